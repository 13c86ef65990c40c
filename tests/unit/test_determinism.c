/* Batch invariance (docs/api.md, "Determinism"): a sequence's logits are
 * bit for bit the same
 *   - decoded alone, or in batches of 2..64 beside random other sequences
 *     of random lengths, some prefilling and some decoding;
 *   - with its prompt prefilled in one piece, in chunks of 1, 7 or 32, or
 *     token by token;
 *   - at a position fed as part of a prefill or as a single decode step;
 *   - with 1 thread or 2;
 * (head widths 16 and 64, the attention kernel's general and specialised code)
 * for plain, T2MLR and LRT models, under f32, bf16 and q8 weights (KV cache
 * following: bf16 under q8),
 * with 1 and 2 threads, on every instruction-set path this machine has and
 * on amx-model (the AMX tile kernel through its software model; on an AMX
 * machine the amx path runs the tile instructions themselves).
 * Compared with memcmp; a failure names the first differing position. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "latent/engine.h"
#include "latent/kv.h"
#include "latent/threads.h"
#include "testutil.h"
#include "tiny_model.h"

#define PAGE 16
#define PROMPT 90       /* the target's prompt: past the first 64-key attention chunk */
#define DECODE 48       /* its decoded tokens: positions up to 137, three chunks */
#define OTHERS 63       /* at most this many other sequences beside it */
#define OTHER_MAX 200   /* an other sequence longer than this starts over */
#define VOCAB 101

static int32_t target[PROMPT + DECODE];
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static int rnd(int n) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (int)(rng_state % (uint64_t)n);
}

typedef struct {
    latent_kv_pool pool;
    latent_engine *eng;
    latent_seq seq[OTHERS + 1]; /* [0] the target */
    const latent_config *cfg;
    const char *what;           /* "plain f32 avx512 2 threads": for failure messages */
} rig;

static void rig_start(rig *r, const latent_model *m, latent_precision p, latent_weights_fmt w, const char *what) {
    latent_err err;
    latent_engine_opts o = {.precision = p, .weights = w};
    latent_kv_dtype kv = p == LATENT_PRECISION_BF16 ? LATENT_KV_BF16 : LATENT_KV_F32;
    int pages = (OTHERS + 1) * ((OTHER_MAX + 48) / PAGE + 2);
    if (latent_kv_pool_init(&r->pool, &m->cfg, PAGE, latent_kv_page_bytes(&m->cfg, PAGE, kv) * pages, kv, &err) != 0 ||
        !(r->eng = latent_engine_new_opts(m, &o, &err))) {
        fprintf(stderr, "%s: %s\n", what, err.msg);
        abort();
    }
    for (int i = 0; i <= OTHERS; i++) latent_seq_init(&r->seq[i], &r->pool, &m->cfg, &err);
    r->what = what, r->cfg = &m->cfg;
}

static void rig_stop(rig *r) {
    for (int i = 0; i <= OTHERS; i++) latent_seq_free(&r->seq[i]);
    latent_engine_free(r->eng);
    latent_kv_pool_free(&r->pool);
}

static void restart(rig *r, int i) {
    latent_err err;
    latent_seq_free(&r->seq[i]);
    latent_seq_init(&r->seq[i], &r->pool, r->cfg, &err);
}

static void step_or_die(rig *r, latent_batch_entry *es, int n) {
    latent_err err;
    if (latent_engine_step(r->eng, es, n, &err) != 0) {
        fprintf(stderr, "%s: step failed: %s\n", r->what, err.msg);
        abort();
    }
}

/* memcmp of `rows` logit rows; on a difference, the first position. */
static int same_logits(const rig *r, const char *how, const float *got, const float *want, int rows, int first_pos) {
    if (memcmp(got, want, sizeof(float) * rows * VOCAB) == 0) {
        tu_checks++;
        return 1;
    }
    for (int i = 0; i < rows * VOCAB; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            CHECK(0, "%s, %s: position %d logit %d is %.9g, alone %.9g", r->what, how, first_pos + i / VOCAB,
                  i % VOCAB, got[i], want[i]);
            break;
        }
    return 0;
}

/* The target alone: its prompt in one prefill (logits of every position),
 * then each further token in a step of its own. */
static void reference(rig *r, float *ref) {
    latent_batch_entry b = {.seq = &r->seq[0], .tokens = target, .n_tokens = PROMPT, .prompt = 1,
                            .logits = LATENT_LOGITS_ALL, .out = ref};
    step_or_die(r, &b, 1);
    for (int i = 0; i < DECODE; i++) {
        b = (latent_batch_entry){.seq = &r->seq[0], .tokens = target + PROMPT + i, .n_tokens = 1, .prompt = 0,
                                 .logits = LATENT_LOGITS_LAST, .out = ref + (size_t)(PROMPT + i) * VOCAB};
        step_or_die(r, &b, 1);
    }
    restart(r, 0);
}

/* The target among `others` other sequences at every step, the batch size
 * cycling through 2..64; the others prefill random chunks or decode. */
static void in_batches(rig *r, const float *ref) {
    static const int sizes[] = {1, 63, 3, 31, 7, 15, 2, 47, 5, 23};
    static int32_t toks[OTHERS + 1][40];
    latent_batch_entry es[OTHERS + 1];
    float *out = malloc(sizeof(float) * (size_t)PROMPT * VOCAB);
    float *junk = malloc(sizeof(float) * (size_t)(OTHERS + 1) * VOCAB);
    int ok = 1;
    for (int step = 0; step <= DECODE && ok; step++) {
        int n_others = sizes[step % (sizeof sizes / sizeof *sizes)];
        es[0] = step == 0 ? (latent_batch_entry){.seq = &r->seq[0], .tokens = target, .n_tokens = PROMPT, .prompt = 1,
                                                 .logits = LATENT_LOGITS_ALL, .out = out}
                          : (latent_batch_entry){.seq = &r->seq[0], .tokens = target + PROMPT + step - 1,
                                                 .n_tokens = 1, .prompt = 0, .logits = LATENT_LOGITS_LAST, .out = out};
        for (int i = 1; i <= n_others; i++) {
            latent_seq *s = &r->seq[i];
            if (s->n_pos > OTHER_MAX) restart(r, i);
            int n = s->n_pos == 0 || rnd(4) == 0 ? 1 + rnd(s->n_pos == 0 ? 24 : 8) : 1;
            for (int t = 0; t < n; t++) toks[i][t] = rnd(VOCAB);
            es[i] = (latent_batch_entry){.seq = s, .tokens = toks[i], .n_tokens = n, .prompt = n > 1,
                                         .logits = rnd(2) ? LATENT_LOGITS_LAST : LATENT_LOGITS_NONE,
                                         .out = junk + (size_t)i * VOCAB};
        }
        /* the target's place in the batch moves too */
        int at = rnd(n_others + 1);
        latent_batch_entry t = es[0];
        es[0] = es[at], es[at] = t;
        step_or_die(r, es, n_others + 1);
        char how[64];
        snprintf(how, sizeof how, "step %d among %d sequences", step, n_others + 1);
        ok = step == 0 ? same_logits(r, how, out, ref, PROMPT, 0)
                       : same_logits(r, how, out, ref + (size_t)(PROMPT + step - 1) * VOCAB, 1, PROMPT + step - 1);
    }
    for (int i = 0; i <= OTHERS; i++) restart(r, i);
    free(out);
    free(junk);
}

/* The whole sequence as prompt chunks of `chunk` tokens (1: token by token;
 * PROMPT + DECODE: one prefill), logits of every position. For these models
 * prompt and generated tokens take the same path (T2MLR recurs on prompts),
 * so every position must match the reference, prefill and decode rows alike. */
static void in_chunks(rig *r, const float *ref, int chunk) {
    int n = PROMPT + DECODE;
    float *out = malloc(sizeof(float) * (size_t)n * VOCAB);
    for (int at = 0; at < n; at += chunk) {
        int len = at + chunk < n ? chunk : n - at;
        latent_batch_entry b = {.seq = &r->seq[0], .tokens = target + at, .n_tokens = len, .prompt = 1,
                                .logits = LATENT_LOGITS_ALL, .out = out + (size_t)at * VOCAB};
        step_or_die(r, &b, 1);
    }
    char how[64];
    snprintf(how, sizeof how, "prompt in chunks of %d", chunk);
    same_logits(r, how, out, ref, n, 0);
    restart(r, 0);
    free(out);
}

/* Runs every comparison for one configuration; returns its reference
 * logits (the caller frees them). */
static float *run_config(const latent_model *m, latent_precision p, latent_weights_fmt w, const char *what) {
    rig r;
    rig_start(&r, m, p, w, what);
    float *ref = malloc(sizeof(float) * (size_t)(PROMPT + DECODE) * VOCAB);
    reference(&r, ref);
    in_batches(&r, ref);
    static const int chunks[] = {1, 7, 32, PROMPT + DECODE};
    for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++) in_chunks(&r, ref, chunks[i]);
    rig_stop(&r);
    return ref;
}

int main(void) {
    /* head_dim 16 (the AVX-512 attention path), FFN 88 (a vector tail) */
    latent_config base = tm_config(64, 4, 4, 2, 88, VOCAB);
    base.max_pos = 512;
    /* 64-wide heads: the attention kernel specialised for them, 2 q heads per kv head */
    latent_config wide = tm_config(128, 2, 2, 1, 88, VOCAB);
    wide.max_pos = 512;
    struct { const char *name; latent_config c; } kinds[] = {
        {"plain", base},
        {"plain-hd64", wide},
        {"t2mlr", tm_t2mlr(base, 1, 2, 1)},
        {"lrt", tm_lrt(base, 3, 1, 2, 0)},
    };
    for (int i = 0; i < PROMPT + DECODE; i++) target[i] = rnd(VOCAB);
    latent_isa top = latent_isa_detected();
    const char *paths[LATENT_ISA_AMX + 2];
    int n_paths = 0;
    for (int i = LATENT_ISA_GENERIC; i <= (int)top; i++) paths[n_paths++] = latent_isa_name((latent_isa)i);
    paths[n_paths++] = "amx-model";
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        latent_model m;
        if (tm_model(&m, kinds[k].c, 7 + k, 0) != 0) abort();
        for (int path = 0; path < n_paths; path++) {
            latent_isa_set_path(paths[path]);
            float *one_thread[3] = {NULL, NULL, NULL}; /* per precision: the reference with 1 thread */
            for (int threads = 1; threads <= 2; threads++) {
                latent_set_threads(threads);
                for (int prec = 0; prec < 3; prec++) { /* f32, bf16, q8 weights (bf16 KV) */
                    latent_precision p = prec ? LATENT_PRECISION_BF16 : LATENT_PRECISION_F32;
                    latent_weights_fmt w = prec == 2 ? LATENT_WEIGHTS_Q8 : LATENT_WEIGHTS_AUTO;
                    char what[96];
                    snprintf(what, sizeof what, "%s %s %s %d thread%s", kinds[k].name, prec == 2 ? "q8" : latent_precision_name(p),
                             paths[path], threads, threads > 1 ? "s" : "");
                    int before = tu_failures;
                    float *ref = run_config(&m, p, w, what);
                    CHECK(tu_failures == before, "%s: not batch invariant (above)", what);
                    if (threads == 1) {
                        one_thread[prec] = ref;
                        continue;
                    }
                    rig r = {.what = what};
                    same_logits(&r, "against 1 thread", ref, one_thread[prec], PROMPT + DECODE, 0);
                    free(ref);
                    free(one_thread[prec]);
                }
            }
        }
        latent_weights_free(&m.w);
    }
    printf("paths tested:");
    for (int i = 0; i < n_paths; i++) printf(" %s", paths[i]);
    printf("; skipped (not on this machine):");
    for (int i = (int)top + 1; i <= LATENT_ISA_AMX; i++) printf(" %s", latent_isa_name((latent_isa)i));
    printf("\n");
    return tu_finish("test_determinism");
}
