/* The bf16 matrix kernels on every instruction-set path this machine has:
 * against a double-precision product of the same bf16-rounded inputs, equal
 * across paths, and batch invariant (a row's bits do not depend on how many
 * rows share the call or where it sits among them). Also the bf16 rounding
 * itself (scalar and vectorised), the pair-major operand the trainer's
 * weight gradients use, and the bf16 KV pages' store and load. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/amx_tile.h"
#include "kernels/kernels.h"
#include "latent/kv.h"
#include "latent/threads.h"
#include "testutil.h"

static uint64_t rs = 88172645463325252ULL;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_rounding(void) {
    CHECK(latent_f32_to_bf16(1.0f) == 0x3f80, "1.0");
    CHECK(latent_bf16_to_f32(latent_f32_to_bf16(-2.5f)) == -2.5f, "-2.5 is exact");
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0) */
    CHECK(latent_f32_to_bf16(1.00390625f) == 0x3f80, "tie to even down");
    /* 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: up to the even one */
    CHECK(latent_f32_to_bf16(1.01171875f) == 0x3f82, "tie to even up");
    CHECK(latent_f32_to_bf16(1.0f + 1.0f / 128 + 1e-4f) == 0x3f81, "nearest");
    float inf = 1.0f / 0.0f, nan = inf - inf;
    CHECK(latent_bf16_to_f32(latent_f32_to_bf16(inf)) == inf, "inf stays inf");
    float back = latent_bf16_to_f32(latent_f32_to_bf16(nan));
    CHECK(back != back, "NaN stays NaN");
    CHECK(latent_bf16_to_f32(latent_f32_to_bf16(3.3895314e38f)) == 3.3895314e38f, "largest bf16 is exact");
}

/* out = Xb W^T in double from the same bf16 values the kernel sees. */
static void reference(double *out, const float *x, const float *w, int m, int n, int k) {
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int i = 0; i < k; i++)
                s += (double)latent_bf16_to_f32(latent_f32_to_bf16(x[(size_t)r * k + i])) *
                     latent_bf16_to_f32(latent_f32_to_bf16(w[(size_t)j * k + i]));
            out[(size_t)r * n + j] = s;
        }
}

static void test_products(latent_isa isa, float *results[], int which) {
    static const int shapes[][3] = {{1, 45, 17}, {3, 64, 576}, {13, 100, 257}, {40, 33, 300}};
    rs = 88172645463325252ULL; /* the same inputs on every path */
    for (int si = 0; si < 4; si++) {
        int m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
        float *x = malloc(sizeof(float) * m * k), *w = malloc(sizeof(float) * n * k), *y = malloc(sizeof(float) * m * n);
        float *y1 = malloc(sizeof(float) * n);
        double *ref = malloc(sizeof(double) * m * n);
        for (int i = 0; i < m * k; i++) x[i] = frand();
        for (int i = 0; i < n * k; i++) w[i] = frand() * 0.5f;
        latent_linear l;
        CHECK(latent_linear_init_bf16(&l, w, n, k) == 0, "bf16 pack");
        latent_linear_forward(y, x, &l, m);
        reference(ref, x, w, m, n, k);
        double worst = 0;
        for (int i = 0; i < m * n; i++) {
            double e = (y[i] - ref[i]) / (1.0 + (ref[i] < 0 ? -ref[i] : ref[i]));
            if (e < 0) e = -e;
            if (e > worst) worst = e;
        }
        /* F32 sums of k exact products: a few ulps of the running sum per term */
        CHECK(worst < 1e-5 * k / 64 + 1e-6, "%s: %dx%dx%d bf16 product error %g", latent_isa_name(isa), m, n, k, worst);
        /* batch invariance: each row alone gives the same bits as among m */
        int same = 1;
        for (int r = 0; r < m; r++) {
            latent_linear_forward(y1, x + (size_t)r * k, &l, 1);
            same &= memcmp(y1, y + (size_t)r * n, sizeof(float) * n) == 0;
        }
        CHECK(same, "%s: %dx%dx%d a row alone differs from the same row among %d", latent_isa_name(isa), m, n, k, m);
        /* the embedding lookup from the panels gives the rounded row */
        float row[600];
        latent_linear_row(&l, n - 1, row);
        int rows_ok = 1;
        for (int i = 0; i < k; i++) rows_ok &= row[i] == latent_bf16_to_f32(latent_f32_to_bf16(w[(size_t)(n - 1) * k + i]));
        CHECK(rows_ok, "%s: latent_linear_row of bf16 panels", latent_isa_name(isa));
        if (si == 3) results[which] = y, y = NULL;
        latent_linear_free(&l);
        free(x), free(w), free(y), free(y1), free(ref);
    }
}

static void test_kv_pages(void) {
    latent_config c = {0};
    c.d = 32, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 16, c.vocab = 8, c.max_pos = 64;
    CHECK(latent_kv_page_bytes(&c, 16, LATENT_KV_BF16) * 2 == latent_kv_page_bytes(&c, 16, LATENT_KV_F32),
          "a bf16 page takes half the bytes");
    latent_kv_pool p;
    latent_err err;
    CHECK(latent_kv_pool_init(&p, &c, 16, latent_kv_page_bytes(&c, 16, LATENT_KV_BF16) * 3, LATENT_KV_BF16, &err) == 0 &&
              p.n_pages == 3,
          "bf16 pool of 3 pages");
    float src[16], dst[16];
    for (int i = 0; i < 16; i++) src[i] = frand();
    void *row = latent_kv_at(&p, p.k, 2, 1, 15);
    latent_kv_store(&p, row, 0, src, 16);
    latent_kv_load(&p, row, 0, dst, 16);
    int ok = 1;
    for (int i = 0; i < 16; i++) ok &= dst[i] == latent_bf16_to_f32(latent_f32_to_bf16(src[i]));
    CHECK(ok, "bf16 page row round trip is the rounded row");
    latent_kv_pool_free(&p);
}

/* The vectorised span and pair packers give latent_f32_to_bf16's bits, ties,
 * NaN, infinities and denormals included, at every length (tails). */
static void test_packers(latent_isa isa) {
    enum { N = 53 };
    float a[N], b[N];
    uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xff800000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu};
    for (int i = 0; i < N; i++) a[i] = frand() * 100, b[i] = frand();
    for (int i = 0; i < 7; i++) memcpy(&a[3 * i + 17], &specials[i], 4), memcpy(&b[5 * i + 1], &specials[i], 4);
    int ok = 1;
    for (int n = 0; n <= N; n++) {
        uint16_t span[N], pairs[2 * N], pairs0[2 * N];
        latent_bf16_round_span(span, a, n);
        latent_bf16_pack_pairs(pairs, a, b, n);
        latent_bf16_pack_pairs(pairs0, b, NULL, n);
        for (int i = 0; i < n; i++)
            ok &= span[i] == latent_f32_to_bf16(a[i]) && pairs[2 * i] == latent_f32_to_bf16(a[i]) &&
                  pairs[2 * i + 1] == latent_f32_to_bf16(b[i]) && pairs0[2 * i] == latent_f32_to_bf16(b[i]) &&
                  pairs0[2 * i + 1] == 0;
    }
    CHECK(ok, "%s: vectorised bf16 span and pair packing equal latent_f32_to_bf16", latent_isa_name(isa));
}

/* X given pair-major ([k/2][m][2], built from X^T's rows two at a time, as
 * the trainer packs dY^T) gives the bits of the row-major product, with and
 * without accumulation, for odd k and partial panels and row tiles. */
static void test_pair_major(latent_isa isa) {
    /* On the hardware tiles the row-major product runs on TDPBF16PS, whose
     * sums round unlike vdpbf16ps's, and the pair-major one on vdpbf16ps: the
     * bits differ (seen on the Xeon). The trainer then reads rows (the
     * kernel table's bf16_pair_major is 0), so no product it runs mixes them. */
    const latent_kernels *km = latent_kernels_active();
    if (km->tiles == &latent_amx_hw) {
        CHECK(!km->bf16_pair_major, "%s: the trainer reads rows on the hardware tiles", latent_isa_name(isa));
        printf("pair-major against rows on %s: not compared (the trainer does not use pair-major there)\n",
               latent_isa_name(isa));
        return;
    }
    int shapes[][3] = {{1, 32, 2}, {13, 40, 7}, {25, 70, 300}, {40, 33, 257}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], kp = (k + 1) / 2, np = 0;
        float *x = malloc(sizeof(float) * m * k), *xt = malloc(sizeof(float) * k * m), *w = malloc(sizeof(float) * n * k);
        float *o1 = malloc(sizeof(float) * m * n), *o2 = malloc(sizeof(float) * m * n);
        uint16_t *xb = malloc(sizeof(uint16_t) * m * kp * 2), *xq = malloc(sizeof(uint16_t) * m * kp * 2), *panels = NULL;
        for (int i = 0; i < m * k; i++) x[i] = frand();
        for (int i = 0; i < n * k; i++) w[i] = frand();
        for (int i = 0; i < m; i++)
            for (int j = 0; j < k; j++) xt[(size_t)j * m + i] = x[(size_t)i * k + j];
        CHECK(latent_gemm_bf16_pack(&panels, &np, w, n, k) == 0, "pack");
        latent_bf16_round_rows(xb, x, m, k);
        for (int q = 0; q < kp; q++)
            latent_bf16_pack_pairs(xq + (size_t)q * m * 2, xt + (size_t)(2 * q) * m, 2 * q + 1 < k ? xt + (size_t)(2 * q + 1) * m : NULL, m);
        for (int acc = 0; acc <= 1; acc++) {
            for (int i = 0; i < m * n; i++) o1[i] = o2[i] = acc ? (float)i : -1.0f;
            if (acc) latent_gemm_bf16_run_acc(o1, n, xb, m, n, k, panels, 0, np);
            else latent_gemm_bf16_run(o1, n, xb, m, n, k, panels, 0, np);
            latent_gemm_bf16_run_pm(o2, n, xq, m, n, k, panels, 0, np, acc);
            CHECK(memcmp(o1, o2, sizeof(float) * m * n) == 0, "%s: %dx%dx%d pair-major product (acc %d) differs from rows",
                  latent_isa_name(isa), m, n, k, acc);
        }
        latent_gemm_bf16_free(panels, np, k);
        free(x), free(xt), free(w), free(o1), free(o2), free(xb), free(xq);
    }
}

/* Packing a matrix from its BF16 values (a checkpoint's, latent_load_opts.
 * keep_bf16) gives the panels of packing their F32 widening: every bit
 * pattern, NaNs included, odd k and a partial panel. */
static void test_pack_from_bf16(void) {
    int n = 70, k = 1001, np1 = 0, np2 = 0; /* n k > 65536 */
    uint16_t *h = malloc(sizeof(uint16_t) * n * k), *p1 = NULL, *p2 = NULL;
    float *w = malloc(sizeof(float) * n * k);
    /* 40503 is odd: the first 65536 elements take every bit pattern once */
    for (int i = 0; i < n * k; i++) h[i] = (uint16_t)((unsigned)i * 40503u), w[i] = latent_bf16_to_f32(h[i]);
    CHECK(latent_gemm_bf16_pack(&p1, &np1, w, n, k) == 0 && latent_gemm_bf16_pack_bf16(&p2, &np2, h, n, k) == 0, "pack");
    CHECK(p1 && p2 && np1 == np2 && memcmp(p1, p2, latent_gemm_bf16_bytes(np1, k)) == 0,
          "panels packed from bf16 differ from those packed from their F32 values");
    latent_gemm_bf16_free(p1, np1, k), latent_gemm_bf16_free(p2, np2, k);
    free(h), free(w);
}

int main(void) {
    test_rounding();
    test_pack_from_bf16();
    test_kv_pages();
    latent_isa top = latent_isa_detected();
    float *results[LATENT_ISA_AMX + 1] = {0};
    for (int t = 1; t <= 2; t++) {
        latent_set_threads(t);
        for (int i = LATENT_ISA_GENERIC; i <= (int)top; i++) {
            latent_isa isa = latent_isa_set((latent_isa)i);
            test_products(isa, results, i);
            if (t == 1) test_packers(isa), test_pair_major(isa);
        }
        /* every vector path rounds alike: the same bits (no denormals in these
         * inputs); amx has its own bits (tiles sum their pairs their own way:
         * test_amx bounds them) */
        for (int i = LATENT_ISA_GENERIC + 1; i <= (int)top && i <= LATENT_ISA_AVX512BF16; i++)
            CHECK(results[i] && results[0] && memcmp(results[i], results[0], sizeof(float) * 40 * 33) == 0,
                  "%d threads: path %s differs from generic", t, latent_isa_name((latent_isa)i));
        for (int i = 0; i <= (int)top; i++) free(results[i]), results[i] = NULL;
    }
    printf("bf16 kernels tested on:");
    for (int i = LATENT_ISA_GENERIC; i <= (int)top; i++) printf(" %s", latent_isa_name((latent_isa)i));
    printf("; skipped (not on this machine):");
    for (int i = (int)top + 1; i <= LATENT_ISA_AMX; i++) printf(" %s", latent_isa_name((latent_isa)i));
    printf("\n");
    return tu_finish("test_bf16");
}
