/* A loaded model: immutable config, read-only float32 weights shared by every
 * session, and the tokenizer. Per-session state lives in kv.h. */
#ifndef LATENT_MODEL_H
#define LATENT_MODEL_H

#include <stdint.h>
#include "latent/config.h"
#include "latent/error.h"

struct latent_tokenizer;

typedef struct latent_layer {
    float *attn_norm;   /* (d) */
    float *wq;          /* (q_dim, d) */
    float *wk;          /* (kv_dim, d) */
    float *wv;          /* (kv_dim, d) */
    float *wo;          /* (d, q_dim) */
    float *mlp_norm;    /* (d) */
    float *wg;          /* (ffn, d) */
    float *wu;          /* (ffn, d) */
    float *wd;          /* (d, ffn) */
    /* LRT, NULL unless this block is injected */
    float *lrt_alpha;   /* (1) residual injection */
    float *lrt_gamma;   /* (1) */
    float *lrt_gate;    /* (2*n_kv_heads, d) KV injection gates */
    float *lrt_k;       /* (kv_dim, d) own, or the shared projection */
    float *lrt_v;       /* (kv_dim, d) */
} latent_layer;

typedef struct latent_t2mlr_weights {
    float *w_rec;       /* (d, d) */
    float *f_cur_w;     /* (d, 2d) */
    float *f_cur_b;     /* (d) */
    float *f_rec_w;     /* (d, 2d) */
    float *f_rec_b;     /* (d) */
    float *gamma_cur;   /* (1) */
    float *gamma_rec;   /* (1) */
} latent_t2mlr_weights;

/* One named parameter: the table every loader, writer and optimizer walks. */
typedef struct latent_param {
    char name[96];      /* Hugging Face tensor name */
    int ndim;
    int64_t shape[2];
    int64_t numel;
    float **slot;       /* where the pointer lives in latent_weights */
    const uint16_t *bf16; /* (numel) the BF16 values in the file mapping when the loader
                           kept this matrix unwidened (latent_load_opts.keep_bf16):
                           then *slot holds zeros, not the weights. NULL otherwise. */
} latent_param;

typedef struct latent_weights {
    float *embed;       /* (vocab, d) */
    float *final_norm;  /* (d) */
    float *lm_head;     /* (vocab, d); == embed when tied */
    latent_layer *layers;       /* (n_layers) */
    latent_t2mlr_weights t2mlr;
    float *lrt_shared_k, *lrt_shared_v; /* (kv_dim, d) when shared_kv_projection */
    latent_param *params; int n_params;  /* every stored tensor, in file order */
    float *slab;        /* one anonymous mapping backing every pointer above, except
                           tensors a loader uses in place from a file mapping */
    int64_t slab_floats;
    size_t slab_bytes;
} latent_weights;

typedef struct latent_model {
    char *dir;
    latent_config cfg;
    latent_weights w;
    struct latent_tokenizer *tok;  /* NULL when the directory has no tokenizer.json */
    void *mapped;       /* the safetensors mappings F32 tensors are used from in
                           place (copy-on-write); owned, released by latent_model_free */
    int checkpoint_bf16;/* the checkpoint stores its matrices in BF16 (the engine's
                           precision `auto` then computes in bf16) */
    int bf16_kept;      /* how many matrices are held only as BF16 (param->bf16): such a
                           model serves a bf16 engine and nothing that reads F32 weights */
} latent_model;

/* Builds the parameter table for cfg and allocates one zeroed slab behind it.
 * Each param's slot points into *w (and w->layers), so *w must stay where it
 * was allocated (do not copy the struct by value and use the copy). */
int latent_weights_alloc(latent_weights *w, const latent_config *cfg, latent_err *err);
void latent_weights_free(latent_weights *w);
/* Re-derives the aliases (tied LM head, shared LRT projections) after slots move. */
void latent_weights_link(latent_weights *w, const latent_config *cfg);
const latent_param *latent_weights_find(const latent_weights *w, const char *name);

/* Loads config.json, the safetensors (single or sharded via the index json),
 * and tokenizer.json (if present) from `dir`. Every expected tensor must be
 * present with the right shape; weights are converted to float32 once. */
int latent_model_load(latent_model *m, const char *dir, latent_err *err);

typedef struct latent_load_opts {
    /* 1: matrices the checkpoint stores in BF16 stay in the file mapping
     * (param->bf16) and a bf16 engine packs its panels straight from them:
     * no F32 copy is made, and their F32 slots stay zero. For a model that
     * only an engine under bf16 (or auto, which a BF16 checkpoint resolves
     * to bf16) will read; an F32 engine and latent_weights_save refuse it. */
    int keep_bf16;
} latent_load_opts;
/* latent_model_load with options (NULL: the defaults, every tensor widened). */
int latent_model_load_opts(latent_model *m, const char *dir, const latent_load_opts *o, latent_err *err);
void latent_model_free(latent_model *m);

/* Writes every param (F32, or BF16 when bf16 != 0) atomically: to
 * `path`/model.safetensors when path is an existing directory, else to the
 * file `path` itself. */
int latent_weights_save(const latent_weights *w, const char *path, int bf16, latent_err *err);

#endif
