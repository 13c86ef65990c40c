/* See fault.h. */
#include "fault.h"

#include <stdlib.h>

static int countdown = -1, calls;

void *latent_step_realloc(void *old, size_t bytes) {
    int fail = countdown == calls;
    calls++;
    return fail ? NULL : realloc(old, bytes);
}

void latent_fault_inject(int k) { countdown = k, calls = 0; }
int latent_fault_calls(void) { return calls; }
