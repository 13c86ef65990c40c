/* The guard's policy: no client, however slow, silent or many-addressed,
 * keeps a connection or request-body memory from the others. Every request
 * has deadlines (its header within header-timeout-seconds; its body
 * arriving, at min-body-rate after body-timeout-seconds), a stream whose
 * client takes nothing for stream-stall-seconds is due to close, a new
 * connection at max-connections evicts the oldest one still receiving its
 * request, and request bodies share one budget (max-body-buffer-mib).
 *
 * Decisions only: the guard knows connections by the srv_guard_conn that
 * http.c embeds in each of its sockets, is told what happens to them, and
 * says which are due to close; http.c closes them. Loop thread only. */
#ifndef SRV_HTTP_GUARD_H
#define SRV_HTTP_GUARD_H

#include <stddef.h>

/* Connections MHD may hold beyond max-connections: the guard evicts down to
 * the limit, and an evicted socket is closed on MHD's next run. */
#define SRV_GUARD_HEADROOM 32

typedef struct srv_guard_limits {
    int max_connections;
    int timeout_s;            /* the idle timeout (0 = never) */
    int header_timeout_s;
    int body_timeout_s;
    long min_body_rate;       /* bytes/s */
    size_t max_body_buffer;   /* bytes */
    int stream_stall_s;       /* 0 = never */
} srv_guard_limits;

/* What the guard has done, since start (Prometheus counters). */
typedef struct srv_http_guard_stats {
    unsigned long long header_timeouts;  /* headers not complete within header_timeout_s */
    unsigned long long body_timeouts;    /* bodies stalled or slower than min_body_rate */
    unsigned long long evictions;        /* incomplete requests closed to let a new connection in */
    unsigned long long body_refusals;    /* 503: the body budget was spent */
    unsigned long long stream_stalls;    /* streams cancelled: their client took no bytes */
    size_t body_bytes;                   /* gauge: request-body bytes held now */
} srv_http_guard_stats;

/* Where a connection is in its current request. */
typedef enum {
    GUARD_AWAIT_HEADER = 0,   /* connected, or its previous request ended: the next header must come */
    GUARD_BODY,               /* the header is in; the body is arriving */
    GUARD_BUSY                /* the request is complete: answered or being answered */
} srv_guard_phase;

/* The guard's view of one connection (embedded in http.c's socket). */
typedef struct srv_guard_conn srv_guard_conn;
struct srv_guard_conn {
    srv_guard_phase phase;
    double t_phase;           /* when the phase began */
    int kept_alive;           /* a request has ended on it before */
    int closing;              /* due to close: http.c shut it down */
    size_t body_len;          /* body bytes received */
    size_t body_charged;      /* bytes of the budget its body buffer holds */
    double t_body;            /* when body bytes last arrived (or the header completed) */
    int streaming;            /* a stream is being sent */
    size_t unsent;            /* stream bytes not yet taken by MHD */
    double t_taken;           /* when MHD last took stream bytes (its client reads) */
    srv_guard_conn *prev, *next; /* oldest first */
};

typedef struct srv_guard {
    srv_guard_limits lim;
    srv_guard_conn *head, *tail;
    int n_open, n_closing;
    size_t body_bytes;
    srv_http_guard_stats stats;
} srv_guard;

void srv_guard_init(srv_guard *g, const srv_guard_limits *lim);
/* A connection opened. Returns the connection to close now when this one
 * passes max-connections (the oldest incomplete request, or this one when
 * every other is busy), else NULL. */
srv_guard_conn *srv_guard_opened(srv_guard *g, srv_guard_conn *gc, double now);
void srv_guard_closed(srv_guard *g, srv_guard_conn *gc);
/* http.c shut gc down. */
void srv_guard_closing(srv_guard *g, srv_guard_conn *gc);
/* The reason gc is due to close now (counted), or NULL. */
const char *srv_guard_due(srv_guard *g, srv_guard_conn *gc, double now);

/* A request's header is complete; it announced content_length (0: none,
 * or chunked; a length over the body limit is not held). -1 (503 to send)
 * when the body budget cannot hold it. */
int srv_guard_began(srv_guard *g, srv_guard_conn *gc, unsigned long long content_length, double now);
/* Before n more body bytes are stored: 0 when the budget cannot hold them (counted). */
int srv_guard_body_fits(srv_guard *g, srv_guard_conn *gc, size_t n);
/* Body bytes arrived; the buffer now has `capacity` bytes (charged). */
void srv_guard_body_stored(srv_guard *g, srv_guard_conn *gc, size_t len, size_t capacity, double now);
/* The body's buffer was freed: its bytes go back to the budget. */
void srv_guard_body_released(srv_guard *g, srv_guard_conn *gc);
/* The whole request is in (or it was answered early). */
void srv_guard_complete(srv_guard_conn *gc, double now);
/* Stream progress: bytes still to give MHD, and whether MHD took some now. */
void srv_guard_stream(srv_guard_conn *gc, size_t unsent, int taken, double now);
/* The request ended; a kept-alive connection waits for the next header. */
void srv_guard_ended(srv_guard *g, srv_guard_conn *gc, double now);

#endif
