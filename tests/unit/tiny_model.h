/* In-memory tiny random models for engine tests (no files involved). */
#ifndef LATENT_TINY_MODEL_H
#define LATENT_TINY_MODEL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "latent/model.h"

static uint64_t tm_rng = 88172645463325252ULL;
static inline double tm_uniform(void) {
    tm_rng ^= tm_rng << 13, tm_rng ^= tm_rng >> 7, tm_rng ^= tm_rng << 17;
    return (tm_rng >> 11) * (1.0 / 9007199254740992.0);
}
static inline float tm_normal(void) {
    double u = tm_uniform() + 1e-12, v = tm_uniform();
    return (float)(sqrt(-2 * log(u)) * cos(2 * M_PI * v));
}

/* A Llama config of the given size; recurrence fields left for the caller. */
static inline latent_config tm_config(int d, int layers, int heads, int kv_heads, int ffn, int vocab) {
    latent_config c;
    memset(&c, 0, sizeof c);
    c.d = d, c.n_layers = layers, c.n_heads = heads, c.n_kv_heads = kv_heads;
    c.head_dim = d / heads, c.ffn = ffn, c.vocab = vocab, c.max_pos = 256;
    c.rms_eps = 1e-5f, c.rope_theta = 10000.0f, c.tie_embeddings = 1;
    c.bos_id = 1, c.eos_id = 2, c.n_eos = 1, c.eos_ids[0] = 2;
    return c;
}

static inline latent_config tm_t2mlr(latent_config c, int l_start, int l_end, int recur_on_prompt) {
    c.rec = LATENT_REC_T2MLR;
    c.t2mlr = (latent_t2mlr_config){.l_start = l_start, .l_end = l_end, .cache_residual = 1,
                                    .cache_norm_clamp = 5.0f, .cache_norm_eps = 1e-6f,
                                    .recur_on_prompt = recur_on_prompt};
    return c;
}

static inline latent_config tm_lrt(latent_config c, int source, int start, int end, int shared) {
    c.rec = LATENT_REC_LRT;
    c.lrt = (latent_lrt_config){.source_layer = source, .inject_start = start, .inject_end = end,
                                .residual_injection = 1, .kv_injection = 1, .shared_kv_projection = shared};
    return c;
}

/* Fills every tensor from `seed`: the backbone first, from its own stream, so
 * a recurrent model and its plain twin share backbone weights for one seed. */
static inline int tm_model(latent_model *m, latent_config c, uint64_t seed, int zero_gammas) {
    memset(m, 0, sizeof *m);
    m->cfg = c;
    latent_err err;
    if (latent_weights_alloc(&m->w, &m->cfg, &err) != 0) return -1;
    for (int pass = 0; pass < 2; pass++) {
        tm_rng = seed * 2654435761ULL + 12345 + (uint64_t)pass * 977;
        for (int i = 0; i < m->w.n_params; i++) {
            const latent_param *p = &m->w.params[i];
            int recurrent = strstr(p->name, "lrt") || strstr(p->name, "t2mlr");
            if (recurrent != pass) continue;
            float *x = *p->slot;
            int is_norm = strstr(p->name, "norm") != NULL;
            float scale = p->ndim == 2 ? 1.0f / sqrtf((float)p->shape[1]) : 0.1f;
            for (int64_t j = 0; j < p->numel; j++) x[j] = (is_norm ? 1.0f : 0.0f) + scale * tm_normal();
            if (strstr(p->name, "gamma_")) x[0] = zero_gammas ? 0.0f : (strstr(p->name, "rec") ? 0.7f : 0.5f);
            if (strstr(p->name, "lrt.alpha")) x[0] = 1.0f + 0.1f * tm_normal();
            if (strstr(p->name, "lrt.gamma")) x[0] = 0.3f;
        }
    }
    return 0;
}

#endif
