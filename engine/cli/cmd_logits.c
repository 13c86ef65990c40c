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

int cmd_logits(int argc, char **argv) {
    const char *dir = NULL, *tokens_arg = NULL, *n_prompt_arg = NULL;
    int incremental = 0;
    latent_engine_opts eo = {0};
    const char *kv_setting = "auto";
    for (int i = 1; i < argc; i++) {
        if (cli_precision_opt(argc, argv, &i, &eo) || cli_opt(argc, argv, &i, "--kv-dtype", &kv_setting)) continue;
        if (!strcmp(argv[i], "--incremental")) {
            incremental = 1;
            continue;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 0;
        }
        if (cli_opt(argc, argv, &i, "--model", &dir) || cli_opt(argc, argv, &i, "--tokens", &tokens_arg) ||
            cli_opt(argc, argv, &i, "--n-prompt", &n_prompt_arg))
            continue;
        fputs(help, stderr);
        return cli_fail("logits: unknown option '%s'", argv[i]);
    }
    if (!dir) return cli_fail("logits: --model DIR is required");
    if (!tokens_arg) return cli_fail("logits: --tokens ID,ID,... is required");
    int32_t *ids = NULL;
    int n = cli_parse_ids(tokens_arg, &ids);
    if (n < 1) return cli_fail("logits: --tokens must be comma-separated non-negative integers (got '%s')", tokens_arg);
    long n_prompt = n;
    if (n_prompt_arg && cli_parse_long(n_prompt_arg, 0, n, &n_prompt) != 0) {
        free(ids);
        return cli_fail("logits: --n-prompt must be an integer from 0 to %d", n);
    }

    latent_model m = {0};
    latent_err err;
    if (cli_load_model(&m, dir, &eo, &err) != 0) {
        free(ids);
        cli_fail("%s", err.msg);
        return 1;
    }
    int rc = 1;
    latent_kv_pool pool = {0};
    latent_seq seq = {0};
    latent_engine *eng = NULL;
    float *logits = NULL;
    for (int i = 0; i < n; i++)
        if (ids[i] >= m.cfg.vocab) {
            cli_fail("logits: token id %d is outside the vocabulary (0..%d)", ids[i], m.cfg.vocab - 1);
            goto done;
        }
    if (n > m.cfg.max_pos) {
        cli_fail("logits: %d tokens exceed the model's context of %d", n, m.cfg.max_pos);
        goto done;
    }
    if (cli_kv_pool(&pool, &m, &eo, kv_setting, 1, n, &err) != 0 ||
        latent_seq_init(&seq, &pool, &m.cfg, &err) != 0 || !(eng = latent_engine_new_opts(&m, &eo, &err))) {
        cli_fail("%s", err.msg);
        goto done;
    }
    logits = malloc((size_t)n * m.cfg.vocab * sizeof(float));
    if (!logits) {
        cli_fail("logits: out of memory");
        goto done;
    }
    /* The prompt in one step, then the generated part in another. */
    latent_batch_entry parts[2] = {
        {.seq = &seq, .tokens = ids, .n_tokens = (int)n_prompt, .prompt = 1, .logits = LATENT_LOGITS_ALL, .out = logits},
        {.seq = &seq, .tokens = ids + n_prompt, .n_tokens = n - (int)n_prompt, .prompt = 0,
         .logits = LATENT_LOGITS_ALL, .out = logits + (size_t)n_prompt * m.cfg.vocab},
    };
    for (int p = 0; p < 2; p++) {
        latent_batch_entry b = parts[p];
        int step = incremental ? 1 : b.n_tokens;
        for (int i = 0; i < parts[p].n_tokens; i += step) {
            b.tokens = parts[p].tokens + i;
            b.n_tokens = step;
            b.out = parts[p].out + (size_t)i * m.cfg.vocab;
            if (latent_engine_step(eng, &b, 1, &err) != 0) {
                cli_fail("%s", err.msg);
                goto done;
            }
        }
    }
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
    latent_engine_free(eng);
    latent_seq_free(&seq);
    latent_kv_pool_free(&pool);
    latent_model_free(&m);
    free(ids);
    return rc;
}
