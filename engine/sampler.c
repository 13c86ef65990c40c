/* Token sampler: see include/latent/sampler.h for the pipeline and semantics.
 *
 * Cost per call is O(n_history + vocab) passes plus: top-k by one scan with a
 * k-heap (small k, O(vocab + k log k log(vocab/k)) expected) or quickselect
 * (large k); top-p by a bucket histogram that cuts the candidates to the
 * buckets holding the nucleus, then a heap popped until the nucleus is
 * complete. The vocabulary is never fully sorted. One expf per candidate;
 * at T = 1 without top-k the log-softmax reuses the sampling weights. */
#include "latent/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* Binary heap on ix[0..n): the root is the best candidate (worst = 0) or the
 * worst (worst = 1) under ranks_before; ids are distinct, so "after" is
 * ranks_before with the arguments swapped. */
static int heap_above(const float *key, int32_t a, int32_t b, int worst) {
    return worst ? ranks_before(key, b, a) : ranks_before(key, a, b);
}

static void heap_sift_down(int32_t *ix, int i, int n, const float *key, int worst) {
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && heap_above(key, ix[c + 1], ix[c], worst)) c++;
        if (!heap_above(key, ix[c], ix[i], worst)) return;
        swap_ids(ix, i, c);
        i = c;
    }
}

static void heap_build(int32_t *ix, int n, const float *key, int worst) {
    for (int i = n / 2 - 1; i >= 0; i--) heap_sift_down(ix, i, n, key, worst);
}

/* Small k: one scan keeping the k best in ix[0..k) as a heap whose root is
 * the worst of them, so most tokens cost one float compare. Ids arrive in
 * ascending order, so a tie with the root never displaces it (lower id wins). */
static void heap_top_k(int32_t *ix, int vocab, int k, const float *key) {
    for (int i = 0; i < k; i++) ix[i] = i;
    heap_build(ix, k, key, 1);
    float floor_l = key[ix[0]];
    for (int i = k; i < vocab; i++) {
        if (!(key[i] > floor_l)) continue;
        ix[0] = i;
        heap_sift_down(ix, 0, k, key, 1);
        floor_l = key[ix[0]];
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

/* Top-p pre-filter: buckets of x = (l - max) / T, half a nat wide, down to
 * x = -16 (the last bucket takes the rest). The buckets are ordered like the
 * ranking, so the nucleus lies in the first buckets whose mass reaches
 * target; keeps those in ix[0..return) and drops the rest. */
#define TOP_P_BUCKETS 32
static int top_p_bucket(float l, float max, float inv_t) {
    float v = -(l - max) * inv_t * 2.0f;  /* >= 0, or NaN for -inf * 0 */
    return v < TOP_P_BUCKETS - 1 ? (int)v : TOP_P_BUCKETS - 1;
}

static int top_p_prefilter(int32_t *ix, int m, const float *logits, const float *w, float max,
                           float inv_t, double target) {
    double bm[TOP_P_BUCKETS] = {0};
    for (int i = 0; i < m; i++) bm[top_p_bucket(logits[ix[i]], max, inv_t)] += w[ix[i]];
    double cum = 0;
    int last = 0;
    while (last < TOP_P_BUCKETS - 1 && (cum += bm[last]) < target) last++;
    if (last == TOP_P_BUCKETS - 1) return m;
    int j = 0;
    for (int i = 0; i < m; i++)
        if (top_p_bucket(logits[ix[i]], max, inv_t) <= last) swap_ids(ix, i, j++);
    return j;
}

/* top-k: the k best ids into ix[0..k) (every id, in order, when top-k is
 * off); a bounded heap for small k, quickselect for large k. The count. */
static int top_k_ids(const latent_sampler_params *p, const float *logits, int vocab, int32_t *ix) {
    int n = vocab;
    if (p->top_k > 0 && p->top_k < vocab) {
        n = p->top_k;
        if ((int64_t)n * 16 <= vocab) {
            heap_top_k(ix, vocab, n, logits);
        } else {
            for (int i = 0; i < vocab; i++) ix[i] = i;
            select_top_k(ix, vocab, n, logits);
        }
    } else {
        for (int i = 0; i < vocab; i++) ix[i] = i;
    }
    return n;
}

/* top-p over ix[0..m) (target = top_p of the top-k mass): bucket
 * pre-filter, then pop the best from a heap until the nucleus holds the
 * target. The nucleus is ix[s..m'), s returned, m' into *m. */
static int top_p_nucleus(int32_t *ix, int *m, const float *logits, const float *w, float max, float inv_t,
                         double target) {
    *m = top_p_prefilter(ix, *m, logits, w, max, inv_t, target);
    heap_build(ix, *m, logits, 0);
    int end = *m;
    double cum = 0;
    do {
        swap_ids(ix, 0, end - 1);   /* best goes to the popped tail */
        end--;
        heap_sift_down(ix, 0, end, logits, 0);
        cum += w[ix[end]];
    } while (cum < target && end > 0);
    return end;
}

/* Temperature, top-k, top-p, min-p and one inverse-CDF draw. w: vocab floats,
 * ix: vocab ints (scratch). best is the argmax of logits. When the weights of
 * the whole vocabulary at T = 1 were summed, *sum_all gets the sum (the
 * log-softmax needs the same one), else -1. */
static int32_t sample_filtered(const latent_sampler_params *p, latent_rng *rng,
                               const float *logits, int vocab, float max, int32_t best,
                               float *w, int32_t *ix, double *sum_all) {
    float inv_t = 1.0f / p->temperature;
    int n = top_k_ids(p, logits, vocab, ix);

    /* unnormalised probabilities of the top-k set and their sum */
    double z = 0;
    for (int i = 0; i < n; i++) {
        float wi = token_weight(logits[ix[i]], max, inv_t);
        w[ix[i]] = wi;
        z += wi;
    }
    *sum_all = n == vocab && inv_t == 1.0f ? z : -1;

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

    /* top-p over the top-k distribution (target relative to z, not mass) */
    int s = 0;
    double target = (double)p->top_p * z;
    if (p->top_p < 1 && mass >= target) /* else the nucleus is wider than the min-p set */
        s = top_p_nucleus(ix, &m, logits, w, max, inv_t, target);

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

    double sum = -1;
    int32_t tok = greedy ? best : sample_filtered(p, rng, logits, vocab, max, best, w, ix, &sum);

    if (out) {
        /* log-softmax of the processed logits (before temperature) */
        if (sum < 0) {
            sum = 0;
            for (int i = 0; i < vocab; i++) sum += expf(logits[i] - max);  /* max term is 1, sum >= 1 */
        }
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
