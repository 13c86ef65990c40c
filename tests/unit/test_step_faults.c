/* A failed engine step changes nothing: an allocation failure injected at
 * each allocation point of a multi-entry step (prefill and decode entries
 * together, a fork sharing pages, plain, T2MLR and LRT, f32 and bf16) leaves
 * every sequence, its pages, the pool and the recurrent state exactly as
 * before the step; the step then retried without a failure gives the same
 * logits as a clean run. Also the pool running out across entries: all or
 * nothing. */
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "latent/engine.h"
#include "latent/kv.h"
#include "testutil.h"
#include "tiny_model.h"

#define PAGE 4
#define NSEQ 3

typedef struct {
    int n_pos, n_pages, pages[64], n_free;
    int32_t tokens[256];
    uint8_t flows[256];
    float state[64];
} seq_snap;

static void snap(seq_snap *o, const latent_seq *s) {
    memset(o, 0, sizeof *o);
    o->n_pos = s->n_pos, o->n_pages = s->n_pages, o->n_free = s->pool->n_free;
    if (s->n_pages) memcpy(o->pages, s->pages, sizeof(int) * s->n_pages);
    if (s->n_pos) memcpy(o->tokens, s->tokens, sizeof(int32_t) * s->n_pos), memcpy(o->flows, s->flows, s->n_pos);
    if (s->d_state) memcpy(o->state, s->state, sizeof(float) * s->d_state);
}

static int same(const seq_snap *a, const latent_seq *s) {
    seq_snap b;
    snap(&b, s);
    return memcmp(a, &b, sizeof b) == 0;
}

typedef struct {
    latent_kv_pool pool;
    latent_engine *eng;
    latent_seq seq[NSEQ];
} rig;

static void rig_start(rig *r, const latent_model *m, latent_precision p, int pages) {
    latent_err err;
    latent_engine_opts o = {.precision = p};
    latent_kv_dtype kv = p == LATENT_PRECISION_BF16 ? LATENT_KV_BF16 : LATENT_KV_F32;
    if (latent_kv_pool_init(&r->pool, &m->cfg, PAGE, latent_kv_page_bytes(&m->cfg, PAGE, kv) * pages, kv, &err) != 0 ||
        !(r->eng = latent_engine_new_opts(m, &o, &err)))
        abort();
    for (int i = 0; i < NSEQ; i++) latent_seq_init(&r->seq[i], &r->pool, &m->cfg, &err);
    /* history: seq 0 has 6 tokens, seq 1 is a fork of its first 5 (sharing a page), seq 2 is new */
    int32_t hist[6] = {3, 9, 1, 4, 7, 2};
    float *lg = malloc(sizeof(float) * m->cfg.vocab);
    latent_batch_entry b = {.seq = &r->seq[0], .tokens = hist, .n_tokens = 6, .prompt = 1, .logits = LATENT_LOGITS_LAST, .out = lg};
    if (latent_engine_step(r->eng, &b, 1, &err) != 0) abort();
    if (latent_seq_fork(&r->seq[1], &r->seq[0], 6, &err) < 0) abort();
    free(lg);
}

static void rig_stop(rig *r) {
    for (int i = 0; i < NSEQ; i++) latent_seq_free(&r->seq[i]);
    latent_engine_free(r->eng);
    latent_kv_pool_free(&r->pool);
}

/* The step under test: decode on seq 0, a 3-token continuation on the fork,
 * a 9-token prompt on seq 2; logits of every row asked for. */
static int the_step(rig *r, float *out, int V, latent_err *err) {
    static const int32_t a[1] = {5}, b[3] = {8, 6, 2}, c[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    latent_batch_entry es[3] = {
        {.seq = &r->seq[0], .tokens = a, .n_tokens = 1, .prompt = 0, .logits = LATENT_LOGITS_LAST, .out = out},
        {.seq = &r->seq[1], .tokens = b, .n_tokens = 3, .prompt = 0, .logits = LATENT_LOGITS_ALL, .out = out + V},
        {.seq = &r->seq[2], .tokens = c, .n_tokens = 9, .prompt = 1, .logits = LATENT_LOGITS_ALL, .out = out + 4 * V},
    };
    return latent_engine_step(r->eng, es, 3, err);
}

static void run_kind(const char *name, latent_config c, latent_precision p) {
    latent_model m;
    if (tm_model(&m, c, 5, 0) != 0) abort();
    int V = c.vocab, rows = 13;
    float *clean = malloc(sizeof(float) * rows * V), *got = malloc(sizeof(float) * rows * V);
    latent_err err;
    rig r;
    rig_start(&r, &m, p, 64);
    CHECK(the_step(&r, clean, V, &err) == 0, "%s: clean step: %s", name, err.msg);
    rig_stop(&r);

    int points = 0, k;
    for (k = 0; k < 64; k++) {
        rig_start(&r, &m, p, 64);
        seq_snap before[NSEQ];
        for (int i = 0; i < NSEQ; i++) snap(&before[i], &r.seq[i]);
        latent_fault_inject(k);
        int rc = the_step(&r, got, V, &err);
        int reached = latent_fault_calls() > k;
        latent_fault_inject(-1);
        if (!reached) { /* every allocation point has been failed once */
            CHECK(rc == 0 && memcmp(got, clean, sizeof(float) * rows * V) == 0, "%s: step with no failure differs", name);
            rig_stop(&r);
            break;
        }
        points++;
        CHECK(rc != 0 && err.code == LATENT_E_NOMEM, "%s: failure %d: step %s (%s)", name, k, rc ? "failed" : "succeeded",
              latent_err_name(err.code));
        int unchanged = 1;
        for (int i = 0; i < NSEQ; i++) unchanged &= same(&before[i], &r.seq[i]);
        CHECK(unchanged, "%s: failure %d changed a sequence or the pool", name, k);
        CHECK(the_step(&r, got, V, &err) == 0 && memcmp(got, clean, sizeof(float) * rows * V) == 0,
              "%s: after failure %d the retried step differs from a clean one", name, k);
        rig_stop(&r);
    }
    CHECK(points >= 3, "%s: only %d allocation points were exercised", name, points);
    fprintf(stderr, "  %s: %d allocation points failed in turn, state unchanged each time\n", name, points);

    /* a pool too small for the whole step: refused, nothing taken */
    rig_start(&r, &m, p, 6); /* 3 pages used by the history, 4 wanted: seq 1 would get its page, seq 2 not */
    seq_snap before[NSEQ];
    for (int i = 0; i < NSEQ; i++) snap(&before[i], &r.seq[i]);
    int rc = the_step(&r, got, V, &err);
    int unchanged = 1;
    for (int i = 0; i < NSEQ; i++) unchanged &= same(&before[i], &r.seq[i]);
    CHECK(rc != 0 && err.code == LATENT_E_KV_FULL && unchanged, "%s: pool exhaustion: rc %d code %s, unchanged %d", name, rc,
          latent_err_name(err.code), unchanged);
    rig_stop(&r);
    free(clean), free(got);
    latent_weights_free(&m.w);
}

int main(void) {
    latent_config base = tm_config(32, 4, 4, 2, 48, 64);
    static const struct { const char *name; int kind; } kinds[] = {{"plain", 0}, {"t2mlr", 1}, {"lrt", 2}};
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 3; i++) {
            latent_config c = kinds[i].kind == 1 ? tm_t2mlr(base, 1, 2, 1) : kinds[i].kind == 2 ? tm_lrt(base, 2, 0, 3, 1) : base;
            char name[64];
            snprintf(name, sizeof name, "%s/%s", kinds[i].name, p ? "bf16" : "f32");
            run_kind(name, c, p ? LATENT_PRECISION_BF16 : LATENT_PRECISION_F32);
        }
    return tu_finish("test_step_faults");
}
