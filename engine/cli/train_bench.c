/* latent train --bench: the trainer's step time per mode on the standard
 * small model (docs/training.md, "Speed"). */
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "latent/clock.h"
#include "latent/engine.h"
#include "latent/model_init.h"
#include "latent/threads.h"
#include "latent/train.h"

typedef struct { const char *name, *key; int mode, D, K, S; } bench_kind;

enum { BENCH_B = 8, BENCH_T = 256, BENCH_N = BENCH_B * BENCH_T };

/* The standard small model (docs/training.md, "Speed"); c->rec is the caller's. */
static void bench_config(latent_config *c) {
    memset(c, 0, sizeof *c);
    c->d = 256, c->ffn = 768, c->n_layers = 6, c->n_heads = 4, c->n_kv_heads = 4, c->head_dim = 64, c->vocab = 4096;
    c->max_pos = 1024, c->rms_eps = 1e-5f, c->rope_theta = 10000.0f, c->tie_embeddings = true;
    c->bos_id = 1, c->eos_id = 2, c->n_eos = 1, c->eos_ids[0] = 2;
    c->t2mlr = (latent_t2mlr_config){2, 3, true, 5.0f, 1e-6f, true};
    c->lrt = (latent_lrt_config){3, 0, 5, true, true, false};
}

/* --precision's list into precs (0 f32, 1 bf16, in the order given, at
 * most two); the count, or -1 after saying why. */
static int parse_precisions(const char *precisions, int precs[2]) {
    int n_precs = 0;
    for (const char *p = precisions; *p && n_precs < 2;) {
        size_t len = strcspn(p, ",");
        if (len == 3 && !strncmp(p, "f32", 3)) precs[n_precs++] = 0;
        else if (len == 4 && !strncmp(p, "bf16", 4)) precs[n_precs++] = 1;
        else return cli_fail("train --bench: --precision lists f32 and/or bf16 (got '%s')", precisions), -1;
        p += len + (p[len] == ',');
    }
    return n_precs;
}

/* 1 when `key` is an item of the comma-separated filter (NULL: all). */
static int kind_selected(const char *filter, const char *key) {
    if (!filter) return 1;
    const char *p = strstr(filter, key);
    size_t len = strlen(key);
    return p && (p == filter || p[-1] == ',') && (!p[len] || p[len] == ',');
}

/* One kind in one precision: the best of `steps` timed steps after a
 * warm-up into *best (seconds), the trainer's activations into *act_mib.
 * 0, or cli_fail's code after saying why. */
static int time_kind(const latent_config *c, const bench_kind *kind, int bf16, long steps,
                     const latent_train_batch *batch, double *best, double *act_mib) {
    latent_err err;
    latent_model m;
    memset(&m, 0, sizeof m);
    m.cfg = *c;
    m.cfg.rec = kind->mode == LATENT_TRAIN_JACOBI ? LATENT_REC_T2MLR
                : kind->mode == LATENT_TRAIN_LRT  ? LATENT_REC_LRT
                                                  : LATENT_REC_NONE;
    latent_init_opts io;
    latent_init_defaults(&io);
    io.seed = 1;
    if (latent_weights_alloc(&m.w, &m.cfg, &err) != 0) return cli_fail("train --bench: %s", err.msg);
    latent_weights_init(&m.w, &m.cfg, &io);
    latent_train_shape sh = {.mode = kind->mode, .batch = BENCH_B, .seq = BENCH_T, .jacobi_iters = kind->D,
                             .jacobi_grad_iters = kind->K, .lrt_subsets = kind->S, .bf16 = bf16};
    latent_trainer *t = latent_trainer_new(&m, &sh, &err);
    latent_weights g;
    latent_optim opt;
    latent_optim_opts oo = {.adamw = 1, .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                            .grad_clip = 1.0f, .steps = steps + 1};
    if (!t || latent_weights_alloc(&g, &m.cfg, &err) != 0 || latent_optim_init(&opt, &m.cfg, &oo, &err) != 0) {
        int rc = cli_fail("train --bench: %s", err.msg);
        latent_trainer_free(t);
        latent_weights_free(&m.w);
        return rc;
    }
    int rc = 0;
    double *times = malloc((steps + 1) * sizeof(double));
    for (long s = 0; s <= steps && rc == 0; s++) {
        double t0 = latent_now_seconds(), loss;
        memset(g.slab, 0, g.slab_floats * sizeof(float));
        if (latent_trainer_step(t, batch, &g, &loss, &err) != 0) {
            rc = cli_fail("train --bench: %s", err.msg);
            break;
        }
        latent_optim_step(&opt, &m.w, &g, latent_grad_norm(&g, opt.frozen));
        times[s] = latent_now_seconds() - t0;
    }
    if (rc == 0) {
        /* the best of the timed steps (the first one warms caches and
         * pages): on a shared machine the minimum is the step's own cost */
        *best = times[1];
        for (long i = 2; i <= steps; i++) *best = times[i] < *best ? times[i] : *best;
        *act_mib = latent_trainer_activation_bytes(t) / 1048576.0;
    }
    free(times);
    latent_optim_free(&opt);
    latent_weights_free(&g);
    latent_trainer_free(t);
    latent_weights_free(&m.w);
    return rc;
}

int train_bench(long steps, const char *kinds_filter, const char *precisions) {
    latent_config c;
    bench_config(&c);
    const int N = BENCH_N;
    bench_kind kinds[] = {{"plain", "plain", LATENT_TRAIN_PLAIN, 1, 0, 1},
                          {"t2mlr jacobi D=4 B=2", "t2mlr4", LATENT_TRAIN_JACOBI, 4, 2, 1},
                          {"t2mlr jacobi D=8 B=4", "t2mlr8", LATENT_TRAIN_JACOBI, 8, 4, 1},
                          {"lrt S=2", "lrt2", LATENT_TRAIN_LRT, 1, 0, 2}};
    int nk = sizeof kinds / sizeof kinds[0];
    printf("latent train --bench: 6 blocks, d 256, 4 heads (head_dim 64), FFN 768, vocab 4096, tied;\n"
           "B %d, T %d (%d tokens/step), AdamW, %d threads, OpenBLAS %s kernels,\n"
           "best of %ld timed steps after one warm-up.\n"
           "T2MLR window blocks 2..3; LRT source block 3, injected blocks 0..5 (residual + KV, own k/v).\n\n",
           BENCH_B, BENCH_T, N, latent_get_threads(), openblas_get_corename(), steps);
    int precs[2], n_precs = parse_precisions(precisions, precs);
    if (n_precs < 0) return 2;
    printf("products: %s (bf16: the engine's bf16 panel kernel, %s path)\n\n", precisions, latent_kernel_path());
    printf("%-28s %12s %10s %10s %9s\n", "mode", "activations", "step (s)", "tokens/s", "vs plain");
    int32_t *tok = malloc(N * sizeof(int32_t)), *tgt = malloc(N * sizeof(int32_t));
    uint64_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        tok[i] = (int32_t)((r >> 33) % c.vocab);
        tgt[i] = (int32_t)((r >> 13) % c.vocab);
    }
    latent_train_batch batch = {.tokens = tok, .targets = tgt};
    double plain_step[2] = {0, 0};
    int rc = 0;
    for (int run = 0; run < nk * n_precs && rc == 0; run++) {
        int k = run / n_precs, bf16 = precs[run % n_precs];
        if (!kind_selected(kinds_filter, kinds[k].key)) continue;
        double med = 0, act_mib = 0;
        rc = time_kind(&c, &kinds[k], bf16, steps, &batch, &med, &act_mib);
        if (rc != 0) break;
        if (k == 0) plain_step[bf16] = med;
        char name[64];
        snprintf(name, sizeof name, "%s, %s", kinds[k].name, bf16 ? "bf16" : "f32");
        printf("%-28s %8.1f MiB %10.3f %10.0f", name, act_mib, med, N / med);
        if (plain_step[bf16] > 0) printf(" %8.2fx", med / plain_step[bf16]);
        printf("\n");
        fflush(stdout);
    }
    free(tok), free(tgt);
    if (rc == 0) printf("\n(vs plain: step time relative to the plain step)\n");
    return rc;
}
