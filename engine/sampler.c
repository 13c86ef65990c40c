/* Token sampler: see include/latent/sampler.h for the pipeline and semantics.
 *
 * Cost per call is O(n_history + vocab) plus O(k) for top-k selection
 * (quickselect, no full sort) and O(m + P log m) for top-p, where m is the
 * candidate count and P the size of the nucleus (a binary heap popped until
 * the nucleus is complete, so the vocabulary is never fully sorted). */
#include "latent/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- RNG: xoshiro256** seeded by splitmix64 ---------------------------- */

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void latent_rng_seed(latent_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {  /* splitmix64: distinct outputs, so never all zero */
        uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        r->s[i] = z ^ (z >> 31);
    }
}

uint64_t latent_rng_next(latent_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double latent_rng_uniform(latent_rng *r) {
    return (double)(latent_rng_next(r) >> 11) * 0x1.0p-53;  /* 53 random mantissa bits */
}

/* ---- parameters ---------------------------------------------------------- */

void latent_sampler_defaults(latent_sampler_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->bias = NULL;
    p->n_bias = 0;
    p->n_top_logprobs = 0;
}

size_t latent_sampler_scratch_size(int vocab) {
    return vocab < 1 ? 0 : (size_t)vocab * (sizeof(float) + sizeof(int32_t));
}

/* ---- helpers ------------------------------------------------------------- */

/* NaN -> -inf (never chosen); +inf -> FLT_MAX so max-subtraction stays finite. */
static float clean_logit(float x) {
    if (isnan(x)) return -INFINITY;
    if (x == INFINITY) return FLT_MAX;
    return x;
}

/* The one candidate order: higher logit first, ties to the lower id. */
static int ranks_before(const float *key, int32_t a, int32_t b) {
    return key[a] > key[b] || (key[a] == key[b] && a < b);
}

static void swap_ids(int32_t *ix, int i, int j) { int32_t t = ix[i]; ix[i] = ix[j]; ix[j] = t; }

/* Reorders ix[0..n) so that ix[0..k) are the k best by ranks_before (in no
 * particular order). Hoare quickselect, median-of-three pivot; the order is
 * strict (ids break ties), so runs of equal logits do not degrade it. 0<k<n. */
static void select_top_k(int32_t *ix, int n, int k, const float *key) {
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        /* sort ix[lo], ix[mid], ix[hi] so the median sits at mid */
        if (ranks_before(key, ix[mid], ix[lo])) swap_ids(ix, mid, lo);
        if (ranks_before(key, ix[hi], ix[lo])) swap_ids(ix, hi, lo);
        if (ranks_before(key, ix[hi], ix[mid])) swap_ids(ix, hi, mid);
        int32_t pivot = ix[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (ranks_before(key, ix[i], pivot)) i++;
            while (ranks_before(key, pivot, ix[j])) j--;
            if (i <= j) { swap_ids(ix, i, j); i++; j--; }
        }
        /* now ix[lo..j] rank before-or-equal pivot, ix[i..hi] after-or-equal */
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;  /* want lies between: it is the pivot, in place */
    }
}

/* Max-heap on ix[0..n) under ranks_before: the root is the best candidate. */
static void heap_sift_down(int32_t *ix, int i, int n, const float *key) {
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && ranks_before(key, ix[c + 1], ix[c])) c++;
        if (!ranks_before(key, ix[c], ix[i])) return;
        swap_ids(ix, i, c);
        i = c;
    }
}

/* exp((l - max) / T): 1 for the best token, 0 for -inf (and what underflows). */
static float token_weight(float l, float max, float inv_t) {
    float x = (l - max) * inv_t;
    if (!(x > -INFINITY)) return 0.0f;  /* -inf, or NaN from -inf * 0 when T = inf */
    return expf(x);
}

/* Subtracts the penalties from logits of ids in history, once per distinct id.
 * cnt is vocab ints of any content: only entries of history ids are touched,
 * zeroed first, so the cost is O(n_history). */
static void apply_penalties(float *logits, int vocab, const int32_t *history, int n_history,
                            int32_t *cnt, float rep, int rep_on, float presence, float frequency) {
    for (int h = 0; h < n_history; h++) {
        int32_t id = history[h];
        if (id >= 0 && id < vocab) cnt[id] = 0;
    }
    for (int h = 0; h < n_history; h++) {
        int32_t id = history[h];
        if (id >= 0 && id < vocab) cnt[id]++;
    }
    for (int h = 0; h < n_history; h++) {
        int32_t id = history[h];
        if (id < 0 || id >= vocab || cnt[id] == 0) continue;
        int32_t c = cnt[id];
        cnt[id] = 0;  /* once per distinct id */
        float l = logits[id];
        if (rep_on) l = l > 0 ? l / rep : l * rep;  /* CTRL: always toward "less likely" */
        /* OpenAI: presence once if seen, frequency per occurrence */
        l = (float)((double)l - (double)presence - (double)frequency * (double)c);
        logits[id] = clean_logit(l);
    }
}

/* Top-n ids by logit (ties: lower id first) by one scan with insertion into a
 * short sorted list; n <= LATENT_MAX_TOP_LOGPROBS. Returns the count. */
static int top_n_ids(const float *logits, int vocab, int n, int32_t *ids) {
    int cnt = 0;
    if (n <= 0) return 0;
    for (int i = 0; i < vocab; i++) {
        float l = logits[i];
        if (cnt == n && !(l > logits[ids[n - 1]])) continue;
        int pos = cnt < n ? cnt : n - 1;  /* when full, the last one drops out */
        while (pos > 0 && l > logits[ids[pos - 1]]) { ids[pos] = ids[pos - 1]; pos--; }
        ids[pos] = i;
        if (cnt < n) cnt++;
    }
    return cnt;
}

/* Temperature, top-k, top-p, min-p and one inverse-CDF draw. w: vocab floats,
 * ix: vocab ints (scratch). best is the argmax of logits. */
static int32_t sample_filtered(const latent_sampler_params *p, latent_rng *rng,
                               const float *logits, int vocab, float max, int32_t best,
                               float *w, int32_t *ix) {
    float inv_t = 1.0f / p->temperature;

    /* top-k: quickselect the k best ids into ix[0..k) */
    int n = vocab;
    for (int i = 0; i < vocab; i++) ix[i] = i;
    if (p->top_k > 0 && p->top_k < vocab) {
        select_top_k(ix, vocab, p->top_k, logits);
        n = p->top_k;
    }

    /* unnormalised probabilities of the top-k set and their sum */
    double z = 0;
    for (int i = 0; i < n; i++) {
        float wi = token_weight(logits[ix[i]], max, inv_t);
        w[ix[i]] = wi;
        z += wi;
    }

    /* min-p: keep w >= min_p * w_max, w_max = 1. It commutes with top-p
     * (both keep a prefix of the ranking, and the ratio to the max does not
     * change under renormalisation), so it filters first and shrinks the heap. */
    int m = n;
    double mass = z;
    if (p->min_p > 0) {
        int j = 0;
        mass = 0;
        for (int i = 0; i < n; i++)
            if (w[ix[i]] >= p->min_p) { mass += w[ix[i]]; swap_ids(ix, i, j++); }
        if (j == 0) {  /* min_p > 1: keep the best token */
            for (int i = 0; i < n; i++)
                if (ix[i] == best) { swap_ids(ix, i, 0); break; }
            mass = w[best];
            j = 1;
        }
        m = j;
    }

    /* top-p over the top-k distribution (target relative to z, not mass):
     * pop the best from a heap until the nucleus holds top_p of it. */
    int s = 0;
    if (p->top_p < 1) {
        double target = (double)p->top_p * z;
        if (mass >= target) {  /* else the nucleus is wider than the min-p set */
            for (int i = m / 2 - 1; i >= 0; i--) heap_sift_down(ix, i, m, logits);
            int end = m;
            double cum = 0;
            do {
                swap_ids(ix, 0, end - 1);   /* best goes to the popped tail */
                end--;
                heap_sift_down(ix, 0, end, logits);
                cum += w[ix[end]];
            } while (cum < target && end > 0);
            s = end;  /* nucleus: ix[end..m) */
        }
    }

    /* inverse CDF over the survivors ix[s..m), one uniform per call */
    double tot = 0;
    for (int i = s; i < m; i++) tot += w[ix[i]];
    double r = latent_rng_uniform(rng) * tot;
    double cum = 0;
    int32_t tok = -1;
    for (int i = s; i < m; i++) {
        float wi = w[ix[i]];
        if (wi <= 0) continue;   /* zero-probability tokens are never drawn */
        cum += wi;
        tok = ix[i];
        if (r < cum) break;      /* rounding past the end keeps the last positive one */
    }
    return tok >= 0 ? tok : best;  /* the best token has w = 1, so tok >= 0 */
}

/* ---- entry points ---------------------------------------------------------- */

int32_t latent_sampler_sample_scratch(const latent_sampler_params *p, latent_rng *rng,
                                      float *logits, int vocab,
                                      const int32_t *history, int n_history,
                                      latent_sample *out, void *scratch) {
    if (out) { out->token = -1; out->logprob = -INFINITY; out->n_top = 0; }
    if (!logits || vocab < 1) return -1;
    latent_sampler_params defaults;
    if (!p) { latent_sampler_defaults(&defaults); p = &defaults; }

    int greedy = !rng || !(p->temperature >= 1e-5f);  /* NaN temperature: greedy */
    float rep = p->repetition_penalty;
    int rep_on = rep > 0 && isfinite(rep) && rep != 1;
    float presence = isfinite(p->presence_penalty) ? p->presence_penalty : 0;
    float frequency = isfinite(p->frequency_penalty) ? p->frequency_penalty : 0;
    int pen_on = history && n_history > 0 && (rep_on || presence != 0 || frequency != 0);

    void *owned = NULL;
    if (!scratch && (pen_on || !greedy)) {
        scratch = owned = malloc(latent_sampler_scratch_size(vocab));
        if (!scratch) return -1;
    }
    float *w = scratch;                               /* (vocab) weights by id */
    int32_t *ix = scratch ? (int32_t *)(w + vocab) : NULL;  /* (vocab) counts, then candidate ids */

    for (int i = 0; i < vocab; i++) logits[i] = clean_logit(logits[i]);

    /* logit bias, added; ids outside the vocabulary are ignored */
    if (p->bias)
        for (int i = 0; i < p->n_bias; i++) {
            int32_t id = p->bias[i].id;
            if (id >= 0 && id < vocab) logits[id] = clean_logit(logits[id] + p->bias[i].bias);
        }

    if (pen_on) apply_penalties(logits, vocab, history, n_history, ix, rep, rep_on, presence, frequency);

    /* argmax, ties to the lowest id */
    int32_t best = 0;
    for (int i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    float max = logits[best];
    if (max == -INFINITY) {  /* nothing possible: treat as uniform */
        for (int i = 0; i < vocab; i++) logits[i] = 0;
        max = 0;
    }

    int32_t tok = greedy ? best : sample_filtered(p, rng, logits, vocab, max, best, w, ix);

    if (out) {
        /* log-softmax of the processed logits (before temperature) */
        double sum = 0;
        for (int i = 0; i < vocab; i++) sum += expf(logits[i] - max);  /* max term is 1, sum >= 1 */
        double log_z = (double)max + log(sum);
        out->token = tok;
        out->logprob = (float)((double)logits[tok] - log_z);
        int n = p->n_top_logprobs;
        if (n > LATENT_MAX_TOP_LOGPROBS) n = LATENT_MAX_TOP_LOGPROBS;
        if (n > vocab) n = vocab;
        out->n_top = top_n_ids(logits, vocab, n, out->top_ids);
        for (int i = 0; i < out->n_top; i++)
            out->top_logprobs[i] = (float)((double)logits[out->top_ids[i]] - log_z);
    }
    free(owned);
    return tok;
}

int32_t latent_sampler_sample(const latent_sampler_params *p, latent_rng *rng,
                              float *logits, int vocab, const int32_t *history, int n_history,
                              latent_sample *out) {
    return latent_sampler_sample_scratch(p, rng, logits, vocab, history, n_history, out, NULL);
}
