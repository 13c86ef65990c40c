/* The trainer's linear-layer products (train_gemm.c) and the context they
 * keep between calls (private to engine/train/). */
#ifndef LATENT_TRAIN_GEMM_H
#define LATENT_TRAIN_GEMM_H

#include <stddef.h>
#include <stdint.h>

/* A grow-only buffer, 64-byte aligned (the kernels load panels with aligned
 * loads); grown through latent_step_realloc (fault.h), so tests can fail it. */
typedef struct tr_buf {
    void *raw;                /* what the allocator returned, or NULL */
    void *p;                  /* raw rounded up to 64 bytes */
    size_t cap;               /* usable bytes from p */
} tr_buf;

/* One weight's bf16 panels in one orientation (W = op(B)^T of B's ldb and
 * tb, N x K), packed at the first use in a step and reused until it ends. */
typedef struct tr_weight_slot {
    const float *w;
    int tb, ld, N, K;
    unsigned epoch;           /* the step it was packed in; 0: outside any step */
    tr_buf panels;
} tr_weight_slot;

/* What the products of one trainer keep: owned by the trainer
 * (latent_trainer.gemm, trainer_internal.h), made by latent_trainer_new and
 * freed by latent_trainer_free; the ops get a pointer to it. Buffers are
 * grow-only, so after the first step a step allocates nothing. The weight
 * slots are keyed by address, so they belong to the model the trainer was
 * made for. An op given NULL for it runs its products in F32 (the LM head;
 * tests) and keeps nothing. One step at a time: the ops run from one thread
 * (their tasks only read this, but for their own entry of `task`). */
typedef struct tr_gemm {
    int bf16;                 /* products with bf16 operands and F32 sums (--precision bf16) */
    int failed;               /* a bf16 buffer could not be allocated since step_begin: the
                                 products skipped since, and the step fails (LATENT_E_NOMEM) */
    unsigned epoch;           /* the open step's number (1, 2, ...) */
    int step_open;            /* inside step_begin/_end: the weights hold still */
    tr_weight_slot *slots;    /* (n_slots) every weight and orientation packed so far */
    int n_slots, cap_slots;
    tr_buf panels;            /* op(B) packed once for the tasks of one op (latent_tr_pack_b) */
    tr_buf xb;                /* x rounded once for the tasks of one op (latent_tr_round_input) */
    tr_buf *task;             /* (n_task) scratch of each task of one parallel section */
    int n_task;
} tr_gemm;

void latent_tr_gemm_init(tr_gemm *g, int bf16);
/* Frees every buffer; g may be NULL. */
void latent_tr_gemm_free(tr_gemm *g);

/* A step: between _begin and _end no weight changes, so each weight and
 * orientation is packed once (outside, at every call: a weight changed by
 * hand is never read stale). _end returns -1 when a buffer could not be
 * allocated during the step (its results are then not valid), else 0. */
void latent_tr_gemm_step_begin(tr_gemm *g);
int latent_tr_gemm_step_end(tr_gemm *g);

/* Before a parallel section whose tasks call latent_tr_gemm or _gemm_b:
 * scratch of `bytes` for each of tasks 0..n_tasks-1 (bf16 only; a no-op for
 * NULL or F32). -1 when out of memory (g->failed is then set). */
int latent_tr_gemm_reserve(tr_gemm *g, int n_tasks, size_t bytes);
/* The scratch latent_tr_gemm needs for one (M, N, K) product, and
 * latent_tr_gemm_b for an op(A) of M x K. */
size_t latent_tr_gemm_scratch(int M, int N, int K);
size_t latent_tr_gemm_b_scratch(int M, int K);

/* C (M, N) = op(A) op(B), plus C when accumulate; op = transpose when ta /
 * tb. F32 through OpenBLAS (g NULL or not bf16), or bf16 operands and F32
 * sums in task `task`'s scratch. Skipped after a failure (g->failed). */
void latent_tr_gemm(tr_gemm *g, int task, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                    int ldb, int accumulate, float *C, int ldc);

/* bf16: op(B) packed once for several products with it (g->panels, valid
 * until the next call), and such a product in task `task`'s scratch
 * (skipped after a failure). NULL when out of memory (g->failed set). */
const uint16_t *latent_tr_pack_b(tr_gemm *g, int tb, const float *B, int ldb, int N, int K);
void latent_tr_gemm_b(tr_gemm *g, int task, int ta, int M, int N, int K, const float *A, int lda,
                      const uint16_t *panels, int accumulate, float *C, int ldc);

/* bf16: op(B)'s panels for the products of one step (packed once inside a
 * step, at every call outside). Valid until the step ends; NULL when out of
 * memory (g->failed set). */
const uint16_t *latent_tr_weight_panels(tr_gemm *g, int tb, const float *B, int ldb, int N, int K);

/* bf16: x (M, K) rounded once for several products (g->xb, valid until the
 * next call), and C (M, N) = that times the panels' W^T; NULL when out of
 * memory (g->failed set). */
const uint16_t *latent_tr_round_input(tr_gemm *g, const float *x, int M, int K);
void latent_tr_gemm_rounded(const uint16_t *xb, int M, int N, int K, const uint16_t *panels, float *C, int ldc);

/* 1 when g's products run in bf16 (and nothing failed yet). */
static inline int latent_tr_gemm_bf16(const tr_gemm *g) { return g && g->bf16 && !g->failed; }

#endif
