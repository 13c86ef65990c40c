/* latent data: training files for the papers' synthetic tasks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "latent/data.h"

static const char *help =
    "usage: latent data TASK --out PREFIX --n-records N --seed S [options]\n"
    "\n"
    "Writes PREFIX.bin (uint32 token ids), PREFIX.mask (1 byte per token: 1 = scored\n"
    "target), PREFIX.labels (tagging tasks: the target ids), PREFIX.flow (S5\n"
    "retrieval: control flow per token) and PREFIX.json (the task; `latent eval`\n"
    "reads it); see docs/training.md, \"Data files\". Records have a fixed length\n"
    "(--record-len, default the shortest that fits): train with --seq RECORD_LEN.\n"
    "\n"
    "TASK and its options:\n"
    "  group        word problems: a sequence of group elements, the target at every\n"
    "               element is the running product (a tagging task, with labels)\n"
    "    --group G          parity (= z2), zN (cyclic, e.g. z5), s3, s4, s5 (default), s6\n"
    "    --min-len A --max-len B   elements per record (default 16..16); --len K sets both\n"
    "    --final-only       LM format \"<g1> .. <gk> = <product>\", only the product scored\n"
    "  s5-retrieval S5 state tracking with in-context retrieval (T2MLR paper): a\n"
    "               dictionary <perm> value.. then '|', then per action <perm> and\n"
    "               value-len slots; targets: the running state at each action and the\n"
    "               action's dictionary value at its slots; dictionary tokens flow 1\n"
    "    --min-len A --max-len B   actions per record (default 8..8); --len K sets both\n"
    "    --dict-size D      keys (default: as many as actions; 120 = every permutation)\n"
    "    --value-len K      characters per value (1); --n-values V alphabet size (62)\n"
    "  var-assign   variable assignment: \"a=5;b=a;c=b;...;c?\" then the digit (LM format)\n"
    "    --min-depth A --max-depth B   alias hops from the query to a digit (2..2);\n"
    "                       --depth K sets both\n"
    "    --n-base N         variables set to a digit (8); --distractors N extra aliases (6)\n"
    "    --order shuffled|program   lines in any order (default), or as a program:\n"
    "                       every variable assigned on a line before its use\n"
    "    --queries Q        Q queries a record (1): first Q-1 \"v?d;\" of random\n"
    "                       variables, each answer scored, then the task's query\n"
    "    --query-from any|chain|alias|distinct   the extra queries ask for any\n"
    "                       variable (default), only the aliases on the query's\n"
    "                       chain (depths 1..d), any alias (the chain and the\n"
    "                       distractors: no plain lookups), or aliases ending at\n"
    "                       distinct digit variables, none the query's (no answer\n"
    "                       copies another; fewer queries where the record has\n"
    "                       fewer such aliases)\n"
    "    --query-any P      in P% of the records the task's query asks for a random\n"
    "                       variable (any depth, distractors included) instead of\n"
    "                       the chain's head (0): no answer without every line\n"
    "    --decoy P          in P% of the records the first d distractors form a decoy\n"
    "                       chain as deep as the query's (d), ending at another digit\n"
    "                       variable (0): the chain asked is not found by its shape\n"
    "\n"
    "Common: --record-len L, --tokenizer-out DIR (writes DIR/tokenizer.json with the\n"
    "task's symbols, for `latent init --tokenizer DIR`), --show K (print the first\n"
    "K records as text). The vocabulary: PAD 0, BOS 1, EOS 2, then the task's symbols.\n";

static int opt_int(int argc, char **argv, int *i, const char *name, long lo, long hi, int *out, int *bad) {
    const char *v;
    if (!cli_opt(argc, argv, i, name, &v)) return 0;
    long x;
    if (cli_parse_long(v, lo, hi, &x) != 0) {
        cli_fail("data: %s must be an integer from %ld to %ld (got '%s')", name, lo, hi, v);
        *bad = 1;
    }
    *out = (int)x;
    return 1;
}

static void show_record(const latent_dataset *d, int r) {
    char name[32];
    const size_t off = (size_t)r * d->record_len;
    printf("record %d:", r);
    for (int p = 0; p < d->record_len; p++) {
        uint32_t id = d->tokens[off + p];
        if (id == LATENT_DATA_PAD && p > 0) break;
        latent_task_token_name(&d->task, (int)id, name, sizeof name);
        printf(" %s", !strcmp(name, " ") ? "_" : name);
    }
    printf("\n  targets:");
    latent_target tg[4096];
    int n = latent_task_targets(d, r, tg, 4096);
    for (int i = 0; i < n && i < 4096; i++) {
        latent_task_token_name(&d->task, (int)tg[i].want, name, sizeof name);
        printf(" %d:%s", tg[i].pos, name);
    }
    printf("\n");
}

typedef struct {
    latent_task t;
    const char *out, *tok_out, *group, *seed_arg, *order, *query_from;
    int n_records, record_len, show, len, depth;
    long seed;
} data_args;

/* The options of t's kind (lengths, --group, dictionary, depths): 1 when
 * argv[*i] was one (*bad set when its value was not good), else 0. */
static int task_opt(int argc, char **argv, int *i, data_args *a, int *bad) {
    latent_task *t = &a->t;
    if (!strcmp(argv[*i], "--final-only") && t->kind == LATENT_TASK_GROUP) { t->final_only = 1; return 1; }
    if (t->kind == LATENT_TASK_GROUP && cli_opt(argc, argv, i, "--group", &a->group)) return 1;
    if (t->kind == LATENT_TASK_VAR && cli_opt(argc, argv, i, "--order", &a->order)) return 1;
    if (t->kind == LATENT_TASK_VAR && cli_opt(argc, argv, i, "--query-from", &a->query_from)) return 1;
    if (t->kind != LATENT_TASK_VAR &&
        (opt_int(argc, argv, i, "--min-len", 1, 100000, &t->min_len, bad) ||
         opt_int(argc, argv, i, "--max-len", 1, 100000, &t->max_len, bad) ||
         opt_int(argc, argv, i, "--len", 1, 100000, &a->len, bad)))
        return 1;
    if (t->kind == LATENT_TASK_S5R &&
        (opt_int(argc, argv, i, "--dict-size", 0, 120, &t->dict_size, bad) ||
         opt_int(argc, argv, i, "--value-len", 1, 16, &t->value_len, bad) ||
         opt_int(argc, argv, i, "--n-values", 2, 62, &t->n_values, bad)))
        return 1;
    if (t->kind == LATENT_TASK_VAR &&
        (opt_int(argc, argv, i, "--min-depth", 0, 200, &t->min_depth, bad) ||
         opt_int(argc, argv, i, "--max-depth", 0, 200, &t->max_depth, bad) ||
         opt_int(argc, argv, i, "--depth", 0, 200, &a->depth, bad) ||
         opt_int(argc, argv, i, "--n-base", 1, 200, &t->n_base, bad) ||
         opt_int(argc, argv, i, "--distractors", 0, 200, &t->n_distractors, bad) ||
         opt_int(argc, argv, i, "--queries", 1, 200, &t->n_queries, bad) ||
         opt_int(argc, argv, i, "--query-any", 0, 100, &t->query_any_pct, bad) ||
         opt_int(argc, argv, i, "--decoy", 0, 100, &t->decoy_pct, bad)))
        return 1;
    return 0;
}

/* What the options imply once all are read: --len, --depth, --group, the
 * seed and what is required. 0, or cli_fail's code. */
static int finish_args(data_args *a) {
    latent_task *t = &a->t;
    if (a->len) t->min_len = t->max_len = a->len;
    if (a->depth >= 0) t->min_depth = t->max_depth = a->depth;
    if (a->order) {
        if (!strcmp(a->order, "program")) t->program_order = 1;
        else if (strcmp(a->order, "shuffled")) return cli_fail("data: --order must be shuffled or program (got '%s')", a->order);
    }
    if (a->query_from) {
        if (!strcmp(a->query_from, "chain")) t->query_from = LATENT_VAR_QUERY_CHAIN;
        else if (!strcmp(a->query_from, "alias")) t->query_from = LATENT_VAR_QUERY_ALIAS;
        else if (!strcmp(a->query_from, "distinct")) t->query_from = LATENT_VAR_QUERY_DISTINCT;
        else if (strcmp(a->query_from, "any"))
            return cli_fail("data: --query-from must be any, chain, alias or distinct (got '%s')", a->query_from);
    }
    const char *group = a->group;
    if (group) {
        if (!strcmp(group, "parity")) t->group = 'z', t->n = 2;
        else if ((group[0] == 'z' || group[0] == 's') && group[1]) {
            long n;
            if (cli_parse_long(group + 1, 2, 4096, &n) != 0) return cli_fail("data: bad --group '%s'", group);
            t->group = group[0], t->n = (int)n;
        } else {
            return cli_fail("data: --group must be parity, zN, s3, s4, s5 or s6 (got '%s')", group);
        }
    }
    if (!a->out && !a->tok_out) return cli_fail("data: --out PREFIX (or --tokenizer-out DIR) is required");
    if (a->out && !a->seed_arg) return cli_fail("data: --seed S is required");
    if (a->seed_arg && cli_parse_long(a->seed_arg, 0, __LONG_MAX__, &a->seed) != 0)
        return cli_fail("data: --seed must be a non-negative integer (got '%s')", a->seed_arg);
    if (a->out && a->n_records < 1) return cli_fail("data: --n-records N is required");
    return 0;
}

/* 0 to run, 1 when --help printed, 2 (cli_fail's code) on bad usage. */
static int parse_args(int argc, char **argv, data_args *a) {
    *a = (data_args){.depth = -1};
    latent_task *t = &a->t;
    if (!strcmp(argv[1], "group")) latent_task_defaults(t, LATENT_TASK_GROUP);
    else if (!strcmp(argv[1], "s5-retrieval")) latent_task_defaults(t, LATENT_TASK_S5R);
    else if (!strcmp(argv[1], "var-assign")) latent_task_defaults(t, LATENT_TASK_VAR);
    else {
        fputs(help, stderr);
        return cli_fail("data: unknown task '%s' (group, s5-retrieval, var-assign)", argv[1]);
    }
    int bad = 0;
    for (int i = 2; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 1;
        }
        if (cli_opt(argc, argv, &i, "--out", &a->out) || cli_opt(argc, argv, &i, "--tokenizer-out", &a->tok_out) ||
            cli_opt(argc, argv, &i, "--seed", &a->seed_arg))
            continue;
        if (opt_int(argc, argv, &i, "--n-records", 1, 1L << 30, &a->n_records, &bad) ||
            opt_int(argc, argv, &i, "--record-len", 2, 1L << 24, &a->record_len, &bad) ||
            opt_int(argc, argv, &i, "--show", 0, 1000, &a->show, &bad) || task_opt(argc, argv, &i, a, &bad))
            continue;
        fputs(help, stderr);
        return cli_fail("data: unknown option '%s' for %s", argv[i], argv[1]);
    }
    if (bad) return 2;
    return finish_args(a);
}

/* Generates the records, prints the first --show of them, and writes the
 * PREFIX files. 0, or 1 after saying why. */
static int write_dataset(const data_args *a) {
    latent_err err;
    latent_dataset d;
    if (latent_data_generate(&a->t, (uint64_t)a->seed, a->n_records, a->record_len, &d, &err) != 0) {
        cli_fail("%s", err.msg);
        return 1;
    }
    for (int r = 0; r < a->show && r < d.n_records; r++) show_record(&d, r);
    int rc = 0;
    if (latent_dataset_save(&d, a->out, &err) != 0) {
        cli_fail("%s", err.msg);
        rc = 1;
    } else {
        int64_t scored = 0;
        for (int64_t i = 0; i < d.n_tokens; i++) scored += d.mask[i];
        char g[16];
        fprintf(stderr, "latent: data: wrote %s.{bin,mask%s%s,json}: %s%s%s, %d records of %d tokens, %lld scored targets, "
                "vocabulary %d\n", a->out, d.labels ? ",labels" : "", d.flow ? ",flow" : "", latent_task_kind_name(a->t.kind),
                a->t.kind == LATENT_TASK_GROUP ? " " : "", latent_task_group_name(&a->t, g, sizeof g), d.n_records,
                d.record_len, (long long)scored, latent_task_vocab_size(&a->t));
    }
    latent_dataset_free(&d);
    return rc;
}

int cmd_data(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(help, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    data_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc == 1 ? 0 : prc;

    latent_err err;
    if (latent_task_check(&a.t, &err) != 0) return cli_fail("%s", err.msg);
    if (a.tok_out) {
        if (latent_task_write_tokenizer(&a.t, a.tok_out, &err) != 0) {
            cli_fail("%s", err.msg);
            return 1;
        }
        fprintf(stderr, "latent: data: wrote %s/tokenizer.json (%d tokens: pad 0, bos 1, eos 2)\n", a.tok_out,
                latent_task_vocab_size(&a.t));
    }
    if (!a.out) return 0;
    return write_dataset(&a);
}
