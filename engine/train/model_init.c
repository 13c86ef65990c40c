/* Model creation: initial weights (from scratch or as a retrofit of a
 * backbone) and the atomic writing of a model directory. See model_init.h. */
#define _GNU_SOURCE /* renameat2 */
#include "latent/model_init.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "latent/rng.h"
#include "train/dir_io.h"

void latent_init_defaults(latent_init_opts *o) {
    memset(o, 0, sizeof *o);
    o->seed = 0;
    o->std = 0.02f;
    o->scale_residual = 1;
    o->t2mlr_gamma = 0.1f;
    o->lrt_gamma = 0.1f;
    o->t2mlr_gamma_rec = o->t2mlr_gamma_cur = NAN;
}

int latent_param_is_recurrent(const char *name) {
    return strncmp(name, "model.t2mlr.", 12) == 0 || strstr(name, ".lrt.") != NULL ||
           strncmp(name, "model.lrt.", 10) == 0;
}

/* ---- random streams -------------------------------------------------------- */

/* One generator per tensor: seed mixed with the FNV-1a hash of the name. */
static void init_rng_for(latent_rng *r, uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 1099511628211ULL;
    latent_rng_seed(r, seed * 0x9E3779B97F4A7C15ULL ^ h);
}

/* Standard normal by Box-Muller, both values used. */
static void init_fill_normal(float *x, int64_t n, float std, uint64_t seed, const char *name) {
    latent_rng r;
    init_rng_for(&r, seed, name);
    for (int64_t i = 0; i < n; i += 2) {
        double u = latent_rng_uniform(&r), v = latent_rng_uniform(&r);
        double rad = sqrt(-2.0 * log(1.0 - u)), a = 2.0 * M_PI * v; /* 1-u in (0, 1] */
        x[i] = (float)(std * rad * cos(a));
        if (i + 1 < n) x[i + 1] = (float)(std * rad * sin(a));
    }
}

static void init_fill_const(float *x, int64_t n, float v) {
    for (int64_t i = 0; i < n; i++) x[i] = v;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The from-scratch value of one tensor (retrofit overrides the recurrent ones). */
static void init_param(const latent_param *p, const latent_config *cfg, const latent_init_opts *o) {
    float *x = *p->slot;
    const char *n = p->name;
    if (ends_with(n, "norm.weight") || ends_with(n, "layernorm.weight")) {
        init_fill_const(x, p->numel, 1.0f);
    } else if (ends_with(n, "t2mlr.gamma_cur") || ends_with(n, "t2mlr.gamma_rec")) {
        float g = ends_with(n, "t2mlr.gamma_rec") ? o->t2mlr_gamma_rec : o->t2mlr_gamma_cur;
        init_fill_const(x, p->numel, isnan(g) ? o->t2mlr_gamma : g);
    } else if (ends_with(n, "t2mlr.f_cur.bias") || ends_with(n, "t2mlr.f_rec.bias")) {
        init_fill_const(x, p->numel, 0.0f);
    } else if (ends_with(n, "t2mlr.w_rec.weight")) {
        /* u = R W_rec^T keeps R's scale: the state is RMS-normalised (s()) */
        init_fill_normal(x, p->numel, 1.0f / sqrtf((float)cfg->d), o->seed, n);
    } else if (ends_with(n, "lrt.alpha")) {
        init_fill_const(x, p->numel, 1.0f);
    } else if (ends_with(n, "lrt.gamma")) {
        init_fill_const(x, p->numel, o->lrt_gamma);
    } else if (ends_with(n, "lrt.gate.weight")) {
        init_fill_const(x, p->numel, 0.0f);
    } else {
        float std = o->std;
        if (o->scale_residual && (ends_with(n, "o_proj.weight") || ends_with(n, "down_proj.weight")))
            std /= sqrtf(2.0f * (float)cfg->n_layers);
        init_fill_normal(x, p->numel, std, o->seed, n);
    }
}

void latent_weights_init(latent_weights *w, const latent_config *cfg, const latent_init_opts *o) {
    for (int i = 0; i < w->n_params; i++) init_param(&w->params[i], cfg, o);
}

void latent_weights_init_retrofit(latent_weights *w, const latent_config *cfg, uint64_t seed) {
    latent_init_opts o;
    latent_init_defaults(&o);
    o.seed = seed;
    o.t2mlr_gamma = 0.0f;
    o.lrt_gamma = 0.0f;
    for (int i = 0; i < w->n_params; i++) {
        const latent_param *p = &w->params[i];
        if (!latent_param_is_recurrent(p->name)) continue;
        if (ends_with(p->name, "k_proj.weight") || ends_with(p->name, "v_proj.weight"))
            init_fill_const(*p->slot, p->numel, 0.0f); /* LRT memory projections: see the header */
        else
            init_param(p, cfg, &o);
    }
}

int latent_weights_copy_backbone(latent_weights *dst, const latent_weights *src, latent_err *err) {
    for (int i = 0; i < dst->n_params; i++) {
        const latent_param *p = &dst->params[i];
        if (latent_param_is_recurrent(p->name)) continue;
        const latent_param *q = latent_weights_find(src, p->name);
        if (!q) return latent_err_set(err, LATENT_E_INVALID, "backbone: tensor %s is missing from the base model", p->name);
        if (q->ndim != p->ndim || q->shape[0] != p->shape[0] || q->shape[1] != p->shape[1])
            return latent_err_set(err, LATENT_E_INVALID, "backbone: tensor %s has shape [%lld, %lld] in the base model, expected [%lld, %lld]",
                                  p->name, (long long)q->shape[0], (long long)q->shape[1],
                                  (long long)p->shape[0], (long long)p->shape[1]);
        memcpy(*p->slot, *q->slot, (size_t)p->numel * sizeof(float));
    }
    return 0;
}

/* ---- the model directory ---------------------------------------------------- */

const char *const latent_model_side_files[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json", NULL,
};

/* Copies src to dst (a new file) and fsyncs it. */
static int copy_file(const char *src, const char *dst, latent_err *err) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return latent_err_set(err, LATENT_E_IO, "%s: cannot open: %s", src, strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        int e = errno;
        close(in);
        return latent_err_set(err, LATENT_E_IO, "%s: cannot create: %s", dst, strerror(e));
    }
    static char buf[1 << 16];
    int rc = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            rc = latent_err_set(err, LATENT_E_IO, "%s: read failed: %s", src, strerror(errno));
            break;
        }
        for (ssize_t off = 0; off < n;) {
            ssize_t m = write(out, buf + off, (size_t)(n - off));
            if (m < 0) {
                if (errno == EINTR) continue;
                rc = latent_err_set(err, LATENT_E_IO, "%s: write failed: %s", dst, strerror(errno));
                break;
            }
            off += m;
        }
        if (rc) break;
    }
    if (rc == 0 && fsync(out) != 0) rc = latent_err_set(err, LATENT_E_INVALID, "%s: fsync failed: %s", dst, strerror(errno));
    if (close(out) != 0 && rc == 0) rc = latent_err_set(err, LATENT_E_INVALID, "%s: close failed: %s", dst, strerror(errno));
    close(in);
    return rc;
}

static char *parent_of(const char *path) {
    char *s = strdup(path);
    if (!s) return NULL;
    size_t n = strlen(s);
    while (n > 1 && s[n - 1] == '/') s[--n] = 0; /* trailing slashes */
    char *slash = strrchr(s, '/');
    if (!slash) {
        free(s);
        return strdup(".");
    }
    if (slash == s) slash[1] = 0; /* "/x" -> "/" */
    else *slash = 0;
    return s;
}

int latent_model_dir_write(const char *dir, const latent_config *cfg, const latent_weights *w,
                           int bf16, const char *files_from, int replace, latent_err *err) {
    struct stat st;
    int exists = stat(dir, &st) == 0;
    if (exists && !S_ISDIR(st.st_mode)) return latent_err_set(err, LATENT_E_EXISTS, "%s: exists and is not a directory", dir);
    if (exists && !replace)
        return latent_err_set(err, LATENT_E_EXISTS, "%s: already exists (pass --force to replace it)", dir);

    char *parent = parent_of(dir);
    size_t tn = strlen(dir) + 32;
    char *tmp = malloc(tn);
    if (!parent || !tmp) {
        free(parent);
        free(tmp);
        return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir);
    }
    snprintf(tmp, tn, "%s.tmp-%ld", dir, (long)getpid());
    char *path = NULL;
    int rc = -1;
    latent_remove_flat_dir(tmp); /* a leftover of an earlier run with our pid */
    if (mkdir(tmp, 0755) != 0) {
        latent_err_set(err, LATENT_E_IO, "%s: cannot create: %s (does %s exist?)", tmp, strerror(errno), parent);
        goto done;
    }
    if (!(path = latent_path_join(tmp, "config.json"))) goto oom;
    if (latent_config_save_dtype(cfg, path, bf16, err) != 0) goto fail;
    if (latent_weights_save(w, tmp, bf16, err) != 0) goto fail;
    for (int i = 0; files_from && latent_model_side_files[i]; i++) {
        free(path);
        if (!(path = latent_path_join(files_from, latent_model_side_files[i]))) goto oom;
        if (access(path, F_OK) != 0) continue;
        char *dst = latent_path_join(tmp, latent_model_side_files[i]);
        if (!dst) goto oom;
        int c = copy_file(path, dst, err);
        free(dst);
        if (c != 0) goto fail;
    }
    if (latent_fsync_path(tmp, 1) != 0) {
        latent_err_set(err, LATENT_E_INVALID, "%s: fsync failed: %s", tmp, strerror(errno));
        goto fail;
    }
    if (!exists) {
        if (rename(tmp, dir) != 0) {
            latent_err_set(err, LATENT_E_IO, "%s: cannot rename to %s: %s", tmp, dir, strerror(errno));
            goto fail;
        }
    } else {
        /* Swap the complete new directory with the old one in one step; the
         * old files end up under tmp and are removed below. */
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) != 0) {
            latent_err_set(err, LATENT_E_INVALID, "%s: cannot swap in %s: %s", dir, tmp, strerror(errno));
            goto fail;
        }
        latent_remove_flat_dir(tmp);
    }
    if (latent_fsync_path(parent, 1) != 0) {
        latent_err_set(err, LATENT_E_INVALID, "%s: fsync failed: %s", parent, strerror(errno));
        goto done;
    }
    rc = 0;
    goto done;
oom:
    latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir);
fail:
    latent_remove_flat_dir(tmp);
done:
    free(path);
    free(tmp);
    free(parent);
    return rc;
}
