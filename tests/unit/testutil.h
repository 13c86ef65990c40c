/* Minimal test helpers: CHECK records a failure and goes on; each test binary
 * exits non-zero when anything failed. */
#ifndef LATENT_TESTUTIL_H
#define LATENT_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int tu_failures;
static int tu_checks;

#define CHECK(cond, ...) do { \
    tu_checks++; \
    if (!(cond)) { \
        tu_failures++; \
        fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
        fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); \
    } } while (0)

#define CHECK_NEAR(a, b, tol, what) do { \
    double a_ = (a), b_ = (b); \
    CHECK(fabs(a_ - b_) <= (tol), "%s: %.9g vs %.9g (tol %.3g)", (what), a_, b_, (double)(tol)); \
    } while (0)

/* The binary's exit status: 1 when a check failed, or when none ran (a
 * test that checked nothing proved nothing). */
static inline int tu_finish(const char *name) {
    fprintf(stderr, "%s: %d checks, %d failed\n", name, tu_checks, tu_failures);
    if (tu_checks == 0) fprintf(stderr, "%s: no check ran\n", name);
    return tu_failures || tu_checks == 0 ? 1 : 0;
}

/* max |a-b| / max |b| over n values */
static inline double tu_rel_err(const float *a, const float *b, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md) md = d;
        if (fabs((double)b[i]) > mr) mr = fabs((double)b[i]);
    }
    return mr > 0 ? md / mr : md;
}

#endif
