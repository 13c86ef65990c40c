/* The one error sender and JSON replies (reply.h). */
#include "reply.h"

#include <stdlib.h>
#include <string.h>

void srv_reply_error(srv_ctx *x, srv_conn *c, const srv_error *e) { srv_conn_reply_error(c, e, x->cfg.retry_after); }

void srv_reply_error_msg(srv_ctx *x, srv_conn *c, srv_err_kind k, const char *param, const char *msg) {
    srv_error e;
    srv_error_set(&e, k, param, "%s", msg);
    srv_reply_error(x, c, &e);
}

void srv_reply_json(srv_ctx *x, srv_conn *c, int status, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) return srv_reply_error_msg(x, c, SRV_ERR_INTERNAL, NULL, "out of memory");
    srv_conn_reply(c, status, "application/json", s, strlen(s));
    free(s);
}
