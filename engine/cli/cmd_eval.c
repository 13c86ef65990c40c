/* latent eval: a model's accuracy on a synthetic task file, by position or depth. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "latent/data.h"
#include "latent/engine.h"
#include "latent/kv.h"
#include "latent/model.h"

static const char *help =
    "usage: latent eval --model DIR --data FILE.bin [--max-records N] [--bucket-width W]\n"
    "                   [--batch B] [--json] [--show K] [--precision auto|f32|bf16] [--weights auto|q8]\n"
    "                   [--task group|group-final|s5-retrieval|var-assign|raw\n"
    "                    --record-len L [--mask FILE.mask] [--labels FILE.labels]]\n"
    "\n"
    "Runs the model over every record of FILE.bin (written by `latent data`; its task\n"
    "is read from FILE.json) with exact sequential recurrence (the inference engine:\n"
    "one prefill per record, the recurrent window token after token), predicts each\n"
    "scored target greedily (argmax of the logits at the position before it) and\n"
    "prints the accuracy per target kind and bucket: position of the element or\n"
    "action (group, s5-retrieval), sequence length (group --final-only) or alias\n"
    "depth (var-assign), then overall and whole-record accuracy.\n"
    "Tokens with control flow 1 in FILE.flow (the S5 dictionary) run as prompt\n"
    "tokens, the rest as generated tokens (flow 2): a model trained with\n"
    "recur_on_prompt false sees exactly the flows of training.\n"
    "Without FILE.json, --task and --record-len describe the file (raw: every\n"
    "masked token scored, bucketed by its position in the record).\n"
    "--bucket-width W groups W positions per row (default: about 8 rows);\n"
    "--json prints one JSON object instead of the table; --show K prints the\n"
    "first K records' targets and predictions (position:target id:predicted id,\n"
    "then the symbols, target/predicted where they differ).\n";

typedef struct acc { int64_t n, ok; } acc;

typedef struct {
    const char *dir, *data, *task_arg, *mask, *labels;
    long max_records, width, batch, record_len, show;
    int json;
    latent_engine_opts eo;
} eval_args;

/* 0 to run, 1 when --help printed, 2 (cli_fail's code) on bad usage. */
static int parse_args(int argc, char **argv, eval_args *a) {
    const char *v;
    *a = (eval_args){.batch = 16};
    for (int i = 1; i < argc; i++) {
        if (cli_precision_opt(argc, argv, &i, &a->eo)) continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--json")) { a->json = 1; continue; }
        if (cli_opt(argc, argv, &i, "--model", &a->dir) || cli_opt(argc, argv, &i, "--data", &a->data) ||
            cli_opt(argc, argv, &i, "--task", &a->task_arg) || cli_opt(argc, argv, &i, "--mask", &a->mask) ||
            cli_opt(argc, argv, &i, "--labels", &a->labels))
            continue;
        long *target = NULL, lo = 1, hi = 1L << 30;
        const char *name = argv[i];
        if (cli_opt(argc, argv, &i, "--max-records", &v)) target = &a->max_records;
        else if (cli_opt(argc, argv, &i, "--bucket-width", &v)) target = &a->width;
        else if (cli_opt(argc, argv, &i, "--batch", &v)) target = &a->batch, hi = 1024;
        else if (cli_opt(argc, argv, &i, "--record-len", &v)) target = &a->record_len, lo = 2;
        else if (cli_opt(argc, argv, &i, "--show", &v)) target = &a->show, lo = 0;
        if (target) {
            if (cli_parse_long(v, lo, hi, target) != 0) return cli_fail("eval: %s must be an integer from %ld to %ld (got '%s')", name, lo, hi, v);
            continue;
        }
        fputs(help, stderr);
        return cli_fail("eval: unknown option '%s'", argv[i]);
    }
    if (!a->dir) return cli_fail("eval: --model DIR is required");
    if (!a->data) return cli_fail("eval: --data FILE.bin is required");
    return 0;
}

/* The dataset: from FILE.json, or described by --task and --record-len.
 * 0, or the command's exit code. */
static int load_data(const eval_args *a, latent_dataset *d) {
    latent_err err;
    if (a->task_arg) {
        latent_task t;
        if (!strcmp(a->task_arg, "group")) latent_task_defaults(&t, LATENT_TASK_GROUP);
        else if (!strcmp(a->task_arg, "group-final")) latent_task_defaults(&t, LATENT_TASK_GROUP), t.final_only = 1;
        else if (!strcmp(a->task_arg, "s5-retrieval")) latent_task_defaults(&t, LATENT_TASK_S5R);
        else if (!strcmp(a->task_arg, "var-assign")) latent_task_defaults(&t, LATENT_TASK_VAR);
        else if (!strcmp(a->task_arg, "raw")) latent_task_defaults(&t, LATENT_TASK_RAW);
        else return cli_fail("eval: --task must be group, group-final, s5-retrieval, var-assign or raw (got '%s')", a->task_arg);
        if (!a->record_len) return cli_fail("eval: --task needs --record-len L");
        if (latent_dataset_load_files(d, &t, a->data, a->mask, a->labels, (int)a->record_len, &err) != 0) {
            cli_fail("eval: %s", err.msg);
            return 1;
        }
        return 0;
    }
    if (a->mask || a->labels || a->record_len)
        return cli_fail("eval: --mask, --labels and --record-len go with --task (without it FILE.json describes the data)");
    if (latent_dataset_load(d, a->data, &err) != 0) {
        cli_fail("eval: %s", err.msg);
        return 1;
    }
    return 0;
}

/* The tallies: per bucket row and target kind, per kind, whole records. */
typedef struct {
    const char *const *kinds;
    int n_kinds, n_rows, shown;
    long width;
    acc *tab, *total, whole;
    double nll;   /* sum over targets of -log softmax(logits)[target] */
} tally;

/* Scores one record's targets from its logits (argmax at the position before
 * each target) and prints it when --show asks for it. 0, or -1 (out of memory). */
static int score_record(const eval_args *a, const latent_task *t, tally *y, int rec, const latent_target *tb, int n_tg,
                        const float *out, int V) {
    int all_ok = 1, *got = malloc((size_t)(n_tg + 1) * sizeof *got);
    if (!got) return -1;
    for (int k = 0; k < n_tg; k++) {
        const float *row = out + (size_t)(tb[k].pos - 1) * V;
        int best = 0;
        for (int j = 1; j < V; j++)
            if (row[j] > row[best]) best = j;
        got[k] = best;
        double z = 0; /* log-sum-exp about the max: the target's negative log-likelihood */
        for (int j = 0; j < V; j++) z += exp((double)row[j] - row[best]);
        y->nll += log(z) + row[best] - row[tb[k].want];
        int ok = (uint32_t)best == tb[k].want;
        all_ok &= ok;
        int bk = tb[k].bucket < 0 ? 0 : tb[k].bucket / (int)y->width;
        acc *c = &y->tab[(size_t)bk * y->n_kinds + tb[k].kind];
        c->n++, c->ok += ok;
        y->total[tb[k].kind].n++, y->total[tb[k].kind].ok += ok;
    }
    if (y->shown < a->show) {
        /* ids first (pos:want:got), then the symbols (want, or want/got when wrong) */
        printf("record %d:", rec);
        for (int k = 0; k < n_tg; k++) printf(" %d:%u:%d", tb[k].pos, tb[k].want, got[k]);
        printf("  |");
        for (int k = 0; k < n_tg; k++) {
            char w[32], g[32];
            latent_task_token_name(t, (int)tb[k].want, w, sizeof w);
            latent_task_token_name(t, got[k], g, sizeof g);
            printf(" %s%s%s", !strcmp(w, " ") ? "_" : w, (uint32_t)got[k] == tb[k].want ? "" : "/",
                   (uint32_t)got[k] == tb[k].want ? "" : !strcmp(g, " ") ? "_" : g);
        }
        printf("\n");
        y->shown++;
    }
    free(got);
    if (n_tg) y->whole.n++, y->whole.ok += all_ok;
    return 0;
}

static void print_json(const latent_task *t, const tally *y, int n_rec) {
    char g[16];
    printf("{\"task\": \"%s\", \"group\": \"%s\", \"records\": %d, \"bucket\": \"%s\", \"bucket_width\": %ld, \"rows\": [",
           latent_task_kind_name(t->kind), latent_task_group_name(t, g, sizeof g), n_rec, latent_task_bucket_name(t), y->width);
    int first = 1;
    for (int row = 0; row < y->n_rows; row++)
        for (int k = 0; k < y->n_kinds; k++) {
            acc c = y->tab[(size_t)row * y->n_kinds + k];
            if (!c.n) continue;
            printf("%s{\"kind\": \"%s\", \"from\": %ld, \"to\": %ld, \"n\": %lld, \"accuracy\": %.6f}", first ? "" : ", ",
                   y->kinds[k], row * y->width, row * y->width + y->width - 1, (long long)c.n, (double)c.ok / (double)c.n);
            first = 0;
        }
    printf("], \"overall\": {");
    for (int k = 0; k < y->n_kinds; k++)
        printf("%s\"%s\": %.6f", k ? ", " : "", y->kinds[k], y->total[k].n ? (double)y->total[k].ok / (double)y->total[k].n : 0.0);
    long long n = 0;
    for (int k = 0; k < y->n_kinds; k++) n += y->total[k].n;
    printf("}, \"records_correct\": %.6f, \"mean_nll\": %.6f, \"perplexity\": %.4f}\n",
           y->whole.n ? (double)y->whole.ok / (double)y->whole.n : 0.0, n ? y->nll / n : 0.0, n ? exp(y->nll / n) : 0.0);
}

static void print_table(const latent_task *t, const tally *y, int n_rec, int L, const char *dir) {
    char g[16];
    printf("%s%s%s: %d records of %d tokens, model %s\n", latent_task_kind_name(t->kind), t->kind == LATENT_TASK_GROUP ? " " : "",
           latent_task_group_name(t, g, sizeof g), n_rec, L, dir);
    printf("%-10s %-12s %10s %9s\n", "kind", latent_task_bucket_name(t), "targets", "accuracy");
    for (int row = 0; row < y->n_rows; row++)
        for (int k = 0; k < y->n_kinds; k++) {
            acc c = y->tab[(size_t)row * y->n_kinds + k];
            if (!c.n) continue;
            char range[32];
            if (y->width == 1) snprintf(range, sizeof range, "%ld", row * y->width);
            else snprintf(range, sizeof range, "%ld-%ld", row * y->width, row * y->width + y->width - 1);
            printf("%-10s %-12s %10lld %9.4f\n", y->kinds[k], range, (long long)c.n, (double)c.ok / (double)c.n);
        }
    for (int k = 0; k < y->n_kinds; k++)
        if (y->total[k].n)
            printf("%-10s %-12s %10lld %9.4f\n", y->kinds[k], "all", (long long)y->total[k].n,
                   (double)y->total[k].ok / (double)y->total[k].n);
    printf("records fully correct: %lld of %lld (%.4f)\n", (long long)y->whole.ok, (long long)y->whole.n,
           y->whole.n ? (double)y->whole.ok / (double)y->whole.n : 0.0);
    long long n = 0;
    for (int k = 0; k < y->n_kinds; k++) n += y->total[k].n;
    if (n) printf("mean NLL of the targets %.4f, perplexity %.3f\n", y->nll / n, exp(y->nll / n));
}

/* The records the data and model allow: context, vocabulary. 0, or 2. */
static int check_fit(const eval_args *a, const latent_dataset *d, const latent_model *m, int n_rec) {
    int L = d->record_len, V = m->cfg.vocab;
    if (L > m->cfg.max_pos) return cli_fail("eval: records of %d tokens exceed the model's context of %d", L, m->cfg.max_pos);
    int tv = latent_task_vocab_size(&d->task);
    if (tv > V) return cli_fail("eval: the task's vocabulary has %d tokens but the model only %d", tv, V);
    for (int64_t i = 0; i < (int64_t)n_rec * L; i++)
        if (d->tokens[i] >= (uint32_t)V)
            return cli_fail("eval: token %lld of %s has id %u, outside the model's vocabulary (%d)", (long long)i, a->data,
                            d->tokens[i], V);
    if (d->flow && m->cfg.rec == LATENT_REC_T2MLR && m->cfg.t2mlr.recur_on_prompt && !a->json)
        fprintf(stderr, "latent: eval: note: %s recurs on prompt tokens, so the flow-1 tokens of %s run with flow 2\n", a->dir, a->data);
    return 0;
}

/* Entries for record r of the batch slot b: inputs 0 .. last-1, leading
 * flow-1 tokens as a prompt entry (step 0), the rest generated (step 1). */
static void record_entries(const latent_dataset *d, int r, latent_seq *seq, int last, float *out, int V,
                           latent_batch_entry *step[2], int ne[2]) {
    const size_t off = (size_t)r * d->record_len;
    int f = 0;
    while (d->flow && f < last && d->flow[off + f] == 1) f++;
    const int32_t *tok = (const int32_t *)(d->tokens + off);
    if (f > 0)
        step[0][ne[0]++] = (latent_batch_entry){.seq = seq, .tokens = tok, .n_tokens = f, .prompt = 1,
                                                .logits = LATENT_LOGITS_ALL, .out = out};
    if (last > f)
        step[1][ne[1]++] = (latent_batch_entry){.seq = seq, .tokens = tok + f, .n_tokens = last - f, .prompt = 0,
                                                .logits = LATENT_LOGITS_ALL, .out = out + (size_t)f * V};
}

/* The batched run's buffers: `batch` record slots of L positions. */
typedef struct {
    latent_engine *eng;
    latent_kv_pool pool;
    latent_seq *seqs;         /* (batch) */
    latent_batch_entry *ents; /* (2, batch): the prompt entries, then the generated ones */
    float *logits;            /* (batch, L, V) */
    latent_target *tg;        /* (batch, L) */
    int *n_tg;                /* (batch) */
} eval_bufs;

/* The table's rows: a first pass over the targets finds the largest bucket;
 * the width from --bucket-width or about 8 rows. 0, or -1 (out of memory). */
static int size_buckets(const latent_dataset *d, int n_rec, latent_target *tg, tally *y) {
    const int L = d->record_len;
    int max_bucket = 0;
    for (int r = 0; r < n_rec; r++) {
        int n = latent_task_targets(d, r, tg, L);
        for (int k = 0; k < n && k < L; k++)
            if (tg[k].bucket > max_bucket) max_bucket = tg[k].bucket;
    }
    if (!y->width) y->width = d->task.kind == LATENT_TASK_VAR ? 1 : (max_bucket + 7) / 8 > 0 ? (max_bucket + 7) / 8 : 1;
    y->n_rows = max_bucket / (int)y->width + 1;
    return (y->tab = calloc((size_t)y->n_rows * y->n_kinds, sizeof *y->tab)) ? 0 : -1;
}

/* Records r0 .. r0+nb-1 in one batch: their prompt parts in one step, the
 * rest in a second, then each scored into y. 0, or 1 after saying why. */
static int eval_batch(const eval_args *a, const latent_dataset *d, const latent_model *m, eval_bufs *e, tally *y,
                      int r0, int nb) {
    latent_err err;
    const int L = d->record_len, V = m->cfg.vocab;
    int ne[2] = {0, 0};
    latent_batch_entry *step[2] = {e->ents, e->ents + a->batch};
    for (int b = 0; b < nb; b++) {
        latent_target *tb = e->tg + (size_t)b * L;
        e->n_tg[b] = latent_task_targets(d, r0 + b, tb, L);
        if (e->n_tg[b] > L) e->n_tg[b] = L;
        int last = 0;
        for (int k = 0; k < e->n_tg[b]; k++)
            if (tb[k].pos > last) last = tb[k].pos;
        if (last == 0) continue; /* nothing scored */
        if (latent_seq_init(&e->seqs[b], &e->pool, &m->cfg, &err) != 0) {
            cli_fail("eval: %s", err.msg);
            return 1;
        }
        record_entries(d, r0 + b, &e->seqs[b], last, e->logits + (size_t)b * L * V, V, step, ne);
    }
    for (int s = 0; s < 2; s++)
        if (ne[s] && latent_engine_step(e->eng, step[s], ne[s], &err) != 0) {
            cli_fail("eval: %s", err.msg);
            return 1;
        }
    for (int b = 0; b < nb; b++) {
        if (score_record(a, &d->task, y, r0 + b, e->tg + (size_t)b * L, e->n_tg[b], e->logits + (size_t)b * L * V,
                         V) != 0) {
            cli_fail("eval: out of memory");
            return 1;
        }
        latent_seq_free(&e->seqs[b]);
    }
    return 0;
}

int cmd_eval(int argc, char **argv) {
    eval_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc == 1 ? 0 : prc;
    latent_err err;
    latent_dataset d;
    int lrc = load_data(&a, &d);
    if (lrc) return lrc;
    latent_model m = {0};
    if (cli_load_model(&m, a.dir, &a.eo, &err) != 0) {
        latent_dataset_free(&d);
        cli_fail("eval: %s", err.msg);
        return 1;
    }
    const latent_task *t = &d.task;
    const int L = d.record_len, V = m.cfg.vocab;
    int n_rec = d.n_records;
    if (a.max_records && a.max_records < n_rec) n_rec = (int)a.max_records;
    long batch = a.batch;
    int rc = 1;
    tally y = {.kinds = latent_task_target_kinds(t), .width = a.width};
    while (y.kinds[y.n_kinds]) y.n_kinds++;
    eval_bufs e = {.seqs = calloc((size_t)batch, sizeof *e.seqs), .ents = calloc(2 * (size_t)batch, sizeof *e.ents),
                   .logits = malloc((size_t)batch * L * V * sizeof *e.logits),
                   .tg = malloc((size_t)batch * L * sizeof *e.tg), .n_tg = calloc((size_t)batch, sizeof *e.n_tg)};
    y.total = calloc((size_t)y.n_kinds, sizeof *y.total);
    if (!e.seqs || !e.ents || !e.logits || !e.tg || !e.n_tg || !y.total) {
        cli_fail("eval: out of memory");
        goto done;
    }
    if (check_fit(&a, &d, &m, n_rec) != 0) goto done;
    if (cli_kv_pool(&e.pool, &m, &a.eo, "auto", (int)batch, L, &err) != 0 ||
        !(e.eng = latent_engine_new_opts(&m, &a.eo, &err))) {
        cli_fail("eval: %s", err.msg);
        goto done;
    }
    if (size_buckets(&d, n_rec, e.tg, &y) != 0) {
        cli_fail("eval: out of memory");
        goto done;
    }
    for (int r0 = 0; r0 < n_rec; r0 += (int)batch)
        if (eval_batch(&a, &d, &m, &e, &y, r0, n_rec - r0 < batch ? n_rec - r0 : (int)batch) != 0) goto done;
    if (a.json) print_json(t, &y, n_rec);
    else print_table(t, &y, n_rec, L, a.dir);
    rc = 0;
done:
    if (e.seqs)
        for (int b = 0; b < batch; b++) latent_seq_free(&e.seqs[b]);
    latent_engine_free(e.eng);
    latent_kv_pool_free(&e.pool);
    free(e.seqs);
    free(e.ents);
    free(e.logits);
    free(e.tg);
    free(e.n_tg);
    free(y.tab);
    free(y.total);
    latent_model_free(&m);
    latent_dataset_free(&d);
    return rc;
}
