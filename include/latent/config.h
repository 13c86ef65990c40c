/* The model's immutable configuration, read from a Hugging Face config.json
 * (Llama fields plus the optional "latent_recurrence" object of models.md §4). */
#ifndef LATENT_CONFIG_H
#define LATENT_CONFIG_H

#include <stdbool.h>
#include "latent/error.h"

typedef enum { LATENT_REC_NONE = 0, LATENT_REC_T2MLR, LATENT_REC_LRT } latent_rec_type;

typedef struct latent_t2mlr_config {
    int l_start, l_end;       /* 0-based inclusive block indices of the middle window */
    bool cache_residual;      /* R_t = s(y + R_{t-1}) when true, else R_t = y */
    float cache_norm_clamp;   /* s() clamps its factor to [1/clamp, clamp] */
    float cache_norm_eps;
    bool recur_on_prompt;     /* prompt tokens get control flow 2 when true, else 1 */
} latent_t2mlr_config;

typedef struct latent_lrt_config {
    int source_layer;         /* -1 = output of the final RMSNorm */
    int inject_start, inject_end; /* inclusive */
    bool residual_injection;
    bool kv_injection;
    bool shared_kv_projection;
} latent_lrt_config;

typedef struct latent_config {
    int d;                    /* hidden_size */
    int ffn;                  /* intermediate_size */
    int n_layers;             /* num_hidden_layers */
    int n_heads;              /* num_attention_heads */
    int n_kv_heads;           /* num_key_value_heads */
    int head_dim;             /* head_dim, default d / n_heads */
    int vocab;                /* vocab_size */
    int max_pos;              /* max_position_embeddings */
    float rms_eps;            /* rms_norm_eps */
    float rope_theta;
    bool tie_embeddings;      /* tie_word_embeddings */
    int bos_id, eos_id;       /* -1 when absent; eos_id is the first if a list */
    int n_eos;                /* all eos ids (eos_token_id may be a list) */
    int eos_ids[8];
    latent_rec_type rec;
    latent_t2mlr_config t2mlr;
    latent_lrt_config lrt;
} latent_config;

/* Parses config.json at `path`; validates sizes and the recurrence block. */
int latent_config_load(const char *path, latent_config *cfg, latent_err *err);

/* Parses a config from JSON text; `origin` names the source in messages. */
int latent_config_parse(const char *json_text, const char *origin,
                        latent_config *cfg, latent_err *err);

/* Derived sizes. */
static inline int latent_config_q_dim(const latent_config *c) { return c->n_heads * c->head_dim; }
static inline int latent_config_kv_dim(const latent_config *c) { return c->n_kv_heads * c->head_dim; }

/* Writes cfg as a Hugging Face config.json (used by init/retrofit/tests),
 * with "torch_dtype": "float32". */
int latent_config_save(const latent_config *cfg, const char *path, latent_err *err);
/* The same naming the dtype the weights beside it are stored in:
 * "bfloat16" when bf16, else "float32". */
int latent_config_save_dtype(const latent_config *cfg, const char *path, int bf16, latent_err *err);

#endif
