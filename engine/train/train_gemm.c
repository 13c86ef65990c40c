/* The trainer's linear-layer products: F32 through OpenBLAS, or under
 * --precision bf16 both operands rounded to bf16 and multiplied with F32
 * sums by the engine's bf16 panel kernel (engine/kernels/gemm_bf16.c, on
 * this CPU's best path: vdpbf16ps where the CPU has AVX512-BF16). Weights
 * are packed once per step and orientation (latent_tr_weight_panels), an
 * input once for all the products that read it (latent_tr_round_input), a
 * weight gradient's transposed dY pair-major, straight from dY's rows. */
#include "train/train_ops.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "latent/threads.h"

static int tr_bf16;

void latent_tr_set_bf16(int on) { tr_bf16 = on; }
int latent_tr_bf16(void) { return tr_bf16; }

/* W (N, K) with W[n][k] = src[n * rs + k * cs], as bf16 panels
 * [N/32][K/2][32][2] (gemm_bf16.c's layout), zero padded; panels [p0, p1).
 * rs == 1: a k pair is two contiguous source rows, interleaved 16 at a time.
 * Otherwise one feature at a time, reading its k run in order (contiguous
 * for a weight read forward, cs == 1): weights are packed once per step. */
static void pack_panel_range(uint16_t *d, const float *src, size_t rs, size_t cs, int N, int K, int p0, int p1) {
    int kp = (K + 1) / 2;
    for (int pn = p0; pn < p1; pn++) {
        uint16_t *panel = d + (size_t)pn * kp * GEMM_PANEL * 2;
        int row0 = pn * GEMM_PANEL, cols = N - row0 < GEMM_PANEL ? N - row0 : GEMM_PANEL;
        if (rs == 1) {
            for (int q = 0; q < kp; q++)
                latent_bf16_pack_pairs(panel + (size_t)q * GEMM_PANEL * 2, src + (size_t)row0 + (size_t)(2 * q) * cs,
                                       2 * q + 1 < K ? src + (size_t)row0 + (size_t)(2 * q + 1) * cs : NULL, cols);
        } else {
            for (int j = 0; j < cols; j++) {
                const float *feature = src + (size_t)(row0 + j) * rs;
                for (int kk = 0; kk < 2 * kp; kk++)
                    panel[((size_t)(kk / 2) * GEMM_PANEL + j) * 2 + kk % 2] =
                        kk < K ? latent_f32_to_bf16(feature[(size_t)kk * cs]) : 0;
            }
        }
        if (cols < GEMM_PANEL)
            for (int q = 0; q < kp; q++)
                memset(panel + ((size_t)q * GEMM_PANEL + cols) * 2, 0, (size_t)(GEMM_PANEL - cols) * 2 * sizeof *panel);
    }
}

/* op(A) (M, K) as bf16 rows of even length. A transposed operand (cs > 1:
 * the weight gradient's dY^T) is read in tiles of 32 of its rows, which
 * stay in cache while every output row takes its 32 values from them (the
 * path of CPUs without AVX512-BF16; with it, latent_tr_gemm_b packs such an
 * operand pair-major instead). */
static void round_rows(uint16_t *xb, const float *A, size_t rs, size_t cs, int M, int K) {
    int kp2 = (K + 1) / 2 * 2;
    if (cs == 1) {
        for (int i = 0; i < M; i++) latent_bf16_round_span(xb + (size_t)i * kp2, A + (size_t)i * rs, K);
    } else {
        for (int k0 = 0; k0 < K; k0 += 32) {
            int k1 = k0 + 32 < K ? k0 + 32 : K;
            for (int i = 0; i < M; i++) {
                uint16_t *o = xb + (size_t)i * kp2;
                for (int k = k0; k < k1; k++) o[k] = latent_f32_to_bf16(A[(size_t)k * cs + i]);
            }
        }
    }
    if (kp2 > K)
        for (int i = 0; i < M; i++) xb[(size_t)i * kp2 + K] = 0;
}

/* A^T (M, K) for A stored (K, M) with row stride lda, pair-major: pair q of
 * row i at (q M + i) 2, two of A's rows interleaved at a time. */
static void pack_pair_major(uint16_t *xq, const float *A, int lda, int M, int K) {
    for (int q = 0; q < (K + 1) / 2; q++)
        latent_bf16_pack_pairs(xq + (size_t)q * M * 2, A + (size_t)(2 * q) * lda,
                               2 * q + 1 < K ? A + (size_t)(2 * q + 1) * lda : NULL, M);
}

/* Grow-only buffers per thread: a step makes hundreds of these calls, and
 * fresh large allocations would each be new pages for the kernel to zero. */
static _Thread_local uint16_t *tl_xb;
static _Thread_local size_t tl_xb_cap;

static void *grow(void **p, size_t *cap, size_t need) {
    if (need <= *cap) return *p;
    void *q = realloc(*p, need);
    if (!q) return NULL;
    *p = q, *cap = need;
    return q;
}

/* 64-byte aligned (the kernels load panels with aligned loads), grow-only. */
static uint16_t *grow_panels(uint16_t **p, size_t *cap, size_t need) {
    if (need <= *cap) return *p;
    uint16_t *q = aligned_alloc(64, (need + 63) / 64 * 64);
    if (!q) return NULL;
    free(*p);
    *p = q, *cap = need;
    return q;
}

static _Thread_local uint16_t *tl_panels;
static _Thread_local size_t tl_panels_cap;

/* W = op(B)^T (W[n][k] = op(B)[k][n]) into panels of at least the needed size. */
static void pack_b(uint16_t *panels, int tb, const float *B, int ldb, int N, int K) {
    pack_panel_range(panels, B, tb ? (size_t)ldb : 1, tb ? 1 : (size_t)ldb, N, K, 0, (N + GEMM_PANEL - 1) / GEMM_PANEL);
}

/* Packing over the engine threads, one panel per task. */
typedef struct {
    uint16_t *d;
    const float *src;
    size_t rs, cs;
    int N, K;
} pack_job;

static void pack_task(void *ctx, int pn) {
    const pack_job *j = ctx;
    pack_panel_range(j->d, j->src, j->rs, j->cs, j->N, j->K, pn, pn + 1);
}

static void pack_b_parallel(uint16_t *panels, int tb, const float *B, int ldb, int N, int K) {
    pack_job j = {panels, B, tb ? (size_t)ldb : 1, tb ? 1 : (size_t)ldb, N, K};
    latent_parallel_for(pack_task, &j, (N + GEMM_PANEL - 1) / GEMM_PANEL);
}

static uint16_t *shared_panels;
static size_t shared_panels_cap;

const uint16_t *latent_tr_pack_b(int tb, const float *B, int ldb, int N, int K) {
    int np = (N + GEMM_PANEL - 1) / GEMM_PANEL;
    uint16_t *panels = grow_panels(&shared_panels, &shared_panels_cap, latent_gemm_bf16_bytes(np, K));
    if (panels) pack_b_parallel(panels, tb, B, ldb, N, K);
    return panels;
}

/* ---- weights packed once per step ---------------------------------------
 * A weight is read by every pass over its block (T2MLR's middle blocks once
 * per Jacobi iteration) and by its input-gradient product, but changes only
 * in the optimizer, between steps. Inside latent_tr_step_begin/end its panels
 * (one set per orientation) are packed at the first use and reused; outside
 * a step every call packs again, so a weight changed by hand is never read
 * stale. Each weight and orientation has its own slot, grow-only until
 * latent_tr_release_weight_panels (latent_trainer_free): one bf16 copy per
 * orientation, together the size of the F32 weights. */
typedef struct {
    const float *w;
    int tb, ld, N, K;
    unsigned epoch;
    uint16_t *panels;
    size_t cap;
} weight_slot;

static weight_slot *weight_slots;
static int n_weight_slots, cap_weight_slots;
static unsigned step_epoch = 1;
static int step_open;

void latent_tr_step_begin(void) { step_epoch++, step_open = 1; }
void latent_tr_step_end(void) { step_open = 0; }

void latent_tr_release_weight_panels(void) {
    for (int i = 0; i < n_weight_slots; i++) free(weight_slots[i].panels);
    free(weight_slots);
    weight_slots = NULL, n_weight_slots = cap_weight_slots = 0;
}

static weight_slot *slot_for(const float *w, int tb, int ld, int N, int K) {
    for (int i = 0; i < n_weight_slots; i++) {
        weight_slot *e = &weight_slots[i];
        if (e->w == w && e->tb == tb && e->ld == ld && e->N == N && e->K == K) return e;
    }
    if (n_weight_slots == cap_weight_slots) {
        int cap = cap_weight_slots ? 2 * cap_weight_slots : 64;
        weight_slot *grown = realloc(weight_slots, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        weight_slots = grown, cap_weight_slots = cap;
    }
    weight_slot *e = &weight_slots[n_weight_slots++];
    *e = (weight_slot){.w = w, .tb = tb, .ld = ld, .N = N, .K = K};
    return e;
}

const uint16_t *latent_tr_weight_panels(int tb, const float *B, int ldb, int N, int K) {
    weight_slot *e = slot_for(B, tb, ldb, N, K);
    if (!e) return NULL;
    if (step_open && e->epoch == step_epoch) return e->panels;
    int np = (N + GEMM_PANEL - 1) / GEMM_PANEL;
    if (!grow_panels(&e->panels, &e->cap, latent_gemm_bf16_bytes(np, K))) return NULL;
    pack_b_parallel(e->panels, tb, B, ldb, N, K);
    e->epoch = step_open ? step_epoch : 0;
    return e->panels;
}

/* ---- an input rounded once for every product that reads it ---- */

typedef struct {
    uint16_t *xb;
    const float *x;
    int K;
} round_job;

static void round_task(void *ctx, int r0, int r1) {
    const round_job *j = ctx;
    round_rows(j->xb + (size_t)r0 * ((j->K + 1) / 2 * 2), j->x + (size_t)r0 * j->K, (size_t)j->K, 1, r1 - r0, j->K);
}

static uint16_t *shared_xb;
static size_t shared_xb_cap;

const uint16_t *latent_tr_round_input(const float *x, int M, int K) {
    uint16_t *xb = grow((void **)&shared_xb, &shared_xb_cap, (size_t)M * ((K + 1) / 2 * 2) * sizeof(uint16_t));
    if (!xb) return NULL;
    round_job j = {xb, x, K};
    latent_tr_par_rows(round_task, &j, M);
    return xb;
}

void latent_tr_gemm_rounded(const uint16_t *xb, int M, int N, int K, const uint16_t *panels, float *C, int ldc) {
    latent_gemm_bf16_run(C, ldc, xb, M, N, K, panels, 0, (N + GEMM_PANEL - 1) / GEMM_PANEL);
}

int latent_tr_gemm_b(int ta, int M, int N, int K, const float *A, int lda, const uint16_t *panels, int accumulate,
                     float *C, int ldc) {
    int np = (N + GEMM_PANEL - 1) / GEMM_PANEL, kp2 = (K + 1) / 2 * 2;
    uint16_t *xb = grow((void **)&tl_xb, &tl_xb_cap, (size_t)M * kp2 * sizeof(uint16_t));
    if (!xb) return -1;
    if (ta && latent_gemm_bf16_pair_major()) {
        pack_pair_major(xb, A, lda, M, K);
        latent_gemm_bf16_run_pm(C, ldc, xb, M, N, K, panels, 0, np, accumulate);
        return 0;
    }
    round_rows(xb, A, ta ? 1 : (size_t)lda, ta ? (size_t)lda : 1, M, K);
    if (accumulate) latent_gemm_bf16_run_acc(C, ldc, xb, M, N, K, panels, 0, np);
    else latent_gemm_bf16_run(C, ldc, xb, M, N, K, panels, 0, np);
    return 0;
}

/* C (M, N) = op(A) op(B) (+ C when accumulate), bf16 operands, F32 sums. */
static int gemm_bf16(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                     int accumulate, float *C, int ldc) {
    int np = (N + GEMM_PANEL - 1) / GEMM_PANEL;
    uint16_t *panels = grow_panels(&tl_panels, &tl_panels_cap, latent_gemm_bf16_bytes(np, K));
    if (!panels) return -1;
    pack_b(panels, tb, B, ldb, N, K);
    return latent_tr_gemm_b(ta, M, N, K, A, lda, panels, accumulate, C, ldc);
}

void latent_tr_gemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                    int accumulate, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    /* out of memory for the packed operands: the F32 product instead */
    if (tr_bf16 && gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc) == 0) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda,
                B, ldb, accumulate ? 1.0f : 0.0f, C, ldc);
}
