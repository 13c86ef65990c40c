/* latent init: a new model directory from a config, with initial weights. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "latent/config.h"
#include "latent/model.h"
#include "latent/model_init.h"
#include "latent/tokenizer.h"

static const char *help =
    "usage: latent init --config FILE.json --out DIR --seed N [--tokenizer DIR]\n"
    "                   [--dtype f32|bf16] [--std X] [--gamma X]\n"
    "                   [--gamma-rec X] [--gamma-cur X] [--force]\n"
    "\n"
    "Writes a new model directory DIR: config.json (the Llama fields of FILE.json,\n"
    "plus its \"latent_recurrence\" block if any), model.safetensors with initial\n"
    "weights drawn from --seed, and the tokenizer files of --tokenizer DIR\n"
    "(tokenizer.json, tokenizer_config.json, special_tokens_map.json,\n"
    "generation_config.json, whichever exist).\n"
    "\n"
    "Initial weights: matrices and embeddings N(0, std) with std = --std (0.02),\n"
    "o_proj and down_proj N(0, std/sqrt(2*layers)); RMSNorm weights 1.\n"
    "T2MLR: w_rec N(0, 1/d), gate weights N(0, std), gate biases 0, gamma_rec =\n"
    "gamma_cur = --gamma (0.1), or each its own with --gamma-rec / --gamma-cur\n"
    "(the state-tracking recipe: --gamma-rec 1 --gamma-cur 0). LRT: alpha 1,\n"
    "gamma --gamma (0.1), gate weights 0 (gates 1), k/v projections N(0, std).\n"
    "The same seed gives the same backbone with or without the recurrence.\n"
    "\n"
    "DIR is written atomically (a temporary sibling directory, fsync, rename);\n"
    "an existing DIR is refused unless --force.\n";

typedef struct {
    const char *config_path, *out, *tok_dir, *seed_arg;
    int bf16, force;
    latent_init_opts o;
    long seed;
} init_args;

/* 0 to run, 1 when --help printed, 2 (cli_fail's code) on bad usage. */
static int parse_args(int argc, char **argv, init_args *a) {
    const char *v;
    *a = (init_args){0};
    latent_init_defaults(&a->o);
    double gamma = 0;
    int have_gamma = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--force")) { a->force = 1; continue; }
        if (cli_opt(argc, argv, &i, "--config", &a->config_path) || cli_opt(argc, argv, &i, "--out", &a->out) ||
            cli_opt(argc, argv, &i, "--tokenizer", &a->tok_dir) || cli_opt(argc, argv, &i, "--seed", &a->seed_arg))
            continue;
        if (cli_opt(argc, argv, &i, "--dtype", &v)) {
            if (!strcmp(v, "f32")) a->bf16 = 0;
            else if (!strcmp(v, "bf16")) a->bf16 = 1;
            else return cli_fail("init: --dtype must be f32 or bf16 (got '%s')", v);
            continue;
        }
        if (cli_opt(argc, argv, &i, "--std", &v)) {
            double x;
            if (cli_parse_double(v, 0, 10, &x) != 0) return cli_fail("init: --std must be a number from 0 to 10 (got '%s')", v);
            a->o.std = (float)x;
            continue;
        }
        if (cli_opt(argc, argv, &i, "--gamma", &v)) {
            if (cli_parse_double(v, -10, 10, &gamma) != 0) return cli_fail("init: --gamma must be a number from -10 to 10 (got '%s')", v);
            have_gamma = 1;
            continue;
        }
        if (cli_opt(argc, argv, &i, "--gamma-rec", &v) || cli_opt(argc, argv, &i, "--gamma-cur", &v)) {
            double x;
            if (cli_parse_double(v, -10, 10, &x) != 0) return cli_fail("init: %s must be a number from -10 to 10 (got '%s')", argv[i - 1], v);
            *(!strcmp(argv[i - 1], "--gamma-rec") ? &a->o.t2mlr_gamma_rec : &a->o.t2mlr_gamma_cur) = (float)x;
            continue;
        }
        fputs(help, stderr);
        return cli_fail("init: unknown option '%s'", argv[i]);
    }
    if (!a->config_path) return cli_fail("init: --config FILE.json is required");
    if (!a->out) return cli_fail("init: --out DIR is required");
    if (!a->seed_arg) return cli_fail("init: --seed N is required");
    if (cli_parse_long(a->seed_arg, 0, __LONG_MAX__, &a->seed) != 0)
        return cli_fail("init: --seed must be a non-negative integer (got '%s')", a->seed_arg);
    a->o.seed = (uint64_t)a->seed;
    if (have_gamma) a->o.t2mlr_gamma = a->o.lrt_gamma = (float)gamma;
    return 0;
}

/* --tokenizer DIR: its tokenizer.json loads and fits cfg's vocabulary.
 * 0, or the exit code after saying why. */
static int check_tokenizer(const init_args *a, const latent_config *cfg) {
    latent_err err;
    size_t n = strlen(a->tok_dir) + sizeof "/tokenizer.json";
    char *p = malloc(n);
    if (!p) return cli_fail("init: out of memory");
    snprintf(p, n, "%s/tokenizer.json", a->tok_dir);
    latent_tokenizer *t = latent_tokenizer_load(p, &err);
    free(p);
    if (!t) {
        cli_fail("init: --tokenizer: %s", err.msg);
        return 1;
    }
    int tv = latent_tokenizer_vocab_size(t);
    latent_tokenizer_free(t);
    if (tv > cfg->vocab) {
        cli_fail("init: the tokenizer of %s has %d tokens but %s says vocab_size %d (make it at least %d)",
                 a->tok_dir, tv, a->config_path, cfg->vocab, tv);
        return 1;
    }
    return 0;
}

int cmd_init(int argc, char **argv) {
    init_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc == 1 ? 0 : prc;

    latent_err err;
    latent_config cfg;
    if (latent_config_load(a.config_path, &cfg, &err) != 0) {
        cli_fail("init: %s", err.msg);
        return 1;
    }
    if (a.tok_dir) {
        int trc = check_tokenizer(&a, &cfg);
        if (trc) return trc;
    }
    latent_weights w;
    if (latent_weights_alloc(&w, &cfg, &err) != 0) {
        cli_fail("init: %s", err.msg);
        return 1;
    }
    latent_weights_init(&w, &cfg, &a.o);
    int64_t n_params = 0;
    for (int i = 0; i < w.n_params; i++)
        if (!(cfg.tie_embeddings && !strcmp(w.params[i].name, "lm_head.weight"))) n_params += w.params[i].numel;
    int rc = 0;
    if (latent_model_dir_write(a.out, &cfg, &w, a.bf16, a.tok_dir, a.force, &err) != 0) {
        cli_fail("init: %s", err.msg);
        rc = 1;
    } else {
        fprintf(stderr, "latent: init: wrote %s (%d tensors, %.2fM parameters, %s, seed %ld%s)\n", a.out,
                w.n_params, (double)n_params / 1e6, a.bf16 ? "BF16" : "F32", a.seed,
                cfg.rec == LATENT_REC_T2MLR ? ", T2MLR" : cfg.rec == LATENT_REC_LRT ? ", LRT" : "");
    }
    latent_weights_free(&w);
    return rc;
}
