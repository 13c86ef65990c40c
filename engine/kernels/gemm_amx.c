/* BF16 x BF16 -> F32 products on AMX tiles, over the bf16 panels of
 * gemm_bf16.c ([K/2][32][2] per 32-feature panel), written once against the
 * tile layer (amx_tile.h): the same source runs on the hardware and through
 * the software model.
 *
 * Operands, with the 2x2 blocking of amx_tile.h (32 rows x 32 features):
 *   A[i]  16 rows of X, 16 k pairs: X's row layout read at its row stride;
 *   B[j]  16 k pairs x 16 features: the panel read at stride 128 bytes, from
 *         byte 0 (features 0..15) or 64 (16..31). No copy of the weights.
 *
 * Reduction order, for batch invariance by construction: each output
 * element sums K in fixed blocks of AMX_KB pairs (the last one shorter, a
 * multiple of 16 pairs), then the K % 16 remaining pairs as a block of their
 * own (LDTILECFG zeroes the tiles, so a shorter instruction cannot join a
 * running accumulation); each block is one tile accumulation from zero, the
 * blocks are added to the output in k order. All of it is fixed by K: not by
 * the number of rows, a row's place among them (the hardware computes tile
 * rows independently: amx-notes), or which thread runs which panels. Rows
 * that do not fill a tile, and panels past N (zero-padded when packed), only
 * change how many rows and columns are written. */
#include "kernels/amx_tile.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* k pairs per block: a 32-row slice of X (32 KiB) and a panel slice (32 KiB)
 * stay in L2 while the row groups pass; fewer block sums to store and add. */
#define AMX_KB 256
#define TILE_P 16   /* k pairs per full tile instruction */
/* rows per pass over a thread's panels (a multiple of 32): 256 rows of X at
 * K = 1536 are 768 KiB, in L2 beside the panels */
#define AMX_RB 256
/* steps of p pairs between a weight's prefetch and its tile load */
#define AMX_PF_STEPS 2

/* The kernel's functions are inlined into two entries: one calls the tile
 * operations through any table (the model, in tests), the other calls the
 * hardware's inline instructions directly (no call per instruction). */
#define KERNEL static inline __attribute__((always_inline))

typedef struct {
    float *out;
    int ldo;
    const uint16_t *xb;   /* (m, kp pairs) bf16 */
    int m, kp;
    int acc;              /* add to out instead of storing the first block */
} amx_call;

/* A block's sums (buf: C[i][j] as stored from the tiles, 16 floats a row)
 * added into out, `rows` rows and `cols` features: the same F32 adds on
 * every side. The hardware entry adds whole rows in vectors (every CPU with
 * AMX has AVX-512); the scalar add serves the model on CPUs without it. */
typedef float amx_sums[2][2][AMX_MAX_ROWS][16];
typedef void (*add_block_fn)(float *out, size_t ldo, const amx_sums *buf, int rows, int cols);

static void add_block(float *out, size_t ldo, const amx_sums *buf, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int f = 0; f < cols; f++) out[r * ldo + f] += (*buf)[r / 16][f / 16][r % 16][f % 16];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx512f"))) static void add_block_avx512(float *out, size_t ldo, const amx_sums *buf, int rows,
                                                                 int cols) {
    __mmask16 m0 = latent_lane_mask16(cols), m1 = latent_lane_mask16(cols - 16);
    for (int r = 0; r < rows; r++) {
        float *o = out + r * ldo;
        const float *s0 = (*buf)[r / 16][0][r % 16], *s1 = (*buf)[r / 16][1][r % 16];
        _mm512_mask_storeu_ps(o, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, o), _mm512_maskz_loadu_ps(m0, s0)));
        if (m1)
            _mm512_mask_storeu_ps(o + 16, m1,
                                  _mm512_add_ps(_mm512_maskz_loadu_ps(m1, o + 16), _mm512_maskz_loadu_ps(m1, s1)));
    }
}
#endif

/* The 32 x 32 block's C tiles written into out at (r0, c0), for `rows` rows
 * and `cols` features: C[i][j] holds rows 16i.. and features 16j.. A
 * product's first block of a whole panel goes straight from the tiles into
 * out (the tiles have exactly the group's rows); the rest through buf. */
KERNEL void put_block(const latent_amx_ops *o, const amx_call *c, int r0, int rows, int c0, int cols, int first,
                      add_block_fn add) {
    static _Thread_local amx_sums buf;
    float *out = c->out + (size_t)r0 * c->ldo + c0;
    size_t ldo = (size_t)c->ldo;
    if (first && cols == 32) {
        for (int i = 0; i < 2 && 16 * i < rows; i++)
            for (int j = 0; j < 2; j++) o->store(2 * i + j, out + 16 * i * ldo + 16 * j, ldo * sizeof(float));
        return;
    }
    for (int i = 0; i < 2 && 16 * i < rows; i++)
        for (int j = 0; j < 2; j++) o->store(2 * i + j, buf[i][j], 16 * sizeof(float));
    if (!first) {
        add(out, ldo, (const amx_sums *)&buf, rows, cols);
        return;
    }
    for (int r = 0; r < rows; r++) /* a first block of a partial panel */
        for (int f = 0; f < cols; f++) out[r * ldo + f] = buf[r / 16][f / 16][r % 16][f % 16];
}

/* One block of pairs [q0, q1) (steps of p) for rows [r0, r0 + rows) of one
 * panel: tile accumulations from zero, then put into out. */
KERNEL void run_block(const latent_amx_ops *o, const amx_call *c, const uint16_t *panel, int r0, int rows, int c0,
                      int cols, int q0, int q1, int p, add_block_fn add) {
    int two = rows > 16;
    size_t lda = (size_t)c->kp * 4;    /* bytes between rows of X */
    for (int t = 0; t < (two ? 4 : 2); t++) o->zero(t);
    for (int q = q0; q < q1; q += p) {
        const uint16_t *x = c->xb + (size_t)r0 * c->kp * 2 + (size_t)q * 2;
        const uint16_t *w = panel + (size_t)q * GEMM_PANEL * 2;
        o->load(4, x, lda);
        if (two) o->load(5, x + (size_t)16 * c->kp * 2, lda);
        o->load(6, w, GEMM_PANEL * 4);       /* features 0..15 of p pairs */
        o->load(7, w + 32, GEMM_PANEL * 4);  /* features 16..31 */
        o->dpbf16ps(0, 0), o->dpbf16ps(0, 1);
        if (two) o->dpbf16ps(1, 0), o->dpbf16ps(1, 1);
        /* the panel's bytes AMX_PF_STEPS steps on (past its end: the next
         * panel's), fetched while the tiles work: with few rows each weight is
         * read once, from memory, and nothing else hides the wait */
        const char *ahead = (const char *)w + (size_t)AMX_PF_STEPS * p * GEMM_PANEL * 4;
        for (int b = 0; b < p * GEMM_PANEL * 4; b += 64) __builtin_prefetch(ahead + b, 0, 3);
    }
    put_block(o, c, r0, rows, c0, cols, q0 == 0 && !c->acc, add);
}

/* Rows [r0, r1) in groups of `group` rows (all the same size: one shape)
 * over one panel: the full blocks in k order, then the remainder pairs. */
KERNEL void run_rows(const latent_amx_ops *o, const latent_amx_ops *shape_as, const amx_call *c, const uint16_t *panel,
                     int r0, int r1, int group, int c0, int cols, add_block_fn add) {
    int kfull = c->kp / TILE_P * TILE_P, rows0 = group < 16 ? group : 16, rows1 = group - rows0;
    if (kfull > 0) {
        latent_amx_shape(shape_as, rows0, rows1, TILE_P);
        for (int q0 = 0; q0 < kfull; q0 += AMX_KB) {
            int q1 = q0 + AMX_KB < kfull ? q0 + AMX_KB : kfull;
            for (int r = r0; r < r1; r += group) run_block(o, c, panel, r, group, c0, cols, q0, q1, TILE_P, add);
        }
    }
    if (kfull < c->kp) {
        latent_amx_shape(shape_as, rows0, rows1, c->kp - kfull);
        for (int r = r0; r < r1; r += group)
            run_block(o, c, panel, r, group, c0, cols, kfull, c->kp, c->kp - kfull, add);
    }
}

/* Panels [p0, p1): rows in groups of 32, then the rest as one group, a
 * block of AMX_RB rows at a time over all the panels, so that the block's
 * rows of X stay in L2 while the panels pass: over all rows at once, a
 * 4 x 512-row prefill streamed X from memory once per panel. The groups are
 * the same either way (AMX_RB is a multiple of 32), and so are the bits. o
 * gives the instructions, shape_as the table the thread's configuration is
 * loaded for (latent_amx_shape). */
KERNEL void run_panels(const latent_amx_ops *o, const latent_amx_ops *shape_as, const amx_call *c,
                       const uint16_t *panels, int n, int p0, int p1, add_block_fn add) {
    for (int r0 = 0; r0 < c->m; r0 += AMX_RB) {
        int r1 = r0 + AMX_RB < c->m ? r0 + AMX_RB : c->m, full = r0 + (r1 - r0) / 32 * 32;
        for (int pn = p0; pn < p1; pn++) {
            const uint16_t *panel = panels + (size_t)pn * c->kp * GEMM_PANEL * 2;
            int c0 = pn * GEMM_PANEL, cols = n - c0 < GEMM_PANEL ? n - c0 : GEMM_PANEL;
            if (full > r0) run_rows(o, shape_as, c, panel, r0, full, 32, c0, cols, add);
            if (full < r1) run_rows(o, shape_as, c, panel, full, r1, r1 - full, c0, cols, add);
        }
    }
}

/* Through any table (the model, in tests): the AVX-512 add wherever the CPU
 * has it, so that the hardware entry's add is tested on CPUs without AMX;
 * libgcc's check, not the kernel table, since the start-up self-check runs
 * while the table is being chosen. */
static void run_through(const latent_amx_ops *o, const amx_call *c, const uint16_t *panels, int n, int p0, int p1) {
    add_block_fn add = add_block;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f")) add = add_block_avx512;
#endif
    run_panels(o, o, c, panels, n, p0, p1, add);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same with the instructions inline: the table's loads fold into direct
 * calls of amx_tile.h's functions, which inline with their tile numbers. */
static const latent_amx_ops hw_inline = {"amx",        amx_hw_config,   amx_hw_zero,   amx_hw_load,
                                         amx_hw_store, amx_hw_dpbf16ps, amx_hw_dpbssd, amx_hw_release};

__attribute__((target("amx-tile,amx-bf16,amx-int8"))) static void run_hw(const amx_call *c, const uint16_t *panels,
                                                                         int n, int p0, int p1) {
    run_panels(&hw_inline, &latent_amx_hw, c, panels, n, p0, p1, add_block_avx512);
}
#endif

void latent_gemm_amx_run(const latent_amx_ops *ops, float *out, int ldo, const uint16_t *xb, int m, int n, int k,
                         const uint16_t *panels, int p0, int p1, int acc) {
    amx_call c = {out, ldo, xb, m, (k + 1) / 2, acc};
    if (m <= 0 || c.kp == 0) return;
    latent_amx_begin();
#if defined(__x86_64__) && defined(__GNUC__)
    if (ops == &latent_amx_hw) {
        run_hw(&c, panels, n, p0, p1);
        return;
    }
#endif
    run_through(ops, &c, panels, n, p0, p1);
}

/* ---- the start-up self-check ---- */

#define CHECK_M 19  /* a full and a partial 16-row tile */
#define CHECK_N 45  /* a full panel and a partial one */
#define CHECK_K 75  /* 38 pairs: two full 16-pair steps, a remainder of 6, odd K */

static float check_value(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) / 8388608.0 - 1.0); /* [-1, 1) */
}

/* F32 summation bound of one element for two kernels that each add K
 * rounded terms: |difference| <= 2 (K + 4) 2^-24 sum |x w|. */
static double check_bound(const uint16_t *xr, const uint16_t *panels, int row, int k) {
    double s = 0;
    for (int i = 0; i < k; i++)
        s += fabs((double)latent_bf16_to_f32(xr[i]) * latent_gemm_bf16_weight(panels, k, row, i));
    return 2.0 * (k + 4) * 0x1p-24 * s + 0x1p-120;
}

int latent_gemm_amx_selfcheck(const latent_amx_ops *ops, latent_isa vec, double *worst) {
    static _Thread_local float w[CHECK_N * CHECK_K], x[CHECK_M * CHECK_K];
    static _Thread_local uint16_t xb[CHECK_M * (CHECK_K + 1)];
    static _Thread_local float tiles[CHECK_M * CHECK_N], vector[CHECK_M * CHECK_N];
    int kp2 = (CHECK_K + 1) / 2 * 2, np;
    uint32_t s = 12345;
    uint16_t *panels;
    for (int i = 0; i < CHECK_N * CHECK_K; i++) w[i] = check_value(&s);
    /* on one thread, at the vector level: the active one is not decided yet */
    if (latent_gemm_bf16_pack_on(vec, 0, &panels, &np, w, NULL, CHECK_N, CHECK_K) != 0) return -1;
    for (int r = 0; r < CHECK_M; r++)
        for (int i = 0; i < CHECK_K; i++) x[r * CHECK_K + i] = check_value(&s) * (r + 1);
    /* on the baseline level: the active one is not decided yet */
    latent_bf16_round_rows_on(LATENT_ISA_GENERIC, xb, x, CHECK_K, 1, CHECK_M, CHECK_K);
    latent_gemm_bf16_vec_run(vec, vector, CHECK_N, xb, CHECK_M, CHECK_N, CHECK_K, panels, 0, np, 0);
    latent_gemm_amx_run(ops, tiles, CHECK_N, xb, CHECK_M, CHECK_N, CHECK_K, panels, 0, np, 0);
    *worst = 0;
    for (int r = 0; r < CHECK_M; r++)
        for (int j = 0; j < CHECK_N; j++) {
            double d = fabs((double)tiles[r * CHECK_N + j] - vector[r * CHECK_N + j]);
            double q = d / check_bound(xb + r * kp2, panels, j, CHECK_K);
            if (!(q <= *worst)) *worst = q; /* NaN included */
        }
    latent_gemm_bf16_free(panels, np, CHECK_K);
    return *worst <= 1.0 ? 0 : -1;
}
