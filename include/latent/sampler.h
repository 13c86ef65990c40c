/* Token sampling from one logit vector: greedy, temperature, top-k, top-p,
 * min-p, repetition/presence/frequency penalties, logit bias, a seeded RNG per
 * request, and log-probabilities of the chosen and top-N tokens. */
#ifndef LATENT_SAMPLER_H
#define LATENT_SAMPLER_H

#include <stdint.h>

typedef struct latent_rng { uint64_t s[4]; } latent_rng;  /* xoshiro256** */
void latent_rng_seed(latent_rng *r, uint64_t seed);
uint64_t latent_rng_next(latent_rng *r);
double latent_rng_uniform(latent_rng *r);  /* [0, 1) */

typedef struct latent_logit_bias { int32_t id; float bias; } latent_logit_bias;

typedef struct latent_sampler_params {
    float temperature;        /* 0 = greedy */
    int top_k;                /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    float repetition_penalty; /* 1 = off (CTRL-style: divide positive logits, multiply negative) */
    float presence_penalty;   /* 0 = off (OpenAI: minus once if the token appeared) */
    float frequency_penalty;  /* 0 = off (OpenAI: minus count times) */
    const latent_logit_bias *bias; int n_bias;
    int n_top_logprobs;       /* 0..LATENT_MAX_TOP_LOGPROBS */
} latent_sampler_params;

#define LATENT_MAX_TOP_LOGPROBS 20

void latent_sampler_defaults(latent_sampler_params *p);

typedef struct latent_sample {
    int32_t token;
    float logprob;            /* log-softmax of the processed logits (penalties, bias; before temperature) */
    int n_top;
    int32_t top_ids[LATENT_MAX_TOP_LOGPROBS];
    float top_logprobs[LATENT_MAX_TOP_LOGPROBS];
} latent_sample;

/* Samples from logits[0..vocab) (modified in place). `history` is the ids seen
 * so far (prompt and generated) for the penalties. scratch needs room for
 * vocab floats + vocab ints, or NULL to allocate. */
int32_t latent_sampler_sample(const latent_sampler_params *p, latent_rng *rng,
                              float *logits, int vocab, const int32_t *history, int n_history,
                              latent_sample *out);

#endif
