/* latent-bench's statistics: see bench_stats.h. */
#include "bench_stats.h"

#include <math.h>
#include <stdlib.h>

static int bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void bench_sort(double *v, size_t n) {
    if (n > 1) qsort(v, n, sizeof *v, bench_cmp);
}

double bench_percentile(const double *sorted, size_t n, double p) {
    if (n == 0) return 0;
    if (p <= 0) return sorted[0];
    if (p >= 1) return sorted[n - 1];
    double h = (double)(n - 1) * p;
    size_t i = (size_t)floor(h);
    if (i + 1 >= n) return sorted[n - 1];
    return sorted[i] + (h - (double)i) * (sorted[i + 1] - sorted[i]);
}

static double bench_ratio_of(const bench_pair *b, const int *pick, int n) {
    double as = 0, bs = 0;
    long an = 0, bn = 0;
    for (int k = 0; k < n; k++) {
        const bench_pair *x = &b[pick ? pick[k] : k];
        as += x->a_sum, an += x->a_n;
        bs += x->b_sum, bn += x->b_n;
    }
    if (an == 0 || bn == 0 || bs == 0) return 0;
    return (as / (double)an) / (bs / (double)bn);
}

double bench_ratio_ci(const bench_pair *blocks, int n_blocks, int reps, double level, uint64_t seed,
                      double *lo, double *hi) {
    double r = bench_ratio_of(blocks, NULL, n_blocks);
    *lo = *hi = r;
    if (n_blocks < 2 || reps < 2 || r == 0) return r;
    int *pick = malloc((size_t)n_blocks * sizeof *pick);
    double *rs = malloc((size_t)reps * sizeof *rs);
    if (!pick || !rs) {
        free(pick);
        free(rs);
        return r;
    }
    uint64_t s = seed ? seed : 0x9E3779B97F4A7C15ULL;
    int m = 0;
    for (int k = 0; k < reps; k++) {
        for (int j = 0; j < n_blocks; j++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            pick[j] = (int)((s >> 11) % (uint64_t)n_blocks);
        }
        double x = bench_ratio_of(blocks, pick, n_blocks);
        if (x > 0) rs[m++] = x; /* a resample without B samples has no ratio */
    }
    bench_sort(rs, (size_t)m);
    if (m > 0) {
        *lo = bench_percentile(rs, (size_t)m, (1 - level) / 2);
        *hi = bench_percentile(rs, (size_t)m, 1 - (1 - level) / 2);
    }
    free(pick);
    free(rs);
    return r;
}
