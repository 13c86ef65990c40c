/* The error table: kind -> HTTP status, OpenAI type, code. */
#include "errors.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct {
    int status;
    const char *type;
    const char *code;
} table[SRV_ERR__COUNT] = {
    [SRV_ERR_NONE] = {200, "", NULL},
    [SRV_ERR_INVALID_JSON] = {400, "invalid_request_error", "invalid_json"},
    [SRV_ERR_INVALID_FIELD] = {400, "invalid_request_error", "invalid_value"},
    [SRV_ERR_BAD_FRAMING] = {400, "invalid_request_error", "bad_request"},
    [SRV_ERR_MISSING_FIELD] = {400, "invalid_request_error", "missing_required_parameter"},
    [SRV_ERR_CONTEXT_LENGTH] = {400, "invalid_request_error", "context_length_exceeded"},
    [SRV_ERR_UNAUTHORIZED] = {401, "invalid_request_error", "invalid_api_key"},
    [SRV_ERR_NOT_FOUND] = {404, "invalid_request_error", "not_found"},
    [SRV_ERR_MODEL_NOT_FOUND] = {404, "invalid_request_error", "model_not_found"},
    [SRV_ERR_METHOD] = {405, "invalid_request_error", "method_not_allowed"},
    [SRV_ERR_TOO_LARGE] = {413, "invalid_request_error", "request_too_large"},
    [SRV_ERR_OVERLOADED] = {429, "rate_limit_error", "server_overloaded"},
    [SRV_ERR_INTERNAL] = {500, "server_error", "internal_error"},
    [SRV_ERR_NOT_IMPLEMENTED] = {501, "invalid_request_error", "not_implemented"},
    [SRV_ERR_DRAINING] = {503, "server_error", "server_shutting_down"},
    [SRV_ERR_NOT_READY] = {503, "server_error", "model_not_ready"},
    [SRV_ERR_BUSY] = {503, "server_error", "server_busy"},
};

int srv_error_set(srv_error *e, srv_err_kind kind, const char *param, const char *fmt, ...) {
    if (!e) return -1;
    e->kind = kind;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

static int valid_kind(srv_err_kind k) { return k > SRV_ERR_NONE && k < SRV_ERR__COUNT; }

int srv_error_status(srv_err_kind kind) { return valid_kind(kind) ? table[kind].status : 500; }
const char *srv_error_type(srv_err_kind kind) { return valid_kind(kind) ? table[kind].type : "server_error"; }
const char *srv_error_code(srv_err_kind kind) { return valid_kind(kind) ? table[kind].code : NULL; }

/* Messages may quote client bytes: keep only valid UTF-8 so jansson accepts them. */
static json_t *safe_string(const char *s) {
    json_t *j = json_string(s);
    if (j) return j;
    char buf[sizeof ((srv_error *)0)->message];
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && n + 1 < sizeof buf; p++)
        buf[n++] = *p < 0x80 ? (char)*p : '?';
    buf[n] = 0;
    return json_string(buf);
}

char *srv_error_json(const srv_error *e) {
    const char *code = srv_error_code(e->kind);
    json_t *err = json_pack("{s:o, s:s, s:o, s:o}", "message", safe_string(e->message), "type",
                            srv_error_type(e->kind), "param", e->param[0] ? safe_string(e->param) : json_null(),
                            "code", code ? json_string(code) : json_null());
    json_t *root = err ? json_pack("{s:o}", "error", err) : NULL;
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return s;
}
