/* Causal GQA attention over paged KV caches (private to the engine). */
#ifndef LATENT_ATTENTION_H
#define LATENT_ATTENTION_H

#include "latent/config.h"
#include "latent/kv.h"

/* One token row of a step: where its k, v go and what it attends to. */
typedef struct row_meta {
    latent_seq *seq;
    int pos;          /* 0-based position in its sequence */
    int entry;        /* index of its batch entry */
    int row;          /* index in the step's row layout (its RoPE tables) */
    uint8_t flow;     /* 2 recurrent, 1 not */
} row_meta;

typedef struct attn_scratch {
    float *buf;       /* (threads, per_thread) */
    size_t per_thread;
    int threads, ctx; /* sized for this many threads and context length */
    float *parts;     /* partial results of rows split over key ranges */
    size_t parts_cap; /* floats */
} attn_scratch;

/* Grows the scratch for contexts up to ctx tokens; -1 when out of memory. */
int attn_scratch_reserve(attn_scratch *s, const latent_config *c, int ctx);
void attn_scratch_free(attn_scratch *s);

/* att (n, q_dim) = softmax(q k^T / sqrt(head_dim) + causal) v for n rows whose
 * k, v (of `layer`) are already in their sequences' pages. Runs of rows from
 * one sequence use sgemm over the gathered keys; single rows read the pages
 * directly. Work is spread over the engine threads. */
void attention_forward(float *att, const float *q, const row_meta *rows, int n, int layer,
                       const latent_config *c, attn_scratch *s);

#endif
