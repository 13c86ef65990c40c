/* The measurements latent bench is made of (bench_runs.c), shared by its
 * tables: the recurrence's overhead (cmd_bench.c), the kernels
 * (bench_kernels.c) and the cost of determinism (bench_determinism.c). */
#ifndef LATENT_CLI_BENCH_RUNS_H
#define LATENT_CLI_BENCH_RUNS_H

#include "latent/engine.h"
#include "latent/kv.h"
#include "latent/model.h"

typedef struct { double tok_s, p50_ms, p99_ms; } figure;

/* Uniform in [-1, 1) from the benchmark's fixed stream. */
float bench_rand_pm1(void);
/* The standard benchmark model in memory (SmolLM2-135M's shape, random
 * weights from one seed, so every kind shares its backbone). */
int bench_make_standard(latent_model *m, latent_rec_type rec, latent_err *err);
/* Prefill of n_seqs prompts of n tokens each, in one step; tokens/s. */
int bench_prefill(latent_engine *eng, const latent_model *m, int n, int n_seqs, figure *out, latent_err *err);
void bench_keep_best(figure *best, const figure *f);

/* One batch of B decoding sequences, with its own pool. */
typedef struct {
    latent_kv_pool pool;
    latent_seq *seqs;
    int32_t *tok, *next;
    float *logits;
    latent_batch_entry *es;
    double *times, total;
} decode_set;

void decode_set_free(decode_set *d, int B);
/* Allocates the set and prefills a 32-token prompt per sequence (together). */
int decode_set_start(decode_set *d, latent_engine *eng, const latent_model *m, int B, int steps, latent_err *err);
/* One greedy decode step of every sequence of the set, timed as step s. */
int decode_set_step(decode_set *d, latent_engine *eng, const latent_model *m, int B, int s, latent_err *err);
/* tokens/s and the median and p99 step times of `steps` steps. */
void decode_set_figure(decode_set *d, int B, int steps, figure *out);

#endif
