/* Each optimized op against its naive reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "ref_ops.h"
#include "testutil.h"
#include "tiny_model.h"

static float *randv(size_t n) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = tm_normal();
    return x;
}

/* Every op against its reference on the active instruction-set level. */
static void check_ops(void) {
    /* matmul: one row (sgemv) and many rows (sgemm), odd sizes */
    int shapes[][3] = {{1, 37, 19}, {5, 64, 33}, {17, 96, 128}};
    for (int s = 0; s < 3; s++) {
        int n = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        float *x = randv((size_t)n * in), *w = randv((size_t)out * in);
        float *a = malloc(sizeof(float) * n * out), *b = malloc(sizeof(float) * n * out);
        latent_matmul_forward(a, x, w, n, in, out);
        matmul_forward_ref(b, x, w, n, in, out);
        CHECK(tu_rel_err(a, b, (size_t)n * out) < 1e-5, "matmul %dx%dx%d rel err %g", n, in, out,
              tu_rel_err(a, b, (size_t)n * out));
        free(x), free(w), free(a), free(b);
    }
    /* prepared matrices (the packed AVX-512 kernel where the CPU has it):
     * row counts across the 12-row tile, widths that end mid-panel, K blocks,
     * and single rows (their own path) with odd K and widths under 16 */
    int lshapes[][3] = {{1, 40, 70}, {1, 33, 5}, {1, 601, 130}, {2, 33, 5},
                        {7, 64, 96}, {12, 300, 33}, {13, 17, 32}, {29, 600, 130}};
    for (int s = 0; s < 8; s++) {
        int n = lshapes[s][0], in = lshapes[s][1], out = lshapes[s][2];
        float *x = randv((size_t)n * in), *w = randv((size_t)out * in), *w2 = randv((size_t)out * in);
        float *a = malloc(sizeof(float) * n * out), *b = malloc(sizeof(float) * n * out);
        float *a2 = malloc(sizeof(float) * n * out), *b2 = malloc(sizeof(float) * n * out);
        latent_linear l, l2;
        CHECK(latent_linear_init(&l, w, out, in) == 0 && latent_linear_init(&l2, w2, out, in) == 0, "linear init");
        latent_linear_forward(a, x, &l, n);
        matmul_forward_ref(b, x, w, n, in, out);
        CHECK(tu_rel_err(a, b, (size_t)n * out) < 1e-5, "linear %dx%dx%d rel err %g", n, in, out,
              tu_rel_err(a, b, (size_t)n * out));
        latent_linear_forward_multi((float *[]){a, a2}, (const latent_linear *[]){&l, &l2}, 2, x, n);
        matmul_forward_ref(b2, x, w2, n, in, out);
        CHECK(tu_rel_err(a, b, (size_t)n * out) < 1e-5 && tu_rel_err(a2, b2, (size_t)n * out) < 1e-5,
              "linear multi %dx%dx%d", n, in, out);
        latent_linear_free(&l), latent_linear_free(&l2);
        free(x), free(w), free(w2), free(a), free(b), free(a2), free(b2);
    }
    /* rmsnorm */
    {
        int n = 3, d = 50;
        float *x = randv(n * d), *w = randv(d), *a = malloc(sizeof(float) * n * d), *b = malloc(sizeof(float) * n * d);
        latent_rmsnorm_forward(a, x, w, n, d, 1e-5f);
        rmsnorm_forward_ref(b, x, w, n, d, 1e-5f);
        CHECK(tu_rel_err(a, b, n * d) < 1e-6, "rmsnorm rel err %g", tu_rel_err(a, b, n * d));
        free(x), free(w), free(a), free(b);
    }
    /* rope: tables + apply vs the direct formula, at a large position */
    {
        int heads = 3, hd = 16;
        float *x = randv(heads * hd), *y = malloc(sizeof(float) * heads * hd), c[8], sn[8];
        memcpy(y, x, sizeof(float) * heads * hd);
        latent_rope_tables(c, sn, hd, 1000, 10000.0f);
        latent_rope_forward(x, heads, hd, c, sn);
        rope_forward_ref(y, heads, hd, 1000, 10000.0f);
        CHECK(tu_rel_err(x, y, heads * hd) < 1e-6, "rope rel err %g", tu_rel_err(x, y, heads * hd));
        /* position 0 is the identity */
        float *z = randv(hd), z0[16];
        memcpy(z0, z, sizeof z0);
        latent_rope_tables(c, sn, hd, 0, 10000.0f);
        latent_rope_forward(z, 1, hd, c, sn);
        CHECK(memcmp(z, z0, sizeof z0) == 0, "rope at position 0 must not change the vector");
        free(x), free(y), free(z);
    }
    /* swiglu and softmax */
    {
        size_t n = 300;
        float *g = randv(n), *u = randv(n), *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
        latent_swiglu_forward(a, g, u, n);
        swiglu_forward_ref(b, g, u, n);
        CHECK(tu_rel_err(a, b, n) < 1e-6, "swiglu rel err %g", tu_rel_err(a, b, n));
        for (size_t i = 0; i < n; i++) g[i] *= 30.0f; /* large logits: max subtraction matters */
        memcpy(a, g, n * sizeof(float));
        memcpy(b, g, n * sizeof(float));
        latent_softmax_forward(a, (int)n);
        softmax_forward_ref(b, (int)n);
        CHECK(tu_rel_err(a, b, n) < 1e-5, "softmax rel err %g", tu_rel_err(a, b, n));
        double sum = 0;
        for (size_t i = 0; i < n; i++) sum += a[i];
        CHECK_NEAR(sum, 1.0, 1e-5, "softmax sums to one");
        free(g), free(u), free(a), free(b);
    }
}

/* Each level up to the best this machine has, so the paths a CPU below it
 * takes (avx2, generic) are tested here too; then the detected one again. */
int main(void) {
    latent_isa best = latent_isa_detected();
    for (int isa = LATENT_ISA_GENERIC; isa <= (int)best; isa++) {
        latent_isa got = latent_isa_set((latent_isa)isa);
        printf("test_ops: on %s\n", latent_isa_name(got));
        check_ops();
    }
    latent_isa_set(best);
    return tu_finish("test_ops");
}
