/* The guard's decisions (http_guard.h): deadlines per phase, eviction order
 * and the request-body budget. */
#include "http_guard.h"

#include <string.h>

void srv_guard_init(srv_guard *g, const srv_guard_limits *lim) {
    memset(g, 0, sizeof *g);
    g->lim = *lim;
}

static void set_phase(srv_guard_conn *gc, srv_guard_phase p, double now) {
    gc->phase = p;
    gc->t_phase = now;
}

srv_guard_conn *srv_guard_opened(srv_guard *g, srv_guard_conn *gc, double now) {
    memset(gc, 0, sizeof *gc);
    set_phase(gc, GUARD_AWAIT_HEADER, now);
    gc->prev = g->tail;
    if (g->tail) g->tail->next = gc;
    else g->head = gc;
    g->tail = gc;
    g->n_open++;
    if (g->n_open - g->n_closing <= g->lim.max_connections) return NULL;
    /* Over the limit: the oldest connection that has not completed its
     * request makes room (a drip-feeding client is always among those);
     * when every other connection is busy, the new one is refused. */
    g->stats.evictions++;
    for (srv_guard_conn *o = g->head; o != gc; o = o->next)
        if (!o->closing && o->phase != GUARD_BUSY) return o;
    return gc;
}

void srv_guard_closed(srv_guard *g, srv_guard_conn *gc) {
    srv_guard_body_released(g, gc);
    if (gc->closing) g->n_closing--;
    if (gc->prev) gc->prev->next = gc->next;
    else g->head = gc->next;
    if (gc->next) gc->next->prev = gc->prev;
    else g->tail = gc->prev;
    gc->prev = gc->next = NULL;
    g->n_open--;
}

void srv_guard_closing(srv_guard *g, srv_guard_conn *gc) {
    if (gc->closing) return;
    gc->closing = 1;
    g->n_closing++;
}

/* The next header must be in by then: from the connection's start, or for a
 * kept-alive one after its idle time (timeout-seconds) too, since MHD's idle
 * timer restarts with every byte a drip-feeding client sends. */
static int header_late(const srv_guard *g, const srv_guard_conn *gc, double now) {
    double allowed = g->lim.header_timeout_s;
    if (gc->kept_alive) {
        if (g->lim.timeout_s == 0) return 0; /* idle connections were asked to live forever */
        allowed += g->lim.timeout_s;
    }
    return now - gc->t_phase > allowed;
}

/* Stalled (nothing for body-timeout-seconds), or slower on average than
 * min-body-rate once body-timeout-seconds have passed. */
static const char *body_late(const srv_guard *g, const srv_guard_conn *gc, double now) {
    if (now - gc->t_body > g->lim.body_timeout_s) return "request body stalled";
    double owed = (double)g->lim.min_body_rate * (now - gc->t_phase - g->lim.body_timeout_s);
    if (owed > 0 && (double)gc->body_len < owed) return "request body slower than min-body-rate";
    return NULL;
}

static int stream_stalled(const srv_guard *g, const srv_guard_conn *gc, double now) {
    if (!gc->streaming || g->lim.stream_stall_s <= 0) return 0;
    return gc->unsent > 0 && now - gc->t_taken > g->lim.stream_stall_s;
}

const char *srv_guard_due(srv_guard *g, srv_guard_conn *gc, double now) {
    const char *why;
    if (gc->closing) return NULL;
    if (gc->phase == GUARD_AWAIT_HEADER && header_late(g, gc, now)) {
        g->stats.header_timeouts++;
        return "request header not complete within header-timeout-seconds";
    }
    if (gc->phase == GUARD_BODY && (why = body_late(g, gc, now))) {
        g->stats.body_timeouts++;
        return why;
    }
    if (gc->phase == GUARD_BUSY && stream_stalled(g, gc, now)) {
        g->stats.stream_stalls++;
        return "stream stalled: its client took no bytes for stream-stall-seconds";
    }
    return NULL;
}

int srv_guard_began(srv_guard *g, srv_guard_conn *gc, unsigned long long content_length, double now) {
    set_phase(gc, GUARD_BODY, now);
    gc->t_body = now;
    if (content_length == 0) return 0; /* chunked or none: charged as it grows */
    if (g->body_bytes + content_length + 1 > g->lim.max_body_buffer) {
        g->stats.body_refusals++;
        return -1;
    }
    return 0;
}

int srv_guard_body_fits(srv_guard *g, srv_guard_conn *gc, size_t n) {
    size_t want = gc->body_len + n + 1;
    if (want <= gc->body_charged || g->body_bytes - gc->body_charged + want <= g->lim.max_body_buffer) return 1;
    g->stats.body_refusals++;
    return 0;
}

void srv_guard_body_stored(srv_guard *g, srv_guard_conn *gc, size_t len, size_t capacity, double now) {
    gc->body_len = len;
    gc->t_body = now;
    if (capacity <= gc->body_charged) return;
    g->body_bytes += capacity - gc->body_charged;
    gc->body_charged = capacity;
}

void srv_guard_body_released(srv_guard *g, srv_guard_conn *gc) {
    g->body_bytes -= gc->body_charged;
    gc->body_charged = 0;
}

void srv_guard_complete(srv_guard_conn *gc, double now) {
    if (gc->phase != GUARD_BUSY) set_phase(gc, GUARD_BUSY, now);
}

void srv_guard_stream(srv_guard_conn *gc, size_t unsent, int taken, double now) {
    if (!gc->streaming) gc->streaming = 1, gc->t_taken = now;
    gc->unsent = unsent;
    if (taken) gc->t_taken = now;
}

void srv_guard_ended(srv_guard *g, srv_guard_conn *gc, double now) {
    srv_guard_body_released(g, gc);
    gc->kept_alive = 1;
    gc->streaming = 0, gc->unsent = 0, gc->body_len = 0;
    set_phase(gc, GUARD_AWAIT_HEADER, now);
}
