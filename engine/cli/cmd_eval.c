/* latent eval: a model's accuracy on a synthetic task file, by position or depth. */
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
    "                   [--batch B] [--json] [--show K] [--precision auto|f32|bf16]\n"
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

int cmd_eval(int argc, char **argv) {
    const char *dir = NULL, *data = NULL, *task_arg = NULL, *mask = NULL, *labels = NULL, *v;
    long max_records = 0, width = 0, batch = 16, record_len = 0, show = 0;
    int json = 0;
    latent_engine_opts eo = {0};
    for (int i = 1; i < argc; i++) {
        if (cli_precision_opt(argc, argv, &i, &eo)) continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--json")) { json = 1; continue; }
        if (cli_opt(argc, argv, &i, "--model", &dir) || cli_opt(argc, argv, &i, "--data", &data) ||
            cli_opt(argc, argv, &i, "--task", &task_arg) || cli_opt(argc, argv, &i, "--mask", &mask) ||
            cli_opt(argc, argv, &i, "--labels", &labels))
            continue;
        long *target = NULL, lo = 1, hi = 1L << 30;
        const char *name = argv[i];
        if (cli_opt(argc, argv, &i, "--max-records", &v)) target = &max_records;
        else if (cli_opt(argc, argv, &i, "--bucket-width", &v)) target = &width;
        else if (cli_opt(argc, argv, &i, "--batch", &v)) target = &batch, hi = 1024;
        else if (cli_opt(argc, argv, &i, "--record-len", &v)) target = &record_len, lo = 2;
        else if (cli_opt(argc, argv, &i, "--show", &v)) target = &show, lo = 0;
        if (target) {
            if (cli_parse_long(v, lo, hi, target) != 0) return cli_fail("eval: %s must be an integer from %ld to %ld (got '%s')", name, lo, hi, v);
            continue;
        }
        fputs(help, stderr);
        return cli_fail("eval: unknown option '%s'", argv[i]);
    }
    if (!dir) return cli_fail("eval: --model DIR is required");
    if (!data) return cli_fail("eval: --data FILE.bin is required");

    latent_err err;
    latent_dataset d;
    if (task_arg) {
        latent_task t;
        if (!strcmp(task_arg, "group")) latent_task_defaults(&t, LATENT_TASK_GROUP);
        else if (!strcmp(task_arg, "group-final")) latent_task_defaults(&t, LATENT_TASK_GROUP), t.final_only = 1;
        else if (!strcmp(task_arg, "s5-retrieval")) latent_task_defaults(&t, LATENT_TASK_S5R);
        else if (!strcmp(task_arg, "var-assign")) latent_task_defaults(&t, LATENT_TASK_VAR);
        else if (!strcmp(task_arg, "raw")) latent_task_defaults(&t, LATENT_TASK_RAW);
        else return cli_fail("eval: --task must be group, group-final, s5-retrieval, var-assign or raw (got '%s')", task_arg);
        if (!record_len) return cli_fail("eval: --task needs --record-len L");
        if (latent_dataset_load_files(&d, &t, data, mask, labels, (int)record_len, &err) != 0) {
            cli_fail("eval: %s", err.msg);
            return 1;
        }
    } else {
        if (mask || labels || record_len) return cli_fail("eval: --mask, --labels and --record-len go with --task (without it FILE.json describes the data)");
        if (latent_dataset_load(&d, data, &err) != 0) {
            cli_fail("eval: %s", err.msg);
            return 1;
        }
    }
    latent_model m = {0};
    if (latent_model_load(&m, dir, &err) != 0) {
        latent_dataset_free(&d);
        cli_fail("eval: %s", err.msg);
        return 1;
    }
    const latent_task *t = &d.task;
    const int L = d.record_len, V = m.cfg.vocab;
    int n_rec = d.n_records;
    if (max_records && max_records < n_rec) n_rec = (int)max_records;
    int rc = 1, n_kinds = 0;
    const char *const *kinds = latent_task_target_kinds(t);
    while (kinds[n_kinds]) n_kinds++;
    latent_engine *eng = NULL;
    latent_kv_pool pool = {0};
    latent_seq *seqs = calloc((size_t)batch, sizeof *seqs);
    latent_batch_entry *ents = calloc(2 * (size_t)batch, sizeof *ents);
    float *logits = malloc((size_t)batch * L * V * sizeof *logits);
    latent_target *tg = malloc((size_t)batch * L * sizeof *tg);
    int *n_tg = calloc((size_t)batch, sizeof *n_tg);
    acc *tab = NULL, *total = calloc((size_t)n_kinds, sizeof *total);
    acc whole = {0, 0};
    int max_bucket = 0;
    if (!seqs || !ents || !logits || !tg || !n_tg || !total) {
        cli_fail("eval: out of memory");
        goto done;
    }
    if (L > m.cfg.max_pos) {
        cli_fail("eval: records of %d tokens exceed the model's context of %d", L, m.cfg.max_pos);
        goto done;
    }
    int tv = latent_task_vocab_size(t);
    if (tv > V) {
        cli_fail("eval: the task's vocabulary has %d tokens but the model only %d", tv, V);
        goto done;
    }
    for (int64_t i = 0; i < (int64_t)n_rec * L; i++)
        if (d.tokens[i] >= (uint32_t)V) {
            cli_fail("eval: token %lld of %s has id %u, outside the model's vocabulary (%d)", (long long)i, data, d.tokens[i], V);
            goto done;
        }
    if (d.flow && m.cfg.rec == LATENT_REC_T2MLR && m.cfg.t2mlr.recur_on_prompt && !json)
        fprintf(stderr, "latent: eval: note: %s recurs on prompt tokens, so the flow-1 tokens of %s run with flow 2\n", dir, data);
    const int page = 16;
    latent_kv_dtype kvd;
    latent_kv_dtype_choose("auto", latent_precision_resolve(&m, eo.precision), &kvd);
    if (latent_kv_pool_init(&pool, &m.cfg, page, latent_kv_page_bytes(&m.cfg, page, kvd) * (size_t)batch * (L / page + 2), kvd, &err) != 0 ||
        !(eng = latent_engine_new_opts(&m, &eo, &err))) {
        cli_fail("eval: %s", err.msg);
        goto done;
    }
    /* buckets: a first pass over the targets finds the largest */
    for (int r = 0; r < n_rec; r++) {
        int n = latent_task_targets(&d, r, tg, L);
        for (int k = 0; k < n && k < L; k++)
            if (tg[k].bucket > max_bucket) max_bucket = tg[k].bucket;
    }
    if (max_bucket < 0) max_bucket = 0;
    if (!width) width = t->kind == LATENT_TASK_VAR ? 1 : (max_bucket + 7) / 8 > 0 ? (max_bucket + 7) / 8 : 1;
    int n_rows = max_bucket / (int)width + 1;
    if (!(tab = calloc((size_t)n_rows * n_kinds, sizeof *tab))) {
        cli_fail("eval: out of memory");
        goto done;
    }
    int shown = 0;
    for (int r0 = 0; r0 < n_rec; r0 += (int)batch) {
        int nb = n_rec - r0 < batch ? n_rec - r0 : (int)batch, ne[2] = {0, 0};
        latent_batch_entry *step[2] = {ents, ents + batch};
        for (int b = 0; b < nb; b++) {
            int r = r0 + b;
            const size_t off = (size_t)r * L;
            latent_target *tb = tg + (size_t)b * L;
            n_tg[b] = latent_task_targets(&d, r, tb, L);
            if (n_tg[b] > L) n_tg[b] = L;
            int last = 0;
            for (int k = 0; k < n_tg[b]; k++)
                if (tb[k].pos > last) last = tb[k].pos;
            if (last == 0) continue; /* nothing scored */
            if (latent_seq_init(&seqs[b], &pool, &m.cfg, &err) != 0) {
                cli_fail("eval: %s", err.msg);
                goto done;
            }
            /* inputs 0 .. last-1; leading flow-1 tokens as a prompt */
            int f = 0;
            while (d.flow && f < last && d.flow[off + f] == 1) f++;
            const int32_t *tok = (const int32_t *)(d.tokens + off);
            float *out = logits + (size_t)b * L * V;
            if (f > 0)
                step[0][ne[0]++] = (latent_batch_entry){.seq = &seqs[b], .tokens = tok, .n_tokens = f, .prompt = 1,
                                                        .logits = LATENT_LOGITS_ALL, .out = out};
            if (last > f)
                step[1][ne[1]++] = (latent_batch_entry){.seq = &seqs[b], .tokens = tok + f, .n_tokens = last - f,
                                                        .prompt = 0, .logits = LATENT_LOGITS_ALL,
                                                        .out = out + (size_t)f * V};
        }
        for (int s = 0; s < 2; s++)
            if (ne[s] && latent_engine_step(eng, step[s], ne[s], &err) != 0) {
                cli_fail("eval: %s", err.msg);
                goto done;
            }
        for (int b = 0; b < nb; b++) {
            const latent_target *tb = tg + (size_t)b * L;
            const float *out = logits + (size_t)b * L * V;
            int all_ok = 1, *got = malloc((size_t)(n_tg[b] + 1) * sizeof *got);
            if (!got) {
                cli_fail("eval: out of memory");
                goto done;
            }
            for (int k = 0; k < n_tg[b]; k++) {
                const float *row = out + (size_t)(tb[k].pos - 1) * V;
                int best = 0;
                for (int j = 1; j < V; j++)
                    if (row[j] > row[best]) best = j;
                got[k] = best;
                int ok = (uint32_t)best == tb[k].want;
                all_ok &= ok;
                int bk = tb[k].bucket < 0 ? 0 : tb[k].bucket / (int)width;
                acc *a = &tab[(size_t)bk * n_kinds + tb[k].kind];
                a->n++, a->ok += ok;
                total[tb[k].kind].n++, total[tb[k].kind].ok += ok;
            }
            if (shown < show) {
                /* ids first (pos:want:got), then the symbols (want, or want/got when wrong) */
                printf("record %d:", r0 + b);
                for (int k = 0; k < n_tg[b]; k++) printf(" %d:%u:%d", tb[k].pos, tb[k].want, got[k]);
                printf("  |");
                for (int k = 0; k < n_tg[b]; k++) {
                    char w[32], g[32];
                    latent_task_token_name(t, (int)tb[k].want, w, sizeof w);
                    latent_task_token_name(t, got[k], g, sizeof g);
                    printf(" %s%s%s", !strcmp(w, " ") ? "_" : w, (uint32_t)got[k] == tb[k].want ? "" : "/",
                           (uint32_t)got[k] == tb[k].want ? "" : !strcmp(g, " ") ? "_" : g);
                }
                printf("\n");
                shown++;
            }
            free(got);
            if (n_tg[b]) whole.n++, whole.ok += all_ok;
            latent_seq_free(&seqs[b]);
        }
    }
    char g[16];
    if (json) {
        printf("{\"task\": \"%s\", \"group\": \"%s\", \"records\": %d, \"bucket\": \"%s\", \"bucket_width\": %ld, \"rows\": [",
               latent_task_kind_name(t->kind), latent_task_group_name(t, g, sizeof g), n_rec, latent_task_bucket_name(t), width);
        int first = 1;
        for (int row = 0; row < n_rows; row++)
            for (int k = 0; k < n_kinds; k++) {
                acc a = tab[(size_t)row * n_kinds + k];
                if (!a.n) continue;
                printf("%s{\"kind\": \"%s\", \"from\": %ld, \"to\": %ld, \"n\": %lld, \"accuracy\": %.6f}", first ? "" : ", ",
                       kinds[k], row * width, row * width + width - 1, (long long)a.n, (double)a.ok / (double)a.n);
                first = 0;
            }
        printf("], \"overall\": {");
        for (int k = 0; k < n_kinds; k++)
            printf("%s\"%s\": %.6f", k ? ", " : "", kinds[k], total[k].n ? (double)total[k].ok / (double)total[k].n : 0.0);
        printf("}, \"records_correct\": %.6f}\n", whole.n ? (double)whole.ok / (double)whole.n : 0.0);
    } else {
        printf("%s%s%s: %d records of %d tokens, model %s\n", latent_task_kind_name(t->kind), t->kind == LATENT_TASK_GROUP ? " " : "",
               latent_task_group_name(t, g, sizeof g), n_rec, L, dir);
        printf("%-10s %-12s %10s %9s\n", "kind", latent_task_bucket_name(t), "targets", "accuracy");
        for (int row = 0; row < n_rows; row++)
            for (int k = 0; k < n_kinds; k++) {
                acc a = tab[(size_t)row * n_kinds + k];
                if (!a.n) continue;
                char range[32];
                if (width == 1) snprintf(range, sizeof range, "%ld", row * width);
                else snprintf(range, sizeof range, "%ld-%ld", row * width, row * width + width - 1);
                printf("%-10s %-12s %10lld %9.4f\n", kinds[k], range, (long long)a.n, (double)a.ok / (double)a.n);
            }
        for (int k = 0; k < n_kinds; k++)
            if (total[k].n)
                printf("%-10s %-12s %10lld %9.4f\n", kinds[k], "all", (long long)total[k].n, (double)total[k].ok / (double)total[k].n);
        printf("records fully correct: %lld of %lld (%.4f)\n", (long long)whole.ok, (long long)whole.n,
               whole.n ? (double)whole.ok / (double)whole.n : 0.0);
    }
    rc = 0;
done:
    if (seqs)
        for (int b = 0; b < batch; b++) latent_seq_free(&seqs[b]);
    latent_engine_free(eng);
    latent_kv_pool_free(&pool);
    free(seqs);
    free(ents);
    free(logits);
    free(tg);
    free(n_tg);
    free(tab);
    free(total);
    latent_model_free(&m);
    latent_dataset_free(&d);
    return rc;
}
