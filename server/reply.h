/* Replies the daemon's handlers send: JSON bodies and the one error sender,
 * whose Retry-After (on 429 and 503) is the retry-after setting. */
#ifndef SRV_REPLY_H
#define SRV_REPLY_H

#include <jansson.h>

#include "errors.h"
#include "http.h"
#include "server.h"

/* The OpenAI error object with the error table's status. */
void srv_reply_error(srv_ctx *x, srv_conn *c, const srv_error *e);
/* An error of kind k with a fixed message. */
void srv_reply_error_msg(srv_ctx *x, srv_conn *c, srv_err_kind k, const char *param, const char *msg);
/* j as the body (taken: decref'd); 500 when it cannot be serialized. */
void srv_reply_json(srv_ctx *x, srv_conn *c, int status, json_t *j);

#endif
