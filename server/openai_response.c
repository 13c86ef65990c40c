/* Response objects shaped as OpenAI's: completions, chat completions, their
 * stream chunks, usage, logprobs. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "openai_response.h"
#include "latent/tokenizer.h"

/* JSON has no infinities: a -inf logprob (a token the bias ruled out) is reported as -9999. */
static json_t *num(double v) { return json_real(isfinite(v) ? v : -9999.0); }

const char *srv_resp_finish_reason(srv_finish f) { return f == SRV_FINISH_LENGTH ? "length" : "stop"; }

/* A token's text (valid UTF-8: bytes of a split character become U+FFFD) and raw bytes. */
static json_t *token_string(const srv_gen *g, int32_t id, json_t **bytes_out) {
    char raw[256];
    int n = latent_tokenizer_token_bytes(g->x->model.tok, id, raw, sizeof raw);
    if (n < 0) n = 0;
    if (n > (int)sizeof raw) n = (int)sizeof raw;
    srv_buf b = {0};
    srv_text_sanitize(raw, (size_t)n, &b);
    json_t *s = json_stringn(b.p ? b.p : "", b.len);
    srv_buf_free(&b);
    if (bytes_out) {
        *bytes_out = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(*bytes_out, json_integer((unsigned char)raw[i]));
    }
    return s ? s : json_string("");
}

json_t *srv_resp_logprobs_new(int chat) {
    if (chat) return json_pack("{s:[], s:n}", "content", "refusal");
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

void srv_resp_logprobs_add(const srv_gen *g, srv_choice *ch, const srv_event *ev) {
    if (!ch->lp) return;
    int has = ev->n_top >= 0;
    if (g->chat) {
        json_t *bytes, *tops = json_array();
        json_t *tok = token_string(g, ev->token, &bytes);
        for (int i = 0; i < ev->n_top; i++) {
            json_t *tb, *ts = token_string(g, ev->top_ids[i], &tb);
            json_array_append_new(tops, json_pack("{s:o, s:o, s:o}", "token", ts, "logprob", num(ev->top_lps[i]), "bytes", tb));
        }
        json_array_append_new(json_object_get(ch->lp, "content"),
                              json_pack("{s:o, s:o, s:o, s:o}", "token", tok, "logprob", num(ev->logprob), "bytes", bytes,
                                        "top_logprobs", tops));
        return;
    }
    json_t *tok = token_string(g, ev->token, NULL);
    size_t len = json_string_length(tok);
    json_array_append_new(json_object_get(ch->lp, "tokens"), tok);
    json_array_append_new(json_object_get(ch->lp, "token_logprobs"), has ? num(ev->logprob) : json_null());
    json_t *top = json_null();
    if (has) {
        top = json_object();
        for (int i = 0; i < ev->n_top; i++) {
            json_t *ts = token_string(g, ev->top_ids[i], NULL);
            json_object_set_new(top, json_string_value(ts), num(ev->top_lps[i]));
            json_decref(ts);
        }
    }
    json_array_append_new(json_object_get(ch->lp, "top_logprobs"), top);
    json_array_append_new(json_object_get(ch->lp, "text_offset"), json_integer((json_int_t)ch->text_offset));
    ch->text_offset += len;
}

static json_t *usage(const srv_gen *g) {
    int completion = 0;
    for (int i = 0; i < g->n_choices; i++) completion += g->choices[i].n_tokens;
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", g->prompt_tokens, "completion_tokens", completion, "total_tokens",
                     g->prompt_tokens + completion);
}

static json_t *text_value(const char *s, size_t n) {
    json_t *j = json_stringn(s ? s : "", n);
    return j ? j : json_string("");
}

static json_t *envelope(const srv_gen *g, const char *object) {
    const char *fp = g->x->fingerprint;
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", g->id, "object", object, "created", (json_int_t)g->created, "model",
                     g->x->served_name, "system_fingerprint", fp[0] ? json_string(fp) : json_null());
}

/* Echo text of a completions choice: the prompt as given, or its ids decoded. */
void srv_resp_echo_text(const srv_gen *g, const srv_choice *ch, srv_buf *out) {
    const srv_prompt *p = &g->req.prompts[ch->prompt_index];
    if (p->n_ids < 0) {
        srv_buf_append(out, p->text, p->len);
        return;
    }
    size_t n;
    char *t = latent_tokenizer_decode(g->x->model.tok, g->ids[ch->prompt_index], g->n_ids[ch->prompt_index], &n);
    if (t) srv_text_sanitize(t, n, out);
    free(t);
}

char *srv_resp_final(const srv_gen *g) {
    json_t *root = envelope(g, g->chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    for (int i = 0; i < g->n_choices; i++) {
        const srv_choice *ch = &g->choices[i];
        json_t *lp = ch->lp ? json_incref(ch->lp) : json_null();
        json_t *c;
        if (g->chat) {
            c = json_pack("{s:i, s:{s:s, s:o, s:n}, s:o, s:s}", "index", ch->index, "message", "role", "assistant", "content",
                          text_value(ch->out.p, ch->out.len), "refusal", "logprobs", lp, "finish_reason",
                          srv_resp_finish_reason(ch->finish));
        } else {
            srv_buf t = {0};
            if (g->req.echo) srv_resp_echo_text(g, ch, &t);
            srv_buf_append(&t, ch->out.p, ch->out.len);
            c = json_pack("{s:i, s:o, s:o, s:s}", "index", ch->index, "text", text_value(t.p, t.len), "logprobs", lp,
                          "finish_reason", srv_resp_finish_reason(ch->finish));
            srv_buf_free(&t);
        }
        json_array_append_new(choices, c);
    }
    json_object_set_new(root, "choices", choices);
    json_object_set_new(root, "usage", usage(g));
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

static void sse(json_t *obj, srv_buf *out) {
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!s) return;
    srv_buf_puts(out, "data: ");
    srv_buf_puts(out, s);
    srv_buf_puts(out, "\n\n");
    free(s);
}

void srv_resp_chunk(const srv_gen *g, srv_choice *ch, const char *text, size_t len, int with_role, int finish,
                    srv_buf *out) {
    json_t *root = envelope(g, g->chat ? "chat.completion.chunk" : "text_completion");
    json_t *lp = ch->lp ? ch->lp : json_null();
    ch->lp = ch->lp ? srv_resp_logprobs_new(g->chat) : NULL; /* the next chunk starts afresh */
    json_t *fr = finish ? json_string(srv_resp_finish_reason(ch->finish)) : json_null();
    json_t *c;
    if (g->chat) {
        json_t *delta = json_object();
        if (with_role) json_object_set_new(delta, "role", json_string("assistant"));
        if (len || with_role) json_object_set_new(delta, "content", text_value(text, len));
        c = json_pack("{s:i, s:o, s:o, s:o}", "index", ch->index, "delta", delta, "logprobs", lp, "finish_reason", fr);
    } else {
        c = json_pack("{s:i, s:o, s:o, s:o}", "index", ch->index, "text", text_value(text, len), "logprobs", lp,
                      "finish_reason", fr);
    }
    json_object_set_new(root, "choices", json_pack("[o]", c));
    if (g->req.include_usage) json_object_set_new(root, "usage", json_null());
    sse(root, out);
}

void srv_resp_usage_chunk(const srv_gen *g, srv_buf *out) {
    json_t *root = envelope(g, g->chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(root, "choices", json_array());
    json_object_set_new(root, "usage", usage(g));
    sse(root, out);
}
