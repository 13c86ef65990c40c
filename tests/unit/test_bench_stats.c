/* latent-bench's statistics (clients/bench_stats.c): percentiles against
 * values numpy.percentile (linear, type 7) gives for the same data, and the
 * bootstrap ratio interval on paired blocks with known ratios. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../clients/bench_stats.h"
#include "testutil.h"

static void test_percentile(void) {
    double two[] = {1, 2};
    CHECK_NEAR(bench_percentile(two, 2, 0.5), 1.5, 1e-12, "median of {1, 2}");
    CHECK_NEAR(bench_percentile(two, 2, 0.99), 1.99, 1e-12, "p99 of {1, 2}");
    CHECK_NEAR(bench_percentile(two, 2, 0.0), 1.0, 0, "p0 is the minimum");
    CHECK_NEAR(bench_percentile(two, 2, 1.0), 2.0, 0, "p100 is the maximum");
    double one[] = {7};
    CHECK_NEAR(bench_percentile(one, 1, 0.9), 7, 0, "one sample");
    CHECK(bench_percentile(NULL, 0, 0.5) == 0, "no samples give 0");
    /* numpy.percentile([3, 1, 4, 1, 5, 9, 2, 6], [50, 90, 99, 25]) = 3.5, 6.9, 8.79, 1.75 */
    double v[] = {3, 1, 4, 1, 5, 9, 2, 6};
    bench_sort(v, 8);
    CHECK(v[0] == 1 && v[1] == 1 && v[7] == 9, "sorted");
    CHECK_NEAR(bench_percentile(v, 8, 0.5), 3.5, 1e-12, "p50 of 8");
    CHECK_NEAR(bench_percentile(v, 8, 0.9), 6.9, 1e-12, "p90 of 8");
    CHECK_NEAR(bench_percentile(v, 8, 0.99), 8.79, 1e-12, "p99 of 8");
    CHECK_NEAR(bench_percentile(v, 8, 0.25), 1.75, 1e-12, "p25 of 8");
    /* 0..100: the p-quantile is 100 p exactly */
    double r[101];
    for (int i = 0; i <= 100; i++) r[i] = 100 - i;
    bench_sort(r, 101);
    for (int p = 0; p <= 100; p++)
        CHECK_NEAR(bench_percentile(r, 101, p / 100.0), p, 1e-9, "0..100");
    CHECK_NEAR(bench_percentile(r, 101, 0.505), 50.5, 1e-9, "between order statistics");
}

static void test_ratio(void) {
    double lo, hi;
    /* A exactly 1.5 times B in every block: the ratio and a zero-width interval */
    bench_pair same[6];
    for (int k = 0; k < 6; k++) same[k] = (bench_pair){.a_sum = 1.5 * (k + 1) * 10, .a_n = 10, .b_sum = (k + 1) * 10.0, .b_n = 10};
    double x = bench_ratio_ci(same, 6, 500, 0.95, 1, &lo, &hi);
    /* ratio of means: sum a / sum b = 1.5 */
    CHECK_NEAR(x, 1.5, 1e-12, "exact ratio");
    CHECK_NEAR(lo, 1.5, 1e-9, "interval low when every block agrees");
    CHECK_NEAR(hi, 1.5, 1e-9, "interval high when every block agrees");
    /* the point estimate is a ratio of means, counts included */
    bench_pair w[2] = {{.a_sum = 2, .a_n = 1, .b_sum = 3, .b_n = 3}, {.a_sum = 6, .a_n = 3, .b_sum = 1, .b_n = 1}};
    x = bench_ratio_ci(w, 2, 0, 0.95, 1, &lo, &hi);
    CHECK_NEAR(x, (8.0 / 4) / (4.0 / 4), 1e-12, "ratio of pooled means");
    /* one block: no interval */
    x = bench_ratio_ci(w, 1, 1000, 0.95, 1, &lo, &hi);
    CHECK(lo == x && hi == x && fabs(x - 2) < 1e-12, "one block: lo = hi = ratio");
    /* noisy blocks around a true ratio of 1.2: the 95% interval covers it, is
     * ordered, and narrows with 16x the blocks; the same seed repeats */
    uint64_t s = 7;
    bench_pair many[400];
    for (int k = 0; k < 400; k++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double noise = 0.8 + 0.4 * (double)(s >> 11) / 9007199254740992.0;
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double noise_b = 0.8 + 0.4 * (double)(s >> 11) / 9007199254740992.0;
        many[k] = (bench_pair){.a_sum = 100 * 1.2 * noise, .a_n = 100, .b_sum = 100 * noise_b, .b_n = 100};
    }
    double lo25, hi25, lo400, hi400;
    double r25 = bench_ratio_ci(many, 25, 2000, 0.95, 3, &lo25, &hi25);
    double r400 = bench_ratio_ci(many, 400, 2000, 0.95, 3, &lo400, &hi400);
    CHECK(lo25 < r25 && r25 < hi25 && lo25 < 1.2 && 1.2 < hi25, "25 blocks: %g [%g, %g]", r25, lo25, hi25);
    CHECK(lo400 < r400 && r400 < hi400 && lo400 < 1.2 && 1.2 < hi400, "400 blocks: %g [%g, %g]", r400, lo400, hi400);
    CHECK(hi400 - lo400 < 0.5 * (hi25 - lo25), "more blocks, narrower: %g vs %g", hi400 - lo400, hi25 - lo25);
    double lo2, hi2;
    bench_ratio_ci(many, 25, 2000, 0.95, 3, &lo2, &hi2);
    CHECK(lo2 == lo25 && hi2 == hi25, "deterministic for a seed");
}

int main(void) {
    test_percentile();
    test_ratio();
    return tu_finish("test_bench_stats");
}
