/* Small endpoints' work off the loop thread: a body over a few KiB is parsed
 * and processed on libuv's thread pool, as generation requests' bodies are
 * (generate.c), so one client's 4 MiB /tokenize body never stalls the loop
 * that serves everyone else. Small bodies are done in place: the pool's
 * round trip would cost them more than the work. */
#ifndef SRV_OFFLOAD_H
#define SRV_OFFLOAD_H

#include <jansson.h>
#include <stddef.h>

#include "errors.h"
#include "http.h"
#include "server.h"

/* Bodies up to this many bytes are done on the loop. */
#define SRV_OFFLOAD_BYTES (16 * 1024)

/* The work: the reply's JSON object (sent with 200), or NULL with *e set.
 * Runs on a pool thread for big bodies: it may read x's immutable parts
 * (model, tokenizer, template, configuration) and nothing else. */
typedef json_t *(*srv_offload_fn)(srv_ctx *x, const char *body, size_t len, srv_error *e);

/* Runs fn on c's body, in place or on the pool, and replies. */
void srv_offload(srv_ctx *x, srv_conn *c, srv_offload_fn fn);

#endif
