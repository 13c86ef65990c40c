/* The HTTP layer's own structures, shared by http.c (MHD on the loop) and
 * http_guard.c (the per-connection deadlines, eviction and the body
 * budget). Nothing outside the http files includes this. */
#ifndef SRV_HTTP_INTERNAL_H
#define SRV_HTTP_INTERNAL_H

#include <microhttpd.h>
#include <uv.h>

#include "buf.h"
#include "http.h"

/* Where a connection is in its current request, for the guard's deadlines. */
typedef enum {
    SOCK_AWAIT_HEADERS = 0,   /* connected, or its previous request ended: the next header must come */
    SOCK_BODY,                /* the header is in; the body is arriving */
    SOCK_BUSY                 /* the request is complete: answered or being answered */
} srv_sock_phase;

/* One TCP connection, from MHD's accept to its close. A uv_poll watches the
 * socket for the client hanging up for the connection's whole life: MHD's
 * edge-triggered epoll does not see a FIN that arrives with the last data
 * (it stops reading at a short read), and does not watch suspended
 * connections at all. */
typedef struct srv_sock srv_sock;
struct srv_sock {
    srv_http *h;
    int fd;
    uv_poll_t poll;
    int poll_active;
    int hung_up;
    srv_conn *conn;           /* the request being served on it, if any */
    srv_sock_phase phase;
    double t_phase;           /* when the phase began */
    int kept_alive;           /* a request has ended on it before */
    int closing;              /* the guard shut it down; MHD closes it on its next run */
    srv_sock *prev, *next;    /* h->socks, oldest first */
};

struct srv_conn {
    srv_http *h;
    struct MHD_Connection *mc;
    char method[16];
    char *path;
    char id[24];
    double t_start;
    srv_buf body;
    size_t body_charged;      /* bytes of the body budget this request holds */
    double t_body;            /* when body bytes last arrived (or the header completed) */
    int too_large;
    int over_budget;          /* the body budget could not hold its body: 503 */
    int replied, status;
    int suspended;
    int streaming, stream_end;
    int peer_gone, abort_told;
    int want_drain;           /* on_drain when out empties */
    srv_buf out;
    size_t out_off;
    double t_write;
    double t_taken;           /* when MHD last took stream bytes to send (the client reads) */
    srv_sock *sock;
    void *data;
    const srv_conn_handler *handler; /* attached by the request (srv_conn_attach) */
    char **hdr_k, **hdr_v;    /* response headers the layer above added (grown as needed) */
    int n_hdrs, cap_hdrs;
    srv_conn *prev, *next;
};

struct srv_http {
    uv_loop_t *loop;
    struct MHD_Daemon *d;
    uv_poll_t poll;           /* MHD's epoll fd */
    uv_timer_t timer;         /* MHD's timeout, or 0 after a resume */
    uv_timer_t guard_timer;   /* the guard's sweep (http_guard.c) */
    int in_run;
    int kick;                 /* a connection was resumed: MHD must run again */
    int listen_fd;
    srv_http_opts o;
    srv_http_cbs cbs;
    void *ud;
    srv_conn *conns;          /* every request MHD holds */
    int n_conns;
    int n_socks;              /* open connections */
    int n_closing;            /* of which the guard has shut down */
    srv_sock *socks, *socks_tail;
    size_t body_bytes;        /* request-body bytes held by all requests (the budget's use) */
    srv_http_guard_stats guard;
    unsigned long long accepts;          /* accept() calls MHD made, refused ones too */
    unsigned long long accepts_seen;     /* ...at the last srv_http_accepting */
    int queue_waited;         /* the listen queue had connections at the last srv_http_accepting */
    int handles_open;
    unsigned long long next_id;
};

/* http.c: runs MHD again on the next loop iteration. */
void srv_http_kick(srv_http *h);
/* The client is gone: the request's handler hears of it now. */
void srv_http_conn_peer_gone(srv_conn *c);

#endif
