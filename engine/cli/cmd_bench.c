/* latent bench: the engine's own speed, with the recurrence's overhead
 * measured against the same backbone (same weights, path switched off) in
 * the same run, interleaved so machine noise hits both alike. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "latent/engine.h"
#include "latent/kv.h"
#include "latent/model.h"
#include "kernels/kernels.h"
#include "latent/threads.h"

static const char *help =
    "usage: latent bench [--model DIR] [--kinds plain,t2mlr,lrt] [--threads N] [--kernels]\n"
    "                    [--prefill N] [--decode N] [--batches 1,8,32,64] [--rounds R]\n"
    "                    [--precision f32,bf16]\n"
    "\n"
    "Measures prefill tokens/s (one sequence of --prefill tokens, default 512,\n"
    "and four such sequences prefilling together),\n"
    "decode tokens/s at each batch size (--decode steps, default 64, after a\n"
    "32-token prompt per sequence), inter-token latency (median and p99 step\n"
    "time) and, for recurrent models, the same figures for the backbone with the\n"
    "recurrence switched off, printed as ratios. Without --model it builds the\n"
    "standard benchmark model in memory: random weights shaped like SmolLM2-135M\n"
    "(d 576, 30 blocks, 9 heads, 3 KV heads, FFN 1536, vocab 49152), as T2MLR\n"
    "(window 12..17) and LRT (source 18, injected 0..19, shared projection).\n"
    "Each figure is the best of --rounds (default 3). Prefill runs alternate\n"
    "recurrence on and off; decoding runs both side by side, their steps taken\n"
    "in turn, and the decode ratio is backbone over recurrent median step time.\n"
    "--kernels instead times the engine's matrix kernel against OpenBLAS on one\n"
    "1536x576 weight at 1, 8, 32 and 512 rows (with --threads 1: per core),\n"
    "then single rows through 40 such weights (140 MB, read from memory as in\n"
    "batch-1 decoding) in GB/s, each in F32 and in bf16.\n"
    "--precision runs every model in each listed precision (auto, f32, bf16;\n"
    "default auto: the checkpoint's, F32 for the standard model), one table\n"
    "each, with the bytes of weights the engine holds.\n";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static float rand_uniform_pm1(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 24)) * 2.0 - 1.0);
}

/* The standard benchmark model in memory: backbone weights from one seed, so
 * every kind shares them; recurrent tensors small but non-zero. */
static int make_standard(latent_model *m, latent_rec_type rec, latent_err *err) {
    memset(m, 0, sizeof *m);
    latent_config *c = &m->cfg;
    c->d = 576, c->ffn = 1536, c->n_layers = 30, c->n_heads = 9, c->n_kv_heads = 3, c->head_dim = 64;
    c->vocab = 49152, c->max_pos = 8192, c->rms_eps = 1e-5f, c->rope_theta = 100000.0f;
    c->tie_embeddings = true, c->bos_id = 1, c->eos_id = 2, c->n_eos = 1, c->eos_ids[0] = 2;
    c->rec = rec;
    c->t2mlr = (latent_t2mlr_config){12, 17, true, 5.0f, 1e-6f, true};
    c->lrt = (latent_lrt_config){18, 0, 19, true, true, true};
    if (latent_weights_alloc(&m->w, c, err) != 0) return -1;
    rng_state = 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < m->w.n_params; i++) {
        latent_param *p = &m->w.params[i];
        float scale = p->ndim == 2 ? 1.7f / sqrtf((float)p->shape[1]) : 0.05f;
        int norm = strstr(p->name, "norm") != NULL;
        for (int64_t j = 0; j < p->numel; j++) (*p->slot)[j] = (norm ? 1.0f : 0.0f) + scale * rand_uniform_pm1();
        if (strstr(p->name, "gamma") || strstr(p->name, "alpha")) (*p->slot)[0] = strstr(p->name, "alpha") ? 1.0f : 0.2f;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct { double tok_s, p50_ms, p99_ms; } figure;

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

/* Prefill of n_seqs prompts of n tokens each, in one step; tokens/s. */
static latent_kv_dtype kv_for(const latent_engine *eng) {
    return latent_engine_precision(eng) == LATENT_PRECISION_BF16 ? LATENT_KV_BF16 : LATENT_KV_F32;
}

static int bench_prefill(latent_engine *eng, const latent_model *m, int n, int n_seqs, figure *out, latent_err *err) {
    latent_kv_pool pool;
    latent_kv_dtype kvd = kv_for(eng);
    if (latent_kv_pool_init(&pool, &m->cfg, 16, latent_kv_page_bytes(&m->cfg, 16, kvd) * (n / 16 + 2) * n_seqs, kvd, err) != 0)
        return -1;
    latent_seq *seqs = calloc(n_seqs, sizeof *seqs);
    latent_batch_entry *es = calloc(n_seqs, sizeof *es);
    int32_t *tok = malloc((size_t)n * n_seqs * sizeof *tok);
    float *logits = malloc((size_t)n_seqs * m->cfg.vocab * sizeof(float));
    for (int s = 0; s < n_seqs; s++) {
        latent_seq_init(&seqs[s], &pool, &m->cfg, err);
        for (int i = 0; i < n; i++) tok[s * n + i] = (i * 7919 + s * 104729 + 11) % m->cfg.vocab;
        es[s] = (latent_batch_entry){.seq = &seqs[s], .tokens = tok + (size_t)s * n, .n_tokens = n, .prompt = 1,
                                     .logits = LATENT_LOGITS_LAST, .out = logits + (size_t)s * m->cfg.vocab};
    }
    double t0 = now_s();
    int rc = latent_engine_step(eng, es, n_seqs, err);
    double t = now_s() - t0;
    out->tok_s = (double)n * n_seqs / t, out->p50_ms = out->p99_ms = t * 1e3;
    for (int s = 0; s < n_seqs; s++) latent_seq_free(&seqs[s]);
    free(seqs), free(es), free(tok), free(logits);
    latent_kv_pool_free(&pool);
    return rc;
}

/* One batch of B decoding sequences, with its own pool. */
typedef struct {
    latent_kv_pool pool;
    latent_seq *seqs;
    int32_t *tok, *next;
    float *logits;
    latent_batch_entry *es;
    double *times, total;
} decode_set;

static void decode_set_free(decode_set *d, int B) {
    if (d->seqs)
        for (int b = 0; b < B; b++) latent_seq_free(&d->seqs[b]);
    free(d->seqs), free(d->tok), free(d->next), free(d->logits), free(d->es), free(d->times);
    latent_kv_pool_free(&d->pool);
}

/* Allocates the set and prefills a 32-token prompt per sequence (together). */
static int decode_set_start(decode_set *d, latent_engine *eng, const latent_model *m, int B, int steps,
                            latent_err *err) {
    const int prompt = 32, V = m->cfg.vocab;
    memset(d, 0, sizeof *d);
    int per_seq = (prompt + steps) / 16 + 2;
    latent_kv_dtype kvd = kv_for(eng);
    if (latent_kv_pool_init(&d->pool, &m->cfg, 16, latent_kv_page_bytes(&m->cfg, 16, kvd) * per_seq * B, kvd, err) != 0) return -1;
    d->seqs = calloc(B, sizeof *d->seqs);
    d->tok = malloc((size_t)B * prompt * sizeof *d->tok), d->next = malloc(B * sizeof *d->next);
    d->logits = malloc((size_t)B * V * sizeof(float));
    d->es = calloc(B, sizeof *d->es);
    d->times = malloc(steps * sizeof *d->times);
    if (!d->seqs || !d->tok || !d->next || !d->logits || !d->es || !d->times)
        return latent_err_set(err, LATENT_E_NOMEM, "bench: out of memory for %d sequences", B);
    for (int b = 0; b < B; b++) {
        if (latent_seq_init(&d->seqs[b], &d->pool, &m->cfg, err) != 0) return -1;
        for (int i = 0; i < prompt; i++) d->tok[b * prompt + i] = (b * 131 + i * 17 + 3) % V;
        d->es[b] = (latent_batch_entry){.seq = &d->seqs[b], .tokens = d->tok + b * prompt, .n_tokens = prompt,
                                        .prompt = 1, .logits = LATENT_LOGITS_LAST, .out = d->logits + (size_t)b * V};
    }
    return latent_engine_step(eng, d->es, B, err);
}

/* One greedy decode step of every sequence of the set, timed. */
static int decode_set_step(decode_set *d, latent_engine *eng, const latent_model *m, int B, int s, latent_err *err) {
    const int V = m->cfg.vocab;
    for (int b = 0; b < B; b++) {
        d->next[b] = argmax(d->logits + (size_t)b * V, V);
        d->es[b] = (latent_batch_entry){.seq = &d->seqs[b], .tokens = &d->next[b], .n_tokens = 1, .prompt = 0,
                                        .logits = LATENT_LOGITS_LAST, .out = d->logits + (size_t)b * V};
    }
    double t0 = now_s();
    int rc = latent_engine_step(eng, d->es, B, err);
    d->times[s] = now_s() - t0;
    d->total += d->times[s];
    return rc;
}

static void decode_set_figure(decode_set *d, int B, int steps, figure *out) {
    qsort(d->times, steps, sizeof *d->times, cmp_double);
    out->tok_s = (double)B * steps / d->total;
    out->p50_ms = d->times[steps / 2] * 1e3;
    out->p99_ms = d->times[(int)(steps * 0.99)] * 1e3;
}

/* B sequences decoding `steps` greedy steps together after their prompts:
 * aggregate tokens/s and step times. With `both`, a second set runs the
 * backbone (recurrence off) and the two take steps in turn, alternating
 * which goes first, so a burst of load on this shared machine lands on both
 * rather than on one whole run: out[1] recurrent, out[0] backbone. */
static int bench_decode(latent_engine *eng, const latent_model *m, int B, int steps, int both, figure out[2],
                        latent_err *err) {
    decode_set set[2];
    memset(set, 0, sizeof set);
    int rc = 0, lo = both ? 0 : 1;
    for (int on = 1; on >= lo && rc == 0; on--) {
        latent_engine_set_recurrence(eng, on);
        rc = decode_set_start(&set[on], eng, m, B, steps, err);
    }
    for (int s = 0; s < steps && rc == 0; s++)
        for (int i = 0; i < 2 - lo && rc == 0; i++) {
            int on = both ? (s + i) % 2 : 1;
            latent_engine_set_recurrence(eng, on);
            rc = decode_set_step(&set[on], eng, m, B, s, err);
        }
    for (int on = 1; on >= lo; on--) {
        if (rc == 0) decode_set_figure(&set[on], B, steps, &out[on]);
        decode_set_free(&set[on], B);
    }
    latent_engine_set_recurrence(eng, 1);
    return rc;
}

static void keep_best(figure *best, const figure *f) {
    if (f->tok_s > best->tok_s) *best = *f;
}

/* One model, each figure the best of `rounds`. Prefill alternates whole runs
 * with recurrence on and off; decoding interleaves their steps (bench_decode). */
static int bench_model(const char *name, const latent_model *m, latent_precision precision, int prefill, int decode,
                       const int *batches, int n_batches, int rounds) {
    latent_err err;
    latent_engine_opts eo = {.precision = precision};
    latent_engine *eng = latent_engine_new_opts(m, &eo, &err);
    if (!eng) return cli_fail("%s", err.msg);
    int recurrent = m->cfg.rec != LATENT_REC_NONE;
    printf("\n== %s, %s (kernels: %s; weights held: %.1f MB) ==\n", name, latent_precision_name(latent_engine_precision(eng)),
           latent_kernel_path(), latent_engine_weight_bytes(eng) / 1e6);
    printf("%-22s %12s %10s %10s", "measure", "tokens/s", "p50 ms", "p99 ms");
    if (recurrent) printf(" %12s %10s %8s", "backbone t/s", "bb p50 ms", "ratio");
    printf("\n");
    for (int k = -2; k < n_batches; k++) {
        figure best[2];
        memset(best, 0, sizeof best);
        /* decoding: the ratio of median step times, from the round with the
         * best recurrent throughput (both halves of a round interleave) */
        double ratio = 0, best_rec = 0;
        for (int r = 0; r < rounds; r++) {
            figure f[2] = {{0, 0, 0}, {0, 0, 0}};
            int rc = 0;
            if (k < 0) {
                for (int on = 1; on >= (recurrent ? 0 : 1) && rc == 0; on--) {
                    latent_engine_set_recurrence(eng, on);
                    rc = bench_prefill(eng, m, prefill, k == -2 ? 1 : 4, &f[on], &err);
                }
                latent_engine_set_recurrence(eng, 1);
            } else {
                rc = bench_decode(eng, m, batches[k], decode, recurrent, f, &err);
                if (rc == 0 && recurrent && f[1].tok_s > best_rec) best_rec = f[1].tok_s, ratio = f[0].p50_ms / f[1].p50_ms;
            }
            if (rc != 0) {
                latent_engine_free(eng);
                return cli_fail("bench: %s", err.msg);
            }
            keep_best(&best[1], &f[1]);
            if (recurrent) keep_best(&best[0], &f[0]);
        }
        if (k < 0 && recurrent) ratio = best[1].tok_s / best[0].tok_s;
        char label[64];
        if (k == -2) snprintf(label, sizeof label, "prefill %d", prefill);
        else if (k == -1) snprintf(label, sizeof label, "prefill 4 x %d", prefill);
        else snprintf(label, sizeof label, "decode batch %d", batches[k]);
        printf("%-22s %12.1f %10.2f %10.2f", label, best[1].tok_s, best[1].p50_ms, best[1].p99_ms);
        if (recurrent)
            printf(" %12.1f %10.2f %8.3f", best[0].tok_s, best[0].p50_ms, ratio);
        printf("\n");
        fflush(stdout);
    }
    if (recurrent) {
        const latent_engine_stats *st = latent_engine_get_stats(eng);
        printf("recurrence's own share of step time (all runs): %.2f%%\n", 100.0 * st->recur_seconds / st->step_seconds);
    }
    latent_engine_free(eng);
    return 0;
}

/* Single rows from memory rather than cache, as batch-1 decoding reads them:
 * one row through STREAM_MATS distinct weights of the FFN shape (about 140 MB
 * each way, far above the caches) per pass; GB/s of weights read, best of 10. */
#define STREAM_MATS 40
static int bench_kernels_streaming(void) {
    const int out = 1536, in = 576;
    size_t per = (size_t)out * in;
    float *w = malloc(per * STREAM_MATS * sizeof(float)), *x = malloc(in * sizeof(float)), *y = malloc(out * sizeof(float));
    latent_linear *ls = calloc(STREAM_MATS, sizeof *ls);
    int ok = w && x && y && ls;
    for (size_t i = 0; ok && i < per * STREAM_MATS; i++) w[i] = rand_uniform_pm1();
    for (int i = 0; ok && i < in; i++) x[i] = rand_uniform_pm1();
    int made = 0;
    while (ok && made < STREAM_MATS && latent_linear_init(&ls[made], w + per * made, out, in) == 0) made++;
    if (!ok || made < STREAM_MATS) {
        for (int i = 0; i < made; i++) latent_linear_free(&ls[i]);
        free(w), free(x), free(y), free(ls);
        return cli_fail("bench: out of memory");
    }
    latent_linear *lb = calloc(STREAM_MATS, sizeof *lb);
    int made_b = 0;
    while (lb && made_b < STREAM_MATS && latent_linear_init_bf16(&lb[made_b], w + per * made_b, out, in) == 0) made_b++;
    double best[3] = {1e9, 1e9, 1e9};
    for (int r = 0; r < 10; r++)
        for (int which = 0; which < (made_b == STREAM_MATS ? 3 : 2); which++) {
            double t0 = now_s();
            for (int i = 0; i < STREAM_MATS; i++) {
                if (which == 0) latent_linear_forward(y, x, &ls[i], 1);
                else if (which == 1) latent_matmul_forward(y, x, w + per * i, 1, in, out);
                else latent_linear_forward(y, x, &lb[i], 1);
            }
            double t = now_s() - t0;
            if (t < best[which]) best[which] = t;
        }
    double bytes = (double)per * STREAM_MATS * sizeof(float);
    printf("%-22s %14.1f %14.1f %14.1f   (GB/s of weights read: engine F32, OpenBLAS, engine bf16)\n",
           "rows 1, 40 weights", bytes / best[0] / 1e9, bytes / best[1] / 1e9, bytes / 2 / best[2] / 1e9);
    for (int i = 0; i < made_b; i++) latent_linear_free(&lb[i]);
    free(lb);
    for (int i = 0; i < STREAM_MATS; i++) latent_linear_free(&ls[i]);
    free(w), free(x), free(y), free(ls);
    return 0;
}

/* The engine's matrix kernel against OpenBLAS on one FFN-shaped weight
 * (1536 x 576), both split over the same threads: GFLOP/s, best of 20. */
static int bench_kernels(void) {
    const int out = 1536, in = 576, rows[] = {1, 8, 32, 512};
    float *w = malloc((size_t)out * in * sizeof(float)), *x = malloc((size_t)512 * in * sizeof(float));
    float *y = malloc((size_t)512 * out * sizeof(float));
    latent_linear l, lb = {0};
    if (w && x)
        for (size_t i = 0; i < (size_t)out * in; i++) w[i] = rand_uniform_pm1();
    if (w && x)
        for (size_t i = 0; i < (size_t)512 * in; i++) x[i] = rand_uniform_pm1();
    if (!w || !x || !y || latent_linear_init(&l, w, out, in) != 0 || latent_linear_init_bf16(&lb, w, out, in) != 0) {
        free(w), free(x), free(y);
        return cli_fail("bench: out of memory");
    }
    printf("kernel path: %s (detected %s)\n", latent_kernel_path(), latent_isa_name(latent_isa_detected()));
    printf("%-22s %14s %14s %14s\n", "matrix 1536x576", "engine GFLOP/s", "OpenBLAS GFLOP/s", "bf16 GFLOP/s");
    for (int k = 0; k < 4; k++) {
        double best[3] = {1e9, 1e9, 1e9};
        for (int r = 0; r < 20; r++)
            for (int which = 0; which < 3; which++) {
                double t0 = now_s();
                if (which == 0) latent_linear_forward(y, x, &l, rows[k]);
                else if (which == 1) latent_matmul_forward(y, x, w, rows[k], in, out);
                else latent_linear_forward(y, x, &lb, rows[k]);
                double t = now_s() - t0;
                if (t < best[which]) best[which] = t;
            }
        double flop = 2.0 * rows[k] * out * in;
        char label[32];
        snprintf(label, sizeof label, "rows %d", rows[k]);
        printf("%-22s %14.1f %14.1f %14.1f\n", label, flop / best[0] / 1e9, flop / best[1] / 1e9, flop / best[2] / 1e9);
    }
    if (!l.packed) printf("(no AVX-512 here: the engine's F32 products use OpenBLAS)\n");
    latent_linear_free(&l);
    latent_linear_free(&lb);
    free(w), free(x), free(y);
    return bench_kernels_streaming();
}

static int parse_batches(const char *s, int *out, int cap) {
    int32_t *ids;
    int n = cli_parse_ids(s, &ids);
    if (n < 1 || n > cap) return -1;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 1 || ids[i] > 4096) { free(ids); return -1; }
        out[i] = ids[i];
    }
    free(ids);
    return n;
}

int cmd_bench(int argc, char **argv) {
    const char *dir = NULL, *kinds = "plain,t2mlr,lrt", *v;
    int kernels = 0;
    long threads = 0, prefill = 512, decode = 64, rounds = 3;
    latent_precision precs[3] = {LATENT_PRECISION_AUTO};
    int n_precs = 1;
    int batches[16] = {1, 8, 32, 64}, n_batches = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--kernels")) {
            kernels = 1;
            continue;
        }
        if (cli_opt(argc, argv, &i, "--model", &dir) || cli_opt(argc, argv, &i, "--kinds", &kinds)) continue;
        if (cli_opt(argc, argv, &i, "--precision", &v)) {
            char buf[64];
            snprintf(buf, sizeof buf, "%s", v);
            n_precs = 0;
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
                if (n_precs == 3 || latent_precision_parse(tok, &precs[n_precs++]) != 0)
                    return cli_fail("bench: --precision must list auto, f32 or bf16 (got '%s')", v);
            if (n_precs == 0) return cli_fail("bench: --precision needs a value");
            continue;
        }
        if (cli_opt(argc, argv, &i, "--threads", &v)) {
            if (cli_parse_long(v, 1, 256, &threads) != 0) return cli_fail("bench: --threads must be 1..256");
            continue;
        }
        if (cli_opt(argc, argv, &i, "--prefill", &v)) {
            if (cli_parse_long(v, 1, 65536, &prefill) != 0) return cli_fail("bench: --prefill must be 1..65536");
            continue;
        }
        if (cli_opt(argc, argv, &i, "--decode", &v)) {
            if (cli_parse_long(v, 1, 65536, &decode) != 0) return cli_fail("bench: --decode must be 1..65536");
            continue;
        }
        if (cli_opt(argc, argv, &i, "--rounds", &v)) {
            if (cli_parse_long(v, 1, 100, &rounds) != 0) return cli_fail("bench: --rounds must be 1..100");
            continue;
        }
        if (cli_opt(argc, argv, &i, "--batches", &v)) {
            if ((n_batches = parse_batches(v, batches, 16)) < 0) return cli_fail("bench: --batches must be a list of 1..4096");
            continue;
        }
        fputs(help, stderr);
        return cli_fail("bench: unknown option '%s'", argv[i]);
    }
    if (threads) latent_set_threads((int)threads);
    printf("latent bench: %d threads, OPENBLAS_CORETYPE=%s\n", latent_get_threads(),
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)");
    if (kernels) return bench_kernels();
    latent_err err;
    if (dir) {
        latent_model m = {0};
        if (latent_model_load(&m, dir, &err) != 0) {
            cli_fail("%s", err.msg);
            return 1;
        }
        int rc = 0;
        for (int p = 0; p < n_precs && rc == 0; p++)
            rc = bench_model(dir, &m, precs[p], (int)prefill, (int)decode, batches, n_batches, (int)rounds);
        latent_model_free(&m);
        return rc;
    }
    static const struct { const char *name; latent_rec_type rec; } all[] = {
        {"plain", LATENT_REC_NONE}, {"t2mlr", LATENT_REC_T2MLR}, {"lrt", LATENT_REC_LRT}};
    for (int k = 0; k < 3; k++) {
        if (!strstr(kinds, all[k].name)) continue;
        latent_model m;
        if (make_standard(&m, all[k].rec, &err) != 0) return cli_fail("%s", err.msg);
        char name[96];
        snprintf(name, sizeof name, "standard 135M-shaped model, %s, F32 weights", all[k].name);
        int rc = 0;
        for (int p = 0; p < n_precs && rc == 0; p++)
            rc = bench_model(name, &m, precs[p], (int)prefill, (int)decode, batches, n_batches, (int)rounds);
        latent_weights_free(&m.w);
        if (rc) return rc;
    }
    return 0;
}
