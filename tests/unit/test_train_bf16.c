/* bf16 training (docs/training.md, "Precision").
 *
 * 1. The product itself, exactly: latent_tr_gemm in bf16, for the four
 *    transpose combinations the trainer uses, with and without accumulation,
 *    against a double-precision product of the same bf16-rounded operands:
 *    only the F32 summation may differ (K x 2^-24 x sum |terms|). A wrong
 *    packing or transpose gives O(1) errors.
 * 2. One training step with the linear layers' products in bf16 against the
 *    same step in F32, on tiny random models in each mode. Each bf16 operand
 *    carries up to 2^-9 relative error, a product term ~2^-8; a gradient
 *    passes a chain of such products (forward and backward through every
 *    block, LRT's several passes), and the errors compound along it: the
 *    measured max |g_bf16 - g_f32| / max |g_f32| is 1.8% (plain), 2.1%
 *    (Jacobi) and 5.1% (LRT) here. The bound, 1e-1, is twice the worst; the
 *    loss, which sees the forward only, within 1e-2; the weights after one
 *    SGD step within lr x the gradient bound. bf16 must really be used (the
 *    gradients differ) and the F32 step must be unchanged after a bf16 one.
 * 3. The weights' panels packed once per step: inside latent_tr_gemm_step_begin/
 *    _end a weight is packed at its first use and reused (a change to it
 *    inside the step is not seen, which the trainer never does); after the
 *    step, and outside any step, a changed weight is packed again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "latent/threads.h"
#include "train/train_ops.h"
#include "latent/train.h"
#include "testutil.h"
#include "tiny_model.h"

#define B 2
#define T 16

static void one_step(latent_model *m, latent_train_mode mode, int bf16, const latent_train_batch *b, latent_weights *g,
                     double *loss) {
    latent_train_shape sh = {.mode = mode, .batch = B, .seq = T, .jacobi_iters = 4, .jacobi_grad_iters = 2,
                             .lrt_subsets = 2, .bf16 = bf16};
    latent_err err;
    latent_trainer *t = latent_trainer_new(m, &sh, &err);
    if (!t) abort();
    memset(g->slab, 0, g->slab_floats * sizeof(float));
    if (latent_trainer_step(t, b, g, loss, &err) != 0) abort();
    latent_trainer_free(t);
}

static void test_mode(const char *name, latent_model *m, latent_train_mode mode) {
    int V = m->cfg.vocab;
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + 3) % V, tgt[i] = (i * 11 + 5) % V;
    latent_train_batch b = {.tokens = tok, .targets = tgt};
    latent_err err;
    latent_weights g32, g16, again;
    latent_weights_alloc(&g32, &m->cfg, &err);
    latent_weights_alloc(&g16, &m->cfg, &err);
    latent_weights_alloc(&again, &m->cfg, &err);
    double l32, l16, l32b;
    one_step(m, mode, 0, &b, &g32, &l32);
    one_step(m, mode, 1, &b, &g16, &l16);
    one_step(m, mode, 0, &b, &again, &l32b);
    double rel = tu_rel_err(g16.slab, g32.slab, g32.slab_floats), gmax = 0;
    for (int64_t i = 0; i < g32.slab_floats; i++) gmax = fabs(g32.slab[i]) > gmax ? fabs(g32.slab[i]) : gmax;
    fprintf(stderr, "%s: loss f32 %.6f bf16 %.6f; gradient rel err %.3e\n", name, l32, l16, rel);
    CHECK(fabs(l16 - l32) <= 1e-2 * fabs(l32), "%s: bf16 loss %g vs f32 %g", name, l16, l32);
    CHECK(rel <= 1e-1, "%s: bf16 gradient rel err %g > 1e-1", name, rel);
    CHECK(rel > 0, "%s: bf16 gradients equal F32's: bf16 products not used", name);
    CHECK(l32 == l32b && memcmp(g32.slab, again.slab, g32.slab_floats * sizeof(float)) == 0,
          "%s: the F32 step changed after a bf16 one", name);
    /* one SGD step from the same weights with each gradient */
    const float lr = 0.1f;
    double wmax = 0;
    for (int64_t i = 0; i < g32.slab_floats; i++) {
        float w32 = m->w.slab[i] - lr * g32.slab[i], w16 = m->w.slab[i] - lr * g16.slab[i];
        wmax = fabs(w32 - w16) > wmax ? fabs(w32 - w16) : wmax;
    }
    CHECK(wmax <= lr * 1e-1 * gmax + 1e-7, "%s: weights after one step differ by %g (bound %g)", name, wmax,
          lr * 1e-1 * gmax);
    latent_weights_free(&g32);
    latent_weights_free(&g16);
    latent_weights_free(&again);
}

static float bf(float x) { return latent_bf16_to_f32(latent_f32_to_bf16(x)); }

static void test_products(void) {
    enum { M = 37, N = 45, K = 67 }; /* odd sizes: partial panels, an odd k */
    float A[K * M + 8], Bm[K * N + 8], C[M * N], C0[M * N];
    tm_rng = 5;
    for (int i = 0; i < K * M + 8; i++) A[i] = tm_normal();
    for (int i = 0; i < K * N + 8; i++) Bm[i] = tm_normal();
    for (int i = 0; i < M * N; i++) C0[i] = tm_normal();
    tr_gemm g;
    latent_tr_gemm_init(&g, 1);
    if (latent_tr_gemm_reserve(&g, 1, latent_tr_gemm_scratch(M, N, K)) != 0) abort();
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int acc = 0; acc < 2; acc++) {
                int lda = ta ? M : K, ldb = tb ? K : N;
                memcpy(C, C0, sizeof C);
                latent_tr_gemm(&g, 0, ta, tb, M, N, K, A, lda, Bm, ldb, acc, C, N);
                double worst = 0;
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double ref = acc ? C0[i * N + j] : 0, mag = fabs(ref);
                        for (int k = 0; k < K; k++) {
                            double t = (double)bf(ta ? A[k * lda + i] : A[i * lda + k]) * bf(tb ? Bm[j * ldb + k] : Bm[k * ldb + j]);
                            ref += t, mag += fabs(t);
                        }
                        double e = fabs(C[i * N + j] - ref) / (mag * K * 0x1p-24 + 1e-30);
                        worst = e > worst ? e : worst;
                    }
                CHECK(worst <= 1.0, "bf16 product ta=%d tb=%d acc=%d: error %.2f x the F32 summation bound", ta, tb, acc,
                      worst);
            }
    latent_tr_gemm_free(&g);
}

static void test_weight_panels(void) {
    enum { N = 40, IN = 24, OUT = 33 };
    float x[N * IN], w[OUT * IN], y0[N * OUT], y1[N * OUT], y2[N * OUT];
    tm_rng = 9;
    for (int i = 0; i < N * IN; i++) x[i] = tm_normal();
    for (int i = 0; i < OUT * IN; i++) w[i] = tm_normal();
    tr_gemm g;
    latent_tr_gemm_init(&g, 1);
    latent_tr_linear_forward(&g, y0, x, w, NULL, N, IN, OUT); /* outside a step */
    for (int i = 0; i < OUT * IN; i++) w[i] *= 2.0f;       /* exact in bf16: y doubles */
    latent_tr_linear_forward(&g, y1, x, w, NULL, N, IN, OUT);
    int doubled = 1;
    for (int i = 0; i < N * OUT; i++) doubled &= y1[i] == 2.0f * y0[i];
    CHECK(doubled, "outside a step, a changed weight is packed again");

    latent_tr_gemm_step_begin(&g);
    latent_tr_linear_forward(&g, y1, x, w, NULL, N, IN, OUT);
    for (int i = 0; i < OUT * IN; i++) w[i] *= 2.0f;
    latent_tr_linear_forward(&g, y2, x, w, NULL, N, IN, OUT);
    CHECK(memcmp(y1, y2, sizeof y1) == 0, "inside a step the weight's panels are packed once (reused)");
    latent_tr_gemm_step_end(&g);
    latent_tr_gemm_step_begin(&g);
    latent_tr_linear_forward(&g, y2, x, w, NULL, N, IN, OUT);
    latent_tr_gemm_step_end(&g);
    doubled = 1;
    for (int i = 0; i < N * OUT; i++) doubled &= y2[i] == 2.0f * y1[i];
    CHECK(doubled, "the next step packs the changed weight again");
    latent_tr_gemm_free(&g);
}

int main(void) {
    test_products();
    test_weight_panels();
    latent_set_threads(2);
    latent_config base = tm_config(64, 3, 4, 2, 96, 50);
    latent_model plain, t2, lrt;
    tm_model(&plain, base, 3, 0);
    tm_model(&t2, tm_t2mlr(base, 1, 1, 1), 3, 0);
    tm_model(&lrt, tm_lrt(base, 1, 0, 2, 0), 3, 0);
    test_mode("plain", &plain, LATENT_TRAIN_PLAIN);
    test_mode("t2mlr jacobi", &t2, LATENT_TRAIN_JACOBI);
    test_mode("lrt", &lrt, LATENT_TRAIN_LRT);
    /* the same on the AMX tile kernel (through its software model here; on
     * the tiles themselves where the CPU has AMX) */
    const char *tiles = latent_isa_detected() == LATENT_ISA_AMX ? "amx" : "amx-model";
    latent_isa_set_path(tiles);
    latent_set_threads(1);
    test_products();
    latent_set_threads(2);
    test_mode(tiles, &plain, LATENT_TRAIN_PLAIN);
    printf("products and the plain step also on %s\n", tiles);
    latent_weights_free(&plain.w), latent_weights_free(&t2.w), latent_weights_free(&lrt.w);
    return tu_finish("test_train_bf16");
}
