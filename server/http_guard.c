/* Deadlines, eviction and the request-body budget (http_guard.h). A sweep
 * once a second closes what is past its deadline; closing is a shutdown()
 * of the socket, which MHD sees as the peer's end of stream and frees on its
 * next run, so the guard never frees anything MHD holds. */
#include "http_guard.h"

#include <sys/socket.h>

#include "log.h"

#define SWEEP_MS 1000

static void guard_close(srv_http *h, srv_sock *s, unsigned long long *counter, const char *why) {
    if (s->closing) return;
    s->closing = 1;
    h->n_closing++;
    if (counter) (*counter)++;
    srv_log(SRV_LOG_DEBUG, "http: closing connection %d: %s", s->fd, why);
    shutdown(s->fd, SHUT_RDWR);
    if (s->conn) srv_http_conn_peer_gone(s->conn);
    srv_http_kick(h);
}

/* The next header must be in by then: from the connection's start, or for a
 * kept-alive one after its idle time (timeout-seconds) too, since MHD's idle
 * timer restarts with every byte a drip-feeding client sends. */
static int header_late(const srv_http *h, const srv_sock *s, double now) {
    double allowed = h->o.header_timeout_s;
    if (s->kept_alive) {
        if (h->o.timeout_s == 0) return 0; /* idle connections were asked to live forever */
        allowed += h->o.timeout_s;
    }
    return now - s->t_phase > allowed;
}

/* Stalled (nothing for body-timeout-seconds), or slower on average than
 * min-body-rate once body-timeout-seconds have passed. */
static const char *body_late(const srv_http *h, const srv_sock *s, double now) {
    const srv_conn *c = s->conn;
    if (!c) return NULL;
    if (now - c->t_body > h->o.body_timeout_s) return "request body stalled";
    double owed = (double)h->o.min_body_rate * (now - s->t_phase - h->o.body_timeout_s);
    if (owed > 0 && (double)c->body.len < owed && !c->too_large) return "request body slower than min-body-rate";
    return NULL;
}

/* A stream with bytes to send whose client has taken none for stream-stall-seconds. */
static int stream_stalled(const srv_http *h, const srv_sock *s, double now) {
    const srv_conn *c = s->conn;
    if (!c || !c->streaming || c->stream_end || h->o.stream_stall_s <= 0) return 0;
    return c->out.len > c->out_off && now - c->t_taken > h->o.stream_stall_s;
}

static void sweep(uv_timer_t *t) {
    srv_http *h = t->data;
    double now = srv_now();
    for (srv_sock *s = h->socks, *nx; s; s = nx) {
        nx = s->next;
        if (s->closing) continue;
        const char *why;
        if (s->phase == SOCK_AWAIT_HEADERS && header_late(h, s, now))
            guard_close(h, s, &h->guard.header_timeouts, "request header not complete within header-timeout-seconds");
        else if (s->phase == SOCK_BODY && (why = body_late(h, s, now)))
            guard_close(h, s, &h->guard.body_timeouts, why);
        else if (s->phase == SOCK_BUSY && stream_stalled(h, s, now)) {
            srv_log(SRV_LOG_INFO, "request %s: stream cancelled, its client took no bytes for %d s", s->conn->id,
                    h->o.stream_stall_s);
            guard_close(h, s, &h->guard.stream_stalls, "stream stalled");
        }
    }
}

void srv_guard_start(srv_http *h) {
    uv_timer_init(h->loop, &h->guard_timer);
    h->guard_timer.data = h;
    uv_timer_start(&h->guard_timer, sweep, SWEEP_MS, SWEEP_MS);
}

void srv_guard_stop(srv_http *h) { uv_timer_stop(&h->guard_timer); }

void srv_guard_sock_opened(srv_http *h, srv_sock *s) {
    s->phase = SOCK_AWAIT_HEADERS;
    s->t_phase = srv_now();
    s->prev = h->socks_tail, s->next = NULL;
    if (h->socks_tail) h->socks_tail->next = s;
    else h->socks = s;
    h->socks_tail = s;
    if (h->n_socks - h->n_closing <= h->o.max_connections) return;
    /* Over the limit: the oldest connection that has not completed its
     * request makes room (a drip-feeding client is always among those);
     * when every other connection is busy, the new one is refused. */
    srv_sock *victim = s;
    for (srv_sock *o = h->socks; o != s; o = o->next)
        if (!o->closing && o->phase != SOCK_BUSY) {
            victim = o;
            break;
        }
    guard_close(h, victim, &h->guard.evictions, victim == s ? "max-connections reached, every connection busy"
                                                             : "evicted for a new connection at max-connections");
}

void srv_guard_sock_closed(srv_http *h, srv_sock *s) {
    if (s->closing) h->n_closing--;
    if (s->prev) s->prev->next = s->next;
    else h->socks = s->next;
    if (s->next) s->next->prev = s->prev;
    else h->socks_tail = s->prev;
    s->prev = s->next = NULL;
}

static void set_phase(srv_conn *c, srv_sock_phase p) {
    if (!c->sock || c->sock->phase == p) return;
    c->sock->phase = p;
    c->sock->t_phase = srv_now();
}

int srv_guard_request_began(srv_conn *c, unsigned long long content_length, srv_error *e) {
    srv_http *h = c->h;
    c->t_body = srv_now();
    set_phase(c, SOCK_BODY);
    if (!content_length || content_length > (unsigned long long)h->o.max_body) return 0; /* too large: 413 follows, nothing kept */
    if (h->body_bytes + content_length + 1 > h->o.max_body_buffer) {
        h->guard.body_refusals++;
        return srv_error_set(e, SRV_ERR_BUSY, NULL,
                             "the server is receiving too many request bodies (max-body-buffer-mib); retry later");
    }
    /* The buffer is sized once to what the header announced, so the budget
     * charges what is really held (no doubling as the body arrives). */
    if (srv_buf_reserve(&c->body, (size_t)content_length) == 0) srv_guard_body_stored(c);
    return 0;
}

int srv_guard_body_fits(srv_conn *c, size_t n) {
    srv_http *h = c->h;
    size_t want = c->body.len + n + 1;
    if (want <= c->body_charged) return 1;
    if (h->body_bytes - c->body_charged + want <= h->o.max_body_buffer) return 1;
    h->guard.body_refusals++;
    return 0;
}

void srv_guard_body_stored(srv_conn *c) {
    if (c->body.cap <= c->body_charged) return;
    c->h->body_bytes += c->body.cap - c->body_charged;
    c->body_charged = c->body.cap;
}

void srv_guard_request_complete(srv_conn *c) { set_phase(c, SOCK_BUSY); }

void srv_guard_body_released(srv_conn *c) {
    c->h->body_bytes -= c->body_charged;
    c->body_charged = 0;
}

void srv_guard_request_ended(srv_conn *c) {
    srv_guard_body_released(c);
    if (!c->sock) return;
    c->sock->kept_alive = 1;
    c->sock->phase = SOCK_BUSY; /* forces the phase's clock to restart */
    set_phase(c, SOCK_AWAIT_HEADERS);
}

void srv_http_get_guard_stats(const srv_http *h, srv_http_guard_stats *out) {
    *out = h->guard;
    out->body_bytes = h->body_bytes;
}
