/* Sampler tests: RNG reference values, greedy, determinism, chi-square checks
 * of the sampled distribution against an independent double-precision
 * reference (temperature, top-k, top-p, min-p, combinations), penalties and
 * bias against hand-computed logits, logprobs, and hostile inputs.
 * Every statistical check uses a fixed seed and a critical value at
 * p = 1e-6, so it is deterministic and a false failure is practically
 * impossible. */
#include "latent/sampler.h"
#include "testutil.h"

#include <float.h>
#include <stdint.h>
#include <string.h>

/* chi-square critical values at p = 1e-6 for df = 1..9 */
static const double CHI2_CRIT_1E6[] = {0, 23.928, 27.631, 30.665, 33.377, 35.888,
                                       38.258, 40.522, 42.701, 44.811};

/* Critical value for larger df: Wilson-Hilferty with z(1e-6) = 4.753. */
static double chi2_crit(int df) {
    if (df < 10) return CHI2_CRIT_1E6[df];
    double a = 2.0 / (9.0 * df), t = 1 - a + 4.753 * sqrt(a);
    return df * t * t * t;
}

static const float L8[8] = {1.0f, 2.5f, -0.5f, 0.3f, 2.0f, -1.7f, 0.9f, 1.6f};

/* ---- independent reference distribution (plain, full sort, double) ------- */

/* probs[n] after temperature, top-k, top-p, min-p; order by logit desc, id asc. */
static void ref_dist(const float *logits, int n, double temp, int top_k, double top_p,
                     double min_p, double *probs) {
    int *ord = malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) ord[i] = i;
    for (int i = 0; i < n; i++)  /* selection sort: simple and obviously right */
        for (int j = i + 1; j < n; j++) {
            int a = ord[i], b = ord[j];
            if (logits[b] > logits[a] || (logits[b] == logits[a] && b < a)) { ord[i] = b; ord[j] = a; }
        }
    double mx = logits[ord[0]], z = 0;
    for (int i = 0; i < n; i++) { probs[i] = exp((logits[i] - mx) / temp); z += probs[i]; }
    for (int i = 0; i < n; i++) probs[i] /= z;
    int keep = n;
    if (top_k > 0 && top_k < n) keep = top_k;
    z = 0;
    for (int r = 0; r < keep; r++) z += probs[ord[r]];
    for (int r = 0; r < n; r++) probs[ord[r]] = r < keep ? probs[ord[r]] / z : 0;
    if (top_p < 1) {
        double cum = 0;
        int r = 0;
        while (r < keep) { cum += probs[ord[r]]; r++; if (cum >= top_p) break; }
        keep = r;
        z = 0;
        for (r = 0; r < keep; r++) z += probs[ord[r]];
        for (r = 0; r < n; r++) probs[ord[r]] = r < keep ? probs[ord[r]] / z : 0;
    }
    if (min_p > 0) {
        double pmax = probs[ord[0]];
        z = 0;
        for (int i = 0; i < n; i++) { if (probs[i] < min_p * pmax) probs[i] = 0; z += probs[i]; }
        for (int i = 0; i < n; i++) probs[i] /= z;
    }
    free(ord);
}

/* Draws `draws` samples, checks excluded tokens are never drawn and the
 * chi-square statistic over the allowed ones is below the p = 1e-6 value. */
static void check_dist(const char *name, const float *logits, int n, const latent_sampler_params *p,
                       const double *expect, int draws, uint64_t seed) {
    float *buf = malloc(sizeof(float) * n);
    void *scratch = malloc(latent_sampler_scratch_size(n));
    long *cnt = calloc(n, sizeof(long));
    latent_rng rng;
    latent_rng_seed(&rng, seed);
    int bad = 0;
    for (int d = 0; d < draws; d++) {
        memcpy(buf, logits, sizeof(float) * n);
        int32_t t = latent_sampler_sample_scratch(p, &rng, buf, n, NULL, 0, NULL, scratch);
        if (t < 0 || t >= n) { bad++; continue; }
        cnt[t]++;
    }
    CHECK(bad == 0, "%s: %d out-of-range tokens", name, bad);
    double chi2 = 0;
    int df = -1;
    for (int i = 0; i < n; i++) {
        if (expect[i] == 0) {
            CHECK(cnt[i] == 0, "%s: excluded token %d drawn %ld times", name, i, cnt[i]);
            continue;
        }
        double e = expect[i] * draws;
        chi2 += (cnt[i] - e) * (cnt[i] - e) / e;
        df++;
    }
    if (df == 0) {
        CHECK(chi2 < 1e-9, "%s: single allowed token not always drawn", name);
    } else {
        CHECK(chi2 < chi2_crit(df), "%s: chi2 %.2f >= %.2f (df %d)", name, chi2, chi2_crit(df), df);
    }
    fprintf(stderr, "  %-28s df %3d chi2 %7.2f (crit %.2f)\n", name, df, chi2, df > 0 ? chi2_crit(df) : 0);
    free(buf); free(scratch); free(cnt);
}

static void dist_case(const char *name, const float *logits, int n, double temp, int top_k,
                      double top_p, double min_p, int draws, uint64_t seed) {
    latent_sampler_params p;
    latent_sampler_defaults(&p);
    p.temperature = (float)temp; p.top_k = top_k; p.top_p = (float)top_p; p.min_p = (float)min_p;
    double *e = malloc(sizeof(double) * n);
    ref_dist(logits, n, temp, top_k, top_p, min_p, e);
    check_dist(name, logits, n, &p, e, draws, seed);
    free(e);
}

/* ---- tests ---------------------------------------------------------------- */

static void test_rng(void) {
    /* reference values from an independent Python implementation */
    latent_rng r;
    latent_rng_seed(&r, 0);
    CHECK(r.s[0] == 0xe220a8397b1dcdafULL && r.s[3] == 0xf88bb8a8724c81ecULL, "splitmix64 seed 0 state");
    CHECK(latent_rng_next(&r) == 0x99ec5f36cb75f2b4ULL, "seed 0 #1");
    CHECK(latent_rng_next(&r) == 0xbf6e1f784956452aULL, "seed 0 #2");
    CHECK(latent_rng_next(&r) == 0x1a5f849d4933e6e0ULL, "seed 0 #3");
    latent_rng_seed(&r, 0xdeadbeefcafebabeULL);
    CHECK(latent_rng_next(&r) == 0x2299b3421aa78b66ULL, "seed deadbeef #1");
    CHECK(latent_rng_next(&r) == 0x9af6550483e02887ULL, "seed deadbeef #2");
    latent_rng_seed(&r, 42);
    CHECK(latent_rng_uniform(&r) == (double)(0x15780b2e0c2ec716ULL >> 11) / 9007199254740992.0, "uniform");
    double mn = 1, mx = 0, sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = latent_rng_uniform(&r);
        if (u < mn) mn = u;
        if (u > mx) mx = u;
        sum += u;
    }
    CHECK(mn >= 0 && mx < 1, "uniform range [%g, %g]", mn, mx);
    CHECK_NEAR(sum / 100000, 0.5, 0.01, "uniform mean");
}

static void test_defaults(void) {
    latent_sampler_params p;
    memset(&p, 0x5a, sizeof p);
    latent_sampler_defaults(&p);
    CHECK(p.temperature == 1 && p.top_k == 0 && p.top_p == 1 && p.min_p == 0, "defaults 1");
    CHECK(p.repetition_penalty == 1 && p.presence_penalty == 0 && p.frequency_penalty == 0, "defaults 2");
    CHECK(p.bias == NULL && p.n_bias == 0 && p.n_top_logprobs == 0, "defaults 3");
    CHECK(latent_sampler_scratch_size(49152) == 49152 * 8 && latent_sampler_scratch_size(0) == 0, "scratch size");
}

static void test_greedy(void) {
    latent_sampler_params p;
    latent_sampler_defaults(&p);
    p.temperature = 0;
    float l[6] = {0.1f, 3.0f, -2.0f, 3.0f, 2.9f, 3.0f};
    latent_rng r, r0;
    latent_rng_seed(&r, 5);
    r0 = r;
    for (int i = 0; i < 10; i++) {
        float b[6];
        memcpy(b, l, sizeof b);
        CHECK(latent_sampler_sample(&p, &r, b, 6, NULL, 0, NULL) == 1, "argmax ties to lowest id");
    }
    CHECK(memcmp(&r, &r0, sizeof r) == 0, "greedy does not touch the RNG");
    p.temperature = 1e-6f;
    float b[6];
    memcpy(b, l, sizeof b);
    CHECK(latent_sampler_sample(&p, &r, b, 6, NULL, 0, NULL) == 1, "temperature < 1e-5 is greedy");
    CHECK(memcmp(&r, &r0, sizeof r) == 0, "tiny temperature does not touch the RNG");
    p.temperature = 1;  /* NULL rng means greedy */
    memcpy(b, l, sizeof b);
    CHECK(latent_sampler_sample(&p, NULL, b, 6, NULL, 0, NULL) == 1, "NULL rng is greedy");
    /* greedy after a bias moves the argmax */
    latent_logit_bias bias = {4, 0.5f};
    p.temperature = 0; p.bias = &bias; p.n_bias = 1;
    memcpy(b, l, sizeof b);
    CHECK(latent_sampler_sample(&p, NULL, b, 6, NULL, 0, NULL) == 4, "greedy sees the bias");
}

static void test_determinism(void) {
    latent_sampler_params p;
    latent_sampler_defaults(&p);
    p.temperature = 1.2f; p.top_k = 6; p.top_p = 0.95f;
    int32_t a[500], b[500], c[500];
    latent_rng ra, rb, rc;
    latent_rng_seed(&ra, 1234); latent_rng_seed(&rb, 1234); latent_rng_seed(&rc, 1235);
    void *scratch = malloc(latent_sampler_scratch_size(8));
    for (int i = 0; i < 500; i++) {
        float x[8];
        memcpy(x, L8, sizeof x); a[i] = latent_sampler_sample(&p, &ra, x, 8, NULL, 0, NULL);
        memcpy(x, L8, sizeof x); b[i] = latent_sampler_sample_scratch(&p, &rb, x, 8, NULL, 0, NULL, scratch);
        memcpy(x, L8, sizeof x); c[i] = latent_sampler_sample(&p, &rc, x, 8, NULL, 0, NULL);
    }
    free(scratch);
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed, same samples (malloc and scratch paths)");
    CHECK(memcmp(a, c, sizeof a) != 0, "different seeds differ");
}

static void test_distributions(void) {
    const int D = 200000;
    dist_case("T=1", L8, 8, 1.0, 0, 1, 0, D, 11);
    dist_case("T=0.7", L8, 8, 0.7, 0, 1, 0, D, 12);
    dist_case("T=1.5", L8, 8, 1.5, 0, 1, 0, D, 13);
    dist_case("top_k=3", L8, 8, 1.0, 3, 1, 0, D, 14);
    dist_case("top_k=1", L8, 8, 1.0, 1, 1, 0, D, 15);
    dist_case("top_k=7 T=1.5", L8, 8, 1.5, 7, 1, 0, D, 16);
    /* top_p and min_p kept well away from the cumulative sums and probability
     * ratios they cut at (T=1: cum 0.383 0.615 0.770 0.856 0.933; ratio 1 0.607
     * 0.407 0.223 0.202 0.111), so float rounding cannot move a boundary */
    dist_case("top_p=0.7", L8, 8, 1.0, 0, 0.7, 0, D, 17);
    dist_case("top_p=0.5 T=0.7", L8, 8, 0.7, 0, 0.5, 0, D, 18);
    dist_case("min_p=0.1", L8, 8, 1.0, 0, 1, 0.1, D, 19);
    dist_case("min_p=0.3 T=1.5", L8, 8, 1.5, 0, 1, 0.3, D, 20);
    dist_case("k=6 p=0.9 T=1.3", L8, 8, 1.3, 6, 0.9, 0, D, 21);
    dist_case("k=6 p=0.9 m=0.3 T=1.3", L8, 8, 1.3, 6, 0.9, 0.3, D, 22);
    dist_case("k=5 p=0.85 m=0.25", L8, 8, 1.0, 5, 0.85, 0.25, D, 23);
    dist_case("p=0.95 m=0.2", L8, 8, 1.0, 0, 0.95, 0.2, D, 24);
    /* ties at the top-k boundary go to the lower ids */
    static const float ties[8] = {0, 1, 1, 0.5f, 1, 1, 0, 1};
    dist_case("ties top_k=3", ties, 8, 1.0, 3, 1, 0, D, 25);
    dist_case("ties top_p=0.4", ties, 8, 1.0, 0, 0.4, 0, D, 26);

    /* a wider vocabulary exercises quickselect and the top-p heap */
    enum { V = 1000 };
    static float big[V];
    latent_rng r;
    latent_rng_seed(&r, 99);
    for (int i = 0; i < V; i++) big[i] = (float)(6 * latent_rng_uniform(&r) - 3);
    for (int i = 0; i < 40; i++) big[(i * 37) % V] = 2.97f;  /* 40 ties straddling the top-k cut */
    dist_case("V=1000 top_k=10", big, V, 1.0, 10, 1, 0, 50000, 27);
    dist_case("V=1000 top_k=45 T=0.8", big, V, 0.8, 45, 1, 0, 50000, 28);
    dist_case("V=1000 top_p=0.2", big, V, 0.5, 0, 0.2, 0, 50000, 29);
    dist_case("V=1000 k=200 p=0.1 m=0.5", big, V, 1.0, 200, 0.1, 0.5, 50000, 30);
}

/* log-softmax in double */
static void ref_logsoftmax(const double *l, int n, double *out) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) if (l[i] > mx) mx = l[i];
    for (int i = 0; i < n; i++) s += exp(l[i] - mx);
    for (int i = 0; i < n; i++) out[i] = l[i] - mx - log(s);
}

/* Runs the sampler greedily with n_top = 8 and compares every logprob and the
 * processed logits with the expected processed logits `want`. */
static void check_processed(const char *name, const latent_sampler_params *p0, const int32_t *hist,
                            int nh, const double *want) {
    latent_sampler_params p = *p0;
    p.temperature = 0; p.n_top_logprobs = 8;
    float x[8];
    memcpy(x, L8, sizeof x);
    /* scratch full of garbage: counts must not depend on its contents */
    void *scratch = malloc(latent_sampler_scratch_size(8));
    memset(scratch, 0x7f, latent_sampler_scratch_size(8));
    latent_sample s;
    int32_t t = latent_sampler_sample_scratch(&p, NULL, x, 8, hist, nh, &s, scratch);
    free(scratch);
    double lp[8];
    ref_logsoftmax(want, 8, lp);
    int best = 0;
    for (int i = 1; i < 8; i++) if (want[i] > want[best]) best = i;
    CHECK(t == best && s.token == best, "%s: greedy token %d, want %d", name, t, best);
    CHECK_NEAR(s.logprob, lp[best], 1e-5, name);
    CHECK(s.n_top == 8, "%s: n_top %d", name, s.n_top);
    for (int i = 0; i < 8; i++) {
        CHECK_NEAR(x[i], want[i], 1e-5 * (1 + fabs(want[i])), name);
        int id = s.top_ids[i];
        CHECK(id >= 0 && id < 8, "%s: top id %d", name, id);
        if (id >= 0 && id < 8) CHECK_NEAR(s.top_logprobs[i], lp[id], 1e-5, name);
        if (i > 0) CHECK(s.top_logprobs[i] <= s.top_logprobs[i - 1], "%s: top sorted", name);
    }
}

static void test_penalties(void) {
    latent_sampler_params p;
    double w[8];
    /* history: token 1 x3 (positive logit), token 5 x2 (negative), token 3 x1,
     * plus ids outside the vocabulary, which are ignored */
    const int32_t hist[] = {1, 5, 1, 99, 3, -2, 1, 5, 8, INT32_MAX, INT32_MIN};
    const int nh = (int)(sizeof hist / sizeof hist[0]);

    latent_sampler_defaults(&p);
    for (int i = 0; i < 8; i++) w[i] = L8[i];
    check_processed("no-op", &p, hist, nh, w);

    latent_sampler_defaults(&p);
    p.repetition_penalty = 1.3f;
    for (int i = 0; i < 8; i++) w[i] = L8[i];
    w[1] = 2.5 / 1.3; w[3] = 0.3 / 1.3; w[5] = -1.7 * 1.3;  /* once per distinct id */
    check_processed("repetition", &p, hist, nh, w);

    latent_sampler_defaults(&p);
    p.presence_penalty = 0.6f;
    for (int i = 0; i < 8; i++) w[i] = L8[i];
    w[1] -= 0.6; w[3] -= 0.6; w[5] -= 0.6;
    check_processed("presence", &p, hist, nh, w);

    latent_sampler_defaults(&p);
    p.frequency_penalty = 0.25f;
    for (int i = 0; i < 8; i++) w[i] = L8[i];
    w[1] -= 0.75; w[3] -= 0.25; w[5] -= 0.5;
    check_processed("frequency", &p, hist, nh, w);

    latent_sampler_defaults(&p);
    p.presence_penalty = -0.5f; p.frequency_penalty = -0.125f;  /* negative: encourage */
    for (int i = 0; i < 8; i++) w[i] = L8[i];
    w[1] += 0.5 + 0.375; w[3] += 0.5 + 0.125; w[5] += 0.5 + 0.25;
    check_processed("negative presence/frequency", &p, hist, nh, w);

    latent_sampler_defaults(&p);
    const latent_logit_bias bias[] = {{2, 1.5f}, {7, -100}, {0, 100}, {8, 5}, {-1, 3}, {INT32_MAX, 1}};
    p.bias = bias; p.n_bias = 6;
    for (int i = 0; i < 8; i++) w[i] = L8[i];
    w[2] += 1.5; w[7] -= 100; w[0] += 100;
    check_processed("bias", &p, NULL, 0, w);

    /* all together, in order: bias, repetition, presence/frequency */
    latent_sampler_defaults(&p);
    const latent_logit_bias bias2[] = {{3, -1.0f}, {4, 0.5f}};
    p.bias = bias2; p.n_bias = 2;
    p.repetition_penalty = 1.5f; p.presence_penalty = 0.2f; p.frequency_penalty = 0.1f;
    const int32_t hist2[] = {3, 4, 4, 6, 6, 6};
    for (int i = 0; i < 8; i++) w[i] = L8[i];
    w[3] = (0.3 - 1.0) * 1.5 - 0.2 - 0.1;      /* bias makes it negative: multiplied */
    w[4] = (2.0 + 0.5) / 1.5 - 0.2 - 0.2;
    w[6] = 0.9 / 1.5 - 0.2 - 0.3;
    check_processed("combined", &p, hist2, 6, w);

    /* presence/frequency also with the allocating entry point */
    latent_sampler_defaults(&p);
    p.frequency_penalty = 1; p.temperature = 0;
    float x[8];
    memcpy(x, L8, sizeof x);
    const int32_t h3[] = {1, 1};
    CHECK(latent_sampler_sample(&p, NULL, x, 8, h3, 2, NULL) == 4, "frequency moves the argmax");
    CHECK_NEAR(x[1], 0.5, 1e-6, "frequency via malloc path");
}

static void test_logprobs(void) {
    enum { V = 100 };
    float l[V], x[V];
    double d[V], lp[V];
    latent_rng r;
    latent_rng_seed(&r, 7);
    for (int i = 0; i < V; i++) l[i] = (float)(8 * latent_rng_uniform(&r) - 4);
    l[10] = l[20] = l[30] = 4.5f;  /* a three-way tie at the top */
    l[50] = l[60] = 3.9f;
    for (int i = 0; i < V; i++) d[i] = l[i];
    ref_logsoftmax(d, V, lp);
    /* reference ranking: logprob desc, ties lower id */
    int ord[V];
    for (int i = 0; i < V; i++) ord[i] = i;
    for (int i = 0; i < V; i++)
        for (int j = i + 1; j < V; j++)
            if (d[ord[j]] > d[ord[i]] || (d[ord[j]] == d[ord[i]] && ord[j] < ord[i])) {
                int t = ord[i]; ord[i] = ord[j]; ord[j] = t;
            }
    latent_sampler_params p;
    latent_sampler_defaults(&p);
    p.temperature = 0.9f; p.n_top_logprobs = 20;
    latent_sample s;
    for (int k = 0; k < 50; k++) {
        memcpy(x, l, sizeof x);
        int32_t t = latent_sampler_sample(&p, &r, x, V, NULL, 0, &s);
        CHECK(t >= 0 && t < V && s.token == t, "token %d", t);
        if (t < 0 || t >= V) continue;
        CHECK_NEAR(s.logprob, lp[t], 1e-5, "chosen logprob (before temperature)");
    }
    CHECK(s.n_top == 20, "n_top %d", s.n_top);
    for (int i = 0; i < s.n_top; i++) {
        CHECK(s.top_ids[i] == ord[i], "top %d: id %d want %d", i, s.top_ids[i], ord[i]);
        CHECK_NEAR(s.top_logprobs[i], lp[ord[i]], 1e-5, "top logprob");
    }
    p.n_top_logprobs = 1000;  /* clamped to LATENT_MAX_TOP_LOGPROBS */
    memcpy(x, l, sizeof x);
    latent_sampler_sample(&p, &r, x, V, NULL, 0, &s);
    CHECK(s.n_top == LATENT_MAX_TOP_LOGPROBS, "clamp n_top %d", s.n_top);
    p.n_top_logprobs = -3;
    memcpy(x, l, sizeof x);
    latent_sampler_sample(&p, &r, x, V, NULL, 0, &s);
    CHECK(s.n_top == 0, "negative n_top %d", s.n_top);
    /* n_top beyond the vocabulary */
    float three[3] = {0, 1, 2};
    p.n_top_logprobs = 5;
    latent_sampler_sample(&p, &r, three, 3, NULL, 0, &s);
    CHECK(s.n_top == 3 && s.top_ids[0] == 2 && s.top_ids[2] == 0, "n_top %d > vocab", s.n_top);
    double e = log(exp(0.0) + exp(1.0) + exp(2.0));
    CHECK_NEAR(s.top_logprobs[0], 2 - e, 1e-6, "vocab 3 top");
    CHECK_NEAR(s.top_logprobs[2], 0 - e, 1e-6, "vocab 3 last");
}

static void test_robustness(void) {
    latent_sampler_params p;
    latent_sampler_defaults(&p);
    latent_rng r;
    latent_rng_seed(&r, 3);
    latent_sample s;

    /* NaN logits are -inf: never drawn, logprob -inf in the top list */
    float nanl[6] = {NAN, 1, NAN, 0.5f, -NAN, 0.2f};
    int drawn_nan = 0;
    p.n_top_logprobs = 6;
    for (int i = 0; i < 2000; i++) {
        float x[6];
        memcpy(x, nanl, sizeof x);
        int32_t t = latent_sampler_sample(&p, &r, x, 6, NULL, 0, &s);
        if (t != 1 && t != 3 && t != 5) drawn_nan++;
        CHECK(isfinite(s.logprob), "finite logprob");
    }
    CHECK(drawn_nan == 0, "NaN tokens drawn %d times", drawn_nan);
    CHECK(s.top_ids[0] == 1 && s.top_ids[3] == 0 && isinf(s.top_logprobs[3]) && s.top_logprobs[3] < 0,
          "NaN ranks last with logprob -inf");
    p.n_top_logprobs = 0;

    /* all NaN / all -inf: uniform, still a valid id */
    float alln[4] = {NAN, NAN, -INFINITY, NAN};
    int32_t t = latent_sampler_sample(&p, &r, alln, 4, NULL, 0, &s);
    CHECK(t >= 0 && t < 4 && isfinite(s.logprob), "all NaN -> %d (%g)", t, s.logprob);
    CHECK_NEAR(s.logprob, -log(4.0), 1e-6, "all NaN is uniform");

    /* +inf wins and stays finite */
    float infl[4] = {0, INFINITY, 2, -INFINITY};
    t = latent_sampler_sample(&p, &r, infl, 4, NULL, 0, &s);
    CHECK(t == 1 && s.logprob == 0, "+inf -> %d (%g)", t, s.logprob);

    /* out-of-range bias / history only: same as no penalties */
    const latent_logit_bias bias[] = {{-5, 50}, {8, 50}, {INT32_MIN, 1}};
    const int32_t hist[] = {-1, 8, 1000000, INT32_MIN};
    p.bias = bias; p.n_bias = 3; p.repetition_penalty = 2; p.presence_penalty = 1;
    float x[8];
    memcpy(x, L8, sizeof x);
    latent_sampler_sample(&p, &r, x, 8, hist, 4, NULL);
    CHECK(memcmp(x, L8, sizeof x) == 0, "out-of-range ids change nothing");
    /* NULL history with a count, negative counts */
    memcpy(x, L8, sizeof x);
    latent_sampler_sample(&p, &r, x, 8, NULL, 5, NULL);
    latent_sampler_sample(&p, &r, x, 8, hist, -4, NULL);
    CHECK(memcmp(x, L8, sizeof x) == 0, "NULL / negative history changes nothing");
    /* NULL bias with a count */
    p.bias = NULL; p.n_bias = 4;
    memcpy(x, L8, sizeof x);
    latent_sampler_sample(&p, &r, x, 8, NULL, 0, NULL);
    CHECK(memcmp(x, L8, sizeof x) == 0, "NULL bias changes nothing");
    /* invalid repetition penalties are ignored */
    const float bad_rep[] = {0, -1, NAN, INFINITY};
    const int32_t h1[] = {1};
    for (int i = 0; i < 4; i++) {
        latent_sampler_defaults(&p);
        p.repetition_penalty = bad_rep[i];
        memcpy(x, L8, sizeof x);
        latent_sampler_sample(&p, &r, x, 8, h1, 1, NULL);
        CHECK(x[1] == L8[1], "repetition penalty %g ignored", bad_rep[i]);
    }

    /* top_k > vocab and negative top_k are off */
    dist_case("top_k=100 > vocab", L8, 8, 1.0, 100, 1, 0, 50000, 40);
    latent_sampler_defaults(&p);
    p.top_k = -3;
    double e[8];
    ref_dist(L8, 8, 1.0, 0, 1, 0, e);
    check_dist("top_k=-3", L8, 8, &p, e, 50000, 41);

    /* top_p 0 / negative and min_p > 1 keep exactly the best token */
    const float one_kind[][2] = {{0, 0}, {-1, 0}, {1, 2}, {1, 1e9f}};
    for (int c = 0; c < 4; c++) {
        latent_sampler_defaults(&p);
        p.top_p = one_kind[c][0] < 1 ? one_kind[c][0] : 1;
        p.min_p = one_kind[c][1];
        p.temperature = 2;
        int others = 0;
        for (int i = 0; i < 1000; i++) {
            memcpy(x, L8, sizeof x);
            if (latent_sampler_sample(&p, &r, x, 8, NULL, 0, NULL) != 1) others++;
        }
        CHECK(others == 0, "top_p %g min_p %g keeps one: %d others", p.top_p, p.min_p, others);
    }

    /* vocab 1, vocab 0, NULL logits, NULL params, NULL out */
    float one = 3.0f;
    latent_sampler_defaults(&p);
    p.n_top_logprobs = 5; p.top_k = 1; p.top_p = 0.5f; p.min_p = 0.5f;
    t = latent_sampler_sample(&p, &r, &one, 1, NULL, 0, &s);
    CHECK(t == 0 && s.token == 0 && s.logprob == 0 && s.n_top == 1 && s.top_ids[0] == 0, "vocab 1");
    CHECK(latent_sampler_sample(&p, &r, &one, 0, NULL, 0, &s) == -1 && s.token == -1, "vocab 0");
    CHECK(latent_sampler_sample(&p, &r, NULL, 8, NULL, 0, &s) == -1, "NULL logits");
    memcpy(x, L8, sizeof x);
    t = latent_sampler_sample(NULL, &r, x, 8, NULL, 0, NULL);
    CHECK(t >= 0 && t < 8, "NULL params -> %d", t);

    /* NaN and infinite temperature: no crash, valid ids */
    latent_sampler_defaults(&p);
    p.temperature = NAN;
    memcpy(x, L8, sizeof x);
    CHECK(latent_sampler_sample(&p, &r, x, 8, NULL, 0, NULL) == 1, "NaN temperature is greedy");
    p.temperature = INFINITY;
    float infl2[4] = {0, -INFINITY, 5, NAN};
    for (int i = 0; i < 200; i++) {
        float y[4];
        memcpy(y, infl2, sizeof y);
        t = latent_sampler_sample(&p, &r, y, 4, NULL, 0, NULL);
        CHECK(t == 0 || t == 2, "infinite temperature -> %d", t);
    }
    /* NaN / infinite penalties and biases */
    latent_sampler_defaults(&p);
    const latent_logit_bias nb[] = {{0, NAN}, {1, INFINITY}, {2, -INFINITY}};
    p.bias = nb; p.n_bias = 3; p.presence_penalty = NAN; p.frequency_penalty = INFINITY;
    p.n_top_logprobs = 3;
    for (int i = 0; i < 100; i++) {
        memcpy(x, L8, sizeof x);
        t = latent_sampler_sample(&p, &r, x, 8, h1, 1, &s);
        CHECK(t >= 0 && t < 8 && t != 0 && t != 2, "hostile bias -> %d", t);
    }
}

/* A vocabulary the size of the real one, through every filter, plus a long
 * history, under the sanitizers. */
static void test_large_vocab(void) {
    enum { V = 49152 };
    float *l = malloc(sizeof(float) * V), *x = malloc(sizeof(float) * V);
    int32_t *hist = malloc(sizeof(int32_t) * 4096);
    void *scratch = malloc(latent_sampler_scratch_size(V));
    latent_rng r;
    latent_rng_seed(&r, 2024);
    for (int i = 0; i < V; i++) l[i] = (float)(10 * latent_rng_uniform(&r) - 5);
    for (int i = 0; i < 4096; i++) hist[i] = (int32_t)(latent_rng_next(&r) % (V + 100)) - 50;
    latent_sampler_params p;
    latent_sampler_defaults(&p);
    p.repetition_penalty = 1.1f; p.presence_penalty = 0.3f; p.frequency_penalty = 0.1f;
    p.n_top_logprobs = 20;
    const int ks[] = {0, 1, 40, 20000};
    const float ps[] = {1, 0.9f, 0.3f, 0};
    const float ms[] = {0, 0.05f, 0.5f};
    latent_sample s;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 3; c++) {
                p.top_k = ks[a]; p.top_p = ps[b]; p.min_p = ms[c];
                memcpy(x, l, sizeof(float) * V);
                int32_t t = latent_sampler_sample_scratch(&p, &r, x, V, hist, 4096, &s, scratch);
                CHECK(t >= 0 && t < V, "k %d p %g m %g -> %d", ks[a], ps[b], ms[c], t);
                if (t < 0 || t >= V) continue;
                CHECK(s.logprob <= s.top_logprobs[0] && s.n_top == 20, "logprob bound");
                if (ks[a] == 1 || ps[b] == 0) CHECK(t == s.top_ids[0], "single-token filter picks the best");
            }
    free(l); free(x); free(hist); free(scratch);
}

int main(void) {
    test_rng();
    test_defaults();
    test_greedy();
    test_determinism();
    test_distributions();
    test_penalties();
    test_logprobs();
    test_robustness();
    test_large_vocab();
    return tu_finish("test_sampler");
}
