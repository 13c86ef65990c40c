/* One error table for the daemon: each kind maps to an HTTP status, an OpenAI
 * error type and code, in one place (errors.c). Every error reply has the
 * same JSON shape: {"error": {"message", "type", "param", "code"}}. */
#ifndef SRV_ERRORS_H
#define SRV_ERRORS_H

typedef enum srv_err_kind {
    SRV_ERR_NONE = 0,
    SRV_ERR_INVALID_JSON,     /* 400: the body is not JSON (or not an object) */
    SRV_ERR_INVALID_FIELD,    /* 400: a field has the wrong type or value */
    SRV_ERR_BAD_FRAMING,      /* 400: ambiguous message framing or a missing Host */
    SRV_ERR_MISSING_FIELD,    /* 400: a required field is absent */
    SRV_ERR_CONTEXT_LENGTH,   /* 400: prompt (+ max_tokens) longer than the context or the KV pool */
    SRV_ERR_UNAUTHORIZED,     /* 401: missing or wrong API key */
    SRV_ERR_NOT_FOUND,        /* 404: unknown route */
    SRV_ERR_MODEL_NOT_FOUND,  /* 404: `model` names another model */
    SRV_ERR_METHOD,           /* 405: known route, wrong method */
    SRV_ERR_TOO_LARGE,        /* 413: body over the limit */
    SRV_ERR_OVERLOADED,       /* 429: queue full */
    SRV_ERR_INTERNAL,         /* 500 */
    SRV_ERR_NOT_IMPLEMENTED,  /* 501: a transfer coding we do not speak */
    SRV_ERR_DRAINING,         /* 503: shutting down */
    SRV_ERR_NOT_READY,        /* 503: model not loaded yet */
    SRV_ERR_BUSY,             /* 503: a shared limit of the HTTP layer is spent (request-body memory) */
    SRV_ERR__COUNT
} srv_err_kind;

typedef struct srv_error {
    srv_err_kind kind;
    char param[64];           /* the offending field ("" = none, JSON null) */
    char message[512];
} srv_error;

/* Fills *e (may be NULL) and returns -1, so validators can `return srv_error_set(...)`.
 * param may be NULL. */
int srv_error_set(srv_error *e, srv_err_kind kind, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

int srv_error_status(srv_err_kind kind);
const char *srv_error_type(srv_err_kind kind);
const char *srv_error_code(srv_err_kind kind);   /* NULL = JSON null */

/* The error body as a malloc'd NUL-terminated JSON string (never NULL unless
 * out of memory). */
char *srv_error_json(const srv_error *e);

#endif
