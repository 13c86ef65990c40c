/* oneDNN's bf16 matmul against the engine's bf16 kernel on one FFN-shaped
 * weight (1536 x 576, bf16 in, F32 out) at 1, 8, 32 and 512 rows, and whether
 * oneDNN gives a row the same bits whatever the number of rows (the engine's
 * kernel does: test_bf16). A measurement for docs/architecture.md, not a
 * dependency: `make bench-onednn` installs libdnnl-dev and runs it. It times
 * the kernel itself (kernels/kernels.h, private), so it lives with the tests,
 * not with the clients, which use only include/latent/. */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "latent/clock.h"
#include "latent/engine.h"

#define CK(x)                                                                   \
    do {                                                                        \
        dnnl_status_t st_ = (x);                                                \
        if (st_ != dnnl_success) {                                              \
            fprintf(stderr, "onednn_compare: %s failed (%d)\n", #x, (int)st_); \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

int main(void) {
    enum { K = 576, N = 1536, MAX_M = 512 };
    static const int rows[] = {1, 8, 32, 512};
    float *w = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * MAX_M * K), *y = malloc(sizeof(float) * MAX_M * N);
    float *row0 = malloc(sizeof(float) * N * 8), *ye = malloc(sizeof(float) * MAX_M * N);
    uint16_t *xb = malloc(sizeof(uint16_t) * MAX_M * K);
    if (!w || !x || !y || !row0 || !ye || !xb) return 1;
    srand(1);
    for (int i = 0; i < N * K; i++) w[i] = rand() / (float)RAND_MAX - 0.5f;
    for (int i = 0; i < MAX_M * K; i++) x[i] = rand() / (float)RAND_MAX - 0.5f;
    latent_bf16_round_rows(xb, x, MAX_M, K);
    latent_linear l;
    if (latent_linear_init_bf16(&l, w, N, K) != 0) return 1;
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
    printf("kernel path %s; 1536x576 bf16, F32 out, GFLOP/s, best of 30\n", latent_kernel_path());
    printf("%-6s %10s %12s %14s  %s\n", "rows", "oneDNN", "engine bf16", "engine/oneDNN", "rows 0-7 = their 1-row bits");
    for (int ri = 0; ri < 4; ri++) {
        int M = rows[ri];
        dnnl_dims_t sd = {M, K}, wd = {K, N}, dd = {M, N};
        dnnl_memory_desc_t smd, wany, dmd, wplain;
        CK(dnnl_memory_desc_init_by_tag(&smd, 2, sd, dnnl_bf16, dnnl_ab));
        CK(dnnl_memory_desc_init_by_tag(&wany, 2, wd, dnnl_bf16, dnnl_format_tag_any));
        CK(dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dnnl_f32, dnnl_ab));
        CK(dnnl_memory_desc_init_by_tag(&wplain, 2, wd, dnnl_f32, dnnl_ba));
        dnnl_matmul_desc_t md;
        CK(dnnl_matmul_desc_init(&md, &smd, &wany, NULL, &dmd));
        dnnl_primitive_desc_t pd, rpd;
        CK(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL));
        const char *impl = "?";
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        dnnl_memory_t wsrc, wdst, sm, dm;
        CK(dnnl_memory_create(&wsrc, &wplain, eng, w));
        CK(dnnl_memory_create(&wdst, wq, eng, DNNL_MEMORY_ALLOCATE));
        CK(dnnl_reorder_primitive_desc_create(&rpd, &wplain, eng, wq, eng, NULL));
        dnnl_primitive_t reorder, mm;
        CK(dnnl_primitive_create(&reorder, rpd));
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, wsrc}, {DNNL_ARG_TO, wdst}};
        CK(dnnl_primitive_execute(reorder, stream, 2, ra)); /* weights reordered once */
        CK(dnnl_memory_create(&sm, &smd, eng, xb));
        CK(dnnl_memory_create(&dm, &dmd, eng, y));
        CK(dnnl_primitive_create(&mm, pd));
        dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, wdst}, {DNNL_ARG_DST, dm}};
        double best[2] = {1e9, 1e9};
        for (int r = 0; r < 30; r++) {
            double t0 = latent_now_seconds();
            CK(dnnl_primitive_execute(mm, stream, 3, a));
            CK(dnnl_stream_wait(stream));
            double t = latent_now_seconds() - t0;
            if (t < best[0]) best[0] = t;
            t0 = latent_now_seconds();
            latent_linear_forward(ye, x, &l, M);
            t = latent_now_seconds() - t0;
            if (t < best[1]) best[1] = t;
        }
        /* rows 0..7 alone: oneDNN's 1-row primitive on each row's input */
        if (M == 1)
            for (int i = 0; i < 8; i++) {
                dnnl_memory_t si;
                CK(dnnl_memory_create(&si, &smd, eng, xb + (size_t)i * K));
                dnnl_exec_arg_t ai[3] = {{DNNL_ARG_SRC, si}, {DNNL_ARG_WEIGHTS, wdst}, {DNNL_ARG_DST, dm}};
                CK(dnnl_primitive_execute(mm, stream, 3, ai));
                CK(dnnl_stream_wait(stream));
                memcpy(row0 + (size_t)i * N, y, sizeof(float) * N);
                dnnl_memory_destroy(si);
            }
        int same = 1;
        for (int i = 0; i < 8 && i < M; i++) same &= memcmp(row0 + (size_t)i * N, y + (size_t)i * N, sizeof(float) * N) == 0;
        double flop = 2.0 * M * N * K;
        printf("%-6d %10.1f %12.1f %14.2f  %s (%s)\n", M, flop / best[0] / 1e9, flop / best[1] / 1e9, best[0] / best[1],
               M == 1 ? "-" : same ? "yes" : "NO", impl);
        dnnl_primitive_destroy(mm), dnnl_primitive_destroy(reorder);
        dnnl_primitive_desc_destroy(pd), dnnl_primitive_desc_destroy(rpd);
        dnnl_memory_destroy(wsrc), dnnl_memory_destroy(wdst), dnnl_memory_destroy(sm), dnnl_memory_destroy(dm);
    }
    latent_linear_free(&l);
    dnnl_stream_destroy(stream), dnnl_engine_destroy(eng);
    free(w), free(x), free(y), free(row0), free(ye), free(xb);
    return 0;
}
