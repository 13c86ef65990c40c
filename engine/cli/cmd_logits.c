/* latent logits: every position's logits for a token sequence, as JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "latent/engine.h"
#include "latent/kv.h"
#include "latent/model.h"

static const char *help =
    "usage: latent logits --model DIR --tokens ID,ID,... [--n-prompt K] [--incremental]\n"
    "                     [--precision auto|f32|bf16] [--weights auto|q8] [--kv-dtype auto|f32|bf16]\n"
    "\n"
    "Runs the model over the tokens and prints {\"logits\": [[...], ...]}, one row\n"
    "of vocab_size floats per position. The first K tokens (all, by default) are a\n"
    "prompt and follow the model's control-flow rules (recur_on_prompt); the rest\n"
    "are treated as generated tokens. --incremental feeds one token per step\n"
    "(decoding through the KV cache) instead of one prefill. --precision picks what\n"
    "the matrix products compute in (auto: the checkpoint's dtype), --kv-dtype what\n"
    "the KV cache stores (auto: bf16 under bf16, else f32).\n";

typedef struct {
    const char *dir, *kv_setting;
    int incremental;
    latent_engine_opts eo;
    int32_t *ids; /* --tokens, malloc'd */
    int n;
    long n_prompt;
} logits_args;

/* 0 to run, 1 when --help printed, 2 (cli_fail's code) on bad usage. */
static int parse_args(int argc, char **argv, logits_args *a) {
    const char *tokens_arg = NULL, *n_prompt_arg = NULL;
    *a = (logits_args){.kv_setting = "auto"};
    for (int i = 1; i < argc; i++) {
        if (cli_precision_opt(argc, argv, &i, &a->eo) || cli_opt(argc, argv, &i, "--kv-dtype", &a->kv_setting)) continue;
        if (!strcmp(argv[i], "--incremental")) {
            a->incremental = 1;
            continue;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 1;
        }
        if (cli_opt(argc, argv, &i, "--model", &a->dir) || cli_opt(argc, argv, &i, "--tokens", &tokens_arg) ||
            cli_opt(argc, argv, &i, "--n-prompt", &n_prompt_arg))
            continue;
        fputs(help, stderr);
        return cli_fail("logits: unknown option '%s'", argv[i]);
    }
    if (!a->dir) return cli_fail("logits: --model DIR is required");
    if (!tokens_arg) return cli_fail("logits: --tokens ID,ID,... is required");
    a->n = cli_parse_ids(tokens_arg, &a->ids);
    if (a->n < 1) return cli_fail("logits: --tokens must be comma-separated non-negative integers (got '%s')", tokens_arg);
    a->n_prompt = a->n;
    if (n_prompt_arg && cli_parse_long(n_prompt_arg, 0, a->n, &a->n_prompt) != 0) {
        free(a->ids);
        return cli_fail("logits: --n-prompt must be an integer from 0 to %d", a->n);
    }
    return 0;
}

/* The prompt in one step, then the generated part in another (with
 * --incremental, one token a step); every position's logits into
 * logits (n, vocab). 0, or 1 after saying why. */
static int run_tokens(latent_engine *eng, latent_seq *seq, const logits_args *a, int vocab, float *logits) {
    latent_err err;
    latent_batch_entry parts[2] = {
        {.seq = seq, .tokens = a->ids, .n_tokens = (int)a->n_prompt, .prompt = 1, .logits = LATENT_LOGITS_ALL,
         .out = logits},
        {.seq = seq, .tokens = a->ids + a->n_prompt, .n_tokens = a->n - (int)a->n_prompt, .prompt = 0,
         .logits = LATENT_LOGITS_ALL, .out = logits + (size_t)a->n_prompt * vocab},
    };
    for (int p = 0; p < 2; p++) {
        latent_batch_entry b = parts[p];
        int step = a->incremental ? 1 : b.n_tokens;
        for (int i = 0; i < parts[p].n_tokens; i += step) {
            b.tokens = parts[p].tokens + i;
            b.n_tokens = step;
            b.out = parts[p].out + (size_t)i * vocab;
            if (latent_engine_step(eng, &b, 1, &err) != 0) {
                cli_fail("%s", err.msg);
                return 1;
            }
        }
    }
    return 0;
}

int cmd_logits(int argc, char **argv) {
    logits_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc == 1 ? 0 : prc;
    const int n = a.n;

    latent_model m = {0};
    latent_err err;
    if (cli_load_model(&m, a.dir, &a.eo, &err) != 0) {
        free(a.ids);
        cli_fail("%s", err.msg);
        return 1;
    }
    int rc = 1;
    cli_session s = {0};
    float *logits = NULL;
    for (int i = 0; i < n; i++)
        if (a.ids[i] >= m.cfg.vocab) {
            cli_fail("logits: token id %d is outside the vocabulary (0..%d)", a.ids[i], m.cfg.vocab - 1);
            goto done;
        }
    if (n > m.cfg.max_pos) {
        cli_fail("logits: %d tokens exceed the model's context of %d", n, m.cfg.max_pos);
        goto done;
    }
    if (cli_session_init(&s, &m, &a.eo, a.kv_setting, n, &err) != 0) {
        cli_fail("%s", err.msg);
        goto done;
    }
    logits = malloc((size_t)n * m.cfg.vocab * sizeof(float));
    if (!logits) {
        cli_fail("logits: out of memory");
        goto done;
    }
    if (run_tokens(s.eng, &s.seq, &a, m.cfg.vocab, logits) != 0) goto done;
    fputs("{\"logits\": [", stdout);
    for (int t = 0; t < n; t++) {
        fputs(t ? ",\n[" : "[", stdout);
        for (int j = 0; j < m.cfg.vocab; j++) printf(j ? ", %.9g" : "%.9g", logits[(size_t)t * m.cfg.vocab + j]);
        fputs("]", stdout);
    }
    fputs("]}\n", stdout);
    rc = 0;
done:
    free(logits);
    cli_session_free(&s);
    latent_model_free(&m);
    free(a.ids);
    return rc;
}
