/* Allocation on the step path, with failure injection for the tests that
 * prove a failed step changes nothing (private to libengine and its tests). */
#ifndef LATENT_FAULT_H
#define LATENT_FAULT_H

#include <stddef.h>

/* realloc(old, bytes), except that it fails (NULL, old untouched) when the
 * injected countdown reaches it. */
void *latent_step_realloc(void *old, size_t bytes);
/* Tests: the k-th latent_step_realloc from now on fails (k >= 0), or none
 * (k < 0). Not thread-safe: tests call steps from one thread. */
void latent_fault_inject(int k);
/* Calls to latent_step_realloc since the last latent_fault_inject. */
int latent_fault_calls(void);

#endif
