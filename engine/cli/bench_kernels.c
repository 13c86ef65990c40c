/* latent bench --kernels: the engine's matrix kernels against OpenBLAS. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_runs.h"
#include "cli.h"
#include "kernels/kernels.h"
#include "latent/clock.h"

/* Single rows from memory rather than cache, as batch-1 decoding reads them:
 * one row through STREAM_MATS distinct weights of the FFN shape (about 140 MB
 * each way, far above the caches) per pass; GB/s of weights read, best of 10. */
#define STREAM_MATS 40
static int bench_kernels_streaming(void) {
    const int out = 1536, in = 576;
    size_t per = (size_t)out * in;
    float *w = malloc(per * STREAM_MATS * sizeof(float)), *x = malloc(in * sizeof(float)), *y = malloc(out * sizeof(float));
    latent_linear *ls = calloc(STREAM_MATS, sizeof *ls);
    int ok = w && x && y && ls;
    for (size_t i = 0; ok && i < per * STREAM_MATS; i++) w[i] = bench_rand_pm1();
    for (int i = 0; ok && i < in; i++) x[i] = bench_rand_pm1();
    int made = 0;
    while (ok && made < STREAM_MATS && latent_linear_init(&ls[made], w + per * made, out, in) == 0) made++;
    if (!ok || made < STREAM_MATS) {
        for (int i = 0; i < made; i++) latent_linear_free(&ls[i]);
        free(w), free(x), free(y), free(ls);
        return cli_fail("bench: out of memory");
    }
    latent_linear *lb = calloc(STREAM_MATS, sizeof *lb);
    int made_b = 0;
    while (lb && made_b < STREAM_MATS && latent_linear_init_bf16(&lb[made_b], w + per * made_b, out, in) == 0) made_b++;
    double best[3] = {1e9, 1e9, 1e9};
    for (int r = 0; r < 10; r++)
        for (int which = 0; which < (made_b == STREAM_MATS ? 3 : 2); which++) {
            double t0 = latent_now_seconds();
            for (int i = 0; i < STREAM_MATS; i++) {
                if (which == 0) latent_linear_forward(y, x, &ls[i], 1);
                else if (which == 1) latent_matmul_forward(y, x, w + per * i, 1, in, out);
                else latent_linear_forward(y, x, &lb[i], 1);
            }
            double t = latent_now_seconds() - t0;
            if (t < best[which]) best[which] = t;
        }
    double bytes = (double)per * STREAM_MATS * sizeof(float);
    printf("%-22s %14.1f %14.1f %14.1f   (GB/s of weights read: engine F32, OpenBLAS, engine bf16)\n",
           "rows 1, 40 weights", bytes / best[0] / 1e9, bytes / best[1] / 1e9, bytes / 2 / best[2] / 1e9);
    for (int i = 0; i < made_b; i++) latent_linear_free(&lb[i]);
    free(lb);
    for (int i = 0; i < STREAM_MATS; i++) latent_linear_free(&ls[i]);
    free(w), free(x), free(y), free(ls);
    return 0;
}

/* The engine's matrix kernel against OpenBLAS on one FFN-shaped weight
 * (1536 x 576), both split over the same threads: GFLOP/s, best of 20. */
int bench_kernels(void) {
    const int out = 1536, in = 576, rows[] = {1, 8, 32, 512};
    float *w = malloc((size_t)out * in * sizeof(float)), *x = malloc((size_t)512 * in * sizeof(float));
    float *y = malloc((size_t)512 * out * sizeof(float));
    latent_linear l, lb = {0};
    if (w && x)
        for (size_t i = 0; i < (size_t)out * in; i++) w[i] = bench_rand_pm1();
    if (w && x)
        for (size_t i = 0; i < (size_t)512 * in; i++) x[i] = bench_rand_pm1();
    if (!w || !x || !y || latent_linear_init(&l, w, out, in) != 0 || latent_linear_init_bf16(&lb, w, out, in) != 0) {
        free(w), free(x), free(y);
        return cli_fail("bench: out of memory");
    }
    printf("kernel path: %s (detected %s)\n", latent_kernel_path(), latent_isa_name(latent_isa_detected()));
    printf("%-22s %14s %14s %14s\n", "matrix 1536x576", "engine GFLOP/s", "OpenBLAS GFLOP/s", "bf16 GFLOP/s");
    for (int k = 0; k < 4; k++) {
        double best[3] = {1e9, 1e9, 1e9};
        for (int r = 0; r < 20; r++)
            for (int which = 0; which < 3; which++) {
                double t0 = latent_now_seconds();
                if (which == 0) latent_linear_forward(y, x, &l, rows[k]);
                else if (which == 1) latent_matmul_forward(y, x, w, rows[k], in, out);
                else latent_linear_forward(y, x, &lb, rows[k]);
                double t = latent_now_seconds() - t0;
                if (t < best[which]) best[which] = t;
            }
        double flop = 2.0 * rows[k] * out * in;
        char label[32];
        snprintf(label, sizeof label, "rows %d", rows[k]);
        printf("%-22s %14.1f %14.1f %14.1f\n", label, flop / best[0] / 1e9, flop / best[1] / 1e9, flop / best[2] / 1e9);
    }
    if (!l.packed) printf("(no AVX-512 here: the engine's F32 products use OpenBLAS)\n");
    latent_linear_free(&l);
    latent_linear_free(&lb);
    free(w), free(x), free(y);
    return bench_kernels_streaming();
}
