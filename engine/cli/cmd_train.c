/* latent train: offline training of a model directory on token files, on
 * one process or as data-parallel ranks under mpirun (train_dist.c). The
 * math is in engine/train/train_model.c, the benchmark in train_bench.c;
 * this file is the loop: batches, optimizer, logging, evaluation,
 * checkpoints and resume. */
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "latent/clock.h"
#include "latent/engine.h"
#include "latent/model.h"
#include "latent/model_init.h"
#include "latent/threads.h"
#include "latent/train.h"
#include "train_dist.h"

static const char *help =
    "usage: latent train --model DIR --data FILE.bin --out DIR [options]\n"
    "       latent train --out DIR --resume [options]\n"
    "       latent train --bench [--steps N] [--threads N] [--kinds plain,t2mlr4,t2mlr8,lrt2]\n"
    "                            [--precision f32,bf16]\n"
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
    "  --jacobi-grad-iters K  iterations the gradient flows through (2): the last K run\n"
    "  --jacobi-tol EPS     adaptive Jacobi: stop the middle passes once an iteration\n"
    "                       changes the recurrent state by less than EPS (max abs);\n"
    "                       --jacobi-iters is then the cap (0: always D; default 0)\n"
    "  --lrt-subsets S      LRT interleaved subsets (2)\n"
    "  --optimizer adamw|sgd (adamw)  --lr X (1e-3)  --weight-decay W (0)\n"
    "  --beta1 X (0.9)  --beta2 X (0.999)  --eps X (1e-8)\n"
    "  --grad-clip C        clip the global gradient norm to C; 0 = off (1.0)\n"
    "  --warmup N           linear warmup steps (0)\n"
    "  --lr-schedule cosine|constant   after warmup (cosine, to 0 at --schedule-steps)\n"
    "  --schedule-steps N   steps the schedule spans (default --steps); more than\n"
    "                       --steps runs the start of a longer recipe\n"
    "  --seed N             shuffling order (1)\n"
    "  --no-shuffle         read windows in the order of models.md §5\n"
    "  --eval-data FILE.bin --eval-every N (100) --eval-batches N (8)\n"
    "                       mean loss of the first N unshuffled batches of FILE\n"
    "  --save-every N       checkpoint every N steps (0: only at the end)\n"
    "  --keep N             checkpoints kept (2)\n"
    "  --resume             continue from OUT/latest (bit-exact), or start fresh\n"
    "                       when OUT has no checkpoint; --model is then optional\n"
    "  --threads N          worker threads (all cores)\n"
    "  --precision auto|f32|bf16  the linear layers' products: bf16 operands with\n"
    "                       F32 sums (weights, gradients, optimizer, norms, losses\n"
    "                       and the recurrence stay F32); auto follows the model's\n"
    "                       dtype (auto)\n"
    "  --save-dtype auto|f32|bf16  model.safetensors of the checkpoints (auto: the\n"
    "                       starting model's dtype); bf16 halves them, but a resume\n"
    "                       then continues from rounded weights\n"
    "  mpirun -np N latent train ...   data parallel over N ranks (docs/training.md)\n"
    "  --bench              tokens/s of a training step on the standard small\n"
    "                       model (6 blocks, d 256, 4 heads, FFN 768, vocab 4096,\n"
    "                       B 8, T 256): plain, T2MLR D=4/B=2 and D=8/B=4, LRT S=2\n";

static volatile sig_atomic_t g_stop;
int train_bench(long steps, const char *kinds_filter, const char *precisions);
static void on_signal(int sig) { g_stop = sig; }

typedef struct {
    const char *model, *data, *out, *eval_data, *kinds;
    long steps, schedule_steps, batch, seq, D, K, S, eval_every, eval_batches, save_every, keep, threads;
    long long seed;
    int mode; /* -1: from the model */
    int shuffle, resume, bench;
    latent_precision precision, save_dtype;  /* save_dtype: AUTO, F32 or BF16 */
    double jacobi_tol;
    const char *bench_precisions;            /* --precision's list, for --bench */
    latent_optim_opts o;
} train_args;

/* Everything a run holds, on every rank. */
typedef struct {
    train_args *a;
    train_dist *d;
    int lead;                 /* rank 0: the one that prints, logs and saves */
    int mode, b0;             /* b0: this rank's first sequence of each global batch */
    const char *model_dir;
    latent_model m;
    latent_tokens data, ev;
    latent_trainer *t;
    latent_weights g;
    latent_optim opt;
    latent_train_state st;
    FILE *log;
    latent_train_batch batch; /* the global batch (every rank reads it whole, runs its share) */
} train_run;

static void train_args_defaults(train_args *a) {
    memset(a, 0, sizeof *a);
    a->steps = 1000, a->batch = 8, a->seq = 256, a->D = 4, a->K = 2, a->S = 2;
    a->eval_every = 100, a->eval_batches = 8, a->keep = 2, a->seed = 1, a->mode = -1, a->shuffle = 1;
    a->o = (latent_optim_opts){.adamw = 1, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                               .grad_clip = 1.0f, .cosine = 1};
}

/* The options parse_args' helpers take: NOT_MINE when argv[*i] is none of
 * theirs, 0 when it was one and its value was good, else cli_fail's 2. */
enum { NOT_MINE = -1 };

/* The integer and real options, each a range from its table. */
static int parse_number_opt(int argc, char **argv, int *i, train_args *a, int *have_steps) {
    const char *v;
    double x;
    long n;
    struct { const char *name; long *dst; long lo, hi; } ints[] = {
        {"--steps", &a->steps, 1, 1L << 40}, {"--schedule-steps", &a->schedule_steps, 1, 1L << 40},
        {"--batch", &a->batch, 1, 1 << 16}, {"--seq", &a->seq, 2, 1 << 20},
        {"--jacobi-iters", &a->D, 1, 4096}, {"--jacobi-grad-iters", &a->K, 0, 4096},
        {"--lrt-subsets", &a->S, 1, 1 << 20}, {"--eval-every", &a->eval_every, 0, 1L << 40},
        {"--eval-batches", &a->eval_batches, 1, 1 << 20}, {"--save-every", &a->save_every, 0, 1L << 40},
        {"--keep", &a->keep, 1, 1 << 20}, {"--threads", &a->threads, 1, 64}};
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
        if (cli_opt(argc, argv, i, ints[k].name, &v)) {
            if (cli_parse_long(v, ints[k].lo, ints[k].hi, &n) != 0)
                return cli_fail("train: %s must be an integer from %ld to %ld (got '%s')", ints[k].name, ints[k].lo,
                                ints[k].hi, v);
            *ints[k].dst = n;
            *have_steps |= ints[k].dst == &a->steps;
            return 0;
        }
    struct { const char *name; float *dst; double lo, hi; } reals[] = {
        {"--lr", &a->o.lr, 0, 100}, {"--weight-decay", &a->o.weight_decay, 0, 100},
        {"--beta1", &a->o.beta1, 0, 0.999999}, {"--beta2", &a->o.beta2, 0, 0.99999999},
        {"--eps", &a->o.eps, 0, 1}, {"--grad-clip", &a->o.grad_clip, 0, 1e9}};
    for (size_t k = 0; k < sizeof reals / sizeof reals[0]; k++)
        if (cli_opt(argc, argv, i, reals[k].name, &v)) {
            if (cli_parse_double(v, reals[k].lo, reals[k].hi, &x) != 0)
                return cli_fail("train: %s must be a number from %g to %g (got '%s')", reals[k].name, reals[k].lo,
                                reals[k].hi, v);
            *reals[k].dst = (float)x;
            return 0;
        }
    return NOT_MINE;
}

/* The options with a value of their own kind: seed, warmup, names. */
static int parse_other_opt(int argc, char **argv, int *i, train_args *a) {
    const char *v;
    long n;
    if (cli_opt(argc, argv, i, "--seed", &v)) {
        if (cli_parse_long(v, 0, 0x7fffffffffffffffL, &n) != 0)
            return cli_fail("train: --seed must be a non-negative integer (got '%s')", v);
        a->seed = n;
        return 0;
    }
    if (cli_opt(argc, argv, i, "--warmup", &v)) {
        if (cli_parse_long(v, 0, 1L << 40, &n) != 0) return cli_fail("train: --warmup must be >= 0 (got '%s')", v);
        a->o.warmup = (int)n;
        return 0;
    }
    if (cli_opt(argc, argv, i, "--optimizer", &v)) {
        if (!strcmp(v, "adamw")) a->o.adamw = 1;
        else if (!strcmp(v, "sgd")) a->o.adamw = 0;
        else return cli_fail("train: --optimizer must be adamw or sgd (got '%s')", v);
        return 0;
    }
    if (cli_opt(argc, argv, i, "--lr-schedule", &v)) {
        if (!strcmp(v, "cosine")) a->o.cosine = 1;
        else if (!strcmp(v, "constant")) a->o.cosine = 0;
        else return cli_fail("train: --lr-schedule must be cosine or constant (got '%s')", v);
        return 0;
    }
    if (cli_opt(argc, argv, i, "--precision", &v)) {
        a->bench_precisions = v;
        if (strchr(v, ',')) return 0; /* a list: --bench only (checked there) */
        if (latent_precision_parse(v, &a->precision) != 0)
            return cli_fail("train: --precision must be auto, f32 or bf16 (got '%s')", v);
        return 0;
    }
    if (cli_opt(argc, argv, i, "--jacobi-tol", &v)) {
        if (cli_parse_double(v, 0, 1e9, &a->jacobi_tol) != 0)
            return cli_fail("train: --jacobi-tol must be a number >= 0 (got '%s')", v);
        return 0;
    }
    if (cli_opt(argc, argv, i, "--save-dtype", &v)) {
        if (latent_precision_parse(v, &a->save_dtype) != 0)
            return cli_fail("train: --save-dtype must be auto, f32 or bf16 (got '%s')", v);
        return 0;
    }
    if (cli_opt(argc, argv, i, "--mode", &v)) {
        if (!strcmp(v, "plain")) a->mode = LATENT_TRAIN_PLAIN;
        else if (!strcmp(v, "jacobi")) a->mode = LATENT_TRAIN_JACOBI;
        else if (!strcmp(v, "lrt")) a->mode = LATENT_TRAIN_LRT;
        else return cli_fail("train: --mode must be plain, jacobi or lrt (got '%s')", v);
        return 0;
    }
    return NOT_MINE;
}

static int parse_args(int argc, char **argv, train_args *a) {
    train_args_defaults(a);
    int have_steps = 0;
    for (int i = 1; i < argc; i++) {
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
        int rc = parse_number_opt(argc, argv, &i, a, &have_steps);
        if (rc == NOT_MINE) rc = parse_other_opt(argc, argv, &i, a);
        if (rc == NOT_MINE) return cli_fail("train: unknown option '%s' (see latent train --help)", argv[i]);
        if (rc != 0) return rc;
    }
    if (a->bench && !have_steps) a->steps = 5;
    if (a->schedule_steps && a->schedule_steps < a->steps)
        return cli_fail("train: --schedule-steps (%ld) must be at least --steps (%ld)", a->schedule_steps, a->steps);
    a->o.steps = a->schedule_steps ? a->schedule_steps : a->steps;
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

/* One global batch through this rank's share (sequences [b0, b0 + its
 * trainer's batch)): the whole batch's scored targets counted over the ranks
 * (each loss is a mean over them), the share's forward (and backward into g,
 * when g is not NULL), then the gradients and the loss summed over the
 * ranks. On one process b0 = 0 and the share is the batch. */
static int dist_batch(train_dist *d, latent_trainer *t, const latent_train_batch *global, int b0, int T,
                      latent_weights *g, double *loss, latent_err *err) {
    size_t o = (size_t)b0 * T;
    latent_train_batch share = {.tokens = global->tokens + o, .targets = global->targets + o,
                                .mask = global->mask + o, .flow = global->flow + o};
    if (d->size > 1) { /* LRT has a head per subset, at most T of them */
        int64_t *counts = malloc(sizeof(int64_t) * LATENT_TRAIN_MAX_HEADS(T));
        double *sums = malloc(sizeof(double) * LATENT_TRAIN_MAX_HEADS(T));
        int heads = counts && sums ? latent_trainer_count_scored(t, &share, counts) : 0;
        for (int h = 0; h < heads; h++) sums[h] = (double)counts[h];
        int rc = heads == 0 ? latent_err_set(err, LATENT_E_NOMEM, "out of memory")
                 : train_dist_sum_doubles(d, sums, heads) != 0 ? latent_err_set(err, LATENT_E_IO, "MPI_Allreduce failed")
                                                              : 0;
        for (int h = 0; h < heads; h++) counts[h] = (int64_t)sums[h];
        share.scored_total = counts;
        if (rc == 0) rc = latent_trainer_step(t, &share, g, loss, err);
        free(counts), free(sums);
        if (rc != 0) return -1;
    } else if (latent_trainer_step(t, &share, g, loss, err) != 0) {
        return -1;
    }
    if (d->size == 1) return 0;
    if ((g && train_dist_sum_floats(d, g->slab, g->slab_floats) != 0) || train_dist_sum_doubles(d, loss, 1) != 0)
        return latent_err_set(err, LATENT_E_IO, "MPI_Allreduce failed");
    return 0;
}

static double eval_loss(train_dist *d, latent_trainer *t, const latent_tokens *ev, int B, int b0, int T,
                        long n_batches, latent_train_batch *b, latent_err *err) {
    double sum = 0;
    for (long s = 0; s < n_batches; s++) {
        double l;
        latent_tokens_batch(ev, s, B, T, 0, 0, b);
        if (dist_batch(d, t, b, b0, T, NULL, &l, err) != 0) return NAN;
        sum += l;
    }
    return sum / n_batches;
}

/* One line of train.jsonl for the step just taken. */
static void log_step(FILE *log, const latent_train_state *st, double loss, double ev_loss, double lr, double gn, double tps,
                     double comm_s, int mode, const latent_gate_stats *gs) {
    fprintf(log, "{\"step\": %lld, \"loss\": %.9g, \"eval_loss\": ", (long long)st->step, loss);
    if (isnan(ev_loss)) fprintf(log, "null");
    else fprintf(log, "%.9g", ev_loss);
    fprintf(log, ", \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.1f", lr, gn, tps);
    if (!isnan(comm_s)) fprintf(log, ", \"allreduce_s\": %.6f", comm_s); /* data parallel: time in the collectives */
    if (mode == LATENT_TRAIN_JACOBI)
        fprintf(log, ", \"jacobi_iters\": %d, \"jacobi_rows\": %.4g, \"tanh_gamma_rec\": %.6g, \"tanh_gamma_cur\": %.6g, "
                     "\"gate_rec\": %.6g, \"gate_cur\": %.6g",
                gs->jacobi_iters, gs->jacobi_rows, gs->tanh_gamma_rec, gs->tanh_gamma_cur, gs->gate_rec, gs->gate_cur);
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
                         const latent_weights *g, const latent_tokens *data, const train_dist *d) {
    int64_t n_params = 0;
    for (int i = 0; i < m->w.n_params; i++) n_params += m->w.params[i].numel;
    printf("latent train: %s, %.2fM parameters, mode %s, products %s", model_dir, n_params / 1e6, mode_name(mode),
           latent_precision_resolve(m, a->precision) == LATENT_PRECISION_BF16 ? "bf16 (F32 sums)" : "f32");
    if (mode == LATENT_TRAIN_JACOBI) printf(" (D=%ld, B=%ld)", a->D, a->K);
    if (mode == LATENT_TRAIN_LRT) printf(" (S=%ld)", a->S);
    printf(", batch %ld x seq %ld, %d threads, OpenBLAS %s\n", a->batch, a->seq, latent_get_threads(),
           openblas_get_corename());
    if (d->size > 1)
        printf("latent train: data parallel over %d ranks (MPI), each with a share of every batch and %d threads\n",
               d->size, latent_get_threads());
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
 * a signal; rank 0 writes it, after checking every rank holds the same
 * weights), then the stop a signal asked for. 0 to go on, else the exit
 * code (130 for a signal, after its checkpoint). */
static int save_and_maybe_stop(train_run *r, int last, int stop, int tty) {
    latent_err err;
    const train_args *a = r->a;
    if (last || (a->save_every && r->st.step % a->save_every == 0)) {
        if (!train_dist_same(r->d, r->m.w.slab, r->m.w.slab_floats * sizeof(float)))
            return cli_fail("train: the ranks' weights differ at step %lld (not saved)", (long long)r->st.step);
        int bf16 = latent_precision_resolve(&r->m, a->save_dtype) == LATENT_PRECISION_BF16;
        double failed = r->lead && latent_ckpt_save_dtype(a->out, &r->m, &r->opt, &r->st, r->model_dir, (int)a->keep,
                                                          bf16, &err) != 0;
        if (failed) cli_fail("train: checkpoint: %s", err.msg);
        /* every rank waits for rank 0's save: none may exit (and have mpirun
         * end the job) while it writes */
        if (train_dist_sum_doubles(r->d, &failed, 1) != 0 || failed) return 1;
        if (r->lead && !tty) printf("saved %s/step-%08lld\n", a->out, (long long)r->st.step);
    }
    if (!stop) return 0;
    if (r->lead)
        fprintf(stderr, "\nlatent train: stopped by a signal after step %lld (checkpoint saved)\n", (long long)r->st.step);
    return 130;
}

static void print_done(const train_args *a, const latent_train_state *st, double t_start) {
    char el[32];
    fmt_time(el, sizeof el, latent_now_seconds() - t_start);
    printf("latent train: done, step %lld, loss %.6f, %s; model in %s/latest\n", (long long)st->step, st->last_loss, el,
           a->out);
}


/* Rank 0 decides where the run starts (and cleans OUT's stale temporaries);
 * the others learn it. 0, or the exit code. */
static int decide_start(train_run *r, char *ckpt, size_t cap, int *resuming) {
    int hdr[2] = {0, 0}; /* resuming (-1: usage error), 0 */
    if (r->lead) {
        latent_ckpt_clean_stale(r->a->out);
        hdr[0] = find_start(r->a, ckpt, cap);
    }
    if (train_dist_bcast(r->d, hdr, sizeof hdr) != 0 || train_dist_bcast(r->d, ckpt, cap) != 0)
        return cli_fail("train: MPI_Bcast failed");
    *resuming = hdr[0];
    return hdr[0] < 0 ? 2 : 0;
}

/* Rank 0's weights, optimizer moments and position go to every rank, so
 * all start from the same bits whatever they read from disk. */
static int sync_state(train_run *r) {
    train_dist *d = r->d;
    int rc = train_dist_bcast(d, r->m.w.slab, r->m.w.slab_floats * sizeof(float));
    if (r->opt.o.adamw) {
        rc |= train_dist_bcast(d, r->opt.m.slab, r->opt.m.slab_floats * sizeof(float));
        rc |= train_dist_bcast(d, r->opt.v.slab, r->opt.v.slab_floats * sizeof(float));
    }
    rc |= train_dist_bcast(d, &r->opt.step, sizeof r->opt.step);
    rc |= train_dist_bcast(d, &r->st, sizeof r->st);
    return rc ? cli_fail("train: MPI_Bcast failed") : 0;
}

/* Opens the data, builds this rank's trainer and the optimizer, and on rank
 * 0 prepares OUT (and a resumed run's state), then shares it. 0 or exit code. */
static int setup(train_run *r, int resuming, const char *ckpt) {
    train_args *a = r->a;
    latent_err err;
    const latent_config *c = &r->m.cfg;
    if (latent_tokens_open(&r->data, a->data, c->vocab, (int)a->seq, &err) != 0 ||
        (a->eval_data && latent_tokens_open(&r->ev, a->eval_data, c->vocab, (int)a->seq, &err) != 0))
        return cli_fail("train: %s", err.msg);
    int local_b = train_dist_share(r->d, (int)a->batch, &r->b0);
    latent_train_shape sh = {.mode = r->mode, .batch = local_b, .seq = (int)a->seq, .jacobi_iters = (int)a->D,
                             .jacobi_grad_iters = (int)a->K, .lrt_subsets = (int)a->S, .jacobi_tol = a->jacobi_tol,
                             .bf16 = latent_precision_resolve(&r->m, a->precision) == LATENT_PRECISION_BF16};
    if (!(r->t = latent_trainer_new(&r->m, &sh, &err)) || latent_weights_alloc(&r->g, c, &err) != 0 ||
        latent_optim_init(&r->opt, c, &a->o, &err) != 0)
        return cli_fail("%s", err.msg);
    if (r->mode == LATENT_TRAIN_PLAIN)
        for (int i = 0; i < r->m.w.n_params; i++) r->opt.frozen[i] = latent_param_is_recurrent(r->m.w.params[i].name);
    r->st = (latent_train_state){0, (uint64_t)a->seed, 0};
    int rc = r->lead ? prepare_out(a, resuming, ckpt, &r->opt, &r->st, &r->log) : 0;
    if (train_dist_bcast(r->d, &rc, sizeof rc) != 0) return cli_fail("train: MPI_Bcast failed");
    if (rc != 0) return rc;
    size_t N = (size_t)a->batch * a->seq;
    r->batch = (latent_train_batch){.tokens = malloc(N * sizeof(int32_t)), .targets = malloc(N * sizeof(int32_t)),
                                    .mask = malloc(N), .flow = malloc(N)};
    if (!r->batch.tokens || !r->batch.targets || !r->batch.mask || !r->batch.flow) return cli_fail("train: out of memory");
    return sync_state(r);
}

/* The steps from st.step to --steps. 0, or the exit code. */
static int run_steps(train_run *r) {
    train_args *a = r->a;
    latent_err err;
    int tty = r->lead && isatty(1), rc = 0;
    double avg = 0, t_start = latent_now_seconds();
    int64_t first = r->st.step;
    size_t N = (size_t)a->batch * a->seq;
    for (int64_t s = r->st.step; s < a->steps; s++) {
        double t0 = latent_now_seconds(), comm0 = r->d->comm_seconds, loss;
        latent_tokens_batch(&r->data, s, (int)a->batch, (int)a->seq, a->shuffle, r->st.seed, &r->batch);
        memset(r->g.slab, 0, r->g.slab_floats * sizeof(float));
        if (dist_batch(r->d, r->t, &r->batch, r->b0, (int)a->seq, &r->g, &loss, &err) != 0) {
            rc = cli_fail("train: step %lld: %s", (long long)s + 1, err.msg);
            break;
        }
        double gn = latent_grad_norm(&r->g, r->opt.frozen);
        double lr = latent_optim_step(&r->opt, &r->m.w, &r->g, gn);
        latent_gate_stats gs;
        latent_trainer_gate_stats(r->t, &gs);
        /* Read the signal flag once per step, and agree on it over the ranks:
         * a signal that lands after this point is acted on after the next
         * step, never without its save, and every rank stops at one step. */
        double flags[7] = {g_stop != 0, gs.gate_rec, gs.gate_cur, gs.alpha, gs.gamma, gs.gate_loc, gs.gate_fb};
        if (train_dist_sum_doubles(r->d, flags, 7) != 0) {
            rc = cli_fail("train: MPI_Allreduce failed");
            break;
        }
        if (r->d->size > 1) /* gate means: the ranks' average (a diagnostic) */
            gs.gate_rec = flags[1] / r->d->size, gs.gate_cur = flags[2] / r->d->size, gs.alpha = flags[3] / r->d->size,
            gs.gamma = flags[4] / r->d->size, gs.gate_loc = flags[5] / r->d->size, gs.gate_fb = flags[6] / r->d->size;
        double dt = latent_now_seconds() - t0, tps = N / dt;
        avg = s == first ? dt : 0.9 * avg + 0.1 * dt;
        r->st.step = s + 1;
        r->st.last_loss = loss;
        double ev_loss = NAN;
        int stop = flags[0] > 0, last = r->st.step == a->steps || stop;
        if (a->eval_data && ((a->eval_every && r->st.step % a->eval_every == 0) || last)) {
            ev_loss = eval_loss(r->d, r->t, &r->ev, (int)a->batch, r->b0, (int)a->seq, a->eval_batches, &r->batch, &err);
            if (isnan(ev_loss)) {
                rc = cli_fail("train: eval: %s", err.msg);
                break;
            }
        }
        if (r->lead) {
            log_step(r->log, &r->st, loss, ev_loss, lr, gn, tps, r->d->size > 1 ? r->d->comm_seconds - comm0 : NAN,
                     r->mode, &gs);
            print_progress(tty, &r->st, a->steps, loss, lr, gn, tps, avg, ev_loss);
        }
        if (!isfinite(loss)) {
            rc = cli_fail("train: the loss is %g at step %lld; stopping (try a smaller --lr)", loss, (long long)r->st.step);
            break;
        }
        if ((rc = save_and_maybe_stop(r, last, stop, tty)) != 0) break;
    }
    if (tty) printf("\n");
    if (rc == 0 && r->lead) print_done(a, &r->st, t_start);
    return rc;
}

static void run_free(train_run *r) {
    if (r->log) fclose(r->log);
    free(r->batch.tokens), free(r->batch.targets), free(r->batch.mask), free(r->batch.flow);
    latent_optim_free(&r->opt);
    latent_weights_free(&r->g);
    latent_trainer_free(r->t);
    latent_tokens_close(&r->data);
    latent_tokens_close(&r->ev);
    latent_model_free(&r->m);
}

static int train(train_args *a, train_dist *d) {
    train_run r = {.a = a, .d = d, .lead = d->rank == 0};
    char ckpt[4096] = "";
    int resuming = 0, rc;
    if ((rc = decide_start(&r, ckpt, sizeof ckpt, &resuming)) != 0) return rc;
    r.model_dir = resuming ? ckpt : a->model;
    latent_err err;
    if (latent_model_load(&r.m, r.model_dir, &err) != 0) return cli_fail("train: %s", err.msg);
    if (a->seq > r.m.cfg.max_pos) {
        latent_model_free(&r.m);
        return cli_fail("train: --seq %ld exceeds the model's max_position_embeddings (%d)", a->seq, r.m.cfg.max_pos);
    }
    if (a->jacobi_tol > 0 && d->size > 1) {
        latent_model_free(&r.m);
        return cli_fail("train: --jacobi-tol under mpirun is not supported yet (each rank would stop its Jacobi "
                        "iterations on its own share; run fixed --jacobi-iters)");
    }
    if (a->batch < d->size) {
        latent_model_free(&r.m);
        return cli_fail("train: --batch %ld is smaller than the %d ranks (each needs a sequence)", a->batch, d->size);
    }
    r.mode = train_mode(a, &r.m.cfg);
    if ((rc = setup(&r, resuming, ckpt)) == 0) {
        if (r.lead) {
            print_banner(a, &r.m, r.model_dir, r.mode, r.t, &r.g, &r.data, d);
            if (resuming) printf("latent train: resuming from %s at step %lld\n", ckpt, (long long)r.st.step);
            fflush(stdout);
        }
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        /* SIGTERM to mpirun: it stops reading the ranks' output and then
         * signals them. Rank 0 must not block in (or die of) a write to
         * that output before it saves: progress lines may be lost, never
         * train.jsonl or the checkpoint. */
        if (d->size > 1) {
            signal(SIGPIPE, SIG_IGN);
            fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
        }
        rc = run_steps(&r);
    }
    run_free(&r);
    return rc;
}

int cmd_train(int argc, char **argv) {
    train_args a;
    if (parse_args(argc, argv, &a) != 0) return 2;
    if (a.threads) latent_set_threads((int)a.threads);
    if (a.bench) return train_bench(a.steps, a.kinds, a.bench_precisions ? a.bench_precisions : "f32");
    if (!a.out || !a.data || a.D < 1)
        return cli_fail(!a.out ? "train: --out DIR is required (see latent train --help)"
                        : !a.data ? "train: --data FILE.bin is required" : "train: --jacobi-iters must be >= 1");
    train_dist d;
    if (train_dist_start(&d) != 0) return 1;
    int rc = train(&a, &d);
    /* a rank that failed alone would leave the others waiting in a collective */
    if (rc != 0 && rc != 130 && d.size > 1) train_dist_abort(&d, rc);
    /* Stopped by a signal under mpirun, which is tearing the job down and
     * would not answer MPI_Finalize: the checkpoint is saved, just go. */
    if (rc == 130 && d.size > 1) _exit(rc);
    train_dist_finish(&d);
    return rc;
}
