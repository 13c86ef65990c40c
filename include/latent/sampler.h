/* Token sampling from one logit vector: greedy, temperature, top-k, top-p,
 * min-p, repetition/presence/frequency penalties, logit bias, a seeded RNG per
 * request, and log-probabilities of the chosen and top-N tokens.
 *
 * Pipeline (vLLM / llama.cpp / OpenAI semantics), all on the caller's logits:
 *   NaN -> -inf, +inf -> FLT_MAX
 *   -> logit bias (added; ids outside [0, vocab) ignored)
 *   -> repetition penalty, once per distinct id in history
 *      (logit > 0 ? logit / p : logit * p)
 *   -> presence/frequency: logit -= presence * (count > 0) + frequency * count
 *   -> logprobs: log-softmax of these logits (before temperature)
 *   -> temperature < 1e-5: greedy argmax (ties: lowest id), RNG untouched
 *   -> else logits / temperature -> top-k -> top-p -> min-p
 *      -> one draw from the renormalized rest (inverse CDF, one
 *         latent_rng_uniform per call).
 * Orderings everywhere are by processed logit, ties to the lower id.
 *
 * `history` is whatever the caller passes; counts are over all of it. OpenAI
 * counts presence/frequency over generated tokens only: pass just the
 * generated ids for that, or prompt + generated for llama.cpp-style
 * repetition penalty over the context.
 *
 * Parameter validation is the caller's (the server answers 400), but no
 * parameter value makes the sampler crash or read out of bounds: a NULL
 * params means defaults, a NULL rng means greedy, a NULL history or
 * n_history <= 0 means no history, repetition_penalty <= 0 or non-finite is
 * ignored, top_k outside (0, vocab) is off, top_p >= 1 (or NaN) is off,
 * top_p <= 0 keeps one token, min_p > 1 keeps one token, and logits that are
 * all -inf are treated as uniform. */
#ifndef LATENT_SAMPLER_H
#define LATENT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "latent/rng.h"


typedef struct latent_logit_bias { int32_t id; float bias; } latent_logit_bias;

typedef struct latent_sampler_params {
    float temperature;        /* 0 = greedy (anything below 1e-5 is greedy) */
    int top_k;                /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    float repetition_penalty; /* 1 = off (CTRL-style: divide positive logits, multiply negative) */
    float presence_penalty;   /* 0 = off (OpenAI: minus once if the token appeared) */
    float frequency_penalty;  /* 0 = off (OpenAI: minus count times) */
    const latent_logit_bias *bias; int n_bias;  /* borrowed for the call */
    int n_top_logprobs;       /* 0..LATENT_MAX_TOP_LOGPROBS (clamped) */
} latent_sampler_params;

#define LATENT_MAX_TOP_LOGPROBS 20

/* temperature 1, top_k 0, top_p 1, min_p 0, repetition 1, presence 0,
 * frequency 0, no bias, n_top_logprobs 0. */
void latent_sampler_defaults(latent_sampler_params *p);

typedef struct latent_sample {
    int32_t token;
    float logprob;            /* log-softmax of the processed logits (penalties, bias; before temperature) */
    int n_top;
    int32_t top_ids[LATENT_MAX_TOP_LOGPROBS];      /* by logprob descending, ties lower id first */
    float top_logprobs[LATENT_MAX_TOP_LOGPROBS];
} latent_sample;

/* Samples from logits[0..vocab) (modified in place: they end up holding the
 * processed logits, before temperature). `history` is the ids seen so far for
 * the penalties (see above). `out` may be NULL. Returns the token id, or -1
 * when vocab < 1, logits is NULL or memory ran out (then out->token = -1).
 * Allocates its scratch per call; the hot path should use the _scratch form. */
int32_t latent_sampler_sample(const latent_sampler_params *p, latent_rng *rng,
                              float *logits, int vocab, const int32_t *history, int n_history,
                              latent_sample *out);

/* Bytes of scratch latent_sampler_sample_scratch needs for `vocab`
 * (vocab floats + vocab int32s; 0 when vocab < 1). */
size_t latent_sampler_scratch_size(int vocab);

/* As latent_sampler_sample, with caller-owned scratch of at least
 * latent_sampler_scratch_size(vocab) bytes, 4-byte aligned (malloc'd memory
 * is). Its contents need not be initialised and are garbage afterwards; it
 * may be reused across calls but not shared between concurrent calls.
 * A NULL scratch allocates as latent_sampler_sample does. Never allocates
 * otherwise. */
int32_t latent_sampler_sample_scratch(const latent_sampler_params *p, latent_rng *rng,
                                      float *logits, int vocab,
                                      const int32_t *history, int n_history,
                                      latent_sample *out, void *scratch);

#endif
