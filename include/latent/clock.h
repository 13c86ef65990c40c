/* The project's one monotonic clock: seconds since an arbitrary fixed point
 * (CLOCK_MONOTONIC), for timing intervals; never goes back. Inline, so that
 * programs which do not link libengine.a (latent-bench) share it too. */
#ifndef LATENT_CLOCK_H
#define LATENT_CLOCK_H

#include <time.h>

static inline double latent_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
