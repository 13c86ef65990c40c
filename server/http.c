/* libmicrohttpd in external epoll mode on a libuv loop; suspend/resume. */
#include "latent/clock.h"
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "http_framing.h"
#include "http_guard.h"
#include "log.h"

#define LISTEN_BACKLOG 1024

typedef struct srv_sock srv_sock;
struct srv_sock {
    srv_http *h;
    int fd;
    uv_poll_t poll;
    int poll_active;
    int hung_up;
    srv_conn *conn;           /* the request being served on it, if any */
    srv_guard_conn gc;        /* the guard's view of it (its deadlines; h->guard's list) */
};

struct srv_conn {
    srv_http *h;
    struct MHD_Connection *mc;
    char method[16];
    char *path;
    char id[24];
    double t_start;
    srv_buf body;
    size_t rcvd;              /* body bytes received (kept or not) */
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
    uv_timer_t guard_timer;   /* the guard's sweep, once a second */
    int in_run;
    int kick;                 /* a connection was resumed: MHD must run again */
    int listen_fd;
    srv_http_opts o;
    srv_http_cbs cbs;
    void *ud;
    srv_conn *conns;          /* every request MHD holds */
    int n_conns;
    int n_socks;              /* open connections */
    srv_guard guard;          /* deadlines, eviction, the body budget (http_guard.h) */
    unsigned long long accepts;          /* accept() calls MHD made, refused ones too */
    unsigned long long accepts_seen;     /* ...at the last srv_http_accepting */
    int queue_waited;         /* the listen queue had connections at the last srv_http_accepting */
    int handles_open;
    unsigned long long next_id;
};

/* ---- listening socket --------------------------------------------------------- */

int srv_http_listen(const char *host, int port, const char *unix_path, char *desc, size_t cap, latent_err *err) {
    int fd;
    if (unix_path && *unix_path) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(unix_path) >= sizeof sa.sun_path) return latent_err_set(err, LATENT_E_INVALID, "unix socket path %s is too long", unix_path);
        strcpy(sa.sun_path, unix_path);
        struct stat st;
        if (lstat(unix_path, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(unix_path); /* a stale socket */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
            int e = errno;
            if (fd >= 0) close(fd);
            return latent_err_set(err, LATENT_E_IO, "cannot listen on unix socket %s: %s", unix_path, strerror(e));
        }
        snprintf(desc, cap, "unix:%s", unix_path);
        return fd;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host && *host ? host : NULL, ps, &hints, &res);
    if (rc != 0) return latent_err_set(err, LATENT_E_IO, "cannot resolve host '%s': %s", host, gai_strerror(rc));
    int e = 0;
    fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, LISTEN_BACKLOG) == 0) break;
        e = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return latent_err_set(err, LATENT_E_IO, "cannot listen on %s:%d: %s", host, port, strerror(e));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char hs[NI_MAXHOST] = "?", sv[NI_MAXSERV] = "?";
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, hs, sizeof hs, sv, sizeof sv, NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(desc, cap, ss.ss_family == AF_INET6 ? "http://[%s]:%s" : "http://%s:%s", hs, sv);
    return fd;
}

/* ---- MHD on the loop ---------------------------------------------------------------- */

static void run(srv_http *h);

static void on_timer(uv_timer_t *t) { run(t->data); }
static void on_epoll(uv_poll_t *p, int status, int events) { run(p->data); }

/* One pass of MHD over whatever is ready, then its next timeout. Never
 * re-entered from inside an MHD callback. */
static void run(srv_http *h) {
    if (h->in_run || !h->d) return;
    h->in_run = 1;
    h->kick = 0;
    MHD_run(h->d);
    h->in_run = 0;
    MHD_UNSIGNED_LONG_LONG to;
    if (h->kick) uv_timer_start(&h->timer, on_timer, 0, 0);
    else if (MHD_get_timeout(h->d, &to) == MHD_YES) uv_timer_start(&h->timer, on_timer, to, 0);
    else uv_timer_stop(&h->timer);
}

/* In external polling mode MHD has no wake-up channel of its own: after a
 * resume it must be run again (on the next loop iteration). */
static void kick(srv_http *h) {
    h->kick = 1;
    if (!h->in_run && h->d) uv_timer_start(&h->timer, on_timer, 0, 0);
}


static void free_conn(srv_conn *c) {
    srv_buf_free(&c->body);
    srv_buf_free(&c->out);
    for (int i = 0; i < c->n_hdrs; i++) free(c->hdr_k[i]), free(c->hdr_v[i]);
    free(c->hdr_k), free(c->hdr_v);
    free(c->path);
    free(c);
}

static void tell_abort(srv_conn *c);

static void conn_peer_gone(srv_conn *c) {
    c->peer_gone = 1;
    tell_abort(c);
    srv_conn_wake(c);
}

/* The client hung up (or half-closed: HTTP/1.1 has no use for a request
 * that can no longer be followed by reading). Shutting our read side wakes
 * MHD's epoll so that it reads the end of stream and frees the slot now,
 * not at the idle timeout. */
static void on_sock_hangup(uv_poll_t *p, int status, int events) {
    srv_sock *s = p->data;
    uv_poll_stop(p);
    s->poll_active = 0;
    s->hung_up = 1;
    shutdown(s->fd, SHUT_RD);
    if (s->conn) conn_peer_gone(s->conn);
    kick(s->h);
}

static void sock_closed(uv_handle_t *hd) { free(hd->data); }

static srv_sock *sock_of(srv_guard_conn *gc) { return (srv_sock *)((char *)gc - offsetof(srv_sock, gc)); }
static srv_guard_conn *gc_of(const srv_conn *c) { return c->sock ? &c->sock->gc : NULL; }

/* Closes a connection the guard found due: a shutdown() that MHD reads as
 * the peer's end of stream on its next run, so that MHD frees what it holds;
 * a request waiting or streaming on it hears at once. */
static void guard_close(srv_http *h, srv_sock *s, const char *why) {
    if (s->gc.closing) return;
    srv_guard_closing(&h->guard, &s->gc);
    if (s->conn && s->conn->streaming) srv_log(SRV_LOG_INFO, "request %s: %s", s->conn->id, why);
    else srv_log(SRV_LOG_DEBUG, "http: closing connection %d: %s", s->fd, why);
    shutdown(s->fd, SHUT_RDWR);
    if (s->conn) conn_peer_gone(s->conn);
    kick(h);
}

static void guard_sweep(uv_timer_t *t) {
    srv_http *h = t->data;
    double now = latent_now_seconds();
    for (srv_guard_conn *gc = h->guard.head, *nx; gc; gc = nx) {
        nx = gc->next;
        const char *why = srv_guard_due(&h->guard, gc, now);
        if (why) guard_close(h, sock_of(gc), why);
    }
}

/* Every accept() MHD makes, counted before its own limits refuse any: the
 * watchdog's evidence that the listener is alive. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    ((srv_http *)cls)->accepts++;
    return MHD_YES;
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context, enum MHD_ConnectionNotificationCode code) {
    srv_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        srv_sock *s = ci ? calloc(1, sizeof *s) : NULL;
        h->n_socks++;
        if (!s) return; /* served without hang-up detection */
        s->h = h, s->fd = ci->connect_fd;
        if (uv_poll_init(h->loop, &s->poll, s->fd) != 0) {
            free(s);
            return;
        }
        s->poll.data = s;
        if (uv_poll_start(&s->poll, UV_DISCONNECT, on_sock_hangup) == 0) s->poll_active = 1;
        *socket_context = s;
        srv_guard_conn *victim = srv_guard_opened(&h->guard, &s->gc, latent_now_seconds());
        if (victim) guard_close(h, sock_of(victim), victim == &s->gc ? "max-connections reached, every connection busy"
                                                                     : "evicted for a new connection at max-connections");
        return;
    }
    h->n_socks--;
    srv_sock *s = *socket_context;
    if (s) {
        if (s->conn) s->conn->sock = NULL;
        srv_guard_closed(&h->guard, &s->gc);
        uv_close((uv_handle_t *)&s->poll, sock_closed); /* before MHD closes the fd */
        *socket_context = NULL;
    }
    /* At max-connections MHD took the listen socket out of its epoll set and
     * puts it back only on a later MHD_run: with every connection gone there
     * would be no later run, and latentd would never accept again. */
    kick(h);
}

/* MHD does not watch a suspended connection; the socket's uv_poll tells us
 * when its client hangs up (kept through resumes: a stream suspends between
 * every two tokens). */
static void do_suspend(srv_conn *c) {
    if (c->suspended) return;
    MHD_suspend_connection(c->mc);
    c->suspended = 1;
}

void srv_conn_wake(srv_conn *c) {
    if (!c->suspended) return;
    c->suspended = 0;
    MHD_resume_connection(c->mc);
    kick(c->h);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    srv_conn *c = cls;
    if (c->peer_gone) return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t avail = c->out.len - c->out_off;
    if (avail) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, c->out.p + c->out_off, n);
        c->out_off += n;
        if (gc_of(c)) srv_guard_stream(gc_of(c), c->out.len - c->out_off, 1, latent_now_seconds());
        if (c->out_off == c->out.len) {
            srv_buf_reset(&c->out), c->out_off = 0;
            if (c->want_drain && c->handler) c->want_drain = 0, c->handler->drain(c->h->ud, c, c->data);
        }
        return (ssize_t)n;
    }
    if (c->stream_end) return MHD_CONTENT_READER_END_OF_STREAM;
    do_suspend(c);
    return 0;
}

/* A new request: its srv_conn, linked and attached to its socket. NULL when
 * out of memory. */
static srv_conn *conn_new(srv_http *h, struct MHD_Connection *mc, const char *url, const char *method) {
    srv_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->h = h, c->mc = mc;
    snprintf(c->method, sizeof c->method, "%s", method);
    c->path = strdup(url ? url : "/");
    if (!c->path) {
        free(c);
        return NULL;
    }
    snprintf(c->id, sizeof c->id, "%llx", ++h->next_id);
    c->t_start = c->t_write = latent_now_seconds();
    c->next = h->conns;
    if (h->conns) h->conns->prev = c;
    h->conns = c;
    h->n_conns++;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci && ci->socket_context) {
        c->sock = ci->socket_context;
        c->sock->conn = c;
        if (c->sock->hung_up) c->peer_gone = 1;
    }
    return c;
}

/* The header is complete: refuse framing that smuggles and bodies past the
 * budget at once; reserve the announced body. */
static void admit_header(srv_http *h, srv_conn *c, struct MHD_Connection *mc, const char *version) {
    srv_error e;
    unsigned long long content_length;
    if (srv_http_check_framing(mc, version, h->o.max_body, &content_length, &e) != 0) {
        srv_conn_add_header(c, MHD_HTTP_HEADER_CONNECTION, "close"); /* what follows cannot be trusted */
        srv_conn_reply_error(c, &e, 0);
        if (c->sock) srv_guard_complete(&c->sock->gc, latent_now_seconds());
    } else if (c->sock && srv_guard_began(&h->guard, &c->sock->gc, content_length, latent_now_seconds()) != 0) {
        srv_error_set(&e, SRV_ERR_BUSY, NULL, "the server is receiving too many request bodies (max-body-buffer-mib); retry later");
        srv_conn_add_header(c, MHD_HTTP_HEADER_CONNECTION, "close"); /* the body is not read */
        srv_conn_reply_error(c, &e, h->o.retry_after_s);
        srv_guard_complete(&c->sock->gc, latent_now_seconds());
    } else if (content_length && c->sock && srv_buf_reserve(&c->body, (size_t)content_length) == 0) {
        /* sized once to what the header announced: the budget charges what is held */
        srv_guard_body_stored(&h->guard, &c->sock->gc, 0, c->body.cap, latent_now_seconds());
    }
}

/* A piece of the body: kept, or dropped once it passes the size limit or
 * the budget (answered when the body is complete). */
static void take_upload(srv_http *h, srv_conn *c, const char *upload, size_t n) {
    srv_guard_conn *gc = gc_of(c);
    c->rcvd += n;
    if (!c->too_large && c->body.len + n > (size_t)h->o.max_body) c->too_large = 1;
    if (gc && !c->too_large && !c->over_budget && !srv_guard_body_fits(&h->guard, gc, n)) c->over_budget = 1;
    if (c->too_large || c->over_budget) srv_buf_free(&c->body);
    else srv_buf_append(&c->body, upload, n);
    if (gc) {
        if (!c->body.p) srv_guard_body_released(&h->guard, gc);
        srv_guard_body_stored(&h->guard, gc, c->rcvd, c->body.cap, latent_now_seconds());
    }
}

/* The body is complete: 0 when it may go to the handler, or -1 after
 * answering what went wrong while it arrived. */
static int refuse_body(srv_http *h, srv_conn *c) {
    srv_error e;
    if (c->too_large) {
        srv_error_set(&e, SRV_ERR_TOO_LARGE, NULL, "the request body is larger than the limit of %ld bytes", h->o.max_body);
        srv_conn_reply_error(c, &e, 0);
    } else if (c->over_budget) {
        srv_error_set(&e, SRV_ERR_BUSY, NULL, "the server is receiving too many request bodies (max-body-buffer-mib); retry later");
        srv_conn_add_header(c, MHD_HTTP_HEADER_CONNECTION, "close");
        srv_conn_reply_error(c, &e, h->o.retry_after_s);
    } else if (c->body.oom) {
        srv_error_set(&e, SRV_ERR_INTERNAL, NULL, "out of memory reading the body");
        srv_conn_reply_error(c, &e, 0);
    } else {
        return 0;
    }
    return -1;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv_http *h = cls;
    srv_conn *c = *con_cls;
    if (!c) {
        if (!(c = conn_new(h, mc, url, method))) return MHD_NO;
        *con_cls = c;
        admit_header(h, c, mc, version);
        return MHD_YES;
    }
    if (c->replied && !c->streaming) {
        *upload_size = 0; /* the body of a request already answered is dropped */
        return MHD_YES;
    }
    if (*upload_size) {
        take_upload(h, c, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (gc_of(c)) srv_guard_complete(gc_of(c), latent_now_seconds());
    if (c->peer_gone) return MHD_NO;
    if (c->replied || refuse_body(h, c) != 0) return MHD_YES;
    if (c->handler) c->handler->resume(h->ud, c, c->data);
    else h->cbs.on_request(h->ud, c);
    if (!c->replied && !c->suspended) {
        srv_error e;
        srv_error_set(&e, SRV_ERR_INTERNAL, NULL, "no reply");
        srv_conn_reply_error(c, &e, 0);
    }
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_http *h = cls;
    srv_conn *c = *con_cls;
    if (!c) return;
    *con_cls = NULL;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) c->peer_gone = 1;
    if (c->peer_gone) tell_abort(c);
    h->cbs.on_close(h->ud, c);
    if (c->handler) c->handler->close(h->ud, c, c->data);
    if (gc_of(c)) srv_guard_ended(&h->guard, gc_of(c), latent_now_seconds());
    if (c->prev) c->prev->next = c->next;
    else h->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    h->n_conns--;
    if (c->sock && c->sock->conn == c) c->sock->conn = NULL;
    free_conn(c);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    srv_log(SRV_LOG_DEBUG, "http: %s", msg);
}

srv_http *srv_http_start(uv_loop_t *loop, const srv_http_opts *o, const srv_http_cbs *cbs, void *ud, latent_err *err) {
    srv_http *h = calloc(1, sizeof *h);
    if (!h) {
        latent_err_set(err, LATENT_E_NOMEM, "http: out of memory");
        return NULL;
    }
    h->loop = loop, h->o = *o, h->cbs = *cbs, h->ud = ud, h->listen_fd = o->listen_fd;
    unsigned int flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    h->d = MHD_start_daemon(flags, 0, on_accept, h, on_access, h, MHD_OPTION_LISTEN_SOCKET, o->listen_fd,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)(o->max_connections + SRV_GUARD_HEADROOM), MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned int)o->max_connections_per_client, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned int)o->timeout_s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_END);
    if (!h->d) {
        free(h);
        latent_err_set(err, LATENT_E_IO, "http: cannot start libmicrohttpd (epoll, suspend/resume)");
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
    if (!di || uv_poll_init(loop, &h->poll, di->epoll_fd) != 0) {
        MHD_stop_daemon(h->d);
        free(h);
        latent_err_set(err, LATENT_E_IO, "http: cannot watch libmicrohttpd's epoll fd");
        return NULL;
    }
    h->poll.data = h;
    uv_timer_init(loop, &h->timer);
    h->timer.data = h;
    srv_guard_limits gl = {.max_connections = o->max_connections, .timeout_s = o->timeout_s,
                           .header_timeout_s = o->header_timeout_s, .body_timeout_s = o->body_timeout_s,
                           .min_body_rate = o->min_body_rate, .max_body_buffer = o->max_body_buffer,
                           .stream_stall_s = o->stream_stall_s};
    srv_guard_init(&h->guard, &gl);
    uv_timer_init(loop, &h->guard_timer);
    h->guard_timer.data = h;
    uv_timer_start(&h->guard_timer, guard_sweep, 1000, 1000);
    h->handles_open = 3;
    uv_poll_start(&h->poll, UV_READABLE, on_epoll);
    run(h);
    return h;
}

void srv_http_quiesce(srv_http *h) {
    if (!h || h->listen_fd < 0) return;
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
    h->listen_fd = -1;
}

int srv_http_active(const srv_http *h) { return h ? h->n_conns : 0; }

void srv_http_get_guard_stats(const srv_http *h, srv_http_guard_stats *out) {
    *out = h->guard.stats;
    out->body_bytes = h->guard.body_bytes;
}

int srv_http_accepting(srv_http *h) {
    if (!h || !h->d || h->listen_fd < 0) return 1;
    struct pollfd pf = {.fd = h->listen_fd, .events = POLLIN};
    int waiting = poll(&pf, 1, 0) > 0 && (pf.revents & POLLIN);
    int deaf = waiting && h->queue_waited && h->accepts == h->accepts_seen && h->n_socks < h->o.max_connections;
    h->queue_waited = waiting;
    h->accepts_seen = h->accepts;
    run(h);
    return !deaf;
}

static void handle_closed(uv_handle_t *hd) {
    srv_http *h = hd->data;
    if (--h->handles_open == 0) free(h);
}

void srv_http_stop(srv_http *h) {
    if (!h) return;
    for (srv_conn *c = h->conns; c; c = c->next) {
        c->peer_gone = 1;
        srv_conn_wake(c);
    }
    for (int i = 0; i < 4 && h->n_conns; i++) run(h);
    uv_timer_stop(&h->timer);
    MHD_stop_daemon(h->d); /* ends what is left: on_close for each */
    h->d = NULL;
    if (h->listen_fd >= 0) close(h->listen_fd);
    uv_close((uv_handle_t *)&h->poll, handle_closed);
    uv_close((uv_handle_t *)&h->timer, handle_closed);
    uv_timer_stop(&h->guard_timer);
    uv_close((uv_handle_t *)&h->guard_timer, handle_closed);
}

/* ---- requests ------------------------------------------------------------------------ */

const char *srv_conn_method(const srv_conn *c) { return c->method; }
const char *srv_conn_path(const srv_conn *c) { return c->path; }
const char *srv_conn_header(const srv_conn *c, const char *name) {
    return MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, name);
}
void srv_conn_peer(const srv_conn *c, char *buf, size_t cap) {
    snprintf(buf, cap, "unknown");
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_UNIX) {
        snprintf(buf, cap, "unix");
        return;
    }
    socklen_t len = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (getnameinfo(sa, len, buf, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0) snprintf(buf, cap, "unknown");
}

const char *srv_conn_body(const srv_conn *c, size_t *len) {
    *len = c->body.len;
    return c->body.p ? c->body.p : "";
}
const char *srv_conn_id(const srv_conn *c) { return c->id; }
double srv_conn_started(const srv_conn *c) { return c->t_start; }
int srv_conn_status(const srv_conn *c) { return c->status; }
int srv_conn_aborted(const srv_conn *c) { return c->peer_gone; }
void *srv_conn_data(const srv_conn *c) { return c->data; }
void srv_conn_attach(srv_conn *c, const srv_conn_handler *h, void *data) { c->handler = h, c->data = data; }

static void tell_abort(srv_conn *c) {
    if (c->abort_told) return;
    c->abort_told = 1;
    if (c->handler) c->handler->abort(c->h->ud, c, c->data);
    else if (c->h->cbs.on_abort) c->h->cbs.on_abort(c->h->ud, c);
}
double srv_conn_idle(const srv_conn *c) { return latent_now_seconds() - c->t_write; }

int srv_conn_add_header(srv_conn *c, const char *name, const char *value) {
    if (c->n_hdrs == c->cap_hdrs) {
        int cap = c->cap_hdrs ? 2 * c->cap_hdrs : 8;
        char **k = realloc(c->hdr_k, (size_t)cap * sizeof *k);
        if (k) c->hdr_k = k;
        char **v = k ? realloc(c->hdr_v, (size_t)cap * sizeof *v) : NULL;
        if (v) c->hdr_v = v;
        if (!k || !v) return -1;
        c->cap_hdrs = cap;
    }
    char *kn = strdup(name), *vn = strdup(value);
    if (!kn || !vn) {
        free(kn), free(vn);
        return -1;
    }
    c->hdr_k[c->n_hdrs] = kn, c->hdr_v[c->n_hdrs] = vn;
    c->n_hdrs++;
    return 0;
}

/* CORS: the Origin header is echoed when allowed ("*" allows any). */
static void add_common_headers(srv_conn *c, struct MHD_Response *r, const char *ctype) {
    if (ctype) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(r, "X-Request-Id", c->id);
    const srv_strlist *co = c->h->o.cors_origins;
    const char *origin = srv_conn_header(c, "Origin");
    if (co && co->n && origin) {
        for (int i = 0; i < co->n; i++)
            if (!strcmp(co->items[i], "*") || !strcmp(co->items[i], origin)) {
                MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
                MHD_add_response_header(r, "Vary", "Origin");
                break;
            }
    }
    for (int i = 0; i < c->n_hdrs; i++) MHD_add_response_header(r, c->hdr_k[i], c->hdr_v[i]);
}

void srv_conn_reply(srv_conn *c, int status, const char *ctype, const char *body, size_t len) {
    if (c->replied) return;
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return;
    add_common_headers(c, r, ctype);
    if (MHD_queue_response(c->mc, (unsigned int)status, r) == MHD_YES) c->replied = 1, c->status = status;
    MHD_destroy_response(r);
}

void srv_conn_reply_error(srv_conn *c, const srv_error *e, int retry_after) {
    int status = srv_error_status(e->kind);
    if (status == 429 || status == 503) {
        char v[16];
        snprintf(v, sizeof v, "%d", retry_after);
        srv_conn_add_header(c, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    char *body = srv_error_json(e);
    const char *fallback = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
    srv_conn_reply(c, status, "application/json", body ? body : fallback, strlen(body ? body : fallback));
    free(body);
    if (c->replied && srv_log_enabled(SRV_LOG_DEBUG)) srv_log(SRV_LOG_DEBUG, "request %s: %d %s", c->id, status, e->message);
}

void srv_conn_suspend(srv_conn *c) { do_suspend(c); }

void srv_conn_stream_start(srv_conn *c, int status, const char *ctype) {
    if (c->replied) return;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, c, NULL);
    if (!r) return;
    add_common_headers(c, r, ctype);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    if (MHD_queue_response(c->mc, (unsigned int)status, r) == MHD_YES)
        c->replied = 1, c->streaming = 1, c->status = status;
    MHD_destroy_response(r);
}

void srv_conn_write(srv_conn *c, const char *data, size_t n) {
    if (c->stream_end || c->peer_gone) return;
    srv_buf_append(&c->out, data, n);
    c->t_write = latent_now_seconds();
    if (gc_of(c)) srv_guard_stream(gc_of(c), c->out.len - c->out_off, 0, c->t_write);
    srv_conn_wake(c);
}

void srv_conn_take_body(srv_conn *c, srv_buf *out) {
    *out = c->body;
    memset(&c->body, 0, sizeof c->body);
}

void srv_conn_release_body(srv_conn *c) {
    srv_buf_free(&c->body);
    if (gc_of(c)) srv_guard_body_released(&c->h->guard, gc_of(c));
}

size_t srv_conn_unsent(const srv_conn *c) { return c->out.len - c->out_off; }
void srv_conn_notify_drain(srv_conn *c) { c->want_drain = 1; }

void srv_conn_end(srv_conn *c) {
    c->stream_end = 1;
    srv_conn_wake(c);
}
