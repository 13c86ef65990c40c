/* Request bodies -> srv_gen_request, field by field as the OpenAI reference has them. */
#include "openai_request.h"
#include "response_format.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Absent and null both mean "not given". */
static json_t *field(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

static int get_bool(json_t *o, const char *key, int *out, srv_error *e) {
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return srv_error_set(e, SRV_ERR_INVALID_FIELD, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

static int get_number(json_t *o, const char *key, double lo, double hi, float *out, srv_error *e) {
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_number(v)) return srv_error_set(e, SRV_ERR_INVALID_FIELD, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, key, "'%s' must be from %g to %g (got %g)", key, lo, hi, x);
    *out = (float)x;
    return 0;
}

/* An integer (or a real with an integral value, as JavaScript sends them). */
static int as_int64(json_t *v, long long *out) {
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        double x = json_real_value(v);
        if (x == floor(x) && fabs(x) < 9.0e15) {
            *out = (long long)x;
            return 0;
        }
    }
    return -1;
}

static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, srv_error *e) {
    json_t *v = field(o, key);
    if (!v) return 0;
    long long x;
    if (as_int64(v, &x) != 0) return srv_error_set(e, SRV_ERR_INVALID_FIELD, key, "'%s' must be an integer", key);
    if (x < lo || x > hi)
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, key, "'%s' must be from %lld to %lld (got %lld)", key, lo, hi, x);
    *out = x;
    return 0;
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* ids from an array of integers in [0, vocab); `param` names it in errors. */
static int parse_ids(json_t *a, const srv_req_limits *lim, const char *param, int32_t **out, int *n_out, srv_error *e) {
    size_t n = json_array_size(a);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        long long x;
        if (as_int64(json_array_get(a, i), &x) != 0 || x < 0 || x >= lim->vocab) {
            free(ids);
            return srv_error_set(e, SRV_ERR_INVALID_FIELD, param, "'%s' must hold token ids from 0 to %d (item %zu is not one)",
                                 param, lim->vocab - 1, i);
        }
        ids[i] = (int32_t)x;
    }
    *out = ids, *n_out = (int)n;
    return 0;
}

static int is_id_array(json_t *a) {
    if (!json_is_array(a) || json_array_size(a) == 0) return 0;
    return json_is_number(json_array_get(a, 0));
}

static int add_prompt(srv_gen_request *r, srv_prompt p, srv_error *e) {
    srv_prompt *ps = realloc(r->prompts, (r->n_prompts + 1) * sizeof *ps);
    if (!ps) {
        free(p.text), free(p.ids);
        return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
    }
    r->prompts = ps;
    r->prompts[r->n_prompts++] = p;
    return 0;
}

static int text_prompt(srv_gen_request *r, json_t *s, srv_error *e) {
    srv_prompt p = {.n_ids = -1, .len = json_string_length(s)};
    if (!(p.text = dup_bytes(json_string_value(s), p.len))) return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
    return add_prompt(r, p, e);
}

static int id_prompt(srv_gen_request *r, json_t *a, const srv_req_limits *lim, const char *param, srv_error *e) {
    srv_prompt p = {0};
    if (parse_ids(a, lim, param, &p.ids, &p.n_ids, e) != 0) return -1;
    return add_prompt(r, p, e);
}

/* prompt: string | [string, ...] | [id, ...] | [[id, ...], ...] */
static int parse_prompt(srv_gen_request *r, json_t *v, const srv_req_limits *lim, srv_error *e) {
    const char *bad = "'prompt' must be a string, a list of strings, a list of token ids or a list of token-id lists";
    if (!v) return srv_error_set(e, SRV_ERR_MISSING_FIELD, "prompt", "'prompt' is required");
    if (json_is_string(v)) return text_prompt(r, v, e);
    if (!json_is_array(v)) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "prompt", "%s", bad);
    size_t n = json_array_size(v);
    if (n == 0) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "prompt", "'prompt' must not be an empty list");
    if (is_id_array(v)) return id_prompt(r, v, lim, "prompt", e);
    if (n > SRV_MAX_PROMPTS)
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, "prompt", "'prompt' holds %zu prompts; at most %d", n, SRV_MAX_PROMPTS);
    int strings = json_is_string(json_array_get(v, 0));
    for (size_t i = 0; i < n; i++) {
        json_t *it = json_array_get(v, i);
        if (strings && json_is_string(it)) {
            if (text_prompt(r, it, e) != 0) return -1;
        } else if (!strings && is_id_array(it)) {
            if (id_prompt(r, it, lim, "prompt", e) != 0) return -1;
        } else {
            return srv_error_set(e, SRV_ERR_INVALID_FIELD, "prompt", "%s (item %zu does not fit)", bad, i);
        }
    }
    return 0;
}

static int parse_stop(srv_gen_request *r, json_t *o, srv_error *e) {
    json_t *v = field(o, "stop");
    if (!v) return 0;
    json_t *one[1] = {v};
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > SRV_MAX_STOP) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "stop", "'stop' may hold at most %d strings", SRV_MAX_STOP);
    } else if (!json_is_string(v)) {
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, "stop", "'stop' must be a string or a list of strings");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : one[0];
        if (!json_is_string(s)) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "stop", "'stop' must be a string or a list of strings");
        size_t len = json_string_length(s);
        if (len > SRV_MAX_STOP_BYTES)
            return srv_error_set(e, SRV_ERR_INVALID_FIELD, "stop", "each stop string may have at most %d bytes", SRV_MAX_STOP_BYTES);
        if (len == 0) continue; /* an empty stop string would stop before anything: ignored */
        if (!(r->stop[r->n_stop] = dup_bytes(json_string_value(s), len)))
            return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
        r->stop_len[r->n_stop++] = len;
    }
    return 0;
}

static int parse_bias(srv_gen_request *r, json_t *o, const srv_req_limits *lim, srv_error *e) {
    json_t *v = field(o, "logit_bias");
    if (!v) return 0;
    if (!json_is_object(v)) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "logit_bias", "'logit_bias' must be an object of token id -> bias");
    size_t n = json_object_size(v);
    if (n > 4096) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "logit_bias", "'logit_bias' may hold at most 4096 entries");
    r->bias = malloc((n ? n : 1) * sizeof *r->bias);
    if (!r->bias) return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        char *end;
        long id = strtol(key, &end, 10);
        /* digits only: strtol alone would take " 5", "+5" or "05x"'s prefix */
        int digits = *key != 0 && strspn(key, "0123456789") == strlen(key);
        if (!digits || *end || id < 0 || id >= lim->vocab)
            return srv_error_set(e, SRV_ERR_INVALID_FIELD, "logit_bias", "'logit_bias' keys must be token ids from 0 to %d", lim->vocab - 1);
        if (!json_is_number(val) || !(json_number_value(val) >= -100 && json_number_value(val) <= 100))
            return srv_error_set(e, SRV_ERR_INVALID_FIELD, "logit_bias", "'logit_bias' values must be numbers from -100 to 100");
        r->bias[r->n_bias++] = (latent_logit_bias){(int32_t)id, (float)json_number_value(val)};
    }
    r->sp.bias = r->bias, r->sp.n_bias = r->n_bias;
    return 0;
}

static int parse_role(const char *s, srv_role *out) {
    if (!strcmp(s, "system") || !strcmp(s, "developer")) *out = SRV_ROLE_SYSTEM;
    else if (!strcmp(s, "user")) *out = SRV_ROLE_USER;
    else if (!strcmp(s, "assistant")) *out = SRV_ROLE_ASSISTANT;
    else if (!strcmp(s, "tool")) *out = SRV_ROLE_TOOL;
    else return -1;
    return 0;
}

/* content: string | [{"type": "text", "text": ...}, ...] | null */
static int parse_content(srv_chat_msg *m, json_t *c, size_t i, srv_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (!c) {
        m->content = dup_bytes("", 0);
        return m->content ? 0 : srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
    }
    if (json_is_string(c)) {
        m->len = json_string_length(c);
        m->content = dup_bytes(json_string_value(c), m->len);
        return m->content ? 0 : srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
    }
    if (!json_is_array(c)) return srv_error_set(e, SRV_ERR_INVALID_FIELD, param, "'%s' must be a string or a list of content parts", param);
    size_t total = 0, n = json_array_size(c);
    for (size_t j = 0; j < n; j++) {
        json_t *part = json_array_get(c, j), *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type))
            return srv_error_set(e, SRV_ERR_INVALID_FIELD, param, "'%s' parts must be objects with a 'type'", param);
        if (strcmp(json_string_value(type), "text") != 0)
            return srv_error_set(e, SRV_ERR_INVALID_FIELD, param, "content parts of type '%.40s' are not supported (only 'text')",
                                 json_string_value(type));
        if (!json_is_string(text))
            return srv_error_set(e, SRV_ERR_INVALID_FIELD, param, "'%s' text parts need a string 'text'", param);
        total += json_string_length(text) + 1;
    }
    m->content = malloc(total + 1);
    if (!m->content) return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
    for (size_t j = 0; j < n; j++) {
        json_t *text = json_object_get(json_array_get(c, j), "text");
        if (j) m->content[m->len++] = '\n';
        memcpy(m->content + m->len, json_string_value(text), json_string_length(text));
        m->len += json_string_length(text);
    }
    m->content[m->len] = 0;
    return 0;
}

static int parse_messages(srv_gen_request *r, json_t *v, srv_error *e) {
    if (!v) return srv_error_set(e, SRV_ERR_MISSING_FIELD, "messages", "'messages' is required");
    if (!json_is_array(v) || json_array_size(v) == 0)
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, "messages", "'messages' must be a non-empty list of messages");
    size_t n = json_array_size(v);
    if (n > 100000) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "messages", "too many messages");
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages) return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i), *role = json_object_get(m, "role");
        char param[64];
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_is_object(m))
            return srv_error_set(e, SRV_ERR_INVALID_FIELD, "messages", "messages[%zu] must be an object", i);
        if (!json_is_string(role) || parse_role(json_string_value(role), &r->messages[i].role) != 0)
            return srv_error_set(e, SRV_ERR_INVALID_FIELD, param, "'%s' must be one of system, developer, user, assistant, tool", param);
        r->n_messages++;
        if (parse_content(&r->messages[i], field(m, "content"), i, e) != 0) return -1;
    }
    return 0;
}

static int parse_sampling(srv_gen_request *r, json_t *o, srv_error *e) {
    long long x;
    if (get_number(o, "temperature", 0, 2, &r->sp.temperature, e) ||
        get_number(o, "top_p", 0, 1, &r->sp.top_p, e) ||
        get_number(o, "min_p", 0, 1, &r->sp.min_p, e) ||
        get_number(o, "presence_penalty", -2, 2, &r->sp.presence_penalty, e) ||
        get_number(o, "frequency_penalty", -2, 2, &r->sp.frequency_penalty, e) ||
        get_number(o, "repetition_penalty", 0.01, 10, &r->sp.repetition_penalty, e))
        return -1;
    x = 0;
    if (get_int(o, "top_k", -1, 1 << 30, &x, e)) return -1;
    r->sp.top_k = x > 0 ? (int)x : 0;
    x = 1;
    if (get_int(o, "n", 1, SRV_MAX_N, &x, e)) return -1;
    r->n = (int)x;
    if (field(o, "seed")) {
        if (get_int(o, "seed", INT64_MIN, INT64_MAX, &x, e)) return -1;
        r->has_seed = 1, r->seed = (uint64_t)x;
    }
    if (get_bool(o, "stream", &r->stream, e) || get_bool(o, "ignore_eos", &r->ignore_eos, e)) return -1;
    json_t *so = field(o, "stream_options");
    if (so) {
        if (!json_is_object(so)) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "stream_options", "'stream_options' must be an object");
        json_t *iu = field(so, "include_usage");
        if (iu && !json_is_boolean(iu))
            return srv_error_set(e, SRV_ERR_INVALID_FIELD, "stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
        r->include_usage = json_is_true(iu);
    }
    json_t *user = field(o, "user");
    if (user && !json_is_string(user)) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "user", "'user' must be a string");
    if (srv_response_format_parse(field(o, "response_format"), &r->json, e)) return -1;
    return parse_stop(r, o, e);
}

static int parse_model(srv_gen_request *r, json_t *o, srv_error *e) {
    json_t *m = field(o, "model");
    if (!m) return 0;
    if (!json_is_string(m)) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "model", "'model' must be a string");
    r->model = dup_bytes(json_string_value(m), json_string_length(m));
    return r->model ? 0 : srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
}

static int parse_body(srv_gen_request *r, srv_api api, json_t *o, const srv_req_limits *lim, srv_error *e) {
    long long x;
    if (parse_model(r, o, e)) return -1;
    switch (api) {
    case SRV_API_COMPLETIONS:
        if (parse_prompt(r, field(o, "prompt"), lim, e) || parse_sampling(r, o, e) || get_bool(o, "echo", &r->echo, e)) return -1;
        x = -1;
        if (get_int(o, "max_tokens", 0, 1 << 30, &x, e)) return -1;
        r->max_tokens = (int)x;
        if (field(o, "logprobs")) {
            if (get_int(o, "logprobs", 0, LATENT_MAX_TOP_LOGPROBS, &x, e)) return -1;
            r->logprobs = 1 + (int)x;
        }
        return parse_bias(r, o, lim, e);
    case SRV_API_CHAT: {
        if (parse_messages(r, field(o, "messages"), e) || parse_sampling(r, o, e)) return -1;
        x = -1;
        if (get_int(o, "max_tokens", 0, 1 << 30, &x, e) || get_int(o, "max_completion_tokens", 0, 1 << 30, &x, e)) return -1;
        r->max_tokens = (int)x;
        int lp = 0;
        if (get_bool(o, "logprobs", &lp, e)) return -1;
        x = 0;
        if (get_int(o, "top_logprobs", 0, LATENT_MAX_TOP_LOGPROBS, &x, e)) return -1;
        if (x > 0 && !lp) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r->logprobs = lp ? 1 + (int)x : 0;
        return parse_bias(r, o, lim, e);
    }
    case SRV_API_TOKENIZE: {
        json_t *p = field(o, "prompt");
        if (!p) p = field(o, "content");
        if (p) {
            if (!json_is_string(p)) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "prompt", "'prompt' must be a string");
            if (text_prompt(r, p, e)) return -1;
        } else if (field(o, "messages")) {
            if (parse_messages(r, field(o, "messages"), e)) return -1;
        } else {
            return srv_error_set(e, SRV_ERR_MISSING_FIELD, "prompt", "'prompt' (a string) or 'messages' is required");
        }
        return get_bool(o, "add_generation_prompt", &r->add_generation_prompt, e);
    }
    case SRV_API_DETOKENIZE: {
        json_t *t = field(o, "tokens");
        if (!t) return srv_error_set(e, SRV_ERR_MISSING_FIELD, "tokens", "'tokens' is required");
        if (!json_is_array(t)) return srv_error_set(e, SRV_ERR_INVALID_FIELD, "tokens", "'tokens' must be a list of token ids");
        return id_prompt(r, t, lim, "tokens", e);
    }
    }
    return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "unknown API");
}

int srv_req_parse(srv_gen_request *r, srv_api api, const char *body, size_t len, const srv_req_limits *lim,
                  srv_error *e) {
    memset(r, 0, sizeof *r);
    r->api = api;
    r->max_tokens = -1;
    r->n = 1;
    r->add_generation_prompt = 1;
    latent_sampler_defaults(&r->sp);
    json_error_t jerr;
    json_t *root = json_loadb(body ? body : "", len, JSON_ALLOW_NUL, &jerr);
    if (!root) {
        char text[160];
        /* jansson's message may quote invalid bytes: keep it ASCII. */
        size_t k = 0;
        for (const char *p = jerr.text; *p && k + 1 < sizeof text; p++) text[k++] = (unsigned char)*p < 0x80 ? *p : '?';
        text[k] = 0;
        return srv_error_set(e, SRV_ERR_INVALID_JSON, NULL, "the body is not valid JSON: %s (line %d, column %d)", text,
                             jerr.line, jerr.column);
    }
    int rc = 0;
    if (!json_is_object(root)) rc = srv_error_set(e, SRV_ERR_INVALID_JSON, NULL, "the body must be a JSON object");
    else rc = parse_body(r, api, root, lim, e);
    json_decref(root);
    if (rc != 0) srv_req_free(r);
    return rc;
}

void srv_req_free(srv_gen_request *r) {
    if (!r) return;
    free(r->model);
    for (int i = 0; i < r->n_prompts; i++) free(r->prompts[i].text), free(r->prompts[i].ids);
    free(r->prompts);
    for (int i = 0; i < r->n_messages; i++) free(r->messages[i].content);
    free(r->messages);
    free(r->bias);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    latent_json_grammar_free(r->json);
    memset(r, 0, sizeof *r);
}
