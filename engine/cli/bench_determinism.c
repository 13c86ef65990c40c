/* latent bench --determinism: what batch invariance costs. Two engines on
 * the same weights and precision: the default (batch-invariant kernels) and
 * --deterministic false (the fastest kernels this machine has whose
 * rounding depends on the batch). Their prefill runs alternate, and their
 * decode sets take steps in turn, so machine noise lands on both alike. */
#include <stdio.h>
#include <string.h>

#include "bench_runs.h"
#include "cli.h"

static int prefill_pair(latent_engine *const eng[2], const latent_model *m, int n, int rounds, figure best[2],
                        latent_err *err) {
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < 2; i++) {
            int which = (r + i) % 2;
            figure f;
            if (bench_prefill(eng[which], m, n, 1, &f, err) != 0) return -1;
            bench_keep_best(&best[which], &f);
        }
    return 0;
}

static int decode_pair(latent_engine *const eng[2], const latent_model *m, int B, int steps, int rounds, figure best[2],
                       latent_err *err) {
    for (int r = 0; r < rounds; r++) {
        decode_set set[2];
        memset(set, 0, sizeof set);
        int rc = 0;
        for (int w = 0; w < 2 && rc == 0; w++) rc = decode_set_start(&set[w], eng[w], m, B, steps, err);
        for (int s = 0; s < steps && rc == 0; s++)
            for (int i = 0; i < 2 && rc == 0; i++) {
                int w = (s + i) % 2;
                rc = decode_set_step(&set[w], eng[w], m, B, s, err);
            }
        for (int w = 0; w < 2; w++) {
            figure f;
            if (rc == 0) decode_set_figure(&set[w], B, steps, &f), bench_keep_best(&best[w], &f);
            decode_set_free(&set[w], B);
        }
        if (rc != 0) return -1;
    }
    return 0;
}

int bench_determinism(const latent_model *m, const char *name, latent_precision precision, int prefill, int decode,
                      int rounds) {
    latent_err err;
    latent_engine *eng[2] = {NULL, NULL};
    for (int w = 0; w < 2; w++) {
        latent_engine_opts o = {.precision = precision, .nondeterministic = w};
        if (!(eng[w] = latent_engine_new_opts(m, &o, &err))) {
            latent_engine_free(eng[0]);
            return cli_fail("%s", err.msg);
        }
    }
    printf("\n== %s, %s (kernels: %s): the cost of determinism ==\n", name,
           latent_precision_name(latent_engine_precision(eng[0])), latent_kernel_path());
    printf("%-16s %14s %10s %14s %10s %8s\n", "measure", "invariant t/s", "p50 ms", "fast t/s", "p50 ms", "cost");
    const int batches[] = {1, 32};
    int rc = 0;
    for (int k = -1; k < 2 && rc == 0; k++) {
        figure best[2];
        memset(best, 0, sizeof best);
        char label[32];
        if (k < 0) {
            rc = prefill_pair(eng, m, prefill, rounds, best, &err);
            snprintf(label, sizeof label, "prefill %d", prefill);
        } else {
            rc = decode_pair(eng, m, batches[k], decode, rounds, best, &err);
            snprintf(label, sizeof label, "decode batch %d", batches[k]);
        }
        /* cost: the invariant kernels' time per token over the fast ones' */
        if (rc == 0)
            printf("%-16s %14.1f %10.2f %14.1f %10.2f %8.3f\n", label, best[0].tok_s, best[0].p50_ms, best[1].tok_s,
                   best[1].p50_ms, best[1].tok_s / best[0].tok_s);
        fflush(stdout);
    }
    for (int w = 0; w < 2; w++) latent_engine_free(eng[w]);
    return rc == 0 ? 0 : cli_fail("bench: %s", err.msg);
}
