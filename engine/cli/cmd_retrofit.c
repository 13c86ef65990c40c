/* latent retrofit: add a T2MLR or LRT recurrent path to a trained model so that
 * its logits are unchanged (the path starts closed and learns to open). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "latent/config.h"
#include "latent/model.h"
#include "latent/model_init.h"
#include "safetensors.h"

static const char *help =
    "usage: latent retrofit --model BASEDIR (--t2mlr L_START,L_END | --lrt SRC[,START,END])\n"
    "                       --out DIR --seed N [--shared-kv] [--recur-on-prompt 0|1]\n"
    "                       [--no-residual-injection] [--no-kv-injection]\n"
    "                       [--dtype auto|f32|bf16] [--force]\n"
    "\n"
    "Writes DIR: BASEDIR's plain Llama model with a recurrent path added, initialised\n"
    "so that the new model computes exactly the base model's logits:\n"
    "  --t2mlr L_START,L_END  middle-layer recurrence over blocks L_START..L_END\n"
    "                         (0-based, inclusive). gamma_rec = gamma_cur = 0, so\n"
    "                         Phi(h, R) = h; w_rec N(0, 1/d), gate weights N(0, 0.02),\n"
    "                         gate biases 0 (random, so each gamma gets a gradient).\n"
    "  --lrt SRC[,START,END]  memory from block SRC (-1: the final norm's output),\n"
    "                         injected into blocks START..END (default all). alpha 1,\n"
    "                         gamma 0, gate weights 0 (both gates 2*sigmoid(0) = 1),\n"
    "                         k/v memory projections 0: the memory adds exactly 0,\n"
    "                         while the gradients of gamma and of the k/v projections\n"
    "                         are non-zero from the first step.\n"
    "  --shared-kv            LRT: one k/v memory projection for every injected block\n"
    "  --recur-on-prompt 0|1  T2MLR: whether prompt tokens recur (default 1)\n"
    "The backbone tensors are copied unchanged, with the tokenizer files.\n"
    "--dtype auto (default) writes BF16 when the base is all BF16, else F32.\n"
    "DIR is written atomically; an existing DIR is refused unless --force.\n";

static int parse_ints(const char *s, int *out, int max) {
    int n = 0;
    const char *p = s;
    while (n < max) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < -1000000 || v > 1000000) return -1;
        out[n++] = (int)v;
        if (*end == 0) return n;
        if (*end != ',') return -1;
        p = end + 1;
    }
    return -1;
}

/* 1 when every tensor in every *.safetensors file of dir is BF16. */
static int base_is_bf16(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int all_bf16 = 1, any = 0;
    struct dirent *e;
    while (all_bf16 && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 12 || strcmp(e->d_name + n - 12, ".safetensors") != 0) continue;
        size_t pn = strlen(dir) + n + 2;
        char *p = malloc(pn);
        if (!p) { all_bf16 = 0; break; }
        snprintf(p, pn, "%s/%s", dir, e->d_name);
        st_file f = {0};
        if (latent_st_file_open(&f, p, NULL) != 0) {
            all_bf16 = 0;
        } else {
            for (int i = 0; i < f.n_tensors; i++)
                if (f.tensors[i].dtype != ST_BF16) all_bf16 = 0;
            any = 1;
        }
        latent_st_file_close(&f);
        free(p);
    }
    closedir(d);
    return any && all_bf16;
}

typedef struct {
    const char *base, *out, *t2mlr, *lrt, *seed_arg;
    int shared, force, residual, kv, dtype; /* dtype: -1 auto, 0 f32, 1 bf16 */
    long recur_on_prompt, seed;
} retro_args;

/* 0 to run, 1 when --help printed, 2 (cli_fail's code) on bad usage. */
static int parse_args(int argc, char **argv, retro_args *a) {
    const char *v;
    *a = (retro_args){.residual = 1, .kv = 1, .dtype = -1, .recur_on_prompt = 1};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--shared-kv")) { a->shared = 1; continue; }
        if (!strcmp(argv[i], "--force")) { a->force = 1; continue; }
        if (!strcmp(argv[i], "--no-residual-injection")) { a->residual = 0; continue; }
        if (!strcmp(argv[i], "--no-kv-injection")) { a->kv = 0; continue; }
        if (cli_opt(argc, argv, &i, "--model", &a->base) || cli_opt(argc, argv, &i, "--out", &a->out) ||
            cli_opt(argc, argv, &i, "--t2mlr", &a->t2mlr) || cli_opt(argc, argv, &i, "--lrt", &a->lrt) ||
            cli_opt(argc, argv, &i, "--seed", &a->seed_arg))
            continue;
        if (cli_opt(argc, argv, &i, "--recur-on-prompt", &v)) {
            if (cli_parse_long(v, 0, 1, &a->recur_on_prompt) != 0)
                return cli_fail("retrofit: --recur-on-prompt must be 0 or 1");
            continue;
        }
        if (cli_opt(argc, argv, &i, "--dtype", &v)) {
            if (!strcmp(v, "auto")) a->dtype = -1;
            else if (!strcmp(v, "f32")) a->dtype = 0;
            else if (!strcmp(v, "bf16")) a->dtype = 1;
            else return cli_fail("retrofit: --dtype must be auto, f32 or bf16 (got '%s')", v);
            continue;
        }
        fputs(help, stderr);
        return cli_fail("retrofit: unknown option '%s'", argv[i]);
    }
    if (!a->base) return cli_fail("retrofit: --model BASEDIR is required");
    if (!a->out) return cli_fail("retrofit: --out DIR is required");
    if (!a->seed_arg) return cli_fail("retrofit: --seed N is required");
    if (!a->t2mlr == !a->lrt) return cli_fail("retrofit: give exactly one of --t2mlr L_START,L_END and --lrt SRC[,START,END]");
    if (cli_parse_long(a->seed_arg, 0, __LONG_MAX__, &a->seed) != 0)
        return cli_fail("retrofit: --seed must be a non-negative integer (got '%s')", a->seed_arg);
    return 0;
}

/* The recurrent path --t2mlr or --lrt asks for, into the base model's cfg
 * (plain); 0, or -1 after saying why. */
static int set_recurrence(latent_config *cfg, const retro_args *ra) {
    const int L = cfg->n_layers;
    int a[3];
    if (ra->t2mlr) {
        if (parse_ints(ra->t2mlr, a, 2) != 2 || a[0] < 0 || a[0] > a[1] || a[1] >= L) {
            cli_fail("retrofit: --t2mlr needs L_START,L_END with 0 <= L_START <= L_END < %d (got '%s')", L, ra->t2mlr);
            return -1;
        }
        cfg->rec = LATENT_REC_T2MLR;
        cfg->t2mlr = (latent_t2mlr_config){.l_start = a[0], .l_end = a[1], .cache_residual = true,
                                           .cache_norm_clamp = 5.0f, .cache_norm_eps = 1e-6f,
                                           .recur_on_prompt = ra->recur_on_prompt != 0};
        return 0;
    }
    int n = parse_ints(ra->lrt, a, 3);
    if (n == 1) a[1] = 0, a[2] = L - 1;
    if ((n != 1 && n != 3) || a[0] < -1 || a[0] >= L || a[1] < 0 || a[1] > a[2] || a[2] >= L) {
        cli_fail("retrofit: --lrt needs SRC[,START,END] with -1 <= SRC < %d and 0 <= START <= END < %d (got '%s')", L,
                 L, ra->lrt);
        return -1;
    }
    if (!ra->residual && !ra->kv) {
        cli_fail("retrofit: --no-residual-injection and --no-kv-injection together leave no memory path");
        return -1;
    }
    cfg->rec = LATENT_REC_LRT;
    cfg->lrt = (latent_lrt_config){.source_layer = a[0], .inject_start = a[1], .inject_end = a[2],
                                   .residual_injection = ra->residual, .kv_injection = ra->kv,
                                   .shared_kv_projection = ra->shared};
    return 0;
}

int cmd_retrofit(int argc, char **argv) {
    retro_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc == 1 ? 0 : prc;

    latent_err err;
    latent_model m = {0};
    if (latent_model_load(&m, a.base, &err) != 0) {
        cli_fail("retrofit: %s", err.msg);
        return 1;
    }
    int rc = 1;
    latent_weights w = {0};
    latent_config cfg = m.cfg;
    if (cfg.rec != LATENT_REC_NONE) {
        cli_fail("retrofit: %s already has a recurrent path (%s); retrofit a plain Llama model", a.base,
                 cfg.rec == LATENT_REC_T2MLR ? "t2mlr" : "lrt");
        goto done;
    }
    if (set_recurrence(&cfg, &a) != 0) goto done;
    if (latent_weights_alloc(&w, &cfg, &err) != 0 || latent_weights_copy_backbone(&w, &m.w, &err) != 0) {
        cli_fail("retrofit: %s", err.msg);
        goto done;
    }
    latent_weights_init_retrofit(&w, &cfg, (uint64_t)a.seed);
    int bf16 = a.dtype >= 0 ? a.dtype : base_is_bf16(a.base);
    if (latent_model_dir_write(a.out, &cfg, &w, bf16, a.base, a.force, &err) != 0) {
        cli_fail("retrofit: %s", err.msg);
        goto done;
    }
    int64_t added = 0;
    for (int i = 0; i < w.n_params; i++)
        if (latent_param_is_recurrent(w.params[i].name)) added += w.params[i].numel;
    fprintf(stderr, "latent: retrofit: wrote %s (%s, %lld recurrent parameters added, %s)\n", a.out,
            cfg.rec == LATENT_REC_T2MLR ? "T2MLR" : "LRT", (long long)added, bf16 ? "BF16" : "F32");
    rc = 0;
done:
    latent_weights_free(&w);
    latent_model_free(&m);
    return rc;
}
