/* The bf16 panel packer (bf16_pack.c) on every level this machine has, and
 * the engine's packing at load (latent_gemm_bf16_pack: over the threads, or
 * inside a task of a parallel section):
 * every byte of the panels is written, and written as the panels' definition
 * says, so packing faster never changes a product's bits. Also prints how
 * fast each level packs a 135M-shaped FFN weight (information, not a check). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "latent/clock.h"
#include "latent/threads.h"
#include "testutil.h"

static uint64_t rs = 88172645463325252ULL;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* The panels' definition, element by element: pair q of feature j of panel
 * pn holds W[32 pn + j][2q], W[32 pn + j][2q + 1]; 0 past n and past k; F32
 * rounded as latent_f32_to_bf16, BF16 as is but NaNs quietened. */
static uint16_t panel_ref(const float *wf, const uint16_t *wb, size_t rs_, size_t cs, int n, int k, size_t at) {
    size_t kp = (size_t)(k + 1) / 2, pn = at / (kp * 2 * GEMM_PANEL), q = at / (2 * GEMM_PANEL) % kp;
    int j = (int)(at % (2 * GEMM_PANEL) / 2), row = (int)pn * GEMM_PANEL + j, c = (int)(2 * q + at % 2);
    if (row >= n || c >= k) return 0;
    size_t i = (size_t)row * rs_ + (size_t)c * cs;
    if (wf) return latent_f32_to_bf16(wf[i]);
    return (wb[i] & 0x7fff) > 0x7f80 ? wb[i] | 0x40 : wb[i];
}

/* One shape and source layout: the generic packer against the definition,
 * every other level against the generic packer's bytes, over buffers filled
 * with garbage first (a byte left unwritten shows). */
static int check_shape(latent_isa top, int n, int k, int layout) {
    int np = (n + GEMM_PANEL - 1) / GEMM_PANEL, ok = 1;
    /* row-major, rows wider than k, transposed (the trainer's op(B)) */
    size_t rs_ = layout == 0 ? (size_t)k : layout == 1 ? (size_t)k + 5 : 1, cs = layout == 2 ? (size_t)n : 1;
    size_t cnt = layout == 2 ? (size_t)k * n : (size_t)n * rs_, bytes = latent_gemm_bf16_bytes(np, k);
    float *wf = malloc(cnt * sizeof *wf);
    uint16_t *wb = malloc(cnt * sizeof *wb), *gen = malloc(bytes), *got = malloc(bytes);
    if (!wf || !wb || !gen || !got) abort();
    /* BF16: an odd step walks through every bit pattern (NaNs, infinities, denormals) */
    for (size_t i = 0; i < cnt; i++) wb[i] = (uint16_t)(i * 40503u + (unsigned)(n + k)), wf[i] = frand() * 4;
    for (size_t i = 0; i < cnt; i += 13) memcpy(&wf[i], &(uint32_t){0x7f800001u + (uint32_t)i}, 4); /* NaNs */
    for (size_t i = 5; i < cnt; i += 17) memcpy(&wf[i], &(uint32_t){0x3f808000u + (uint32_t)(i & 1) * 0x10000u}, 4); /* ties */
    for (int src = 0; src < 2; src++) {
        const float *f = src ? NULL : wf;
        memset(gen, 0xA5, bytes);
        latent_bf16_pack_panels_on(LATENT_ISA_GENERIC, gen, f, wb, rs_, cs, n, k, 0, np);
        for (size_t i = 0; i < bytes / 2; i++) ok &= gen[i] == panel_ref(f, wb, rs_, cs, n, k, i);
        for (int isa = LATENT_ISA_AVX2; isa <= (int)top; isa++) {
            memset(got, 0x5A, bytes);
            latent_bf16_pack_panels_on((latent_isa)isa, got, f, wb, rs_, cs, n, k, 0, np);
            ok &= memcmp(got, gen, bytes) == 0;
        }
    }
    free(wf), free(wb), free(gen), free(got);
    return ok;
}

static void test_levels(latent_isa top) {
    static const int ns[] = {1, 17, 32, 33, 64, 71}, ks[] = {1, 2, 31, 32, 33, 34, 63, 64, 65, 577};
    int ok = 1, cases = 0;
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof ks / sizeof *ks; b++)
            for (int layout = 0; layout < 3; layout++, cases++) ok &= check_shape(top, ns[a], ks[b], layout);
    CHECK(ok, "panel packers on every level give the definition's bytes (%d shapes and layouts, F32 and BF16)", cases);
}

/* Packing at load, split over the threads, against one thread on the generic
 * level: a matrix big enough to be split (1537 x 577, 1.7 MiB of panels). */
static void test_load(latent_isa top) {
    int n = 1537, k = 577, np1 = 0, np2 = 0;
    float *w = malloc(sizeof(float) * n * k);
    uint16_t *h = malloc(sizeof(uint16_t) * n * k), *p1 = NULL, *p2 = NULL;
    if (!w || !h) abort();
    for (int i = 0; i < n * k; i++) w[i] = frand(), h[i] = (uint16_t)((unsigned)i * 40503u);
    for (int i = LATENT_ISA_GENERIC; i <= (int)top; i++) {
        latent_isa_set((latent_isa)i);
        for (int src = 0; src < 2; src++) {
            int rc = src ? latent_gemm_bf16_pack_bf16(&p1, &np1, h, n, k) : latent_gemm_bf16_pack(&p1, &np1, w, n, k);
            rc |= latent_gemm_bf16_pack_on(LATENT_ISA_GENERIC, 0, &p2, &np2, src ? NULL : w, h, n, k);
            CHECK(rc == 0 && np1 == np2 && memcmp(p1, p2, latent_gemm_bf16_bytes(np1, k)) == 0,
                  "%s, %d threads, %s: packing at load differs from one thread's", latent_isa_name((latent_isa)i),
                  latent_get_threads(), src ? "bf16" : "f32");
            latent_gemm_bf16_free(p1, np1, k), latent_gemm_bf16_free(p2, np2, k);
        }
    }
    free(w), free(h);
}

/* The engine packs its blocks as tasks of one parallel section, and a
 * packer inside a task, which would split itself over the threads, runs on
 * the task's thread (threads.c): the same bytes as packing alone. */
typedef struct {
    const float *w;
    int n, k;
    uint16_t *p[4];
    int np[4], rc[4];
} nested_job;

static void nested_task(void *ctx, int t) {
    nested_job *j = ctx;
    j->rc[t] = latent_gemm_bf16_pack(&j->p[t], &j->np[t], j->w, j->n, j->k);
}

static void test_nested(void) {
    nested_job j = {.n = 1537, .k = 577};
    float *w = malloc(sizeof(float) * j.n * j.k);
    uint16_t *ref = NULL;
    int npr = 0, ok = 1;
    if (!w) abort();
    for (int i = 0; i < j.n * j.k; i++) w[i] = frand();
    j.w = w;
    latent_parallel_for(nested_task, &j, 4);
    ok &= latent_gemm_bf16_pack(&ref, &npr, w, j.n, j.k) == 0;
    for (int t = 0; t < 4; t++) {
        ok &= j.rc[t] == 0 && j.np[t] == npr && memcmp(j.p[t], ref, latent_gemm_bf16_bytes(npr, j.k)) == 0;
        latent_gemm_bf16_free(j.p[t], j.np[t], j.k);
    }
    CHECK(ok, "packing inside tasks of a parallel section gives the bytes of packing alone");
    latent_gemm_bf16_free(ref, npr, j.k);
    free(w);
}

/* MB/s of panels written, per level, one thread (information). */
static void report_speed(latent_isa top) {
    int n = 1536, k = 576, np = (n + GEMM_PANEL - 1) / GEMM_PANEL;
    size_t bytes = latent_gemm_bf16_bytes(np, k);
    float *w = malloc(sizeof(float) * n * k);
    uint16_t *h = malloc(sizeof(uint16_t) * n * k), *d = malloc(bytes);
    if (!w || !h || !d) abort();
    for (int i = 0; i < n * k; i++) w[i] = frand(), h[i] = latent_f32_to_bf16(w[i]);
    printf("packing a 1536 x 576 weight into panels, one thread, best of 7, MB/s of panels (bf16 source / f32 source):");
    for (int i = LATENT_ISA_GENERIC; i <= (int)top; i++) {
        double mbs[2];
        for (int src = 0; src < 2; src++) {
            double best = 1e30; /* the best of 7: the machine may be busy */
            for (int r = 0; r < 7; r++) {
                double t0 = latent_now_seconds();
                latent_bf16_pack_panels_on((latent_isa)i, d, src ? w : NULL, h, (size_t)k, 1, n, k, 0, np);
                double t = latent_now_seconds() - t0;
                best = t < best ? t : best;
            }
            mbs[src] = bytes / 1e6 / best;
        }
        printf(" %s %.0f / %.0f;", latent_isa_name((latent_isa)i), mbs[0], mbs[1]);
    }
    printf("\n");
    free(w), free(h), free(d);
}

int main(void) {
    latent_set_threads(2); /* the split is what is tested (a 1-core machine runs both halves itself) */
    latent_isa top = latent_isa_detected();
    if (top > LATENT_ISA_AVX512BF16) top = LATENT_ISA_AVX512BF16; /* the packer has no tile level */
    test_levels(top);
    test_load(top);
    test_nested();
    report_speed(top);
    latent_isa_set(latent_isa_detected());
    return tu_finish("test_bf16_pack");
}
