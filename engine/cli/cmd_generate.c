/* latent generate: stream a completion of a prompt to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "latent/engine.h"
#include "latent/kv.h"
#include "latent/model.h"
#include "latent/sampler.h"
#include "latent/tokenizer.h"

static const char *help =
    "usage: latent generate --model DIR --prompt TEXT [-n N] [--temperature T]\n"
    "                       [--top-k K] [--top-p P] [--seed S] [--ids]\n"
    "                       [--precision auto|f32|bf16] [--weights auto|q8] [--kv-dtype auto|f32|bf16]\n"
    "\n"
    "Encodes TEXT with DIR/tokenizer.json, runs it as a prompt and streams up to N\n"
    "(default 64) generated tokens to stdout as text, stopping early at the model's\n"
    "end-of-sequence token. --temperature 0 (the default) is greedy; otherwise the\n"
    "sampler draws with the seeded generator (--seed, default 0), so the same seed\n"
    "gives the same text. --ids prints the generated ids as a JSON array instead.\n";

static int is_eos(const latent_config *c, int32_t id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return 1;
    return 0;
}

typedef struct {
    const char *dir, *prompt, *kv_setting;
    long n_gen, seed, top_k;
    double temperature, top_p;
    int print_ids;
    latent_engine_opts eo;
} gen_args;

/* 0 to run, 1 when --help printed, 2 (cli_fail's code) on bad usage. */
static int parse_args(int argc, char **argv, gen_args *a) {
    const char *v;
    *a = (gen_args){.kv_setting = "auto", .n_gen = 64, .top_p = 1};
    for (int i = 1; i < argc; i++) {
        if (cli_precision_opt(argc, argv, &i, &a->eo) || cli_opt(argc, argv, &i, "--kv-dtype", &a->kv_setting)) continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--ids")) { a->print_ids = 1; continue; }
        if (cli_opt(argc, argv, &i, "--model", &a->dir) || cli_opt(argc, argv, &i, "--prompt", &a->prompt)) continue;
        if (cli_opt(argc, argv, &i, "-n", &v) || cli_opt(argc, argv, &i, "--max-tokens", &v)) {
            if (cli_parse_long(v, 0, 1L << 24, &a->n_gen) != 0) return cli_fail("generate: -n must be a non-negative integer (got '%s')", v);
            continue;
        }
        if (cli_opt(argc, argv, &i, "--temperature", &v)) {
            if (cli_parse_double(v, 0, 100, &a->temperature) != 0) return cli_fail("generate: --temperature must be a number from 0 to 100 (got '%s')", v);
            continue;
        }
        if (cli_opt(argc, argv, &i, "--top-p", &v)) {
            if (cli_parse_double(v, 0, 1, &a->top_p) != 0) return cli_fail("generate: --top-p must be a number from 0 to 1 (got '%s')", v);
            continue;
        }
        if (cli_opt(argc, argv, &i, "--top-k", &v)) {
            if (cli_parse_long(v, 0, 1L << 30, &a->top_k) != 0) return cli_fail("generate: --top-k must be a non-negative integer (got '%s')", v);
            continue;
        }
        if (cli_opt(argc, argv, &i, "--seed", &v)) {
            if (cli_parse_long(v, 0, __LONG_MAX__, &a->seed) != 0) return cli_fail("generate: --seed must be a non-negative integer (got '%s')", v);
            continue;
        }
        fputs(help, stderr);
        return cli_fail("generate: unknown option '%s'", argv[i]);
    }
    if (!a->dir) return cli_fail("generate: --model DIR is required");
    if (!a->prompt) return cli_fail("generate: --prompt TEXT is required");
    return 0;
}

/* Encodes the prompt into *ids (malloc'd, with room for the tokens to
 * generate); the prompt's length, or -1 after saying why. */
static int encode_prompt(const latent_model *m, const gen_args *a, int32_t **ids) {
    if (!m->tok) {
        cli_fail("generate: %s has no tokenizer.json", a->dir);
        return -1;
    }
    size_t plen = strlen(a->prompt);
    int n_prompt = latent_tokenizer_encode(m->tok, a->prompt, plen, NULL, 0);
    if (n_prompt < 1) {
        cli_fail("generate: the prompt encodes to no tokens");
        return -1;
    }
    if (n_prompt + a->n_gen > m->cfg.max_pos) {
        cli_fail("generate: %d prompt tokens + %ld to generate exceed the context of %d", n_prompt, a->n_gen,
                 m->cfg.max_pos);
        return -1;
    }
    *ids = malloc((n_prompt + a->n_gen + 1) * sizeof **ids);
    if (!*ids) {
        cli_fail("generate: out of memory");
        return -1;
    }
    latent_tokenizer_encode(m->tok, a->prompt, plen, *ids, n_prompt);
    return n_prompt;
}

/* Runs the prompt ids[0..n_prompt) and samples up to a->n_gen tokens after
 * it into ids, printing each (text or ids) as it comes. 0, or 1 after saying
 * why. */
static int decode(latent_engine *eng, const latent_model *m, latent_seq *seq, const gen_args *a, int32_t *ids,
                  int n_prompt, float *logits) {
    latent_err err;
    latent_sampler_params sp;
    latent_sampler_defaults(&sp);
    sp.temperature = (float)a->temperature;
    sp.top_p = (float)a->top_p;
    sp.top_k = (int)a->top_k;
    latent_rng rng;
    latent_rng_seed(&rng, (uint64_t)a->seed);
    latent_utf8_stream utf8 = {0};
    static char piece[4096], text[LATENT_UTF8_STREAM_ROOM(4096)];

    latent_batch_entry b = {.seq = seq, .tokens = ids, .n_tokens = n_prompt, .prompt = 1,
                            .logits = LATENT_LOGITS_LAST, .out = logits};
    if (a->print_ids) putchar('[');
    for (int t = 0; t < a->n_gen; t++) {
        if (latent_engine_step(eng, &b, 1, &err) != 0) {
            cli_fail("%s", err.msg);
            return 1;
        }
        latent_sample s;
        int32_t next = latent_sampler_sample(&sp, &rng, logits, m->cfg.vocab, ids, n_prompt + t, &s);
        ids[n_prompt + t] = next;
        if (is_eos(&m->cfg, next)) break;
        if (a->print_ids) {
            printf(t ? ", %d" : "%d", next);
        } else {
            int nb = latent_tokenizer_token_bytes(m->tok, next, piece, sizeof piece);
            if (nb > (int)sizeof piece) nb = (int)sizeof piece; /* longer tokens are cut */
            size_t out = nb > 0 ? latent_utf8_stream_feed(&utf8, piece, (size_t)nb, text) : 0;
            fwrite(text, 1, out, stdout);
        }
        fflush(stdout);
        b = (latent_batch_entry){.seq = seq, .tokens = &ids[n_prompt + t], .n_tokens = 1, .prompt = 0,
                                 .logits = LATENT_LOGITS_LAST, .out = logits};
    }
    if (a->print_ids) {
        puts("]");
    } else {
        size_t out = latent_utf8_stream_flush(&utf8, text);
        fwrite(text, 1, out, stdout);
        putchar('\n');
    }
    return 0;
}

int cmd_generate(int argc, char **argv) {
    gen_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc == 1 ? 0 : prc;

    latent_model m = {0};
    latent_err err;
    if (cli_load_model(&m, a.dir, &a.eo, &err) != 0) {
        cli_fail("%s", err.msg);
        return 1;
    }
    int rc = 1;
    cli_session s = {0};
    float *logits = NULL;
    int32_t *ids = NULL;
    int n_prompt = encode_prompt(&m, &a, &ids);
    if (n_prompt < 0) goto done;
    logits = malloc((size_t)m.cfg.vocab * sizeof(float));
    if (!logits) {
        cli_fail("generate: out of memory");
        goto done;
    }
    if (cli_session_init(&s, &m, &a.eo, a.kv_setting, n_prompt + (int)a.n_gen, &err) != 0) {
        cli_fail("%s", err.msg);
        goto done;
    }
    rc = decode(s.eng, &m, &s.seq, &a, ids, n_prompt, logits);
done:
    free(ids);
    free(logits);
    cli_session_free(&s);
    latent_model_free(&m);
    return rc;
}
