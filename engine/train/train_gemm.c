/* The trainer's linear-layer products: F32 through OpenBLAS, or under
 * --precision bf16 both operands rounded to bf16 and multiplied with F32
 * sums by the engine's bf16 panel kernel (engine/kernels/gemm_bf16.c, on
 * this CPU's best path: vdpbf16ps where the CPU has AVX512-BF16). Weights
 * are packed once per step and orientation (latent_tr_weight_panels), an
 * input once for all the products that read it (latent_tr_round_input), a
 * weight gradient's transposed dY pair-major, straight from dY's rows. The
 * rounding and packing are the kernels' own (bf16_pack.c); what is kept
 * between calls lives in the trainer's tr_gemm (train_gemm.h). */
#include "train/train_gemm.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "kernels/kernels.h"
#include "latent/threads.h"
#include "train/train_rows.h"

static int n_panels(int N) { return (N + GEMM_PANEL - 1) / GEMM_PANEL; }
static size_t rows_bytes(int M, int K) { return (size_t)M * ((K + 1) / 2 * 2) * sizeof(uint16_t); }

/* ---- buffers ------------------------------------------------------------ */

/* b with at least `need` bytes at b->p (contents not kept); NULL when out of memory. */
static void *buf_grow(tr_buf *b, size_t need) {
    if (need <= b->cap) return b->p;
    void *raw = latent_step_realloc(b->raw, need + 63);
    if (!raw) return NULL;
    b->raw = raw;
    b->p = (void *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    b->cap = need;
    return b->p;
}

static void buf_free(tr_buf *b) {
    free(b->raw);
    *b = (tr_buf){0};
}

void latent_tr_gemm_init(tr_gemm *g, int bf16) { *g = (tr_gemm){.bf16 = bf16, .epoch = 1}; }

void latent_tr_gemm_free(tr_gemm *g) {
    if (!g) return;
    for (int i = 0; i < g->n_slots; i++) buf_free(&g->slots[i].panels);
    for (int i = 0; i < g->n_task; i++) buf_free(&g->task[i]);
    free(g->slots), free(g->task);
    buf_free(&g->panels), buf_free(&g->xb);
    latent_tr_gemm_init(g, g->bf16);
}

/* Out of memory: every product from here to the step's end is skipped. */
static void *fail(tr_gemm *g) {
    g->failed = 1;
    return NULL;
}

void latent_tr_gemm_step_begin(tr_gemm *g) { g->epoch++, g->step_open = 1, g->failed = 0; }

int latent_tr_gemm_step_end(tr_gemm *g) {
    g->step_open = 0;
    return g->failed ? -1 : 0;
}

int latent_tr_gemm_reserve(tr_gemm *g, int n_tasks, size_t bytes) {
    if (!latent_tr_gemm_bf16(g)) return 0;
    if (n_tasks > g->n_task) {
        tr_buf *grown = latent_step_realloc(g->task, (size_t)n_tasks * sizeof *grown);
        if (!grown) return fail(g), -1;
        memset(grown + g->n_task, 0, (size_t)(n_tasks - g->n_task) * sizeof *grown);
        g->task = grown, g->n_task = n_tasks;
    }
    for (int i = 0; i < n_tasks; i++)
        if (!buf_grow(&g->task[i], bytes)) return fail(g), -1;
    return 0;
}

size_t latent_tr_gemm_b_scratch(int M, int K) { return rows_bytes(M, K); }

/* the panels first: their size keeps the rounded rows 64-byte aligned */
size_t latent_tr_gemm_scratch(int M, int N, int K) { return latent_gemm_bf16_bytes(n_panels(N), K) + rows_bytes(M, K); }

/* Task `task`'s scratch, of at least `need` bytes: reserved before the
 * parallel section, so a task never allocates (and never shares it). */
static void *task_scratch(const tr_gemm *g, int task, size_t need) {
    if (task < 0 || task >= g->n_task || g->task[task].cap < need) abort(); /* latent_tr_gemm_reserve not called */
    return g->task[task].p;
}

/* ---- packing ------------------------------------------------------------ */

/* W = op(B)^T (W[n][k] = op(B)[k][n]) over the engine threads, one panel per task. */
typedef struct {
    uint16_t *d;
    const float *src;
    size_t rs, cs;
    int N, K;
} pack_job;

static void pack_task(void *ctx, int pn) {
    const pack_job *j = ctx;
    latent_bf16_pack_panels(j->d, j->src, j->rs, j->cs, j->N, j->K, pn, pn + 1);
}

static void pack_b_parallel(uint16_t *panels, int tb, const float *B, int ldb, int N, int K) {
    pack_job j = {panels, B, tb ? (size_t)ldb : 1, tb ? 1 : (size_t)ldb, N, K};
    latent_parallel_for(pack_task, &j, n_panels(N));
}

const uint16_t *latent_tr_pack_b(tr_gemm *g, int tb, const float *B, int ldb, int N, int K) {
    uint16_t *panels = buf_grow(&g->panels, latent_gemm_bf16_bytes(n_panels(N), K));
    if (!panels) return fail(g);
    pack_b_parallel(panels, tb, B, ldb, N, K);
    return panels;
}

/* ---- weights packed once per step ---------------------------------------
 * A weight is read by every pass over its block (T2MLR's middle blocks once
 * per Jacobi iteration) and by its input-gradient product, but changes only
 * in the optimizer, between steps. Inside a step its panels (one set per
 * orientation) are packed at the first use and reused; outside a step every
 * call packs again. Each weight and orientation has its own slot, grow-only
 * until the trainer is freed: one bf16 copy per orientation, together the
 * size of the F32 weights. */

static tr_weight_slot *slot_for(tr_gemm *g, const float *w, int tb, int ld, int N, int K) {
    for (int i = 0; i < g->n_slots; i++) {
        tr_weight_slot *e = &g->slots[i];
        if (e->w == w && e->tb == tb && e->ld == ld && e->N == N && e->K == K) return e;
    }
    if (g->n_slots == g->cap_slots) {
        int cap = g->cap_slots ? 2 * g->cap_slots : 64;
        tr_weight_slot *grown = latent_step_realloc(g->slots, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        g->slots = grown, g->cap_slots = cap;
    }
    tr_weight_slot *e = &g->slots[g->n_slots++];
    *e = (tr_weight_slot){.w = w, .tb = tb, .ld = ld, .N = N, .K = K};
    return e;
}

const uint16_t *latent_tr_weight_panels(tr_gemm *g, int tb, const float *B, int ldb, int N, int K) {
    tr_weight_slot *e = slot_for(g, B, tb, ldb, N, K);
    if (!e) return fail(g);
    if (g->step_open && e->epoch == g->epoch) return e->panels.p;
    if (!buf_grow(&e->panels, latent_gemm_bf16_bytes(n_panels(N), K))) return fail(g);
    pack_b_parallel(e->panels.p, tb, B, ldb, N, K);
    e->epoch = g->step_open ? g->epoch : 0;
    return e->panels.p;
}

/* ---- an input rounded once for every product that reads it ---- */

typedef struct {
    uint16_t *xb;
    const float *x;
    int K;
} round_job;

static void round_task(void *ctx, int r0, int r1) {
    const round_job *j = ctx;
    latent_bf16_round_rows(j->xb + (size_t)r0 * ((j->K + 1) / 2 * 2), j->x + (size_t)r0 * j->K, r1 - r0, j->K);
}

const uint16_t *latent_tr_round_input(tr_gemm *g, const float *x, int M, int K) {
    uint16_t *xb = buf_grow(&g->xb, rows_bytes(M, K));
    if (!xb) return fail(g);
    round_job j = {xb, x, K};
    latent_tr_par_rows(round_task, &j, M);
    return xb;
}

/* ---- products ----------------------------------------------------------- */

void latent_tr_gemm_rounded(const uint16_t *xb, int M, int N, int K, const uint16_t *panels, float *C, int ldc) {
    latent_gemm_bf16_run(C, ldc, xb, M, N, K, panels, 0, n_panels(N));
}

/* op(A)'s rows into xb (pair-major when the kernel wants a transposed A so),
 * then the product. A^T pair-major: pair q of row i at (q M + i) 2, two of
 * A's rows interleaved at a time. */
static void gemm_b_into(uint16_t *xb, int ta, int M, int N, int K, const float *A, int lda, const uint16_t *panels,
                        int accumulate, float *C, int ldc) {
    int np = n_panels(N);
    if (ta && latent_gemm_bf16_pair_major()) {
        for (int q = 0; q < (K + 1) / 2; q++)
            latent_bf16_pack_pairs(xb + (size_t)q * M * 2, A + (size_t)(2 * q) * lda,
                                   2 * q + 1 < K ? A + (size_t)(2 * q + 1) * lda : NULL, M);
        latent_gemm_bf16_run_pm(C, ldc, xb, M, N, K, panels, 0, np, accumulate);
        return;
    }
    latent_bf16_round_rows_on(latent_kernels_active()->isa, xb, A, ta ? 1 : (size_t)lda, ta ? (size_t)lda : 1, M, K);
    if (accumulate) latent_gemm_bf16_run_acc(C, ldc, xb, M, N, K, panels, 0, np);
    else latent_gemm_bf16_run(C, ldc, xb, M, N, K, panels, 0, np);
}

void latent_tr_gemm_b(tr_gemm *g, int task, int ta, int M, int N, int K, const float *A, int lda,
                      const uint16_t *panels, int accumulate, float *C, int ldc) {
    if (g->failed || M <= 0 || N <= 0) return;
    gemm_b_into(task_scratch(g, task, rows_bytes(M, K)), ta, M, N, K, A, lda, panels, accumulate, C, ldc);
}

void latent_tr_gemm(tr_gemm *g, int task, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                    int ldb, int accumulate, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (!g || !g->bf16) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A,
                    lda, B, ldb, accumulate ? 1.0f : 0.0f, C, ldc);
        return;
    }
    if (g->failed) return;
    size_t pb = latent_gemm_bf16_bytes(n_panels(N), K);
    uint16_t *panels = task_scratch(g, task, latent_tr_gemm_scratch(M, N, K));
    latent_bf16_pack_panels(panels, B, tb ? (size_t)ldb : 1, tb ? 1 : (size_t)ldb, N, K, 0, n_panels(N));
    gemm_b_into(panels + pb / sizeof *panels, ta, M, N, K, A, lda, panels, accumulate, C, ldc);
}
