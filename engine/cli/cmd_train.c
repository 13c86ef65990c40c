/* latent train: offline training of a model directory on token files, and
 * `latent train --bench`, the training step's speed on the standard small
 * model. The math is in engine/train_model.c; this file is the loop:
 * batches, optimizer, logging, evaluation, checkpoints and resume. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "latent/model.h"
#include "latent/model_init.h"
#include "latent/threads.h"
#include "latent/train.h"

static const char *help =
    "usage: latent train --model DIR --data FILE.bin --out DIR [options]\n"
    "       latent train --out DIR --resume [options]\n"
    "       latent train --bench [--steps N] [--threads N] [--kinds plain,t2mlr4,t2mlr8,lrt2]\n"
    "\n"
    "Trains the model in DIR on the token file FILE.bin (uint32 ids; FILE.mask,\n"
    "FILE.labels, FILE.flow beside it are used when present, see docs/training.md)\n"
    "and writes checkpoints to OUT/step-N (complete model directories with the\n"
    "optimizer state), OUT/latest pointing at the newest, and one JSON line per\n"
    "step to OUT/train.jsonl.\n"
    "\n"
    "  --steps N            total steps of the run (1000)\n"
    "  --batch B --seq T    sequences per step and positions per sequence (8, 256)\n"
    "  --mode plain|jacobi|lrt   training mode (default: jacobi for a T2MLR model,\n"
    "                       lrt for an LRT model, plain otherwise; plain on a\n"
    "                       recurrent model trains the backbone, recurrent path off)\n"
    "  --jacobi-iters D     T2MLR Jacobi iterations (4)\n"
    "  --jacobi-grad-iters K  iterations the gradient flows through (2)\n"
    "  --lrt-subsets S      LRT interleaved subsets (2)\n"
    "  --optimizer adamw|sgd (adamw)  --lr X (1e-3)  --weight-decay W (0)\n"
    "  --beta1 X (0.9)  --beta2 X (0.999)  --eps X (1e-8)\n"
    "  --grad-clip C        clip the global gradient norm to C; 0 = off (1.0)\n"
    "  --warmup N           linear warmup steps (0)\n"
    "  --lr-schedule cosine|constant   after warmup (cosine, to 0 at --steps)\n"
    "  --seed N             shuffling order (1)\n"
    "  --no-shuffle         read windows in the order of models.md §5\n"
    "  --eval-data FILE.bin --eval-every N (100) --eval-batches N (8)\n"
    "                       mean loss of the first N unshuffled batches of FILE\n"
    "  --save-every N       checkpoint every N steps (0: only at the end)\n"
    "  --keep N             checkpoints kept (2)\n"
    "  --resume             continue from OUT/latest (bit-exact), or start fresh\n"
    "                       when OUT has no checkpoint; --model is then optional\n"
    "  --threads N          worker threads (all cores)\n"
    "  --bench              tokens/s of a training step on the standard small\n"
    "                       model (6 blocks, d 256, 4 heads, FFN 768, vocab 4096,\n"
    "                       B 8, T 256): plain, T2MLR D=4/B=2 and D=8/B=4, LRT S=2\n";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

typedef struct {
    const char *model, *data, *out, *eval_data, *kinds;
    long steps, batch, seq, D, K, S, eval_every, eval_batches, save_every, keep, threads;
    long long seed;
    int mode; /* -1: from the model */
    int shuffle, resume, bench;
    latent_optim_opts o;
} train_args;

static int parse_args(int argc, char **argv, train_args *a) {
    memset(a, 0, sizeof *a);
    a->steps = 1000, a->batch = 8, a->seq = 256, a->D = 4, a->K = 2, a->S = 2;
    a->eval_every = 100, a->eval_batches = 8, a->keep = 2, a->seed = 1, a->mode = -1, a->shuffle = 1;
    a->o = (latent_optim_opts){.adamw = 1, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                               .grad_clip = 1.0f, .cosine = 1};
    int have_steps = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        double x;
        long n;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            exit(0);
        }
        if (!strcmp(argv[i], "--no-shuffle")) { a->shuffle = 0; continue; }
        if (!strcmp(argv[i], "--resume")) { a->resume = 1; continue; }
        if (!strcmp(argv[i], "--bench")) { a->bench = 1; continue; }
        if (cli_opt(argc, argv, &i, "--model", &a->model) || cli_opt(argc, argv, &i, "--data", &a->data) ||
            cli_opt(argc, argv, &i, "--out", &a->out) || cli_opt(argc, argv, &i, "--eval-data", &a->eval_data) ||
            cli_opt(argc, argv, &i, "--kinds", &a->kinds))
            continue;
        struct { const char *name; long *dst; long lo, hi; } ints[] = {
            {"--steps", &a->steps, 1, 1L << 40}, {"--batch", &a->batch, 1, 1 << 16}, {"--seq", &a->seq, 2, 1 << 20},
            {"--jacobi-iters", &a->D, 1, 4096}, {"--jacobi-grad-iters", &a->K, 0, 4096},
            {"--lrt-subsets", &a->S, 1, 1 << 20}, {"--eval-every", &a->eval_every, 0, 1L << 40},
            {"--eval-batches", &a->eval_batches, 1, 1 << 20}, {"--save-every", &a->save_every, 0, 1L << 40},
            {"--keep", &a->keep, 1, 1 << 20}, {"--threads", &a->threads, 1, 64}};
        int hit = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
            if (cli_opt(argc, argv, &i, ints[k].name, &v)) {
                if (cli_parse_long(v, ints[k].lo, ints[k].hi, &n) != 0)
                    return cli_fail("train: %s must be an integer from %ld to %ld (got '%s')", ints[k].name, ints[k].lo,
                                    ints[k].hi, v);
                *ints[k].dst = n;
                have_steps |= ints[k].dst == &a->steps;
                hit = 1;
                break;
            }
        if (hit) continue;
        struct { const char *name; float *dst; double lo, hi; } reals[] = {
            {"--lr", &a->o.lr, 0, 100}, {"--weight-decay", &a->o.weight_decay, 0, 100},
            {"--beta1", &a->o.beta1, 0, 0.999999}, {"--beta2", &a->o.beta2, 0, 0.99999999},
            {"--eps", &a->o.eps, 0, 1}, {"--grad-clip", &a->o.grad_clip, 0, 1e9}};
        for (size_t k = 0; k < sizeof reals / sizeof reals[0]; k++)
            if (cli_opt(argc, argv, &i, reals[k].name, &v)) {
                if (cli_parse_double(v, reals[k].lo, reals[k].hi, &x) != 0)
                    return cli_fail("train: %s must be a number from %g to %g (got '%s')", reals[k].name, reals[k].lo,
                                    reals[k].hi, v);
                *reals[k].dst = (float)x;
                hit = 1;
                break;
            }
        if (hit) continue;
        if (cli_opt(argc, argv, &i, "--seed", &v)) {
            if (cli_parse_long(v, 0, 0x7fffffffffffffffL, &n) != 0)
                return cli_fail("train: --seed must be a non-negative integer (got '%s')", v);
            a->seed = n;
            continue;
        }
        if (cli_opt(argc, argv, &i, "--warmup", &v)) {
            if (cli_parse_long(v, 0, 1L << 40, &n) != 0) return cli_fail("train: --warmup must be >= 0 (got '%s')", v);
            a->o.warmup = (int)n;
            continue;
        }
        if (cli_opt(argc, argv, &i, "--optimizer", &v)) {
            if (!strcmp(v, "adamw")) a->o.adamw = 1;
            else if (!strcmp(v, "sgd")) a->o.adamw = 0;
            else return cli_fail("train: --optimizer must be adamw or sgd (got '%s')", v);
            continue;
        }
        if (cli_opt(argc, argv, &i, "--lr-schedule", &v)) {
            if (!strcmp(v, "cosine")) a->o.cosine = 1;
            else if (!strcmp(v, "constant")) a->o.cosine = 0;
            else return cli_fail("train: --lr-schedule must be cosine or constant (got '%s')", v);
            continue;
        }
        if (cli_opt(argc, argv, &i, "--mode", &v)) {
            if (!strcmp(v, "plain")) a->mode = LATENT_TRAIN_PLAIN;
            else if (!strcmp(v, "jacobi")) a->mode = LATENT_TRAIN_JACOBI;
            else if (!strcmp(v, "lrt")) a->mode = LATENT_TRAIN_LRT;
            else return cli_fail("train: --mode must be plain, jacobi or lrt (got '%s')", v);
            continue;
        }
        return cli_fail("train: unknown option '%s' (see latent train --help)", argv[i]);
    }
    if (a->bench && !have_steps) a->steps = 5;
    a->o.steps = a->steps;
    return 0;
}

static const char *mode_name(int mode) {
    return mode == LATENT_TRAIN_JACOBI ? "jacobi" : mode == LATENT_TRAIN_LRT ? "lrt" : "plain";
}

static void fmt_time(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e8) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* ---- the benchmark ------------------------------------------------------ */

typedef struct { const char *name, *key; int mode, D, K, S; } bench_kind;

static int bench(const train_args *a) {
    latent_config c;
    memset(&c, 0, sizeof c);
    c.d = 256, c.ffn = 768, c.n_layers = 6, c.n_heads = 4, c.n_kv_heads = 4, c.head_dim = 64, c.vocab = 4096;
    c.max_pos = 1024, c.rms_eps = 1e-5f, c.rope_theta = 10000.0f, c.tie_embeddings = true;
    c.bos_id = 1, c.eos_id = 2, c.n_eos = 1, c.eos_ids[0] = 2;
    c.t2mlr = (latent_t2mlr_config){2, 3, true, 5.0f, 1e-6f, true};
    c.lrt = (latent_lrt_config){3, 0, 5, true, true, false};
    const int B = 8, T = 256, N = B * T;
    bench_kind kinds[] = {{"plain", "plain", LATENT_TRAIN_PLAIN, 1, 0, 1},
                          {"t2mlr jacobi D=4 B=2", "t2mlr4", LATENT_TRAIN_JACOBI, 4, 2, 1},
                          {"t2mlr jacobi D=8 B=4", "t2mlr8", LATENT_TRAIN_JACOBI, 8, 4, 1},
                          {"lrt S=2", "lrt2", LATENT_TRAIN_LRT, 1, 0, 2}};
    int nk = sizeof kinds / sizeof kinds[0];
    printf("latent train --bench: 6 blocks, d 256, 4 heads (head_dim 64), FFN 768, vocab 4096, tied;\n"
           "B %d, T %d (%d tokens/step), AdamW, %d threads, OpenBLAS %s kernels,\n"
           "best of %ld timed steps after one warm-up.\n"
           "T2MLR window blocks 2..3; LRT source block 3, injected blocks 0..5 (residual + KV, own k/v).\n\n",
           B, T, N, latent_get_threads(), openblas_get_corename(), a->steps);
    printf("%-22s %12s %10s %10s %9s\n", "mode", "activations", "step (s)", "tokens/s", "vs plain");
    int32_t *tok = malloc(N * sizeof(int32_t)), *tgt = malloc(N * sizeof(int32_t));
    uint64_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        tok[i] = (int32_t)((r >> 33) % c.vocab);
        tgt[i] = (int32_t)((r >> 13) % c.vocab);
    }
    latent_train_batch batch = {.tokens = tok, .targets = tgt};
    double plain_step = 0;
    int rc = 0;
    for (int k = 0; k < nk && rc == 0; k++) {
        if (a->kinds) { /* a comma-separated subset */
            const char *p = strstr(a->kinds, kinds[k].key);
            size_t len = strlen(kinds[k].key);
            if (!p || (p != a->kinds && p[-1] != ',') || (p[len] && p[len] != ',')) continue;
        }
        latent_err err;
        latent_model m;
        memset(&m, 0, sizeof m);
        m.cfg = c;
        m.cfg.rec = kinds[k].mode == LATENT_TRAIN_JACOBI ? LATENT_REC_T2MLR
                    : kinds[k].mode == LATENT_TRAIN_LRT  ? LATENT_REC_LRT
                                                         : LATENT_REC_NONE;
        latent_init_opts io;
        latent_init_defaults(&io);
        io.seed = 1;
        if (latent_weights_alloc(&m.w, &m.cfg, &err) != 0) return cli_fail("train --bench: %s", err.msg);
        latent_weights_init(&m.w, &m.cfg, &io);
        latent_train_shape sh = {kinds[k].mode, B, T, kinds[k].D, kinds[k].K, kinds[k].S};
        latent_trainer *t = latent_trainer_new(&m, &sh, &err);
        latent_weights g;
        latent_optim opt;
        latent_optim_opts oo = {.adamw = 1, .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                .grad_clip = 1.0f, .steps = a->steps + 1};
        if (!t || latent_weights_alloc(&g, &m.cfg, &err) != 0 || latent_optim_init(&opt, &m.cfg, &oo, &err) != 0) {
            rc = cli_fail("train --bench: %s", err.msg);
            latent_trainer_free(t);
            latent_weights_free(&m.w);
            break;
        }
        double *times = malloc((a->steps + 1) * sizeof(double));
        for (long s = 0; s <= a->steps && rc == 0; s++) {
            double t0 = now_s(), loss;
            memset(g.slab, 0, g.slab_floats * sizeof(float));
            if (latent_trainer_step(t, &batch, &g, &loss, &err) != 0) {
                rc = cli_fail("train --bench: %s", err.msg);
                break;
            }
            latent_optim_step(&opt, &m.w, &g, latent_grad_norm(&g, opt.frozen));
            times[s] = now_s() - t0;
        }
        if (rc == 0) {
            /* the best of the timed steps (the first one warms caches and
             * pages): on a shared machine the minimum is the step's own cost */
            double med = times[1];
            for (long i = 2; i <= a->steps; i++) med = times[i] < med ? times[i] : med;
            if (k == 0) plain_step = med;
            printf("%-22s %8.1f MiB %10.3f %10.0f", kinds[k].name, latent_trainer_activation_bytes(t) / 1048576.0, med,
                   N / med);
            if (plain_step > 0) printf(" %8.2fx", med / plain_step);
            printf("\n");
            fflush(stdout);
        }
        free(times);
        latent_optim_free(&opt);
        latent_weights_free(&g);
        latent_trainer_free(t);
        latent_weights_free(&m.w);
    }
    free(tok), free(tgt);
    if (rc == 0) printf("\n(vs plain: step time relative to the plain step; PyTorch 1.13 CPU reference: ~1560 tokens/s)\n");
    return rc;
}

/* ---- the training loop -------------------------------------------------- */

/* Keeps the lines of OUT/train.jsonl up to `step` (a resumed run re-logs the
 * steps after its checkpoint). */
static void trim_log(const char *path, int64_t step) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = strlen(path) + 8;
    char *tmp = malloc(n), *line = NULL;
    size_t cap = 0;
    snprintf(tmp, n, "%s.tmp", path);
    FILE *o = fopen(tmp, "w");
    while (o && getline(&line, &cap, f) > 0) {
        long long s;
        if (sscanf(line, "{\"step\": %lld", &s) == 1 && s > step) continue;
        fputs(line, o);
    }
    fclose(f);
    if (o && fflush(o) == 0 && fsync(fileno(o)) == 0 && fclose(o) == 0) rename(tmp, path);
    else if (o) fclose(o), unlink(tmp);
    free(line);
    free(tmp);
}

static double eval_loss(latent_trainer *t, const latent_tokens *ev, int B, int T, long n_batches,
                        latent_train_batch *b, latent_err *err) {
    double sum = 0;
    for (long s = 0; s < n_batches; s++) {
        double l;
        latent_tokens_batch(ev, s, B, T, 0, 0, b);
        if (latent_trainer_step(t, b, NULL, &l, err) != 0) return NAN;
        sum += l;
    }
    return sum / n_batches;
}

/* One line of train.jsonl for the step just taken. */
static void log_step(FILE *log, const latent_train_state *st, double loss, double ev_loss, double lr, double gn, double tps,
                     int mode, const latent_gate_stats *gs) {
    fprintf(log, "{\"step\": %lld, \"loss\": %.9g, \"eval_loss\": ", (long long)st->step, loss);
    if (isnan(ev_loss)) fprintf(log, "null");
    else fprintf(log, "%.9g", ev_loss);
    fprintf(log, ", \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.1f", lr, gn, tps);
    if (mode == LATENT_TRAIN_JACOBI)
        fprintf(log, ", \"tanh_gamma_rec\": %.6g, \"tanh_gamma_cur\": %.6g, \"gate_rec\": %.6g, \"gate_cur\": %.6g",
                gs->tanh_gamma_rec, gs->tanh_gamma_cur, gs->gate_rec, gs->gate_cur);
    if (mode == LATENT_TRAIN_LRT)
        fprintf(log, ", \"alpha\": %.6g, \"gamma\": %.6g, \"gate_loc\": %.6g, \"gate_fb\": %.6g", gs->alpha, gs->gamma,
                gs->gate_loc, gs->gate_fb);
    fprintf(log, "}\n");
    fflush(log);
}

/* The progress line: a bar on a terminal, one line per step otherwise. */
static void print_progress(int tty, const latent_train_state *st, long steps, double loss, double lr, double gn, double tps,
                           double avg, double ev_loss) {
    char eta[32];
    fmt_time(eta, sizeof eta, avg * (steps - st->step));
    if (tty) {
        int width = 24, filled = (int)(width * st->step / steps);
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
        bar[width] = 0;
        printf("\r\033[K[%s] step %lld/%ld loss %.4f lr %.2e %.0f tok/s ETA %s", bar, (long long)st->step, steps, loss, lr,
               tps, eta);
        if (!isnan(ev_loss)) printf("\n  eval loss %.4f\n", ev_loss);
    } else {
        printf("step %lld/%ld loss %.6f lr %.3e grad_norm %.4f tok/s %.0f eta %s", (long long)st->step, steps, loss, lr, gn,
               tps, eta);
        if (!isnan(ev_loss)) printf(" eval_loss %.6f", ev_loss);
        printf("\n");
    }
    fflush(stdout);
}

/* Where the run starts: OUT/latest under --resume when it exists (ckpt set,
 * returns 1), else --model (0); -1 (usage error printed) when OUT already
 * holds checkpoints a fresh run would overwrite, or no model is given. */
static int find_start(const train_args *a, char *ckpt, size_t cap) {
    char latest[4096];
    snprintf(latest, sizeof latest, "%s/latest", a->out);
    struct stat st;
    if (a->resume) {
        if (stat(latest, &st) == 0 && S_ISDIR(st.st_mode)) {
            snprintf(ckpt, cap, "%s", latest);
            return 1;
        }
        fprintf(stderr, "latent train: %s has no checkpoint yet; starting from --model\n", a->out);
    }
    if (!a->model) return cli_fail("train: --model DIR is required"), -1;
    if (lstat(latest, &st) == 0)
        return cli_fail("train: %s already holds checkpoints (%s); pass --resume to continue them or choose another --out",
                        a->out, latest), -1;
    return 0;
}

/* What the run is, printed before the first step. */
static void print_banner(const train_args *a, const latent_model *m, const char *model_dir, int mode, latent_trainer *t,
                         const latent_weights *g, const latent_tokens *data) {
    int64_t n_params = 0;
    for (int i = 0; i < m->w.n_params; i++) n_params += m->w.params[i].numel;
    printf("latent train: %s, %.2fM parameters, mode %s", model_dir, n_params / 1e6, mode_name(mode));
    if (mode == LATENT_TRAIN_JACOBI) printf(" (D=%ld, B=%ld)", a->D, a->K);
    if (mode == LATENT_TRAIN_LRT) printf(" (S=%ld)", a->S);
    printf(", batch %ld x seq %ld, %d threads, OpenBLAS %s\n", a->batch, a->seq, latent_get_threads(),
           openblas_get_corename());
    printf("latent train: activations %.1f MiB, gradients %.1f MiB, optimizer %.1f MiB; data %s (%lld tokens%s%s%s)\n",
           latent_trainer_activation_bytes(t) / 1048576.0, g->slab_floats * 4.0 / 1048576.0,
           a->o.adamw ? 2 * g->slab_floats * 4.0 / 1048576.0 : 0.0, a->data, (long long)data->n,
           data->mask ? ", mask" : "", data->labels ? ", labels" : "", data->flow ? ", flow" : "");
}

/* The optimizer state and step of a resumed run, or OUT created for a fresh
 * one; then OUT/train.jsonl opened (a resumed run's cut back to its step).
 * 0, or the exit code after printing why. */
static int prepare_out(const train_args *a, int resuming, const char *ckpt, latent_optim *opt, latent_train_state *st,
                       FILE **log) {
    latent_err err;
    if (resuming) {
        if (latent_ckpt_load_state(ckpt, opt, st, &err) != 0) return cli_fail("train: %s", err.msg);
        if (st->seed != (uint64_t)a->seed)
            fprintf(stderr, "latent train: the checkpoint was trained with --seed %llu; continuing with it\n",
                    (unsigned long long)st->seed);
    } else if (mkdir(a->out, 0755) != 0 && errno != EEXIST) {
        return cli_fail("train: cannot create %s: %s", a->out, strerror(errno));
    }
    char logpath[4096];
    snprintf(logpath, sizeof logpath, "%s/train.jsonl", a->out);
    if (resuming) trim_log(logpath, st->step);
    else unlink(logpath);
    if (!(*log = fopen(logpath, "a"))) return cli_fail("train: cannot open %s: %s", logpath, strerror(errno));
    return 0;
}

/* The training mode: --mode, else the model's kind. */
static int train_mode(const train_args *a, const latent_config *c) {
    if (a->mode >= 0) return a->mode;
    return c->rec == LATENT_REC_T2MLR ? LATENT_TRAIN_JACOBI : c->rec == LATENT_REC_LRT ? LATENT_TRAIN_LRT : LATENT_TRAIN_PLAIN;
}

/* The checkpoint when due (every --save-every steps, and at the last step or
 * a signal), then the stop a signal asked for. 0 to go on, else the exit code
 * (130 for a signal, after its checkpoint). */
static int save_and_maybe_stop(const train_args *a, const latent_model *m, const latent_optim *opt,
                               const latent_train_state *st, const char *tok_dir, int last, int stop, int tty) {
    latent_err err;
    if (last || (a->save_every && st->step % a->save_every == 0)) {
        if (latent_ckpt_save(a->out, m, opt, st, tok_dir, (int)a->keep, &err) != 0)
            return cli_fail("train: checkpoint: %s", err.msg);
        if (!tty) printf("saved %s/step-%08lld\n", a->out, (long long)st->step);
    }
    if (!stop) return 0;
    fprintf(stderr, "\nlatent train: stopped by signal %d after step %lld (checkpoint saved)\n", (int)g_stop,
            (long long)st->step);
    return 130;
}

static void print_done(const train_args *a, const latent_train_state *st, double t_start) {
    char el[32];
    fmt_time(el, sizeof el, now_s() - t_start);
    printf("latent train: done, step %lld, loss %.6f, %s; model in %s/latest\n", (long long)st->step, st->last_loss, el,
           a->out);
}

int cmd_train(int argc, char **argv) {
    train_args a;
    if (parse_args(argc, argv, &a) != 0) return 2;
    if (a.threads) latent_set_threads((int)a.threads);
    if (a.bench) return bench(&a);
    if (!a.out || !a.data || a.D < 1)
        return cli_fail(!a.out ? "train: --out DIR is required (see latent train --help)"
                        : !a.data ? "train: --data FILE.bin is required" : "train: --jacobi-iters must be >= 1");

    latent_err err;
    char ckpt[4096] = "";
    latent_ckpt_clean_stale(a.out);
    int resuming = find_start(&a, ckpt, sizeof ckpt);
    if (resuming < 0) return 2;
    const char *model_dir = resuming ? ckpt : a.model;
    latent_model m;
    if (latent_model_load(&m, model_dir, &err) != 0) return cli_fail("train: %s", err.msg);
    const latent_config *c = &m.cfg;
    if (a.seq > c->max_pos) {
        latent_model_free(&m);
        return cli_fail("train: --seq %ld exceeds the model's max_position_embeddings (%d)", a.seq, c->max_pos);
    }
    int mode = train_mode(&a, c);

    latent_tokens data, ev = {0};
    int rc = 1;
    latent_trainer *t = NULL;
    latent_weights g = {0};
    latent_optim opt = {0};
    FILE *log = NULL;
    int32_t *tok = NULL, *tgt = NULL;
    uint8_t *mask = NULL, *flow = NULL;
    if (latent_tokens_open(&data, a.data, c->vocab, (int)a.seq, &err) != 0) {
        latent_model_free(&m);
        return cli_fail("train: %s", err.msg);
    }
    if (a.eval_data && latent_tokens_open(&ev, a.eval_data, c->vocab, (int)a.seq, &err) != 0) {
        rc = cli_fail("train: %s", err.msg);
        goto done;
    }
    latent_train_shape sh = {mode, (int)a.batch, (int)a.seq, (int)a.D, (int)a.K, (int)a.S};
    if (!(t = latent_trainer_new(&m, &sh, &err)) || latent_weights_alloc(&g, c, &err) != 0 ||
        latent_optim_init(&opt, c, &a.o, &err) != 0) {
        rc = cli_fail("%s", err.msg);
        goto done;
    }
    if (mode == LATENT_TRAIN_PLAIN)
        for (int i = 0; i < m.w.n_params; i++) opt.frozen[i] = latent_param_is_recurrent(m.w.params[i].name);
    latent_train_state st = {0, (uint64_t)a.seed, 0};
    if ((rc = prepare_out(&a, resuming, ckpt, &opt, &st, &log)) != 0) goto done;
    rc = 1;
    size_t N = (size_t)a.batch * a.seq;
    tok = malloc(N * sizeof(int32_t)), tgt = malloc(N * sizeof(int32_t)), mask = malloc(N), flow = malloc(N);
    if (!tok || !tgt || !mask || !flow) {
        rc = cli_fail("train: out of memory");
        goto done;
    }
    latent_train_batch batch = {.tokens = tok, .targets = tgt, .mask = mask, .flow = flow};
    print_banner(&a, &m, model_dir, mode, t, &g, &data);
    if (resuming) printf("latent train: resuming from %s at step %lld\n", ckpt, (long long)st.step);
    fflush(stdout);

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    int tty = isatty(1);
    double avg = 0, t_start = now_s();
    int64_t first = st.step;
    const char *tok_dir = model_dir;
    rc = 0;
    for (int64_t s = st.step; s < a.steps; s++) {
        double t0 = now_s(), loss;
        latent_tokens_batch(&data, s, (int)a.batch, (int)a.seq, a.shuffle, st.seed, &batch);
        memset(g.slab, 0, g.slab_floats * sizeof(float));
        if (latent_trainer_step(t, &batch, &g, &loss, &err) != 0) {
            rc = cli_fail("train: step %lld: %s", (long long)s + 1, err.msg);
            break;
        }
        double gn = latent_grad_norm(&g, opt.frozen);
        double lr = latent_optim_step(&opt, &m.w, &g, gn);
        double dt = now_s() - t0, tps = N / dt;
        avg = s == first ? dt : 0.9 * avg + 0.1 * dt;
        st.step = s + 1;
        st.last_loss = loss;
        latent_gate_stats gs;
        latent_trainer_gate_stats(t, &gs);
        double ev_loss = NAN;
        /* Read the signal flag once per step: a signal that lands after this
         * point is acted on after the next step, never without its save. */
        int stop = g_stop != 0;
        int last = st.step == a.steps || stop;
        if (a.eval_data && ((a.eval_every && st.step % a.eval_every == 0) || last)) {
            ev_loss = eval_loss(t, &ev, (int)a.batch, (int)a.seq, a.eval_batches, &batch, &err);
            if (isnan(ev_loss)) {
                rc = cli_fail("train: eval: %s", err.msg);
                break;
            }
        }
        log_step(log, &st, loss, ev_loss, lr, gn, tps, mode, &gs);
        print_progress(tty, &st, a.steps, loss, lr, gn, tps, avg, ev_loss);
        if (!isfinite(loss)) {
            rc = cli_fail("train: the loss is %g at step %lld; stopping (try a smaller --lr)", loss, (long long)st.step);
            break;
        }
        if ((rc = save_and_maybe_stop(&a, &m, &opt, &st, tok_dir, last, stop, tty)) != 0) break;
    }
    if (tty) printf("\n");
    if (rc == 0) print_done(&a, &st, t_start);
done:
    if (log) fclose(log);
    free(tok), free(tgt), free(mask), free(flow);
    latent_optim_free(&opt);
    latent_weights_free(&g);
    latent_trainer_free(t);
    latent_tokens_close(&data);
    latent_tokens_close(&ev);
    latent_model_free(&m);
    return rc;
}
