/* libmicrohttpd driven by a libuv loop: MHD runs in external-poll epoll mode,
 * its epoll fd watched by a uv_poll and its timeout by a uv_timer, all on the
 * loop thread. A request that waits for the engine is suspended (MHD stops
 * polling it) while a uv_poll of its own watches the socket for the client
 * going away; srv_conn_wake resumes it from the loop.
 *
 * The layer above sees requests as srv_conn: a complete body, then replies:
 * a whole response, or a stream of bytes (SSE). on_request runs when the
 * body is complete and again after each wake of a suspended request until it
 * replies; on_abort when the client leaves while suspended or streaming;
 * on_close exactly once when MHD is done with the request. */
#ifndef SRV_HTTP_H
#define SRV_HTTP_H

#include <stddef.h>
#include <uv.h>

#include "buf.h"
#include "config.h"
#include "errors.h"
#include "http_guard.h"
#include "latent/error.h"

typedef struct srv_http srv_http;
typedef struct srv_conn srv_conn;

typedef struct srv_http_cbs {
    void (*on_request)(void *ud, srv_conn *c);
    void (*on_abort)(void *ud, srv_conn *c);  /* may be NULL (requests that wait attach their own) */
    void (*on_close)(void *ud, srv_conn *c);
} srv_http_cbs;

typedef struct srv_http_opts {
    int listen_fd;
    long max_body;
    int max_connections;
    int max_connections_per_client; /* 0 = no limit */
    int timeout_s;
    /* The guard (http_guard.h): every connection's request has deadlines. */
    int header_timeout_s;     /* a request's header complete this long after the connection opened (or its last request ended) */
    int body_timeout_s;       /* a body with no bytes arriving this long is dropped */
    long min_body_rate;       /* bytes/s a body must average after its first body_timeout_s */
    size_t max_body_buffer;   /* request-body bytes held at once, all requests together (503 past it) */
    int stream_stall_s;       /* a stream whose client takes no bytes this long is cancelled (0 = never) */
    int retry_after_s;        /* Retry-After on the guard's 503 */
    const srv_strlist *cors_origins;
} srv_http_opts;


/* A listening socket: TCP on host:port (port 0 = a free one), or a unix
 * socket at unix_path when set. `desc` gets a printable address. */
int srv_http_listen(const char *host, int port, const char *unix_path, char *desc, size_t cap, latent_err *err);

srv_http *srv_http_start(uv_loop_t *loop, const srv_http_opts *o, const srv_http_cbs *cbs, void *ud, latent_err *err);
/* Stops accepting new connections (open ones go on). */
void srv_http_quiesce(srv_http *h);
/* 0 when the listener is deaf: connections have waited in the listen queue
 * across two calls with free slots and nothing accepted (called by the
 * watchdog; each call also runs MHD once, which re-arms a paused listener). */
int srv_http_accepting(srv_http *h);
/* Requests MHD still holds. */
int srv_http_active(const srv_http *h);
void srv_http_get_guard_stats(const srv_http *h, srv_http_guard_stats *out);
/* Ends every request, stops MHD, closes the handles (frees h once they are closed). */
void srv_http_stop(srv_http *h);

/* The request. */
const char *srv_conn_method(const srv_conn *c);
const char *srv_conn_path(const srv_conn *c);
const char *srv_conn_header(const srv_conn *c, const char *name);
/* The peer's numeric address ("127.0.0.1", "::1"; "unix" for a unix socket). */
void srv_conn_peer(const srv_conn *c, char *buf, size_t cap);
const char *srv_conn_body(const srv_conn *c, size_t *len);
/* The body is no longer needed (parsed): its memory goes back to the body budget. */
void srv_conn_release_body(srv_conn *c);
/* Moves the body's memory to *out (srv_buf_free frees it): work on the
 * thread pool reads it there, since the connection may close meanwhile. It
 * stays charged to the body budget until srv_conn_release_body or the end
 * of the request. */
void srv_conn_take_body(srv_conn *c, srv_buf *out);
const char *srv_conn_id(const srv_conn *c);
double srv_conn_started(const srv_conn *c);
int srv_conn_status(const srv_conn *c);   /* status sent (0 = none yet) */
int srv_conn_aborted(const srv_conn *c);  /* the client went away */
void *srv_conn_data(const srv_conn *c);

/* A request that goes on after on_request returned (it waits for the engine,
 * or streams) attaches its own callbacks, as h2o attaches generators: from
 * then on a wake runs `resume` (inside MHD, where replies may be queued)
 * instead of the router, the client leaving runs `abort`, its unsent stream
 * bytes going out runs `drain` (after srv_conn_notify_drain), and the end of
 * the request runs `close` (after the on_close callback, which may still
 * read data). */
typedef struct srv_conn_handler {
    void (*resume)(void *ud, srv_conn *c, void *data);
    void (*abort)(void *ud, srv_conn *c, void *data);
    void (*drain)(void *ud, srv_conn *c, void *data);
    void (*close)(void *ud, srv_conn *c, void *data);
} srv_conn_handler;
void srv_conn_attach(srv_conn *c, const srv_conn_handler *h, void *data);

/* Replies (inside on_request only). Headers added before a reply go with it. */
/* -1 when out of memory: the reply then goes without it (callers that
 * cannot do without a header answer 500 instead). */
int srv_conn_add_header(srv_conn *c, const char *name, const char *value);
void srv_conn_reply(srv_conn *c, int status, const char *content_type, const char *body, size_t len);
/* The error JSON; 429 and 503 carry Retry-After: retry_after. */
void srv_conn_reply_error(srv_conn *c, const srv_error *e, int retry_after);
/* Waits: on_request runs again after srv_conn_wake. */
void srv_conn_suspend(srv_conn *c);
/* Starts a streamed reply (chunked, unknown length). */
void srv_conn_stream_start(srv_conn *c, int status, const char *content_type);

/* Any time on the loop thread. */
void srv_conn_wake(srv_conn *c);
void srv_conn_write(srv_conn *c, const char *data, size_t n);
void srv_conn_end(srv_conn *c);
/* Bytes written to a stream that have not gone to the socket yet. */
size_t srv_conn_unsent(const srv_conn *c);
/* on_drain runs once when those bytes have all gone (then this must be called again). */
void srv_conn_notify_drain(srv_conn *c);
/* Seconds since the stream last got bytes. */
double srv_conn_idle(const srv_conn *c);


#endif
