/* latent-bench's statistics, apart so a unit test can check them
 * (tests/unit/test_bench_stats.c): percentiles by linear interpolation
 * between order statistics, and a bootstrap interval for the ratio of two
 * mean per-token times measured in paired blocks. */
#ifndef LATENT_BENCH_STATS_H
#define LATENT_BENCH_STATS_H

#include <stddef.h>
#include <stdint.h>

/* Sorts v[0..n) ascending, in place. */
void bench_sort(double *v, size_t n);

/* The p-quantile (0 <= p <= 1) of sorted[0..n) by the "type 7" definition
 * (Hyndman & Fan; R's default, numpy's "linear"): h = (n - 1) p, then
 * sorted[floor h] + (h - floor h) (sorted[floor h + 1] - sorted[floor h]).
 * The median of {1, 2} is 1.5. 0 for n = 0. */
double bench_percentile(const double *sorted, size_t n, double p);

/* One block of a paired comparison: the sum and the count of A's samples and
 * of B's (latent-bench: the inter-token gaps of one round on A and of its
 * partner round on B). */
typedef struct bench_pair {
    double a_sum, b_sum;
    long a_n, b_n;
} bench_pair;

/* Ratio of means over all blocks, (sum a_sum / sum a_n) / (sum b_sum / sum b_n),
 * and its percentile-bootstrap interval at `level` (e.g. 0.95): `reps`
 * resamples of the blocks with replacement (pairs stay together), xorshift
 * generator from `seed` (deterministic). *lo = *hi = the ratio when there are
 * fewer than 2 blocks. Returns the ratio, or 0 when B has no samples. */
double bench_ratio_ci(const bench_pair *blocks, int n_blocks, int reps, double level, uint64_t seed,
                      double *lo, double *hi);

#endif
