/* The guard: no client, however slow, silent or many-addressed, keeps a
 * connection or request-body memory from the others. Every request has
 * deadlines (its header within header-timeout-seconds; its body arriving,
 * at min-body-rate after body-timeout-seconds), streams whose client takes
 * nothing for stream-stall-seconds are cancelled, a new connection at
 * max-connections evicts the oldest one still receiving its request, and
 * request bodies share one budget (max-body-buffer-mib). Loop thread only. */
#ifndef SRV_HTTP_GUARD_H
#define SRV_HTTP_GUARD_H

#include <stddef.h>

#include "errors.h"
#include "http_internal.h"

/* Connections MHD may hold beyond max-connections: the guard evicts down to
 * the limit, and an evicted socket is closed on MHD's next run. */
#define SRV_GUARD_HEADROOM 32

void srv_guard_start(srv_http *h);
void srv_guard_stop(srv_http *h);
/* A connection opened: tracked, and at the limit the oldest incomplete
 * request (or this connection, when every other one is busy) is closed. */
void srv_guard_sock_opened(srv_http *h, srv_sock *s);
void srv_guard_sock_closed(srv_http *h, srv_sock *s);
/* A request's header is complete: its body phase starts. content_length is
 * what it announced (0: none, or chunked). -1 with *e set (503) when the
 * body budget cannot hold it. */
int srv_guard_request_began(srv_conn *c, unsigned long long content_length, srv_error *e);
/* Before n more body bytes are stored: -1 when the budget cannot hold them. */
int srv_guard_body_fits(srv_conn *c, size_t n);
/* After body bytes were stored: the budget charged for the buffer's size. */
void srv_guard_body_stored(srv_conn *c);
/* The whole request is in (or it was answered early). */
void srv_guard_request_complete(srv_conn *c);
/* The body buffer was freed: its bytes go back to the budget. */
void srv_guard_body_released(srv_conn *c);
/* The request ended; a kept-alive connection waits for the next header. */
void srv_guard_request_ended(srv_conn *c);

#endif
