/* The batched forward step the CLI, the daemon and the benchmarks drive.
 *
 * One step takes any mix of entries, each (sequence, new tokens): decode
 * entries of one token and prefill entries of many. Blocks outside the
 * recurrent window run once over every row of the batch (one sgemm per
 * weight); inside the window, recurrent rows run in waves, the i-th new token
 * of every entry together, because token t needs the state token t-1 left. */
#ifndef LATENT_ENGINE_H
#define LATENT_ENGINE_H

#include <stdint.h>
#include "latent/error.h"
#include "latent/kv.h"
#include "latent/model.h"

typedef enum { LATENT_LOGITS_NONE = 0, LATENT_LOGITS_LAST, LATENT_LOGITS_ALL } latent_logits_mode;

typedef struct latent_batch_entry {
    latent_seq *seq;
    const int32_t *tokens; int n_tokens;
    int prompt;               /* tokens are prompt tokens: control flow follows recur_on_prompt */
    latent_logits_mode logits;
    float *out;               /* (1 or n_tokens, vocab), written when logits != NONE */
    void *user;               /* the caller's: the engine never reads or writes it */
} latent_batch_entry;

typedef struct latent_engine_stats {
    double step_seconds;      /* total wall time in latent_engine_step */
    double recur_seconds;     /* of which the recurrence's own work (fusion, state update, injections) */
    int64_t rows;             /* token rows processed */
    int64_t steps;
} latent_engine_stats;

typedef struct latent_engine latent_engine;

/* What the matrix products compute in (docs/model-format.md, "Precision"):
 * f32, or bf16 (weights held once in bf16, inputs rounded to bf16, F32
 * sums; norms, RoPE, softmax, the recurrence, logits stay F32). auto follows
 * the checkpoint: BF16 matrices compute in bf16, F32 and F16 ones in f32. */
typedef enum { LATENT_PRECISION_AUTO = 0, LATENT_PRECISION_F32, LATENT_PRECISION_BF16 } latent_precision;

/* How the matrices are held (docs/model-format.md, "Int8 weights"): as the
 * precision says (auto), or quantized at load to int8 with one scale per 32
 * weights along K, inputs quantized likewise per row (q8). Under q8 the
 * precision (auto: bf16) still sets the KV cache and anything not quantized. */
typedef enum { LATENT_WEIGHTS_AUTO = 0, LATENT_WEIGHTS_Q8 } latent_weights_fmt;

typedef struct latent_engine_opts {
    latent_precision precision;
    /* 0 (the default): every kernel is batch invariant, so a sequence's
     * logits are bit for bit the same alone or in any batch, under any
     * prompt chunking and thread count (docs/api.md, "Determinism").
     * 1 (--deterministic false): faster kernels where they exist, whose
     * rounding depends on the batch (docs/benchmarks.md). */
    int nondeterministic;
    latent_weights_fmt weights;
} latent_engine_opts;

const char *latent_precision_name(latent_precision p);          /* "auto", "f32", "bf16" */
int latent_precision_parse(const char *s, latent_precision *out); /* 0, or -1 */
/* --weights: "auto" or "q8" set *w; "f32" and "bf16" set *p instead (the
 * weights as that precision holds them) and *w to auto. 0, or -1. */
int latent_weights_parse(const char *s, latent_weights_fmt *w, latent_precision *p);
/* The precision options o mean for model m: latent_precision_resolve, except
 * that auto under q8 weights is bf16. o may be NULL. */
latent_precision latent_engine_opts_precision(const latent_model *m, const latent_engine_opts *o);
/* What the engine's matrices are held in: "f32", "bf16" or "q8". */
const char *latent_engine_weights_name(const latent_engine *e);
/* The instruction-set path the kernels take on this machine ("generic",
 * "avx2", "avx512", "avx512bf16", "amx"), after the LATENT_ISA cap. */
const char *latent_kernel_path(void);

/* The precision p means for model m (auto: the checkpoint's dtype). */
latent_precision latent_precision_resolve(const latent_model *m, latent_precision p);
/* The KV cache dtype for a setting "auto", "f32" or "bf16" (auto follows the
 * resolved precision); -1 for another string. */
int latent_kv_dtype_choose(const char *setting, latent_precision resolved, latent_kv_dtype *out);

/* The engine borrows `m` (read-only, must outlive the engine). */
latent_engine *latent_engine_new(const latent_model *m, latent_err *err);
/* The same with options (NULL: defaults, precision auto). */
latent_engine *latent_engine_new_opts(const latent_model *m, const latent_engine_opts *o, latent_err *err);
/* The precision the engine computes in (auto resolved). */
latent_precision latent_engine_precision(const latent_engine *e);
/* Bytes of weights the engine reads in its products and lookups: its packed
 * matrices plus whatever it still reads from the model in F32. */
size_t latent_engine_weight_bytes(const latent_engine *e);
void latent_engine_free(latent_engine *e);

/* Gives back to the system the memory of the model's own copies of the
 * matrices the engine repacked (all but the embedding, still read for token
 * lookups): on CPUs with the packed kernel the engine never reads them again,
 * so a server need not hold the weights twice. Afterwards the model must not
 * be used for anything but this engine (no training, saving or second
 * engine). Returns the bytes released; 0 without the packed kernel. */
size_t latent_engine_release_unpacked(latent_engine *e);

/* Runs one step. Reserves pages for every entry first; fails without running
 * anything when the pool is exhausted or a sequence would pass max_pos. */
int latent_engine_step(latent_engine *e, latent_batch_entry *entries, int n, latent_err *err);

/* Disables the recurrent path (runs the plain backbone on the same weights):
 * the benchmarks' control for measuring the recurrence's overhead. */
void latent_engine_set_recurrence(latent_engine *e, int enabled);
const latent_engine_stats *latent_engine_get_stats(const latent_engine *e);

/* Control flow of a token: 2 recurrent, 1 not (models.md §2). */
int latent_engine_flow(const latent_config *cfg, int prompt);

#endif
