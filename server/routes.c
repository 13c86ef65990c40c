/* The route table: method and path -> handler, authentication, CORS
 * preflight, 404/405, and the small endpoints (health, models, metrics,
 * tokenize, detokenize). Completions live in generate.c. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "latent/clock.h"
#include "generate.h"
#include "reply.h"
#include "routes.h"
#include "latent/tokenizer.h"
#include "log.h"
#include "offload.h"
#include "openai_request.h"
#include "server.h"

typedef void (*handler_fn)(srv_ctx *x, srv_conn *c);

typedef struct {
    const char *path;
    const char *method;       /* GET routes answer HEAD too */
    int auth;                 /* needs an API key when keys are configured */
    handler_fn fn;
} route;


static void reply_error(srv_ctx *x, srv_conn *c, srv_err_kind k, const char *param, const char *msg) {
    srv_reply_error_msg(x, c, k, param, msg);
}

static void h_health(srv_ctx *x, srv_conn *c) {
    if (x->draining) return reply_error(x, c, SRV_ERR_DRAINING, NULL, "the server is shutting down");
    if (!x->ready) return reply_error(x, c, SRV_ERR_NOT_READY, NULL, "the model is still loading");
    srv_reply_json(x, c, 200, json_pack("{s:s}", "status", "ok"));
}

static json_t *model_object(srv_ctx *x) {
    return json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", x->served_name, "object", "model", "created", (json_int_t)time(NULL),
                     "owned_by", "latentd", "max_model_len", x->ready ? x->model.cfg.max_pos : 0);
}

static void h_models(srv_ctx *x, srv_conn *c) {
    srv_reply_json(x, c, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(x)));
}

static void h_model(srv_ctx *x, srv_conn *c) {
    const char *id = srv_conn_path(c) + strlen("/v1/models/");
    if (strcmp(id, x->served_name) != 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist", id);
        return reply_error(x, c, SRV_ERR_MODEL_NOT_FOUND, "model", msg);
    }
    srv_reply_json(x, c, 200, model_object(x));
}

static void h_metrics(srv_ctx *x, srv_conn *c) {
    srv_buf out = {0};
    srv_sched_stats st;
    if (x->sched) srv_sched_get_stats(x->sched, &st);
    srv_gauges gg = {.connections = srv_http_active(x->http), .sessions_live = srv_session_live(), .draining = x->draining,
                     .ready = x->ready, .requests_active = x->n_gens};
    if (x->http) srv_http_get_guard_stats(x->http, &gg.guard);
    srv_metrics_render(&x->metrics, &out, x->sched ? &st : NULL, &gg);
    srv_conn_reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", out.p ? out.p : "", out.len);
    srv_buf_free(&out);
}

static void h_completions(srv_ctx *x, srv_conn *c) { srv_gen_handle(x, c, 0); }
static void h_chat(srv_ctx *x, srv_conn *c) { srv_gen_handle(x, c, 1); }

/* The body as a request of kind api, for this server's model: 0, or -1 with *e. */
static int parse_body(srv_ctx *x, srv_api api, const char *body, size_t len, srv_gen_request *r, srv_error *e) {
    srv_req_limits lim = {.vocab = x->model.cfg.vocab};
    if (srv_req_parse(r, api, body, len, &lim, e) != 0) return -1;
    if (r->model && strcmp(r->model, x->served_name) != 0) {
        srv_error_set(e, SRV_ERR_MODEL_NOT_FOUND, "model", "The model '%.200s' does not exist", r->model);
        srv_req_free(r);
        return -1;
    }
    return 0;
}

/* /tokenize's work (offload.h: on the pool for big bodies). */
static json_t *tokenize_body(srv_ctx *x, const char *body, size_t len, srv_error *e) {
    srv_gen_request r;
    if (parse_body(x, SRV_API_TOKENIZE, body, len, &r, e) != 0) return NULL;
    const char *text;
    size_t n_text;
    char *rendered = NULL;
    if (r.n_messages) {
        rendered = srv_tmpl_render(&x->tmpl, r.messages, r.n_messages, r.add_generation_prompt, &n_text);
        text = rendered;
    } else {
        text = r.prompts[0].text, n_text = r.prompts[0].len;
    }
    int n = text ? latent_tokenizer_encode(x->model.tok, text, n_text, NULL, 0) : -1;
    int32_t *ids = n >= 0 ? malloc(((size_t)n + 1) * sizeof *ids) : NULL;
    if (ids) n = latent_tokenizer_encode(x->model.tok, text, n_text, ids, n);
    free(rendered);
    srv_req_free(&r);
    json_t *arr = ids && n >= 0 ? json_array() : NULL;
    for (int i = 0; arr && i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    if (!arr) {
        srv_error_set(e, SRV_ERR_INTERNAL, NULL, "cannot tokenize");
        return NULL;
    }
    return json_pack("{s:o, s:i, s:i}", "tokens", arr, "count", n, "max_model_len", x->model.cfg.max_pos);
}

/* /detokenize's work (offload.h). */
static json_t *detokenize_body(srv_ctx *x, const char *body, size_t len, srv_error *e) {
    srv_gen_request r;
    if (parse_body(x, SRV_API_DETOKENIZE, body, len, &r, e) != 0) return NULL;
    size_t n;
    char *t = latent_tokenizer_decode(x->model.tok, r.prompts[0].ids, r.prompts[0].n_ids, &n);
    srv_req_free(&r);
    if (!t) {
        srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    srv_buf b = {0};
    srv_text_sanitize(t, n, &b);
    free(t);
    json_t *j = json_pack("{s:o}", "prompt", json_stringn(b.p ? b.p : "", b.len));
    srv_buf_free(&b);
    return j;
}

static void h_tokenize(srv_ctx *x, srv_conn *c) {
    if (!x->ready) return reply_error(x, c, SRV_ERR_NOT_READY, NULL, "the model is still loading");
    srv_offload(x, c, tokenize_body);
}

static void h_detokenize(srv_ctx *x, srv_conn *c) {
    if (!x->ready) return reply_error(x, c, SRV_ERR_NOT_READY, NULL, "the model is still loading");
    srv_offload(x, c, detokenize_body);
}

static const route routes[] = {
    {"/health", "GET", 0, h_health},
    {"/metrics", "GET", 0, h_metrics},
    {"/v1/models", "GET", 1, h_models},
    {"/v1/models/", "GET", 1, h_model}, /* prefix: /v1/models/{id} */
    {"/v1/completions", "POST", 1, h_completions},
    {"/v1/chat/completions", "POST", 1, h_chat},
    {"/tokenize", "POST", 1, h_tokenize},
    {"/detokenize", "POST", 1, h_detokenize},
};
#define N_ROUTES (int)(sizeof routes / sizeof routes[0])

static int path_matches(const route *r, const char *path) {
    size_t n = strlen(r->path);
    if (r->path[n - 1] == '/') return !strncmp(path, r->path, n) && path[n] && !strchr(path + n, '/');
    return !strcmp(path, r->path);
}

/* Constant-time comparison of a presented key with a configured one. */
static int key_equal(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    unsigned char d = na != nb;
    for (size_t i = 0; i < na; i++) d |= (unsigned char)(a[i] ^ b[i % (nb ? nb : 1)]);
    return d == 0;
}

static int authorized(srv_ctx *x, srv_conn *c) {
    if (x->cfg.api_keys.n == 0) return 1;
    const char *h = srv_conn_header(c, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return 0;
    const char *k = h + 7;
    while (*k == ' ') k++;
    int ok = 0;
    for (int i = 0; i < x->cfg.api_keys.n; i++) ok |= key_equal(k, x->cfg.api_keys.items[i]);
    return ok;
}

void srv_routes_on_request(void *ud, srv_conn *c) {
    srv_ctx *x = ud;
    const char *path = srv_conn_path(c), *method = srv_conn_method(c);
    const route *found = NULL;
    for (int i = 0; i < N_ROUTES && !found; i++)
        if (path_matches(&routes[i], path)) found = &routes[i];
    if (!found) {
        char msg[300];
        snprintf(msg, sizeof msg, "no route for %.16s %.200s", method, path);
        return reply_error(x, c, SRV_ERR_NOT_FOUND, NULL, msg);
    }
    if (!strcmp(method, "OPTIONS")) { /* CORS preflight */
        srv_conn_add_header(c, "Access-Control-Allow-Methods", !strcmp(found->method, "GET") ? "GET, HEAD, OPTIONS" : "POST, OPTIONS");
        srv_conn_add_header(c, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        srv_conn_add_header(c, "Access-Control-Max-Age", "600");
        srv_conn_reply(c, 204, NULL, "", 0);
        return;
    }
    int is_get = !strcmp(found->method, "GET");
    if (strcmp(method, found->method) != 0 && !(is_get && !strcmp(method, "HEAD"))) {
        srv_conn_add_header(c, "Allow", is_get ? "GET, HEAD, OPTIONS" : "POST, OPTIONS");
        char msg[300];
        snprintf(msg, sizeof msg, "%.16s is not allowed on %.200s (use %s)", method, path, found->method);
        return reply_error(x, c, SRV_ERR_METHOD, NULL, msg);
    }
    if (found->auth && !authorized(x, c)) {
        srv_conn_add_header(c, "WWW-Authenticate", "Bearer");
        return reply_error(x, c, SRV_ERR_UNAUTHORIZED, NULL,
                           "missing or wrong API key: send the header 'Authorization: Bearer KEY'");
    }
    found->fn(x, c);
}

void srv_routes_on_close(void *ud, srv_conn *c) {
    srv_ctx *x = ud;
    int status = srv_conn_status(c);
    if (srv_conn_aborted(c) && (status == 0 || status == 200)) status = 499; /* the client left first (nginx's code) */
    srv_metrics_request(&x->metrics, srv_metrics_endpoint(srv_conn_path(c)), status);
    srv_gen *g = srv_conn_data(c);
    if (srv_log_enabled(SRV_LOG_INFO)) {
        srv_buf path = {0}, method = {0};
        srv_text_sanitize(srv_conn_path(c), strlen(srv_conn_path(c)), &path); /* a client's bytes: keep the log valid UTF-8 */
        srv_text_sanitize(srv_conn_method(c), strlen(srv_conn_method(c)), &method);
        double ms = (double)(long long)((latent_now_seconds() - srv_conn_started(c)) * 1e4) / 10;
        json_t *f = json_pack("{s:s, s:s%, s:s%, s:i, s:f}", "id", srv_conn_id(c), "method", method.p ? method.p : "", method.len,
                              "path", path.p ? path.p : "", path.len, "status", status, "ms", ms);
        srv_buf_free(&path);
        srv_buf_free(&method);
        int prompt, completion;
        if (f && g && srv_gen_usage(g, &prompt, &completion) == 0) {
            json_object_set_new(f, "prompt_tokens", json_integer(prompt));
            json_object_set_new(f, "completion_tokens", json_integer(completion));
        }
        srv_log_fields(SRV_LOG_INFO, "request", f);
    }
}
