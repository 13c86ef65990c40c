/* latent bench: the engine's own speed, with the recurrence's overhead
 * measured against the same backbone (same weights, path switched off) in
 * the same run, interleaved so machine noise hits both alike. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_runs.h"
#include "cli.h"
#include "latent/engine.h"
#include "latent/kv.h"
#include "latent/model.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"
#include "latent/threads.h"

static const char *help =
    "usage: latent bench [--model DIR] [--kinds plain,t2mlr,lrt] [--threads N] [--kernels]\n"
    "                    [--prefill N] [--decode N] [--batches 1,8,32,64] [--rounds R]\n"
    "                    [--precision f32,bf16] [--weights bf16,q8] [--determinism]\n"
    "\n"
    "Measures prefill tokens/s (one sequence of --prefill tokens, default 512,\n"
    "and four such sequences prefilling together),\n"
    "decode tokens/s at each batch size (--decode steps, default 64, after a\n"
    "32-token prompt per sequence), inter-token latency (median and p99 step\n"
    "time) and, for recurrent models, the same figures for the backbone with the\n"
    "recurrence switched off, printed as ratios. Without --model it builds the\n"
    "standard benchmark model in memory: random weights shaped like SmolLM2-135M\n"
    "(d 576, 30 blocks, 9 heads, 3 KV heads, FFN 1536, vocab 49152), as T2MLR\n"
    "(window 12..17) and LRT (source 18, injected 0..19, shared projection).\n"
    "Each figure is the best of --rounds (default 3). Prefill runs alternate\n"
    "recurrence on and off; decoding runs both side by side, their steps taken\n"
    "in turn, and the decode ratio is backbone over recurrent median step time.\n"
    "--kernels instead times the engine's matrix kernel against OpenBLAS on one\n"
    "1536x576 weight at 1, 8, 32 and 512 rows (with --threads 1: per core),\n"
    "then single rows through 40 such weights (140 MB, read from memory as in\n"
    "batch-1 decoding) in GB/s, each in F32 and in bf16.\n"
    "--precision runs every model in each listed precision (auto, f32, bf16;\n"
    "default auto: the checkpoint's, F32 for the standard model), one table\n"
    "each, with the bytes of weights the engine holds.\n"
    "--weights does the same for a list of weight formats (f32, bf16, q8: int8\n"
    "weights and activations, docs/model-format.md), after --precision's list\n"
    "(given first) or instead of the default.\n"
    "--determinism instead measures what batch invariance costs: prefill and\n"
    "decode at batch 1 and 32 with the default kernels against\n"
    "--deterministic false (the fastest kernels whose rounding depends on the\n"
    "batch), the two interleaved; cost is the ratio of their tokens/s.\n";

/* B sequences decoding `steps` greedy steps together after their prompts:
 * aggregate tokens/s and step times. With `both`, a second set runs the
 * backbone (recurrence off) and the two take steps in turn, alternating
 * which goes first, so a burst of load on this shared machine lands on both
 * rather than on one whole run: out[1] recurrent, out[0] backbone. */
static int bench_decode(latent_engine *eng, const latent_model *m, int B, int steps, int both, figure out[2],
                        latent_err *err) {
    decode_set set[2];
    memset(set, 0, sizeof set);
    int rc = 0, lo = both ? 0 : 1;
    for (int on = 1; on >= lo && rc == 0; on--) {
        latent_engine_set_recurrence(eng, on);
        rc = decode_set_start(&set[on], eng, m, B, steps, err);
    }
    for (int s = 0; s < steps && rc == 0; s++)
        for (int i = 0; i < 2 - lo && rc == 0; i++) {
            int on = both ? (s + i) % 2 : 1;
            latent_engine_set_recurrence(eng, on);
            rc = decode_set_step(&set[on], eng, m, B, s, err);
        }
    for (int on = 1; on >= lo; on--) {
        if (rc == 0) decode_set_figure(&set[on], B, steps, &out[on]);
        decode_set_free(&set[on], B);
    }
    latent_engine_set_recurrence(eng, 1);
    return rc;
}

/* One model, each figure the best of `rounds`. Prefill alternates whole runs
 * with recurrence on and off; decoding interleaves their steps (bench_decode). */
static int bench_model(const char *name, const latent_model *m, latent_precision precision, latent_weights_fmt weights,
                       int prefill, int decode, const int *batches, int n_batches, int rounds) {
    latent_err err;
    latent_engine_opts eo = {.precision = precision, .weights = weights};
    latent_engine *eng = latent_engine_new_opts(m, &eo, &err);
    if (!eng) return cli_fail("%s", err.msg);
    int recurrent = m->cfg.rec != LATENT_REC_NONE;
    printf("\n== %s, %s (kernels: %s; weights held: %.1f MB) ==\n", name, latent_engine_weights_name(eng),
           weights == LATENT_WEIGHTS_Q8 ? latent_q8_path() : latent_kernel_path(), latent_engine_weight_bytes(eng) / 1e6);
    printf("%-22s %12s %10s %10s", "measure", "tokens/s", "p50 ms", "p99 ms");
    if (recurrent) printf(" %12s %10s %8s", "backbone t/s", "bb p50 ms", "ratio");
    printf("\n");
    for (int k = -2; k < n_batches; k++) {
        figure best[2];
        memset(best, 0, sizeof best);
        /* decoding: the ratio of median step times, from the round with the
         * best recurrent throughput (both halves of a round interleave) */
        double ratio = 0, best_rec = 0;
        for (int r = 0; r < rounds; r++) {
            figure f[2] = {{0, 0, 0}, {0, 0, 0}};
            int rc = 0;
            if (k < 0) {
                for (int on = 1; on >= (recurrent ? 0 : 1) && rc == 0; on--) {
                    latent_engine_set_recurrence(eng, on);
                    rc = bench_prefill(eng, m, prefill, k == -2 ? 1 : 4, &f[on], &err);
                }
                latent_engine_set_recurrence(eng, 1);
            } else {
                rc = bench_decode(eng, m, batches[k], decode, recurrent, f, &err);
                if (rc == 0 && recurrent && f[1].tok_s > best_rec) best_rec = f[1].tok_s, ratio = f[0].p50_ms / f[1].p50_ms;
            }
            if (rc != 0) {
                latent_engine_free(eng);
                return cli_fail("bench: %s", err.msg);
            }
            bench_keep_best(&best[1], &f[1]);
            if (recurrent) bench_keep_best(&best[0], &f[0]);
        }
        if (k < 0 && recurrent) ratio = best[1].tok_s / best[0].tok_s;
        char label[64];
        if (k == -2) snprintf(label, sizeof label, "prefill %d", prefill);
        else if (k == -1) snprintf(label, sizeof label, "prefill 4 x %d", prefill);
        else snprintf(label, sizeof label, "decode batch %d", batches[k]);
        printf("%-22s %12.1f %10.2f %10.2f", label, best[1].tok_s, best[1].p50_ms, best[1].p99_ms);
        if (recurrent)
            printf(" %12.1f %10.2f %8.3f", best[0].tok_s, best[0].p50_ms, ratio);
        printf("\n");
        fflush(stdout);
    }
    if (recurrent) {
        const latent_engine_stats *st = latent_engine_get_stats(eng);
        printf("recurrence's own share of step time (all runs): %.2f%%\n", 100.0 * st->recur_seconds / st->step_seconds);
    }
    latent_engine_free(eng);
    return 0;
}


int bench_kernels(void);
int bench_determinism(const latent_model *m, const char *name, latent_precision precision, int prefill, int decode,
                       int rounds);

static int parse_batches(const char *s, int *out, int cap) {
    int32_t *ids;
    int n = cli_parse_ids(s, &ids);
    if (n < 1 || n > cap) return -1;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 1 || ids[i] > 4096) { free(ids); return -1; }
        out[i] = ids[i];
    }
    free(ids);
    return n;
}

/* --kinds: a comma-separated list of the standard models cmd_bench builds. */
static const char *const kind_names[] = {"plain", "t2mlr", "lrt"};

/* 1 when `name` is one of the list's items (whole items, not substrings). */
static int kinds_has(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

/* 0 when every item of the list is a kind; else -1, the first other item in bad. */
static int kinds_check(const char *list, char *bad, size_t cap) {
    for (const char *p = list;; p++) {
        size_t n = strcspn(p, ",");
        size_t k = 0;
        while (k < 3 && (strlen(kind_names[k]) != n || strncmp(p, kind_names[k], n))) k++;
        if (k == 3) {
            snprintf(bad, cap, "%.*s", (int)n, p);
            return -1;
        }
        p += n;
        if (!*p) return 0;
    }
}

typedef struct {
    const char *dir, *kinds;
    int kernels, determinism;
    long threads, prefill, decode, rounds;
    latent_precision precs[6];  /* the tables to run: precision and weights format of each */
    latent_weights_fmt wts[6];
    int n_precs;
    int batches[16], n_batches;
} bench_args;

/* --precision and --weights: their lists into a->precs and a->wts. 0, -1 when
 * argv[*i] is neither, or 2 (cli_fail's code) on a bad value. */
static int parse_formats(int argc, char **argv, int *i, bench_args *a) {
    const char *v;
    char buf[64];
    if (cli_opt(argc, argv, i, "--precision", &v)) {
        snprintf(buf, sizeof buf, "%s", v);
        a->n_precs = 0;
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
            if (a->n_precs == 3 || latent_precision_parse(tok, &a->precs[a->n_precs++]) != 0)
                return cli_fail("bench: --precision must list auto, f32 or bf16 (got '%s')", v);
        if (a->n_precs == 0) return cli_fail("bench: --precision needs a value");
        return 0;
    }
    if (cli_opt(argc, argv, i, "--weights", &v)) { /* appended to --precision's list, or replaces the default */
        snprintf(buf, sizeof buf, "%s", v);
        if (a->n_precs == 1 && a->precs[0] == LATENT_PRECISION_AUTO && a->wts[0] == LATENT_WEIGHTS_AUTO) a->n_precs = 0;
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","), a->n_precs++)
            if (a->n_precs == 6 || (a->precs[a->n_precs] = LATENT_PRECISION_AUTO,
                                    latent_weights_parse(tok, &a->wts[a->n_precs], &a->precs[a->n_precs]) != 0))
                return cli_fail("bench: --weights must list f32, bf16 or q8 (got '%s')", v);
        return 0;
    }
    return -1;
}

/* 0 to run, 1 when --help printed, 2 (cli_fail's code) on bad usage. */
static int parse_args(int argc, char **argv, bench_args *a) {
    const char *v;
    *a = (bench_args){.kinds = "plain,t2mlr,lrt", .prefill = 512, .decode = 64, .rounds = 3,
                      .precs = {LATENT_PRECISION_AUTO}, .wts = {LATENT_WEIGHTS_AUTO}, .n_precs = 1,
                      .batches = {1, 8, 32, 64}, .n_batches = 4};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--kernels")) { a->kernels = 1; continue; }
        if (!strcmp(argv[i], "--determinism")) { a->determinism = 1; continue; }
        if (cli_opt(argc, argv, &i, "--model", &a->dir) || cli_opt(argc, argv, &i, "--kinds", &a->kinds)) continue;
        int frc = parse_formats(argc, argv, &i, a);
        if (frc >= 0) {
            if (frc) return frc;
            continue;
        }
        if (cli_opt(argc, argv, &i, "--threads", &v)) {
            if (cli_parse_long(v, 1, 256, &a->threads) != 0) return cli_fail("bench: --threads must be 1..256");
            continue;
        }
        if (cli_opt(argc, argv, &i, "--prefill", &v)) {
            if (cli_parse_long(v, 1, 65536, &a->prefill) != 0) return cli_fail("bench: --prefill must be 1..65536");
            continue;
        }
        if (cli_opt(argc, argv, &i, "--decode", &v)) {
            if (cli_parse_long(v, 1, 65536, &a->decode) != 0) return cli_fail("bench: --decode must be 1..65536");
            continue;
        }
        if (cli_opt(argc, argv, &i, "--rounds", &v)) {
            if (cli_parse_long(v, 1, 100, &a->rounds) != 0) return cli_fail("bench: --rounds must be 1..100");
            continue;
        }
        if (cli_opt(argc, argv, &i, "--batches", &v)) {
            if ((a->n_batches = parse_batches(v, a->batches, 16)) < 0)
                return cli_fail("bench: --batches must be a list of 1..4096");
            continue;
        }
        fputs(help, stderr);
        return cli_fail("bench: unknown option '%s'", argv[i]);
    }
    char bad[64];
    if (kinds_check(a->kinds, bad, sizeof bad) != 0)
        return cli_fail("bench: --kinds: unknown model kind '%s' (the kinds are plain, t2mlr and lrt)", bad);
    return 0;
}

/* One model's tables: one per precision and weights format asked for. */
static int bench_formats(const bench_args *a, const latent_model *m, const char *name) {
    int rc = 0;
    for (int p = 0; p < a->n_precs && rc == 0; p++)
        rc = a->determinism
                 ? bench_determinism(m, name, a->precs[p], (int)a->prefill, (int)a->decode, (int)a->rounds)
                 : bench_model(name, m, a->precs[p], a->wts[p], (int)a->prefill, (int)a->decode, a->batches,
                               a->n_batches, (int)a->rounds);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc == 1 ? 0 : prc;
    if (a.threads) latent_set_threads((int)a.threads);
    printf("latent bench: %d threads, OPENBLAS_CORETYPE=%s\n", latent_get_threads(),
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)");
    if (a.kernels) return bench_kernels();
    latent_err err;
    if (a.dir) {
        latent_model m = {0};
        if (latent_model_load(&m, a.dir, &err) != 0) {
            cli_fail("%s", err.msg);
            return 1;
        }
        int rc = bench_formats(&a, &m, a.dir);
        latent_model_free(&m);
        return rc;
    }
    static const struct { const char *name; latent_rec_type rec; } all[] = {
        {"plain", LATENT_REC_NONE}, {"t2mlr", LATENT_REC_T2MLR}, {"lrt", LATENT_REC_LRT}};
    for (int k = 0; k < 3; k++) {
        if (!kinds_has(a.kinds, all[k].name)) continue;
        latent_model m;
        if (bench_make_standard(&m, all[k].rec, &err) != 0) return cli_fail("%s", err.msg);
        char name[96];
        snprintf(name, sizeof name, "standard 135M-shaped model, %s, F32 weights", all[k].name);
        int rc = bench_formats(&a, &m, name);
        latent_weights_free(&m.w);
        if (rc) return rc;
    }
    return 0;
}
