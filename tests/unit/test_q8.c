/* Int8 weights (q8.h): the block quantizer's bounds, the panel layout, and
 * the product on every path this machine has (AVX512-VNNI, generic C, and
 * the AMX-INT8 tile kernel through the tile layer's software model):
 * exactly the integer reference scaled in the documented order, the same
 * bits on every path and thread count, and batch invariant (a row alone
 * gives the bits it gets among any number of rows), for K that is not a
 * multiple of 32, partial panels and every row count from 1 to 64. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/amx_tile.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"
#include "latent/threads.h"
#include "testutil.h"

static uint64_t rs = 0x9E3779B97F4A7C15ULL;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Round trip within half a step; the largest magnitude maps to +-127; short
 * blocks are padded with 0; zero and non-finite blocks. */
static void test_quantizer(void) {
    int ok = 1, extreme = 1;
    for (int t = 0; t < 2000; t++) {
        int len = 1 + t % 32;
        float x[Q8_BLOCK], mag = t % 3 == 0 ? 1e-3f : t % 3 == 1 ? 1.0f : 1e4f;
        for (int i = 0; i < len; i++) x[i] = frand() * mag;
        int8_t q[Q8_BLOCK];
        float s = latent_q8_quantize_block(q, x, len), amax = 0;
        for (int i = 0; i < len; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        int top = 0;
        for (int i = 0; i < len; i++) {
            /* x * (127 / amax) is within an ulp or two of x / s: half a step plus rounding */
            ok &= fabsf(x[i] - q[i] * s) <= 0.5f * s * (1 + 1e-4f) && q[i] != -128;
            top |= q[i] == 127 || q[i] == -127;
        }
        for (int i = len; i < Q8_BLOCK; i++) ok &= q[i] == 0;
        extreme &= top && s == amax / 127.0f;
    }
    CHECK(ok, "|x - q s| <= s / 2, q in [-127, 127], padding 0");
    CHECK(extreme, "max |x| quantizes to +-127, scale = max / 127");
    float z[Q8_BLOCK] = {0}, bad[3] = {1.0f, 1.0f / 0.0f, 2.0f}, tiny[2] = {1e-40f, -2e-40f};
    int8_t q[Q8_BLOCK];
    CHECK(latent_q8_quantize_block(q, z, 32) == 0.0f && q[0] == 0 && q[31] == 0, "zero block");
    float s = latent_q8_quantize_block(q, bad, 3);
    CHECK(s != s, "an infinity makes the scale NaN");
    CHECK(latent_q8_quantize_block(q, tiny, 2) == 0.0f && q[0] == 0, "values below 1e-36 quantize to a zero block");
}

/* The product as documented, from the quantizer alone: exact int64 block
 * sums, scaled in k order with fmaf. */
static void reference(float *out, const float *x, const float *w, int m, int n, int k) {
    int nb = latent_q8_blocks(k);
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++) {
            float acc = 0;
            for (int b = 0; b < nb; b++) {
                int len = k - b * Q8_BLOCK < Q8_BLOCK ? k - b * Q8_BLOCK : Q8_BLOCK;
                int8_t xq[Q8_BLOCK], wq[Q8_BLOCK];
                float xs = latent_q8_quantize_block(xq, x + (size_t)r * k + b * Q8_BLOCK, len);
                float ws = latent_q8_quantize_block(wq, w + (size_t)j * k + b * Q8_BLOCK, len);
                int64_t s = 0;
                for (int i = 0; i < Q8_BLOCK; i++) s += (int64_t)xq[i] * wq[i];
                acc = fmaf((float)s, ws * xs, acc);
            }
            out[(size_t)r * n + j] = acc;
        }
}

/* One shape on the active path: the reference's bits, a row alone = the
 * row in the batch, the F32 product within the quantization bound, the
 * dequantized rows. Returns the product (the caller frees it). */
static float *check_shape(int m, int n, int k) {
    const char *path = latent_q8_path();
    float *x = malloc(sizeof(float) * m * k), *w = malloc(sizeof(float) * n * k);
    float *y = malloc(sizeof(float) * m * n), *ref = calloc((size_t)m * n, sizeof(float)), *y1 = malloc(sizeof(float) * n);
    for (int i = 0; i < m * k; i++) x[i] = frand() * (i % 7 == 0 ? 4.0f : 1.0f);
    for (int i = 0; i < n * k; i++) w[i] = frand() * 0.1f;
    latent_linear l;
    CHECK(latent_linear_init_q8(&l, w, n, k) == 0, "q8 pack");
    latent_linear_forward(y, x, &l, m);
    reference(ref, x, w, m, n, k);
    CHECK(memcmp(y, ref, sizeof(float) * m * n) == 0, "%s: %dx%dx%d differs from the integer reference", path, m, n, k);
    int same = 1;
    for (int r = 0; r < m; r++) {
        latent_linear_forward(y1, x + (size_t)r * k, &l, 1);
        same &= memcmp(y1, y + (size_t)r * n, sizeof(float) * n) == 0;
    }
    CHECK(same, "%s: %dx%dx%d a row alone differs from the same row among %d", path, m, n, k, m);
    /* Against the exact F32 product: each block's error is at most
     * sum |x||w| (ex + ew) with ex, ew the relative half-steps 1/254 of
     * each side's largest magnitude; bounded here by the whole row's. */
    int near = 1;
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++) {
            double exact = 0, mass = 0;
            float xm = 0, wm = 0;
            for (int i = 0; i < k; i++) {
                exact += (double)x[(size_t)r * k + i] * w[(size_t)j * k + i];
                xm = fmaxf(xm, fabsf(x[(size_t)r * k + i])), wm = fmaxf(wm, fabsf(w[(size_t)j * k + i]));
            }
            mass = (double)k * xm * wm;
            near &= fabs(y[(size_t)r * n + j] - exact) <= mass * (2.0 / 254 + 1.0 / 254 / 254) + 1e-6;
        }
    CHECK(near, "%s: %dx%dx%d beyond the quantization bound of the F32 product", path, m, n, k);
    float row[600];
    latent_linear_row(&l, n - 1, row);
    int8_t q[Q8_BLOCK];
    int rows_ok = 1;
    for (int b = 0; b < latent_q8_blocks(k); b++) {
        int len = k - b * Q8_BLOCK < Q8_BLOCK ? k - b * Q8_BLOCK : Q8_BLOCK;
        float s = latent_q8_quantize_block(q, w + (size_t)(n - 1) * k + b * Q8_BLOCK, len);
        for (int i = 0; i < len; i++) rows_ok &= row[b * Q8_BLOCK + i] == q[i] * s;
    }
    CHECK(rows_ok, "%s: latent_linear_row gives q * scale", path);
    latent_linear_free(&l);
    free(x), free(w), free(ref), free(y1);
    return y;
}

/* Activation rows through latent_q8_rows_quantize (vectorised full blocks,
 * rows split over threads) give the scalar quantizer's bytes, with zero,
 * tiny, infinite and NaN blocks and a short last block among them. */
static void test_rows_quantize(void) {
    enum { M = 200, K = 200 }; /* 40000 values: split over the threads when there are two */
    static float x[M * K];
    static _Alignas(64) unsigned char buf[M * 512];
    for (int i = 0; i < M * K; i++) x[i] = frand() * (i % 5 == 0 ? 50.0f : 1.0f);
    float inf = 1.0f / 0.0f;
    for (int i = 0; i < 32; i++) x[32 + i] = 0.0f, x[K + 64 + i] = 1e-39f * (i - 16);
    x[2 * K + 100] = inf, x[3 * K + 5] = -inf, x[4 * K + 40] = inf - inf, x[5 * K + 31] = -0.0f;
    int ok = 1;
    q8_rows r;
    latent_q8_rows_quantize(&r, buf, x, M, K);
    for (int i = 0; i < M; i++)
        for (int b = 0; b < r.nb; b++) {
            const q8_xblock *xb = latent_q8_xblock(&r, i, b);
            int8_t q[Q8_BLOCK];
            int len = K - b * Q8_BLOCK < Q8_BLOCK ? K - b * Q8_BLOCK : Q8_BLOCK, sum = 0;
            float s = latent_q8_quantize_block(q, x + (size_t)i * K + b * Q8_BLOCK, len);
            for (int t = 0; t < Q8_BLOCK; t++) sum += q[t];
            ok &= memcmp(q, xb->q, Q8_BLOCK) == 0 && memcmp(&s, &xb->scale, sizeof s) == 0 && xb->corr == -128 * sum;
        }
    CHECK(ok, "%s: quantized rows equal the scalar quantizer's bytes", latent_q8_path());
}

static const int shapes[][3] = {{1, 45, 17}, {3, 64, 576}, {13, 100, 257}, {40, 33, 300}, {7, 96, 32}, {64, 70, 100}};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

/* Every row count 1..64 on one weight with K % 32 != 0 and a partial panel:
 * every row tile size and remainder of the micro-kernels. */
static void test_row_counts(void) {
    enum { N = 40, K = 77, M = 64 };
    float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K);
    float *all = malloc(sizeof(float) * M * N), *some = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) x[i] = frand();
    for (int i = 0; i < N * K; i++) w[i] = frand();
    latent_linear l;
    CHECK(latent_linear_init_q8(&l, w, N, K) == 0, "q8 pack");
    latent_linear_forward(all, x, &l, M);
    int ok = 1;
    for (int m = 1; m <= M; m++) {
        int r0 = (M - m) / 2; /* rows from the middle: a row's place in the call changes too */
        latent_linear_forward(some, x + (size_t)r0 * K, &l, m);
        ok &= memcmp(some, all + (size_t)r0 * N, sizeof(float) * m * N) == 0;
    }
    CHECK(ok, "%s: rows 1..64 of a batch give the bits of the full batch", latent_q8_path());
    latent_linear_free(&l);
    free(x), free(w), free(all), free(some);
}

/* The q8 tile kernel after a foreign TILERELEASE (oneDNN's) on this thread:
 * the next product loads its tile config again (through the model, which
 * aborts on unconfigured tiles; one thread, so the products run here). */
static void test_foreign_release(void) {
    enum { N = 40, K = 77, M = 20 };
    float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K);
    float *y1 = malloc(sizeof(float) * M * N), *y2 = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) x[i] = frand();
    for (int i = 0; i < N * K; i++) w[i] = frand();
    latent_set_threads(1);
    CHECK(latent_isa_set_path("amx-model") == 0, "path amx-model");
    latent_linear l;
    CHECK(latent_linear_init_q8(&l, w, N, K) == 0, "q8 pack");
    latent_linear_forward(y1, x, &l, M);
    latent_amx_model.release(); /* behind the tile layer's back */
    latent_linear_forward(y2, x, &l, M);
    CHECK(memcmp(y1, y2, sizeof(float) * M * N) == 0, "amx-model: a q8 product after a foreign TILERELEASE");
    latent_linear_free(&l);
    free(x), free(w), free(y1), free(y2);
}

int main(void) {
    test_quantizer();
    test_foreign_release();
    /* generic C, then the best vector path (VNNI where the CPU has it), then
     * the AMX tile kernel through the software model of the tile layer, and
     * on AMX hardware the tile kernel on the tiles (LATENT_Q8_TILES=1: the
     * amx path itself keeps q8 on VNNI, which measured faster) */
    int hw = latent_isa_detected() == LATENT_ISA_AMX && !latent_isa_amx_check_failed();
    int n_levels = hw ? 4 : 3;
    const char *levels[4] = {"generic", latent_isa_name(latent_isa_detected()), "amx-model", "amx"};
    float *results[4][N_SHAPES] = {{0}};
    char paths[4][16] = {"", "", "", ""};
    for (int t = 1; t <= 2; t++) {
        latent_set_threads(t);
        for (int li = 0; li < n_levels; li++) {
            if (li == 3) setenv("LATENT_Q8_TILES", "1", 1);
            CHECK(latent_isa_set_path(levels[li]) == 0, "path %s", levels[li]);
            snprintf(paths[li], sizeof paths[li], "%s%s", latent_q8_path(), li == 3 ? "-tiles" : "");
            if (li == 3) {
                CHECK(!strcmp(latent_q8_path(), "amx"), "LATENT_Q8_TILES=1 puts q8 on the hardware tiles");
                unsetenv("LATENT_Q8_TILES");
            }
            rs = 0x9E3779B97F4A7C15ULL; /* the same inputs on every path */
            for (int s = 0; s < N_SHAPES; s++) results[li][s] = check_shape(shapes[s][0], shapes[s][1], shapes[s][2]);
            test_row_counts();
            test_rows_quantize();
        }
        for (int li = 1; li < n_levels; li++)
            for (int s = 0; s < N_SHAPES; s++)
                CHECK(memcmp(results[0][s], results[li][s], sizeof(float) * shapes[s][0] * shapes[s][1]) == 0,
                      "%d threads: %s and %s differ on %dx%dx%d", t, paths[li], paths[0], shapes[s][0], shapes[s][1],
                      shapes[s][2]);
        for (int li = 0; li < n_levels; li++)
            for (int s = 0; s < N_SHAPES; s++) free(results[li][s]), results[li][s] = NULL;
    }
    if (hw) {
        latent_isa_set_path("amx");
        CHECK(strcmp(latent_q8_path(), "amx") != 0, "the amx path keeps q8 off the tiles by default (%s)", latent_q8_path());
    }
    latent_isa_set_path(latent_isa_name(latent_isa_detected()));
    printf("q8 kernels tested on: %s %s %s %s\n", paths[0], paths[1], paths[2], paths[3]);
    return tu_finish("test_q8");
}
