/* POST /v1/completions and /v1/chat/completions on the loop thread:
 * validate, tokenize, create sessions, hand them to the scheduler, then turn
 * the published tokens into SSE chunks or one final response. */
#include "latent/clock.h"
#include "generate.h"
#include "openai_response.h"
#include "reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

#include "latent/json_schema.h"
#include "latent/tokenizer.h"
#include "log.h"

static uint64_t random_seed(void) {
    uint64_t s;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) s = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&s;
    return s;
}

static const char *const state_names[GEN__STATES] = {"new", "queued", "parsing", "parsed", "running",
                                                      "complete", "failed", "aborted", "orphaned"};

/* The transitions srv_gen_state allows (generate.h), by state. */
#define TO(s) (1u << (s))
static const unsigned allowed[GEN__STATES] = {
    [GEN_NEW] = TO(GEN_QUEUED) | TO(GEN_PARSING) | TO(GEN_RUNNING) | TO(GEN_FAILED),
    [GEN_QUEUED] = TO(GEN_PARSING) | TO(GEN_PARSED) | TO(GEN_FAILED) | TO(GEN_ABORTED),
    [GEN_PARSING] = TO(GEN_PARSED) | TO(GEN_ORPHANED),
    [GEN_PARSED] = TO(GEN_RUNNING) | TO(GEN_FAILED),
    [GEN_RUNNING] = TO(GEN_COMPLETE) | TO(GEN_ABORTED),
    [GEN_COMPLETE] = TO(GEN_ABORTED),
    [GEN_FAILED] = TO(GEN_ABORTED),
};
#undef TO

/* Every state change goes through here; one the table does not allow is a
 * bug, logged loudly (and made anyway: the request still ends). */
static void gen_enter(srv_gen *g, srv_gen_state to) {
    if (!(allowed[g->state] & (1u << to)))
        srv_log(SRV_LOG_ERROR, "bug: request %s went from %s to %s", g->id, state_names[g->state], state_names[to]);
    g->state = to;
}

/* No more output will be made for the client (its answer is decided). */
static int gen_settled(const srv_gen *g) { return g->state >= GEN_COMPLETE; }

static void gen_free(srv_gen *g) {
    if (!g) return;
    if (g->quota_held) srv_quota_release(&g->x->quota, g->client, g->quota_held);
    for (int i = 0; i < g->n_choices; i++) {
        srv_choice *ch = &g->choices[i];
        if (ch->sess) srv_sched_release(g->x->sched, ch->sess);
        srv_text_free(&ch->text);
        srv_buf_free(&ch->out);
        json_decref(ch->lp);
    }
    free(g->choices);
    srv_buf_free(&g->body);
    srv_buf_free(&g->events);
    for (int i = 0; g->ids && i < g->n_prompts; i++) free(g->ids[i]);
    free(g->ids);
    free(g->n_ids);
    srv_req_free(&g->req);
    free(g);
}

/* Tokenizes prompt i (text, ids or the rendered chat) into g->ids[i], in
 * one pass: byte-level BPE gives at most one id per byte, so len + 1 ids
 * always suffice (a second pass only if a tokenizer ever needed more).
 * Pure: runs on the thread pool for big prompts. */
static int tokenize(srv_ctx *x, srv_gen *g, int i, srv_error *e) {
    const char *text;
    size_t len;
    char *rendered = NULL;
    if (g->chat) {
        rendered = srv_tmpl_render(&x->tmpl, g->req.messages, g->req.n_messages, 1, &len);
        if (!rendered) return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
        text = rendered;
    } else if (g->req.prompts[i].n_ids >= 0) {
        const srv_prompt *p = &g->req.prompts[i];
        g->ids[i] = malloc(((size_t)p->n_ids + 1) * sizeof(int32_t));
        if (!g->ids[i]) return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
        memcpy(g->ids[i], p->ids, (size_t)p->n_ids * sizeof(int32_t));
        g->n_ids[i] = p->n_ids;
        return 0;
    } else {
        text = g->req.prompts[i].text, len = g->req.prompts[i].len;
    }
    /* Each token stands for at most max_token_bytes of text (a factor of 4
     * more covers normalizers that fold text): a prompt longer than that
     * times the context cannot fit, and is refused before tokenizing it. */
    size_t ctx = (size_t)x->model.cfg.max_pos, surely = len / (4 * (size_t)(x->max_token_bytes > 0 ? x->max_token_bytes : 1));
    if (surely > ctx) {
        free(rendered);
        return srv_error_set(e, SRV_ERR_CONTEXT_LENGTH, g->chat ? "messages" : "prompt",
                             "This model's maximum context length is %zu tokens. However, your prompt has at least %zu tokens "
                             "(%zu bytes).", ctx, surely, len);
    }
    int cap = len + 1 < (size_t)INT32_MAX ? (int)len + 1 : INT32_MAX;
    int n = -1;
    if ((g->ids[i] = malloc((size_t)cap * sizeof(int32_t)))) {
        n = latent_tokenizer_encode(x->model.tok, text, len, g->ids[i], cap);
        if (n > cap) {
            int32_t *more = realloc(g->ids[i], ((size_t)n + 1) * sizeof(int32_t));
            n = more ? latent_tokenizer_encode(x->model.tok, text, len, more, n + 1) : -1;
            if (more) g->ids[i] = more;
        }
    }
    free(rendered);
    if (n < 0 || !g->ids[i]) return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "cannot tokenize the prompt");
    g->n_ids[i] = n;
    return 0;
}

static int tokenize_all(srv_ctx *x, srv_gen *g, srv_error *e) {
    for (int i = 0; i < g->n_prompts; i++)
        if (tokenize(x, g, i, e) != 0) return -1;
    return 0;
}

/* The generation length of prompt i: the request's max_tokens (checked
 * against the server cap, the context and the pool) or a default that fits. */
static int plan_length(srv_ctx *x, srv_gen *g, int i, int group, int *out, srv_error *e) {
    const char *param = g->chat ? "messages" : "prompt";
    int ctx = x->model.cfg.max_pos, n = g->n_ids[i];
    if (n == 0) {
        if (x->model.cfg.bos_id < 0) return srv_error_set(e, SRV_ERR_INVALID_FIELD, param, "the prompt is empty");
        g->ids[i][0] = x->model.cfg.bos_id; /* an empty prompt starts from the beginning-of-sequence token */
        g->n_ids[i] = n = 1;
    }
    int explicit = g->req.max_tokens >= 0;
    int mt = explicit ? g->req.max_tokens : g->chat ? x->cfg.max_tokens : 16;
    if (explicit && mt > x->cfg.max_tokens)
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, g->chat ? "max_completion_tokens" : "max_tokens",
                             "at most %d tokens may be generated per request on this server (asked for %d)", x->cfg.max_tokens, mt);
    if (n > ctx || (n == ctx && mt > 0))
        return srv_error_set(e, SRV_ERR_CONTEXT_LENGTH, param,
                             "This model's maximum context length is %d tokens. However, your prompt has %d tokens.", ctx, n);
    if (n + mt > ctx) {
        if (explicit)
            return srv_error_set(e, SRV_ERR_CONTEXT_LENGTH, g->chat ? "max_completion_tokens" : "max_tokens",
                                 "This model's maximum context length is %d tokens. However, you requested %d tokens "
                                 "(%d in the prompt, %d for the completion).", ctx, n + mt, n, mt);
        mt = ctx - n;
    }
    int pool = srv_sched_pool_pages(x->sched);
    if (srv_sched_group_pages(x->sched, n, mt, group) > pool) {
        if (explicit || srv_sched_group_pages(x->sched, n, 1, group) > pool)
            return srv_error_set(e, SRV_ERR_CONTEXT_LENGTH, param,
                                 "%d sequence(s) of %d prompt tokens and %d completion tokens need %d KV pages; the pool has %d "
                                 "(see --kv-pool-mib)", group, n, mt, srv_sched_group_pages(x->sched, n, mt, group), pool);
        while (mt > 1 && srv_sched_group_pages(x->sched, n, mt, group) > pool) mt = mt * 3 / 4; /* shrink by a quarter until it fits */
    }
    *out = mt;
    return 0;
}

static srv_session *make_session(srv_ctx *x, srv_gen *g, srv_choice *ch, int max_tokens, uint64_t seed) {
    srv_session *s = srv_session_new();
    if (!s) return NULL;
    int p = ch->prompt_index, n = g->n_ids[p];
    s->prompt = malloc((size_t)n * sizeof(int32_t));
    if (g->req.n_bias) s->bias = malloc((size_t)g->req.n_bias * sizeof *s->bias);
    if (!s->prompt || (g->req.n_bias && !s->bias)) {
        srv_session_free(s);
        return NULL;
    }
    memcpy(s->prompt, g->ids[p], (size_t)n * sizeof(int32_t));
    s->n_prompt = n;
    s->max_tokens = max_tokens;
    s->sp = g->req.sp;
    if (g->req.n_bias) memcpy(s->bias, g->req.bias, (size_t)g->req.n_bias * sizeof *s->bias);
    s->sp.bias = s->bias, s->sp.n_bias = g->req.n_bias;
    /* Choice k of a seeded request draws from seed ^ k*golden: choice 0 from the seed itself. */
    s->seed = seed ^ ((uint64_t)ch->index * 0x9E3779B97F4A7C15ULL);
    s->ignore_eos = g->req.ignore_eos;
    for (int i = 0; i < x->model.cfg.n_eos && s->n_stop_ids < SRV_MAX_STOP_IDS; i++) s->stop_ids[s->n_stop_ids++] = x->model.cfg.eos_ids[i];
    if (g->chat && x->eot_id >= 0 && s->n_stop_ids < SRV_MAX_STOP_IDS) s->stop_ids[s->n_stop_ids++] = x->eot_id;
    if (g->req.json && (!x->json_vocab || !(s->json = latent_json_guard_new(g->req.json, x->json_vocab, s->stop_ids, s->n_stop_ids)))) {
        srv_session_free(s);
        return NULL;
    }
    s->logprobs = g->req.logprobs;
    s->prompt_logprobs = !g->chat && g->req.echo && g->req.logprobs;
    s->use_cache = !s->prompt_logprobs;
    s->t_submit = latent_now_seconds();
    s->owner = ch;
    return s;
}

static void choice_done(srv_ctx *x, srv_choice *ch, srv_finish why) {
    if (ch->done) return;
    ch->done = 1;
    ch->finish = why;
    ch->g->n_done++;
    if (ch->sess) {
        srv_sched_release(x->sched, ch->sess);
        ch->sess = NULL;
    }
}

static void link_gen(srv_ctx *x, srv_gen *g) {
    g->next = x->gens;
    if (x->gens) x->gens->prev = g;
    x->gens = g;
    x->n_gens++;
}

static void unlink_gen(srv_ctx *x, srv_gen *g) {
    if (g->prev) g->prev->next = g->next;
    else if (x->gens == g) x->gens = g->next;
    if (g->next) g->next->prev = g->prev;
    g->prev = g->next = NULL;
    x->n_gens--;
}

static void emit(srv_ctx *x, srv_gen *g);
static void srv_gen_resume(srv_ctx *x, srv_conn *c, srv_gen *g);
static void srv_gen_abort(srv_ctx *x, srv_gen *g);
static void srv_gen_close(srv_ctx *x, srv_gen *g);
static void srv_gen_drained(srv_ctx *x, srv_gen *g);

/* The request's own callbacks on its connection (http.h, srv_conn_attach). */
static void on_resume(void *ud, srv_conn *c, void *data) { srv_gen_resume(ud, c, data); }
static void on_abort(void *ud, srv_conn *c, void *data) { srv_gen_abort(ud, data); }
static void on_drain(void *ud, srv_conn *c, void *data) { srv_gen_drained(ud, data); }
static void on_close(void *ud, srv_conn *c, void *data) { srv_gen_close(ud, data); }
static const srv_conn_handler gen_handler = {on_resume, on_abort, on_drain, on_close};

int srv_gen_usage(const srv_gen *g, int *prompt, int *completion) {
    *prompt = g->prompt_tokens, *completion = 0;
    for (int i = 0; i < g->n_choices; i++) *completion += g->choices[i].n_tokens;
    return 0;
}

/* Backpressure: a stream with more than this many bytes its client has not
 * read pauses its sessions' decoding until the bytes have gone to the socket;
 * memory per stream stays bounded. A paused session keeps its pages but
 * gives its batch slot to a waiting request (scheduler.c, preempt_paused). */
#define STREAM_UNSENT_MAX (256 * 1024)

static void set_paused(srv_ctx *x, srv_gen *g, int paused) {
    g->paused = paused;
    for (int i = 0; i < g->n_choices; i++)
        if (g->choices[i].sess) srv_sched_pause(x->sched, g->choices[i].sess, paused);
    if (paused) srv_conn_notify_drain(g->conn), srv_metrics_add(&x->metrics, SRV_C_STREAM_PAUSES, 1);
}

/* One SSE event for a choice with what it holds now: released text (the
 * prompt first, when echoing) and the logprobs of the tokens since its last
 * event; the last one carries finish_reason. Nothing when it holds nothing. */
static void stream_choice(srv_gen *g, srv_choice *ch, srv_buf *out) {
    int has_lp = ch->lp && json_array_size(json_object_get(ch->lp, g->chat ? "content" : "tokens")) > 0;
    if (ch->reported || (!ch->out.len && !has_lp && !ch->done && !ch->echo_pending)) return;
    if (ch->echo_pending && !has_lp && ch->sess && ch->sess->prompt_logprobs) return; /* wait for the prompt's logprobs */
    srv_buf text = {0};
    if (ch->echo_pending) srv_resp_echo_text(g, ch, &text), ch->echo_pending = 0;
    srv_buf_append(&text, ch->out.p, ch->out.len);
    srv_buf_reset(&ch->out);
    if (ch->done && g->err.kind == SRV_ERR_NONE) ch->reported = 1;
    if (text.len || has_lp || ch->reported) srv_resp_chunk(g, ch, text.p, text.len, 0, ch->reported, out);
    if (text.oom) out->oom = 1;
    srv_buf_free(&text);
}

/* Bodies this large are parsed and their prompts tokenized on libuv's
 * thread pool, at low priority: the loop thread serves every other stream
 * meanwhile, and the engine's threads keep the cores (a 4 MiB prompt takes
 * 0.3 s of CPU to tokenize, and 2 cores have none to spare while decoding). */
#define ASYNC_BODY_BYTES (16 * 1024)
#define BIG_REQUEST_NICE 19
/* Bodies over this many bytes take one lane of libuv's pool (4 threads) at
 * a time, queued in order, so that a burst of multi-megabyte prompts leaves
 * three threads to the 16 KiB-1 MiB bodies behind them. */
#define BIG_BODY_BYTES (1024 * 1024)
#define BIG_LANES 1

static int start_generation(srv_ctx *x, srv_gen *g, srv_error *e);

/* Ends a request that failed before generating: the error reply now; the
 * connection's close frees g (it is linked and attached from the start). */
static void fail_request(srv_ctx *x, srv_gen *g, const srv_error *e) {
    gen_enter(g, GEN_FAILED);
    for (int i = 0; i < g->n_choices; i++) choice_done(x, &g->choices[i], SRV_FINISH_CANCELLED); /* what was submitted */
    srv_reply_error(x, g->conn, e);
}

static int prepare(srv_ctx *x, srv_gen *g, const char *body, size_t len, srv_error *e);

static void tokenize_work(uv_work_t *w) {
    static __thread int reniced;
    if (!reniced) { /* this pool thread runs only big requests' parsing from now on */
        reniced = 1;
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), BIG_REQUEST_NICE);
    }
    srv_gen *g = w->data;
    const char *body = g->body.p ? g->body.p : ""; /* taken from the connection, which may close meanwhile */
    g->tok_rc = prepare(g->x, g, body, g->body.len, &g->tok_err) != 0 || tokenize_all(g->x, g, &g->tok_err) != 0 ? -1 : 0;
}

static void tokenize_done(uv_work_t *w, int status);

/* g's body goes to the thread pool: 0, or -1 when it cannot be queued. */
static int queue_tokenize(srv_ctx *x, srv_gen *g) {
    g->tok_work.data = g;
    if (uv_queue_work(x->loop, &g->tok_work, tokenize_work, tokenize_done) != 0) return -1;
    gen_enter(g, GEN_PARSING);
    if (g->big) x->big_running++;
    return 0;
}

/* Starts queued big bodies while the lane has room. */
static void start_big(srv_ctx *x) {
    while (x->big_head && x->big_running < BIG_LANES) {
        srv_gen *g = x->big_head;
        x->big_head = g->big_next;
        if (!x->big_head) x->big_tail = NULL;
        g->big_next = NULL;
        if (queue_tokenize(x, g) != 0) { /* srv_gen_resume answers the error */
            gen_enter(g, GEN_PARSED);
            g->tok_rc = -1;
            srv_error_set(&g->tok_err, SRV_ERR_INTERNAL, NULL, "cannot queue the request's parsing");
            srv_conn_wake(g->conn);
        }
    }
}

static void unqueue_big(srv_ctx *x, srv_gen *g) {
    srv_gen **pp = &x->big_head, *prev = NULL;
    while (*pp && *pp != g) prev = *pp, pp = &(*pp)->big_next;
    if (!*pp) return;
    *pp = g->big_next;
    if (x->big_tail == g) x->big_tail = prev;
    g->big_next = NULL;
}

static void tokenize_done(uv_work_t *w, int status) {
    srv_gen *g = w->data;
    srv_ctx *x = g->x;
    if (g->big) x->big_running--, start_big(x);
    if (g->state == GEN_ORPHANED) { /* the client left and the connection closed meanwhile */
        gen_free(g);
        return;
    }
    gen_enter(g, GEN_PARSED);
    srv_buf_free(&g->body);
    srv_conn_release_body(g->conn); /* parsed: its memory goes back to the body budget */
    if (status != 0 && g->tok_rc == 0) g->tok_rc = -1, srv_error_set(&g->tok_err, SRV_ERR_INTERNAL, NULL, "tokenization cancelled");
    srv_conn_wake(g->conn); /* on_request runs again: srv_gen_resume goes on */
}

/* Checks the request and allocates what it needs; -1 with *e set. */
static int prepare(srv_ctx *x, srv_gen *g, const char *body, size_t len, srv_error *e) {
    srv_req_limits lim = {.vocab = x->model.cfg.vocab};
    if (srv_req_parse(&g->req, g->chat ? SRV_API_CHAT : SRV_API_COMPLETIONS, body, len, &lim, e) != 0) return -1;
    if (g->req.model && strcmp(g->req.model, x->served_name) != 0)
        return srv_error_set(e, SRV_ERR_MODEL_NOT_FOUND, "model", "The model '%.200s' does not exist (this server serves '%.200s')",
                             g->req.model, x->served_name);
    int n = g->req.n, cap = x->cfg.max_sessions + x->cfg.queue_len;
    g->n_prompts = g->chat ? 1 : g->req.n_prompts;
    long total = (long)g->n_prompts * n;
    if (n > x->cfg.max_sessions || total > cap)
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, "n", "%ld sequences (%d prompt(s) x n=%d) exceed what this server runs at once (%d)",
                             total, g->n_prompts, n, n > x->cfg.max_sessions ? x->cfg.max_sessions : cap);
    /* No retry could pass the per-client cap: 400, not 429. */
    if (x->cfg.max_sequences_per_client > 0 && total > x->cfg.max_sequences_per_client)
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, "n",
                             "%ld sequences (%d prompt(s) x n=%d) exceed the per-client limit of %d (max-sequences-per-client)",
                             total, g->n_prompts, n, x->cfg.max_sequences_per_client);
    g->ids = calloc(g->n_prompts, sizeof *g->ids);
    g->n_ids = calloc(g->n_prompts, sizeof *g->n_ids);
    g->choices = calloc(total, sizeof *g->choices);
    if (!g->ids || !g->n_ids || !g->choices) return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
    return 0;
}

void srv_gen_handle(srv_ctx *x, srv_conn *c, int chat) {
    srv_error e = {0};
    if (!x->ready || x->draining) {
        if (!x->ready) srv_error_set(&e, SRV_ERR_NOT_READY, NULL, "the model is still loading");
        else srv_error_set(&e, SRV_ERR_DRAINING, NULL, "the server is shutting down");
        srv_reply_error(x, c, &e);
        return;
    }
    srv_gen *g = calloc(1, sizeof *g);
    if (!g) {
        srv_error_set(&e, SRV_ERR_INTERNAL, NULL, "out of memory");
        srv_reply_error(x, c, &e);
        return;
    }
    g->x = x, g->conn = c, g->chat = chat, g->t_start = srv_conn_started(c);
    g->created = (long long)time(NULL);
    snprintf(g->id, sizeof g->id, "%s-%016llx%s", chat ? "chatcmpl" : "cmpl", (unsigned long long)random_seed(), srv_conn_id(c));
    link_gen(x, g);
    srv_conn_attach(c, &gen_handler, g);
    size_t body_len;
    srv_conn_body(c, &body_len);
    if (body_len > ASYNC_BODY_BYTES) {
        srv_conn_take_body(c, &g->body); /* the pool reads it; the connection may close meanwhile */
        g->big = body_len > BIG_BODY_BYTES;
        if (g->big && x->big_running >= BIG_LANES) { /* waits for the big-body lane */
            gen_enter(g, GEN_QUEUED);
            if (x->big_tail) x->big_tail->big_next = g;
            else x->big_head = g;
            x->big_tail = g;
            srv_conn_suspend(c);
            return;
        }
        if (queue_tokenize(x, g) == 0) {
            srv_conn_suspend(c);
            return;
        }
        /* cannot queue: do it here */
    }
    const char *body = g->body.p ? g->body.p : srv_conn_body(c, &body_len);
    body_len = g->body.p ? g->body.len : body_len;
    int rc = prepare(x, g, body, body_len, &e);
    srv_buf_free(&g->body);
    srv_conn_release_body(c); /* parsed: its memory goes back to the body budget */
    if (rc != 0 || tokenize_all(x, g, &e) != 0 || start_generation(x, g, &e) != 0) fail_request(x, g, &e);
}

/* Who a request counts against: its API key (hashed: keys are not kept),
 * else the last X-Forwarded-For entry from a trusted proxy, else the peer. */
static void client_identity(srv_ctx *x, srv_conn *c, char *out, size_t cap) {
    const char *auth = srv_conn_header(c, "Authorization");
    if (x->cfg.api_keys.n && auth && !strncasecmp(auth, "Bearer ", 7)) {
        uint64_t h = 1469598103934665603ULL; /* FNV-1a */
        for (const unsigned char *p = (const unsigned char *)auth + 7; *p; p++) h = (h ^ *p) * 1099511628211ULL;
        snprintf(out, cap, "key:%016llx", (unsigned long long)h);
        return;
    }
    const char *xff = x->cfg.trust_forwarded_for ? srv_conn_header(c, "X-Forwarded-For") : NULL;
    if (xff && *xff) {
        const char *last = strrchr(xff, ',');
        last = last ? last + 1 : xff;
        while (*last == ' ') last++;
        snprintf(out, cap, "addr:%.60s", last);
        return;
    }
    char peer[64];
    srv_conn_peer(c, peer, sizeof peer);
    snprintf(out, cap, "addr:%s", peer);
}

/* Lengths, sessions (choices 2..n of a prompt fork its state), submission,
 * then the stream's start or a wait for the whole body. */
/* Step 1: every prompt's length plan (max_tokens against the context). */
static int plan_lengths(srv_ctx *x, srv_gen *g, int per_prompt, int *mt, srv_error *e) {
    for (int i = 0; i < g->n_prompts; i++) {
        if (plan_length(x, g, i, per_prompt, &mt[i], e) != 0) return -1;
        g->prompt_tokens += g->n_ids[i];
    }
    return 0;
}

/* Step 2: the client's share of sequences (client_quota.h). */
static int take_quota(srv_ctx *x, srv_gen *g, int sequences, srv_error *e) {
    client_identity(x, g->conn, g->client, sizeof g->client);
    int held;
    if (srv_quota_acquire(&x->quota, g->client, sequences, x->cfg.max_sequences_per_client, &held) != 0) {
        srv_metrics_add(&x->metrics, SRV_C_REJECTED, 1);
        return srv_error_set(e, SRV_ERR_OVERLOADED, NULL,
                             "this client already has %d sequence(s) running or queued; %d more would pass its limit of %d",
                             held, sequences, x->cfg.max_sequences_per_client);
    }
    g->quota_held = sequences;
    return 0;
}

/* Step 3: the choices' text and logprob state. */
static void init_choices(srv_gen *g, int n) {
    g->n_choices = g->n_prompts * n;
    for (int i = 0; i < g->n_choices; i++) {
        srv_choice *ch = &g->choices[i];
        ch->g = g, ch->index = i, ch->prompt_index = i / n;
        srv_text_init(&ch->text, g->req.stop, g->req.stop_len, g->req.n_stop);
        ch->echo_pending = !g->chat && g->req.echo;
        if (g->req.logprobs) ch->lp = srv_resp_logprobs_new(g->chat);
    }
}

/* Step 4: one session per choice; the n choices of a prompt share its
 * prefill (the first leads, the others follow). */
static int make_sessions(srv_ctx *x, srv_gen *g, int n, int prompt_lp, const int *mt, srv_error *e) {
    uint64_t seed = g->req.has_seed ? g->req.seed : random_seed();
    for (int p = 0; p < g->n_prompts; p++) {
        if (mt[p] == 0 && !prompt_lp) {
            for (int k = 0; k < n; k++) choice_done(x, &g->choices[p * n + k], SRV_FINISH_LENGTH);
            continue;
        }
        for (int k = 0; k < n; k++) {
            srv_choice *ch = &g->choices[p * n + k];
            if (!(ch->sess = make_session(x, g, ch, mt[p], seed))) return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
        }
        if (prompt_lp || n == 1) continue;
        srv_session *lead = g->choices[p * n].sess;
        if (!(lead->followers = malloc((size_t)(n - 1) * sizeof *lead->followers)))
            return srv_error_set(e, SRV_ERR_INTERNAL, NULL, "out of memory");
        for (int k = 1; k < n; k++) {
            srv_session *f = g->choices[p * n + k].sess;
            f->leader = lead;
            lead->followers[lead->n_followers++] = f;
        }
    }
    return 0;
}

/* Step 5: the leading sessions go to the scheduler. */
static int submit_sessions(srv_ctx *x, srv_gen *g, srv_error *e) {
    for (int i = 0; i < g->n_choices; i++) {
        srv_session *s = g->choices[i].sess;
        if (!s || s->leader) continue;
        if (srv_sched_submit(x->sched, s) != 0) {
            srv_metrics_add(&x->metrics, SRV_C_REJECTED, 1);
            return srv_error_set(e, SRV_ERR_OVERLOADED, NULL, "the server is at capacity (%d sequences running or queued); retry later",
                                 x->cfg.max_sessions + x->cfg.queue_len); /* gen_free cancels what was submitted */
        }
    }
    return 0;
}

/* Step 6: the response begins: a stream's head (and chat's role chunks), or
 * the wait for every choice of a whole response. */
static void begin_response(srv_ctx *x, srv_gen *g) {
    if (g->req.stream) {
        srv_conn_stream_start(g->conn, 200, "text/event-stream");
        if (g->chat) { /* the first chunk of each choice carries the role */
            srv_buf out = {0};
            for (int i = 0; i < g->n_choices; i++) srv_resp_chunk(g, &g->choices[i], "", 0, 1, 0, &out);
            srv_conn_write(g->conn, out.p, out.len);
            srv_buf_free(&out);
        }
        emit(x, g);
    } else if (g->n_done == g->n_choices) {
        gen_enter(g, GEN_COMPLETE);
        srv_gen_resume(x, g->conn, g);
    } else {
        srv_conn_suspend(g->conn);
    }
    g->dirty = 0;
}

/* A parsed request starts generating: 0, or -1 with e (nothing sent yet). */
static int start_generation(srv_ctx *x, srv_gen *g, srv_error *e) {
    int n = g->req.n, prompt_lp = !g->chat && g->req.echo && g->req.logprobs;
    int mt[g->n_prompts];
    if (plan_lengths(x, g, prompt_lp ? 1 : n, mt, e) != 0) return -1;
    if (take_quota(x, g, g->n_prompts * n, e) != 0) return -1;
    init_choices(g, n);
    if (make_sessions(x, g, n, prompt_lp, mt, e) != 0) return -1;
    if (submit_sessions(x, g, e) != 0) return -1;
    srv_metrics_add(&x->metrics, SRV_C_PROMPT_TOKENS, (uint64_t)g->prompt_tokens);
    gen_enter(g, GEN_RUNNING);
    begin_response(x, g);
    return 0;
}

/* Writes what the choices have for a stream; finishes a complete request. */
static void emit(srv_ctx *x, srv_gen *g) {
    g->dirty = 0;
    if (g->state != GEN_RUNNING) return;
    if (!g->req.stream) {
        if (g->n_done == g->n_choices) {
            gen_enter(g, GEN_COMPLETE);
            srv_conn_wake(g->conn);
        }
        return;
    }
    /* the events built token by token first, then what the choices still hold */
    srv_buf out = g->events;
    memset(&g->events, 0, sizeof g->events);
    for (int i = 0; i < g->n_choices; i++) stream_choice(g, &g->choices[i], &out);
    if (out.oom) {
        /* Out of memory building this stream's events: end it with an error
         * event (a static one, needing no allocation); the others go on. */
        static const char oom[] = "data: {\"error\":{\"message\":\"out of memory building the stream\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":\"internal_error\"}}\n\ndata: [DONE]\n\n";
        srv_buf_free(&out);
        srv_log(SRV_LOG_ERROR, "%s: out of memory building stream events; ending the stream", g->id);
        for (int i = 0; i < g->n_choices; i++) choice_done(x, &g->choices[i], SRV_FINISH_CANCELLED);
        gen_enter(g, GEN_COMPLETE);
        srv_conn_write(g->conn, oom, sizeof oom - 1);
        srv_conn_end(g->conn);
        return;
    }
    if (g->n_done == g->n_choices) {
        if (g->err.kind != SRV_ERR_NONE) {
            char *ej = srv_error_json(&g->err);
            if (ej) srv_buf_printf(&out, "data: %s\n\n", ej);
            free(ej);
        } else if (g->req.include_usage) {
            srv_resp_usage_chunk(g, &out);
        }
        srv_buf_puts(&out, "data: [DONE]\n\n");
        gen_enter(g, GEN_COMPLETE);
    }
    if (out.len) srv_conn_write(g->conn, out.p, out.len);
    if (g->state == GEN_COMPLETE) srv_conn_end(g->conn);
    srv_buf_free(&out);
    if (g->state == GEN_RUNNING && !g->paused && srv_conn_unsent(g->conn) > STREAM_UNSENT_MAX) set_paused(x, g, 1);
}

static void srv_gen_drained(srv_ctx *x, srv_gen *g) {
    if (g->paused) set_paused(x, g, 0);
}

/* The pool's result is in: start generating, or answer the error. */
static void start_parsed(srv_ctx *x, srv_gen *g) {
    srv_error e = {0};
    if (g->err.kind != SRV_ERR_NONE) e = g->err;
    else if (g->tok_rc != 0) e = g->tok_err;
    if (e.kind != SRV_ERR_NONE || start_generation(x, g, &e) != 0) fail_request(x, g, &e);
}

/* The connection was woken (or MHD asks again): act on the request's state. */
static void srv_gen_resume(srv_ctx *x, srv_conn *c, srv_gen *g) {
    switch (g->state) {
    case GEN_QUEUED:
        if (g->err.kind == SRV_ERR_NONE) return srv_conn_suspend(c);
        unqueue_big(x, g); /* drained while waiting for its lane: never parsed */
        return fail_request(x, g, &g->err);
    case GEN_PARSING: /* the pool holds it; an error (draining) is answered when it is back */
        return srv_conn_suspend(c);
    case GEN_PARSED:
        return start_parsed(x, g);
    case GEN_RUNNING:
        return srv_conn_suspend(c); /* woken early: keep waiting */
    case GEN_COMPLETE:
        break;
    default: /* NEW, FAILED, ABORTED, ORPHANED: nothing to send */
        return;
    }
    if (g->req.stream) return; /* the stream's end was written */
    if (g->err.kind != SRV_ERR_NONE) {
        srv_reply_error(x, c, &g->err);
        return;
    }
    char *body = srv_resp_final(g);
    if (!body) {
        srv_error e;
        srv_error_set(&e, SRV_ERR_INTERNAL, NULL, "cannot build the response");
        srv_reply_error(x, c, &e);
        return;
    }
    srv_conn_reply(c, 200, "application/json", body, strlen(body));
    free(body);
}

/* Turns one session's new events into text, logprobs and metrics. */
static void take_session(srv_ctx *x, srv_session *s) {
    srv_choice *ch = s->owner;
    srv_gen *g = ch->g;
    int n;
    srv_finish fin;
    const srv_event *ev = srv_sched_take_events(x->sched, s, &n, &fin);
    if (!ch->seen_first && (n > 0 || fin != SRV_FINISH_NONE)) {
        double w = srv_sched_queue_wait(x->sched, s);
        if (w >= 0) srv_metrics_observe(&x->metrics, SRV_H_QUEUE, w);
    }
    char raw[256], *bytes = raw;
    for (int i = 0; i < n && !ch->done; i++) {
        const srv_event *e = &ev[i];
        if (e->kind == SRV_EV_PROMPT) {
            srv_resp_logprobs_add(g, ch, e);
            continue;
        }
        ch->n_tokens++;
        if (!ch->seen_first) {
            ch->seen_first = 1;
            srv_metrics_observe(&x->metrics, SRV_H_TTFT, e->t - g->t_start);
        } else {
            srv_metrics_observe(&x->metrics, SRV_H_ITL, e->t - ch->t_last);
        }
        ch->t_last = e->t;
        if (e->kind == SRV_EV_EOS) continue; /* ends the text; fin says STOP */
        srv_resp_logprobs_add(g, ch, e);
        int nb = latent_tokenizer_token_bytes(x->model.tok, e->token, raw, sizeof raw);
        if (nb > (int)sizeof raw) { /* a token longer than the buffer: its whole bytes, never a cut */
            bytes = malloc((size_t)nb);
            if (!bytes || latent_tokenizer_token_bytes(x->model.tok, e->token, bytes, nb) != nb) {
                free(bytes);
                bytes = raw;
                srv_error_set(&g->err, SRV_ERR_INTERNAL, NULL, "out of memory decoding a token of %d bytes", nb);
                choice_done(x, ch, SRV_FINISH_ERROR);
                break;
            }
        }
        if (nb > 0 && srv_text_feed(&ch->text, bytes, (size_t)nb, &ch->out)) choice_done(x, ch, SRV_FINISH_STOP);
        if (bytes != raw) free(bytes), bytes = raw;
        /* Streams get one event per token: whatever this token released
         * (held-back UTF-8 or stop-string text goes with the token that
         * releases it) and exactly its logprob entry. */
        if (g->req.stream && !ch->done) stream_choice(g, ch, &g->events);
    }
    if (!ch->done && fin != SRV_FINISH_NONE) {
        if (fin == SRV_FINISH_ERROR || fin == SRV_FINISH_CANCELLED) {
            if (g->err.kind == SRV_ERR_NONE) {
                if (fin == SRV_FINISH_ERROR) srv_error_set(&g->err, SRV_ERR_INTERNAL, NULL, "generation failed: %s", s->err);
                else srv_error_set(&g->err, SRV_ERR_DRAINING, NULL, "the server is shutting down");
            }
        } else {
            srv_text_finish(&ch->text, &ch->out);
        }
        choice_done(x, ch, fin);
    }
    g->dirty = 1;
}

void srv_gen_on_wake(uv_async_t *a) {
    srv_ctx *x = a->data;
    if (!x->sched) return;
    int n = srv_sched_take_ready(x->sched, &x->ready_list, &x->ready_cap);
    enum { TOUCHED_MAX = 64 }; /* requests emitted directly; past it, one pass over all dirty ones */
    srv_gen *touched[TOUCHED_MAX];
    int n_touched = 0, overflow = 0;
    for (int i = 0; i < n; i++) {
        srv_session *s = x->ready_list[i];
        if (!s->loop_released) {
            srv_gen *g = ((srv_choice *)s->owner)->g;
            int was_dirty = g->dirty;
            take_session(x, s);
            if (!was_dirty) {
                if (n_touched < TOUCHED_MAX) touched[n_touched++] = g;
                else overflow = 1;
            }
        }
        srv_sched_unref(x->sched, s);
    }
    for (int i = 0; i < n_touched; i++) emit(x, touched[i]);
    if (overflow)
        for (srv_gen *g = x->gens; g; g = g->next)
            if (g->dirty) emit(x, g);
}

void srv_gen_keepalive(srv_ctx *x) {
    static const char comment[] = ": keep-alive\n\n";
    for (srv_gen *g = x->gens; g; g = g->next)
        if (g->req.stream && g->state == GEN_RUNNING && srv_conn_idle(g->conn) >= x->cfg.keepalive_seconds)
            srv_conn_write(g->conn, comment, sizeof comment - 1);
}

void srv_gen_cancel_all(srv_ctx *x) {
    for (srv_gen *g = x->gens; g; g = g->next) {
        if (gen_settled(g)) continue;
        if (g->err.kind == SRV_ERR_NONE) srv_error_set(&g->err, SRV_ERR_DRAINING, NULL, "the server is shutting down");
        if (g->state != GEN_RUNNING) { /* queued or parsing: resume answers the error */
            srv_conn_wake(g->conn);
            continue;
        }
        for (int i = 0; i < g->n_choices; i++) choice_done(x, &g->choices[i], SRV_FINISH_CANCELLED);
        emit(x, g);
    }
}

/* The client left. */
static void srv_gen_abort(srv_ctx *x, srv_gen *g) {
    if (g->state == GEN_PARSING || g->state == GEN_PARSED || g->state == GEN_NEW) {
        /* nothing runs yet: when the pool is done, the request fails */
        if (g->err.kind == SRV_ERR_NONE) srv_error_set(&g->err, SRV_ERR_INTERNAL, NULL, "the client went away");
        return;
    }
    if (g->state == GEN_QUEUED) unqueue_big(x, g);
    int live = 0;
    for (int i = 0; i < g->n_choices; i++)
        if (!g->choices[i].done) live++, choice_done(x, &g->choices[i], SRV_FINISH_CANCELLED);
    if (live) srv_metrics_add(&x->metrics, SRV_C_CANCELLED, (uint64_t)live);
    if (g->state != GEN_ORPHANED) gen_enter(g, GEN_ABORTED);
}

static void srv_gen_close(srv_ctx *x, srv_gen *g) {
    if (g->state == GEN_RUNNING || g->state == GEN_COMPLETE) {
        int tokens = 0;
        for (int i = 0; i < g->n_choices; i++) tokens += g->choices[i].n_tokens;
        srv_metrics_add(&x->metrics, SRV_C_COMPLETION_TOKENS, (uint64_t)tokens);
        srv_metrics_observe(&x->metrics, SRV_H_E2E, latent_now_seconds() - g->t_start);
    }
    unlink_gen(x, g);
    if (g->state == GEN_QUEUED) unqueue_big(x, g);
    if (g->state == GEN_PARSING) { /* the thread pool still writes g: tokenize_done frees it */
        gen_enter(g, GEN_ORPHANED);
        g->conn = NULL; /* freed after this returns */
        return;
    }
    gen_free(g);
}
