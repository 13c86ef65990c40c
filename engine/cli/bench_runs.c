/* The measurements latent bench is made of: the standard benchmark model,
 * one timed prefill, and sets of sequences decoding step by step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_runs.h"
#include "cli.h"
#include "latent/clock.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
float bench_rand_pm1(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 24)) * 2.0 - 1.0);
}

/* The standard benchmark model in memory: backbone weights from one seed, so
 * every kind shares them; recurrent tensors small but non-zero. */
int bench_make_standard(latent_model *m, latent_rec_type rec, latent_err *err) {
    memset(m, 0, sizeof *m);
    latent_config *c = &m->cfg;
    c->d = 576, c->ffn = 1536, c->n_layers = 30, c->n_heads = 9, c->n_kv_heads = 3, c->head_dim = 64;
    c->vocab = 49152, c->max_pos = 8192, c->rms_eps = 1e-5f, c->rope_theta = 100000.0f;
    c->tie_embeddings = true, c->bos_id = 1, c->eos_id = 2, c->n_eos = 1, c->eos_ids[0] = 2;
    c->rec = rec;
    c->t2mlr = (latent_t2mlr_config){12, 17, true, 5.0f, 1e-6f, true};
    c->lrt = (latent_lrt_config){18, 0, 19, true, true, true};
    if (latent_weights_alloc(&m->w, c, err) != 0) return -1;
    rng_state = 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < m->w.n_params; i++) {
        latent_param *p = &m->w.params[i];
        float scale = p->ndim == 2 ? 1.7f / sqrtf((float)p->shape[1]) : 0.05f;
        int norm = strstr(p->name, "norm") != NULL;
        for (int64_t j = 0; j < p->numel; j++) (*p->slot)[j] = (norm ? 1.0f : 0.0f) + scale * bench_rand_pm1();
        if (strstr(p->name, "gamma") || strstr(p->name, "alpha")) (*p->slot)[0] = strstr(p->name, "alpha") ? 1.0f : 0.2f;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}


static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

/* Prefill of n_seqs prompts of n tokens each, in one step; tokens/s. */
static latent_kv_dtype kv_for(const latent_engine *eng) {
    return latent_engine_precision(eng) == LATENT_PRECISION_BF16 ? LATENT_KV_BF16 : LATENT_KV_F32;
}

int bench_prefill(latent_engine *eng, const latent_model *m, int n, int n_seqs, figure *out, latent_err *err) {
    latent_kv_pool pool;
    latent_kv_dtype kvd = kv_for(eng);
    if (latent_kv_pool_init(&pool, &m->cfg, 16, latent_kv_page_bytes(&m->cfg, 16, kvd) * (n / 16 + 2) * n_seqs, kvd, err) != 0)
        return -1;
    latent_seq *seqs = calloc(n_seqs, sizeof *seqs);
    latent_batch_entry *es = calloc(n_seqs, sizeof *es);
    int32_t *tok = malloc((size_t)n * n_seqs * sizeof *tok);
    float *logits = malloc((size_t)n_seqs * m->cfg.vocab * sizeof(float));
    for (int s = 0; s < n_seqs; s++) {
        latent_seq_init(&seqs[s], &pool, &m->cfg, err);
        for (int i = 0; i < n; i++) tok[s * n + i] = (i * 7919 + s * 104729 + 11) % m->cfg.vocab;
        es[s] = (latent_batch_entry){.seq = &seqs[s], .tokens = tok + (size_t)s * n, .n_tokens = n, .prompt = 1,
                                     .logits = LATENT_LOGITS_LAST, .out = logits + (size_t)s * m->cfg.vocab};
    }
    double t0 = latent_now_seconds();
    int rc = latent_engine_step(eng, es, n_seqs, err);
    double t = latent_now_seconds() - t0;
    out->tok_s = (double)n * n_seqs / t, out->p50_ms = out->p99_ms = t * 1e3;
    for (int s = 0; s < n_seqs; s++) latent_seq_free(&seqs[s]);
    free(seqs), free(es), free(tok), free(logits);
    latent_kv_pool_free(&pool);
    return rc;
}


void decode_set_free(decode_set *d, int B) {
    if (d->seqs)
        for (int b = 0; b < B; b++) latent_seq_free(&d->seqs[b]);
    free(d->seqs), free(d->tok), free(d->next), free(d->logits), free(d->es), free(d->times);
    latent_kv_pool_free(&d->pool);
}

/* Allocates the set and prefills a 32-token prompt per sequence (together). */
int decode_set_start(decode_set *d, latent_engine *eng, const latent_model *m, int B, int steps,
                            latent_err *err) {
    const int prompt = 32, V = m->cfg.vocab;
    memset(d, 0, sizeof *d);
    int per_seq = (prompt + steps) / 16 + 2;
    latent_kv_dtype kvd = kv_for(eng);
    if (latent_kv_pool_init(&d->pool, &m->cfg, 16, latent_kv_page_bytes(&m->cfg, 16, kvd) * per_seq * B, kvd, err) != 0) return -1;
    d->seqs = calloc(B, sizeof *d->seqs);
    d->tok = malloc((size_t)B * prompt * sizeof *d->tok), d->next = malloc(B * sizeof *d->next);
    d->logits = malloc((size_t)B * V * sizeof(float));
    d->es = calloc(B, sizeof *d->es);
    d->times = malloc(steps * sizeof *d->times);
    if (!d->seqs || !d->tok || !d->next || !d->logits || !d->es || !d->times)
        return latent_err_set(err, LATENT_E_NOMEM, "bench: out of memory for %d sequences", B);
    for (int b = 0; b < B; b++) {
        if (latent_seq_init(&d->seqs[b], &d->pool, &m->cfg, err) != 0) return -1;
        for (int i = 0; i < prompt; i++) d->tok[b * prompt + i] = (b * 131 + i * 17 + 3) % V;
        d->es[b] = (latent_batch_entry){.seq = &d->seqs[b], .tokens = d->tok + b * prompt, .n_tokens = prompt,
                                        .prompt = 1, .logits = LATENT_LOGITS_LAST, .out = d->logits + (size_t)b * V};
    }
    return latent_engine_step(eng, d->es, B, err);
}

/* One greedy decode step of every sequence of the set, timed. */
int decode_set_step(decode_set *d, latent_engine *eng, const latent_model *m, int B, int s, latent_err *err) {
    const int V = m->cfg.vocab;
    for (int b = 0; b < B; b++) {
        d->next[b] = argmax(d->logits + (size_t)b * V, V);
        d->es[b] = (latent_batch_entry){.seq = &d->seqs[b], .tokens = &d->next[b], .n_tokens = 1, .prompt = 0,
                                        .logits = LATENT_LOGITS_LAST, .out = d->logits + (size_t)b * V};
    }
    double t0 = latent_now_seconds();
    int rc = latent_engine_step(eng, d->es, B, err);
    d->times[s] = latent_now_seconds() - t0;
    d->total += d->times[s];
    return rc;
}

void decode_set_figure(decode_set *d, int B, int steps, figure *out) {
    qsort(d->times, steps, sizeof *d->times, cmp_double);
    out->tok_s = (double)B * steps / d->total;
    out->p50_ms = d->times[steps / 2] * 1e3;
    out->p99_ms = d->times[(int)(steps * 0.99)] * 1e3;
}

void bench_keep_best(figure *best, const figure *f) {
    if (f->tok_s > best->tok_s) *best = *f;
}

