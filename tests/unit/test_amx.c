/* The AMX tile kernel (gemm_amx.c) and its tile layer (amx_tile.h), on every
 * CPU through the software model, and on CPUs with AMX also on the hardware:
 *   - the model's instructions: one k pair is RNE(C + RNE(a0 b0 + a1 b1))
 *     (computed here independently with fmaf), denormals in and out, int8
 *     TDPBSSD exact with int32 wrap, rows past a load's shape zero;
 *   - products of 1..64 rows, K and N not multiples of 32 (the K remainder,
 *     partial panels and partial row tiles), against a double-precision
 *     product of the same bf16 values within the F32 summation bound
 *     (K + 4) 2^-24 sum|x w| per element;
 *   - batch invariance: every row bit-equal (memcmp) to the same row in a
 *     64-row call, and alone; through latent_linear_forward with 1 and 2
 *     threads on the amx-model path;
 *   - the start-up self-check passes on the model and catches a broken
 *     tile operation;
 *   - on AMX hardware: the instruction tests above on the hardware, bit for
 *     bit (one pair per TDPBF16PS and TDPBSSD are exactly modelled), and
 *     whole products, hardware against model, within 2 (K + 4) 2^-24
 *     sum|x w| (the two sum a tile's 16 pairs in different orders;
 *     amx-notes), and the hardware's own batch invariance with memcmp. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/amx_tile.h"
#include "kernels/kernels.h"
#include "latent/threads.h"
#include "testutil.h"

static uint64_t rs = 0x243F6A8885A308D3ULL;
static uint64_t next(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return rs;
}
static float frand(void) { return (float)((double)(next() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }
/* A bf16 value over about 30 binades around 1, either sign (as amx-notes measured). */
static uint16_t wide_bf16(void) {
    uint64_t r = next();
    return (uint16_t)(((r & 1) << 15) | ((112 + (r >> 1) % 30) << 7) | ((r >> 8) & 0x7f));
}
static float bf(uint16_t h) { return latent_bf16_to_f32(h); }

/* ---- the model's instructions ---- */

static latent_amx_cfg one_cfg; /* static storage, as the layer requires */

/* ops: the model everywhere; on AMX the hardware too, which must then
 * match it bit for bit (one pair per instruction is exactly modelable). */
static void test_one_pair(const latent_amx_ops *o) {
    latent_amx_shape(o, 16, 0, 1); /* A 16 rows x 1 pair, B 1 row */
    uint16_t a[16][2], b[32][2];
    float c[16][16], out[16][16];
    int bad = 0;
    for (int trial = 0; trial < 200; trial++) {
        for (int r = 0; r < 16; r++) a[r][0] = wide_bf16(), a[r][1] = wide_bf16();
        for (int j = 0; j < 16; j++) b[j][0] = wide_bf16(), b[j][1] = wide_bf16();
        for (int r = 0; r < 16; r++)
            for (int j = 0; j < 16; j++) c[r][j] = bf(wide_bf16()) * 4;
        o->load(0, c, sizeof c[0]);
        o->load(4, a, 4);
        o->load(6, b, 64);
        o->dpbf16ps(0, 0);
        o->store(0, out, sizeof out[0]);
        for (int r = 0; r < 16; r++)
            for (int j = 0; j < 16; j++) {
                /* a0 b0 is exact in float here (16-bit significand, in range), so
                 * fmaf rounds the pair's exact sum once */
                float pair = fmaf(bf(a[r][1]), bf(b[j][1]), bf(a[r][0]) * bf(b[j][0]));
                float want = c[r][j] + pair;
                bad += memcmp(&want, &out[r][j], 4) != 0;
            }
    }
    CHECK(bad == 0, "%s TDPBF16PS with one pair: %d of 51200 differ from RNE(C + RNE(a0 b0 + a1 b1))", o->name, bad);

    /* denormal inputs read as zero, a denormal result flushed */
    uint16_t tiny[1][2] = {{0x0001, 0x3f80}}, one[16][2] = {{0x3f80, 0x0000}}; /* a0 denormal, b1 = 0 */
    float z[16][16] = {{0}};
    latent_amx_shape(o, 1, 0, 1);
    o->zero(0);
    o->load(4, tiny, 4);
    o->load(6, one, 64);
    o->dpbf16ps(0, 0);
    o->store(0, z, sizeof z[0]);
    CHECK(z[0][0] == 0 && !signbit(z[0][0]), "%s: denormal bf16 input read as zero: %g", o->name, z[0][0]);
    uint16_t small[1][2] = {{0x0080, 0}}, half[16][2] = {{0x3f00, 0}}; /* 2^-126 * 0.5: a denormal product */
    o->zero(0);
    o->load(4, small, 4);
    o->load(6, half, 64);
    o->dpbf16ps(0, 0);
    o->store(0, z, sizeof z[0]);
    CHECK(z[0][0] == 0, "%s: denormal result flushed to zero: %g", o->name, z[0][0]);
    latent_amx_release();
}

static void test_int8(const latent_amx_ops *o) {
    int8_t a[16][64], b[16][64];
    int32_t c[16][16], out[16][16];
    for (int r = 0; r < 16; r++)
        for (int i = 0; i < 64; i++) a[r][i] = (int8_t)(next() & 0xff), b[r][i] = (int8_t)(next() & 0xff);
    a[0][0] = -128, b[0][0] = -128; /* the extremes */
    for (int r = 0; r < 16; r++)
        for (int j = 0; j < 16; j++) c[r][j] = (int32_t)(next() & 0xffffffffu); /* sums that wrap */
    latent_amx_shape(o, 16, 0, 16);
    o->load(0, c, 64);
    o->load(4, a, 64);
    o->load(6, b, 64);
    o->dpbssd(0, 0);
    o->store(0, out, 64);
    int bad = 0;
    for (int r = 0; r < 16; r++)
        for (int j = 0; j < 16; j++) {
            int64_t s = c[r][j];
            for (int g = 0; g < 16; g++)
                for (int t = 0; t < 4; t++) s += (int64_t)a[r][4 * g + t] * b[g][4 * j + t];
            bad += (uint32_t)s != (uint32_t)out[r][j];
        }
    CHECK(bad == 0, "%s TDPBSSD: %d of 256 sums differ from the exact ones mod 2^32", o->name, bad);

    /* a load of fewer rows and bytes than the tile holds leaves the rest zero */
    latent_amx_shape(o, 3, 0, 2);
    int32_t full[16][16];
    memset(full, 0x55, sizeof full);
    o->load(4, a, 64); /* 3 rows x 8 bytes */
    o->zero(0);
    o->load(6, b, 64);
    o->dpbssd(0, 0);
    o->store(0, full, 64);
    int rest_untouched = 1;
    for (int r = 3; r < 16; r++) rest_untouched &= full[r][0] == 0x55555555;
    CHECK(rest_untouched, "%s: a 3-row tile stores 3 rows", o->name);
    memset(&one_cfg, 0, sizeof one_cfg);
    o->config(&one_cfg); /* palette 0: released */
    latent_amx_release();
}

/* ---- products ---- */

typedef struct {
    int m, n, k, np;
    float *x;            /* (m, k) */
    uint16_t *xb, *panels;
    double *ref, *mag;   /* (m, n): the exact product and sum |x w| of the bf16 values */
} problem;

static void problem_init(problem *p, int m, int n, int k) {
    p->m = m, p->n = n, p->k = k;
    p->x = malloc(sizeof(float) * m * k);
    float *w = malloc(sizeof(float) * n * k);
    for (int i = 0; i < m * k; i++) p->x[i] = frand();
    for (int i = 0; i < n * k; i++) w[i] = frand() * 0.5f;
    int kp2 = (k + 1) / 2 * 2;
    p->xb = malloc(sizeof(uint16_t) * m * kp2);
    latent_bf16_round_rows(p->xb, p->x, m, k);
    if (latent_gemm_bf16_pack(&p->panels, &p->np, w, n, k) != 0) abort();
    p->ref = malloc(sizeof(double) * m * n), p->mag = malloc(sizeof(double) * m * n);
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++) {
            double s = 0, a = 0;
            for (int i = 0; i < k; i++) {
                double t = (double)bf(p->xb[(size_t)r * kp2 + i]) * latent_gemm_bf16_weight(p->panels, k, j, i);
                s += t, a += fabs(t);
            }
            p->ref[(size_t)r * p->n + j] = s, p->mag[(size_t)r * p->n + j] = a;
        }
    free(w);
}

static void problem_free(problem *p) {
    latent_gemm_bf16_free(p->panels, p->np, p->k);
    free(p->x), free(p->xb), free(p->ref), free(p->mag);
}

/* Rows [r0, r0 + m) of the problem through the tile kernel on ops. */
static void product(const latent_amx_ops *ops, const problem *p, float *out, int r0, int m) {
    int kp2 = (p->k + 1) / 2 * 2;
    latent_gemm_amx_run(ops, out, p->n, p->xb + (size_t)r0 * kp2, m, p->n, p->k, p->panels, 0, p->np, 0);
}

/* max over elements of |y - ref| / ((K + 4) 2^-24 sum|x w|): at most 1 passes */
static double worst_vs_ref(const problem *p, const float *y, int m) {
    double worst = 0;
    for (int i = 0; i < m * p->n; i++) {
        double q = fabs(y[i] - p->ref[i]) / ((p->k + 4) * 0x1p-24 * p->mag[i] + 1e-30);
        if (!(q <= worst)) worst = q;
    }
    return worst;
}

/* Every row count 1..max_m (or the listed ones): against the reference, and
 * each row bit-equal to its bits in the max_m-row call and alone. Past
 * 256 rows the kernel passes over its panels a block of rows at a time. */
static void test_shape(const latent_amx_ops *ops, int n, int k, int max_m, const int *counts, int n_counts) {
    problem p;
    problem_init(&p, max_m, n, k);
    size_t all_n = (size_t)max_m * n;
    float *all = malloc(sizeof(float) * all_n), *y = malloc(sizeof(float) * all_n);
    product(ops, &p, all, 0, max_m);
    double worst = worst_vs_ref(&p, all, max_m);
    CHECK(worst <= 1, "%s %dx%dx%d: error %.3g times the bound", ops->name, max_m, n, k, worst);
    int varies = 0, alone_varies = 0;
    for (int c = 0; c < n_counts; c++) {
        int m = counts[c];
        memset(y, 0xff, sizeof(float) * all_n);
        product(ops, &p, y, 0, m);
        varies += memcmp(y, all, sizeof(float) * m * n) != 0;
        for (size_t i = (size_t)m * n; i < all_n; i++) varies += !isnan(y[i]); /* nothing past m rows written */
    }
    for (int r = 0; r < max_m; r += 7) { /* rows alone, at odd places of the max_m */
        product(ops, &p, y, r, 1);
        alone_varies += memcmp(y, all + (size_t)r * n, sizeof(float) * n) != 0;
    }
    CHECK(varies == 0, "%s %dx%d: %d row counts give rows other bits than the %d-row call", ops->name, n, k, varies,
          max_m);
    CHECK(alone_varies == 0, "%s %dx%d: %d rows alone differ from the same rows among %d", ops->name, n, k,
          alone_varies, max_m);
    free(all), free(y);
    problem_free(&p);
}

/* run_acc: out + the product, block by block, within the bound. */
static void test_accumulate(const latent_amx_ops *ops) {
    problem p;
    problem_init(&p, 20, 40, 300);
    float *y = malloc(sizeof(float) * 20 * 40);
    for (int i = 0; i < 20 * 40; i++) y[i] = 1.0f;
    latent_gemm_amx_run(ops, y, p.n, p.xb, p.m, p.n, p.k, p.panels, 0, p.np, 1);
    for (int i = 0; i < 20 * 40; i++) y[i] -= 1.0f, p.mag[i] += 2; /* the added 1, and its rounding */
    double worst = worst_vs_ref(&p, y, 20);
    CHECK(worst <= 1, "%s: accumulated product error %.3g times the bound", ops->name, worst);
    free(y);
    problem_free(&p);
}

/* The engine's path: latent_linear_forward with 1 and 2 threads under
 * LATENT_ISA=amx-model equals the kernel called directly. */
static void test_threads(void) {
    int m = 37, n = 100, k = 257;
    problem p;
    problem_init(&p, m, n, k);
    float *w = malloc(sizeof(float) * n * k), *direct = malloc(sizeof(float) * m * n), *y = malloc(sizeof(float) * m * n);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < k; i++) w[(size_t)j * k + i] = latent_gemm_bf16_weight(p.panels, k, j, i);
    product(&latent_amx_model, &p, direct, 0, m);
    CHECK(latent_isa_set_path("amx-model") == 0 && latent_isa_tile_ops() == &latent_amx_model &&
              !strcmp(latent_isa_path(), "amx-model"), "the amx-model path is set by name");
    latent_linear l;
    if (latent_linear_init_bf16(&l, w, n, k) != 0) abort();
    for (int t = 1; t <= 2; t++) {
        latent_set_threads(t);
        latent_linear_forward(y, p.x, &l, m);
        CHECK(memcmp(y, direct, sizeof(float) * m * n) == 0, "amx-model, %d threads: linear_forward differs from the kernel", t);
        latent_linear_forward(y, p.x + (size_t)5 * k, &l, 1);
        CHECK(memcmp(y, direct + (size_t)5 * n, sizeof(float) * n) == 0, "amx-model, %d threads: a row alone differs", t);
    }
    latent_set_threads(1);
    latent_linear_free(&l);
    const latent_kernels *km = latent_kernels_active();
    CHECK(km->tiles == &latent_amx_model && !strcmp(km->path, "amx-model") && !km->bf16_pair_major &&
              km->q8_tile_rows == 1 && !strcmp(km->q8_path, "amx-model"),
          "the amx-model path's kernel table: tiles through the model, rows for the trainer, q8 on tiles");
    CHECK(latent_isa_set_path("no-such-path") == -1, "an unknown path name is refused");
    CHECK(latent_kernels_active() == km, "a refused path name leaves the kernel table");
    latent_isa_set(latent_isa_detected());
    CHECK(!strcmp(latent_isa_path(), latent_isa_name(latent_isa_active())), "a level's path is its name");
    for (int i = LATENT_ISA_GENERIC; i <= (int)latent_isa_detected() && i <= LATENT_ISA_AVX512BF16; i++) {
        latent_isa_set((latent_isa)i);
        const latent_kernels *kv = latent_kernels_active();
        CHECK(kv->isa == (latent_isa)i && !kv->tiles && !strcmp(kv->path, latent_isa_name((latent_isa)i)) &&
                  kv->bf16_pair_major == (i >= LATENT_ISA_AVX512BF16) && kv->avx512 == (i >= LATENT_ISA_AVX512) &&
                  kv->gemm_f32 == latent_gemm_f32_pick((latent_isa)i) && kv->q8_tile_rows == 0,
              "%s: the kernel table holds the level's kernels", latent_isa_name((latent_isa)i));
    }
    latent_isa_set(latent_isa_detected());
    free(w), free(direct), free(y);
    problem_free(&p);
}

/* A tile unit that adds every product twice: the self-check must refuse it. */
static void double_dp(int i, int j) { latent_amx_model.dpbf16ps(i, j), latent_amx_model.dpbf16ps(i, j); }

static void test_selfcheck(void) {
    latent_isa vec = latent_isa_detected() < LATENT_ISA_AVX512BF16 ? latent_isa_detected() : LATENT_ISA_AVX512BF16;
    double worst;
    CHECK(latent_gemm_amx_selfcheck(&latent_amx_model, vec, &worst) == 0, "self-check on the model (%.3g of the bound)", worst);
    printf("self-check, model against %s: worst %.3g of the bound\n", latent_isa_name(vec), worst);
    latent_amx_ops broken = latent_amx_model;
    broken.name = "broken", broken.dpbf16ps = double_dp;
    CHECK(latent_gemm_amx_selfcheck(&broken, vec, &worst) != 0, "the self-check catches a broken tile unit (%.3g)", worst);
    latent_amx_release();
}

/* Code outside ours (oneDNN) may TILERELEASE between our products: the next
 * product of the same shape must load its config again, not trust the
 * cache (the model aborts on unconfigured tiles, the hardware raises SIGILL). */
static void test_foreign_release(const latent_amx_ops *ops) {
    problem p;
    problem_init(&p, 20, 40, 64);
    float *y1 = malloc(sizeof(float) * 20 * 40), *y2 = malloc(sizeof(float) * 20 * 40);
    product(ops, &p, y1, 0, 20);
    ops->release(); /* behind the tile layer's back, as a foreign library does */
    product(ops, &p, y2, 0, 20);
    CHECK(memcmp(y1, y2, sizeof(float) * 20 * 40) == 0, "%s: a product after a foreign TILERELEASE", ops->name);
    latent_amx_release();
    free(y1), free(y2);
    problem_free(&p);
}

/* On AMX: the instructions against the model, and batch invariance on them. */
static void test_hardware(void) {
    if (latent_isa_detected() != LATENT_ISA_AMX || latent_isa_amx_check_failed()) {
        printf("hardware tiles: skipped (%s)\n", latent_isa_detected() == LATENT_ISA_AMX ? "self-check failed" : "no AMX on this machine");
        CHECK(latent_isa_detected() != LATENT_ISA_AMX, "the AMX self-check failed on this machine");
        return;
    }
    test_one_pair(&latent_amx_hw);
    test_int8(&latent_amx_hw);
    test_foreign_release(&latent_amx_hw);
    static const int shapes[][2] = {{45, 75}, {100, 257}, {64, 576}, {33, 1100}};
    for (int s = 0; s < 4; s++) {
        problem p;
        problem_init(&p, 64, shapes[s][0], shapes[s][1]);
        float *hw = malloc(sizeof(float) * 64 * p.n), *mo = malloc(sizeof(float) * 64 * p.n);
        product(&latent_amx_hw, &p, hw, 0, 64);
        product(&latent_amx_model, &p, mo, 0, 64);
        double worst = 0, frac_equal = 0;
        for (int i = 0; i < 64 * p.n; i++) {
            double q = fabs(hw[i] - mo[i]) / (2 * (p.k + 4) * 0x1p-24 * p.mag[i] + 1e-30);
            if (!(q <= worst)) worst = q;
            frac_equal += hw[i] == mo[i];
        }
        CHECK(worst <= 1, "hardware vs model %dx%d: %.3g times the bound", p.n, p.k, worst);
        printf("hardware vs model %dx%d: worst %.3g of the bound, %.1f%% bit-equal\n", p.n, p.k, worst,
               100 * frac_equal / (64 * p.n));
        latent_amx_release();
        problem_free(&p);
        free(hw), free(mo);
        static const int counts[] = {1, 2, 15, 16, 17, 31, 32, 33, 63, 64};
        test_shape(&latent_amx_hw, shapes[s][0], shapes[s][1], 64, counts, 10);
    }
    static const int past_block[] = {1, 255, 256, 257, 300};
    test_shape(&latent_amx_hw, 45, 75, 300, past_block, 5); /* two row blocks */
}

int main(void) {
    test_one_pair(&latent_amx_model);
    test_int8(&latent_amx_model);
    int every[64];
    for (int i = 0; i < 64; i++) every[i] = i + 1;
    static const int some[] = {1, 2, 15, 16, 17, 31, 32, 33, 47, 63, 64};
    test_shape(&latent_amx_model, 45, 75, 64, every, 64);   /* odd K: 38 pairs, 2 tile steps + 6 */
    test_shape(&latent_amx_model, 33, 300, 64, every, 64);  /* 150 pairs: 9 steps + 6; a 1-feature panel */
    test_shape(&latent_amx_model, 100, 1100, 64, some, 11); /* 550 pairs: blocks 256, 256, 32, then 6 */
    test_shape(&latent_amx_model, 64, 32, 64, some, 11);    /* exact tiles: no remainder anywhere */
    test_shape(&latent_amx_model, 7, 3, 64, some, 11);      /* K smaller than a pair step */
    static const int past_block[] = {1, 33, 255, 256, 257, 287, 288, 289, 300};
    test_shape(&latent_amx_model, 45, 75, 300, past_block, 9); /* two row blocks: 256, then 32 + 12 */
    test_accumulate(&latent_amx_model);
    test_foreign_release(&latent_amx_model);
    test_threads();
    test_selfcheck();
    test_hardware();
    latent_amx_release();
    return tu_finish("test_amx");
}
