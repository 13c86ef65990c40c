/* The parameter table: every stored tensor of a config, by its Hugging Face
 * name and shape, carved from one 64-byte aligned slab (llm.c's
 * fill_in_parameter_sizes, with names). Loader, writer and optimizer all walk
 * w->params; each entry's `slot` is the pointer field it backs. */
#include "latent/model.h"
#include "safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define W_ALIGN_FLOATS 16 /* 64 bytes */

typedef struct w_builder {
    latent_weights *w;
    int cap;
    int64_t off;  /* floats carved so far, each param rounded up to 64 bytes */
    int too_big;  /* the sizes overflow: no machine holds this model */
} w_builder;

/* Adds a parameter; the slot is filled once the slab exists. */
static int w_add(w_builder *b, float **slot, int ndim, int64_t d0, int64_t d1, const char *fmt,
                 ...) __attribute__((format(printf, 6, 7)));
static int w_add(w_builder *b, float **slot, int ndim, int64_t d0, int64_t d1, const char *fmt,
                 ...) {
    latent_weights *w = b->w;
    if (w->n_params == b->cap) {
        int ncap = b->cap ? 2 * b->cap : 64;
        latent_param *p = realloc(w->params, (size_t)ncap * sizeof *p);
        if (!p) return -1;
        w->params = p;
        b->cap = ncap;
    }
    latent_param *p = &w->params[w->n_params++];
    memset(p, 0, sizeof *p);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim == 2 ? d1 : 0;
    p->numel = ndim == 2 ? d0 * d1 : d0; /* each size <= 2^30 (config.c): no overflow */
    p->slot = slot;
    /* the total can overflow (10^5 blocks of 2^60): the slab's bytes must fit in int64 */
    int64_t padded = (p->numel + W_ALIGN_FLOATS - 1) / W_ALIGN_FLOATS * W_ALIGN_FLOATS;
    if (padded > (INT64_MAX / (int64_t)sizeof(float)) - b->off) {
        b->too_big = 1;
        return -1;
    }
    b->off += padded;
    return 0;
}

static int w_build_table(w_builder *b, const latent_config *c) {
    latent_weights *w = b->w;
    const int64_t d = c->d, ffn = c->ffn, V = c->vocab;
    const int64_t q_dim = latent_config_q_dim(c), kv_dim = latent_config_kv_dim(c);
    int rc = 0;
    rc |= w_add(b, &w->embed, 2, V, d, "model.embed_tokens.weight");
    for (int i = 0; i < c->n_layers; i++) {
        latent_layer *l = &w->layers[i];
        rc |= w_add(b, &l->attn_norm, 1, d, 0, "model.layers.%d.input_layernorm.weight", i);
        rc |= w_add(b, &l->wq, 2, q_dim, d, "model.layers.%d.self_attn.q_proj.weight", i);
        rc |= w_add(b, &l->wk, 2, kv_dim, d, "model.layers.%d.self_attn.k_proj.weight", i);
        rc |= w_add(b, &l->wv, 2, kv_dim, d, "model.layers.%d.self_attn.v_proj.weight", i);
        rc |= w_add(b, &l->wo, 2, d, q_dim, "model.layers.%d.self_attn.o_proj.weight", i);
        rc |= w_add(b, &l->mlp_norm, 1, d, 0, "model.layers.%d.post_attention_layernorm.weight", i);
        rc |= w_add(b, &l->wg, 2, ffn, d, "model.layers.%d.mlp.gate_proj.weight", i);
        rc |= w_add(b, &l->wu, 2, ffn, d, "model.layers.%d.mlp.up_proj.weight", i);
        rc |= w_add(b, &l->wd, 2, d, ffn, "model.layers.%d.mlp.down_proj.weight", i);
        if (c->rec == LATENT_REC_LRT && i >= c->lrt.inject_start && i <= c->lrt.inject_end) {
            if (c->lrt.residual_injection) {
                rc |= w_add(b, &l->lrt_alpha, 1, 1, 0, "model.layers.%d.lrt.alpha", i);
                rc |= w_add(b, &l->lrt_gamma, 1, 1, 0, "model.layers.%d.lrt.gamma", i);
            }
            if (c->lrt.kv_injection) {
                rc |= w_add(b, &l->lrt_gate, 2, 2 * (int64_t)c->n_kv_heads, d,
                            "model.layers.%d.lrt.gate.weight", i);
                if (!c->lrt.shared_kv_projection) {
                    rc |= w_add(b, &l->lrt_k, 2, kv_dim, d, "model.layers.%d.lrt.k_proj.weight", i);
                    rc |= w_add(b, &l->lrt_v, 2, kv_dim, d, "model.layers.%d.lrt.v_proj.weight", i);
                }
            }
        }
    }
    rc |= w_add(b, &w->final_norm, 1, d, 0, "model.norm.weight");
    if (c->rec == LATENT_REC_T2MLR) {
        latent_t2mlr_weights *t = &w->t2mlr;
        rc |= w_add(b, &t->w_rec, 2, d, d, "model.t2mlr.w_rec.weight");
        rc |= w_add(b, &t->f_cur_w, 2, d, 2 * d, "model.t2mlr.f_cur.weight");
        rc |= w_add(b, &t->f_cur_b, 1, d, 0, "model.t2mlr.f_cur.bias");
        rc |= w_add(b, &t->f_rec_w, 2, d, 2 * d, "model.t2mlr.f_rec.weight");
        rc |= w_add(b, &t->f_rec_b, 1, d, 0, "model.t2mlr.f_rec.bias");
        rc |= w_add(b, &t->gamma_cur, 1, 1, 0, "model.t2mlr.gamma_cur");
        rc |= w_add(b, &t->gamma_rec, 1, 1, 0, "model.t2mlr.gamma_rec");
    }
    if (c->rec == LATENT_REC_LRT && c->lrt.kv_injection && c->lrt.shared_kv_projection) {
        rc |= w_add(b, &w->lrt_shared_k, 2, kv_dim, d, "model.lrt.k_proj.weight");
        rc |= w_add(b, &w->lrt_shared_v, 2, kv_dim, d, "model.lrt.v_proj.weight");
    }
    if (!c->tie_embeddings) rc |= w_add(b, &w->lm_head, 2, V, d, "lm_head.weight");
    return rc;
}

int latent_weights_alloc(latent_weights *w, const latent_config *cfg, latent_err *err) {
    memset(w, 0, sizeof *w);
    if (cfg->n_layers <= 0 || cfg->d <= 0)
        return latent_err_set(err, LATENT_E_FORMAT, "weights: config has no layers or no hidden size");
    w->layers = calloc((size_t)cfg->n_layers, sizeof *w->layers);
    if (!w->layers) return latent_err_set(err, LATENT_E_NOMEM, "weights: out of memory for %d layers", cfg->n_layers);
    w_builder b = {w, 0, 0, 0};
    if (w_build_table(&b, cfg) != 0) {
        latent_weights_free(w);
        if (b.too_big)
            return latent_err_set(err, LATENT_E_FORMAT, "weights: the config's sizes make more parameters than any machine holds");
        return latent_err_set(err, LATENT_E_NOMEM, "weights: out of memory for the parameter table");
    }
    size_t bytes = (size_t)b.off * sizeof(float);
    if (bytes == 0) bytes = 64;
    /* An anonymous mapping: zero pages that cost nothing until written, so a
     * loader that uses F32 tensors in place from the file never touches the
     * slab's share for them. Page-aligned, hence 64-byte aligned. */
    void *slab = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (slab == MAP_FAILED) {
        latent_weights_free(w);
        return latent_err_set(err, LATENT_E_NOMEM, "weights: cannot allocate %.1f MiB for the weights",
                              (double)bytes / (1 << 20));
    }
    w->slab = slab;
    w->slab_bytes = bytes;
    w->slab_floats = b.off;
    int64_t off = 0;
    for (int i = 0; i < w->n_params; i++) {
        *w->params[i].slot = w->slab + off;
        off += (w->params[i].numel + W_ALIGN_FLOATS - 1) / W_ALIGN_FLOATS * W_ALIGN_FLOATS;
    }
    latent_weights_link(w, cfg);
    return 0;
}

void latent_weights_link(latent_weights *w, const latent_config *cfg) {
    if (cfg->tie_embeddings) w->lm_head = w->embed;
    if (cfg->rec == LATENT_REC_LRT && cfg->lrt.kv_injection && cfg->lrt.shared_kv_projection) {
        for (int i = cfg->lrt.inject_start; i <= cfg->lrt.inject_end; i++) {
            w->layers[i].lrt_k = w->lrt_shared_k;
            w->layers[i].lrt_v = w->lrt_shared_v;
        }
    }
}

void latent_weights_free(latent_weights *w) {
    if (!w) return;
    if (w->slab) munmap(w->slab, w->slab_bytes);
    free(w->layers);
    free(w->params);
    memset(w, 0, sizeof *w);
}

const latent_param *latent_weights_find(const latent_weights *w, const char *name) {
    for (int i = 0; i < w->n_params; i++)
        if (strcmp(w->params[i].name, name) == 0) return &w->params[i];
    return NULL;
}

int latent_weights_save(const latent_weights *w, const char *path, int bf16, latent_err *err) {
    char *file = NULL;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t n = strlen(path) + sizeof "/model.safetensors";
        file = malloc(n);
        if (!file) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
        snprintf(file, n, "%s/model.safetensors", path);
    }
    for (int i = 0; i < w->n_params; i++)
        if (w->params[i].bf16) /* its slot holds zeros (latent_load_opts.keep_bf16) */
            return latent_err_set(err, LATENT_E_INVALID, "%s: \"%s\" was loaded for a bf16 engine only (no F32 copy): "
                                  "load the model with latent_model_load to save it", path, w->params[i].name);
    int n = w->n_params;
    const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
    const float **data = malloc((size_t)(n ? n : 1) * sizeof *data);
    int *ndims = malloc((size_t)(n ? n : 1) * sizeof *ndims);
    int64_t(*shapes)[ST_MAX_DIMS] = calloc((size_t)(n ? n : 1), sizeof *shapes);
    int rc;
    if (!names || !data || !ndims || !shapes) {
        rc = latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
    } else {
        for (int i = 0; i < n; i++) {
            const latent_param *p = &w->params[i];
            names[i] = p->name;
            data[i] = *p->slot;
            ndims[i] = p->ndim;
            shapes[i][0] = p->shape[0];
            shapes[i][1] = p->shape[1];
        }
        rc = latent_st_write(file ? file : path, n, names, data, ndims,
                      (const int64_t(*)[ST_MAX_DIMS])shapes, bf16 ? ST_BF16 : ST_F32, err);
    }
    free(names);
    free(data);
    free(ndims);
    free(shapes);
    free(file);
    return rc;
}
