/* The OpenAI `system_fingerprint` of a running server (docs/api.md,
 * "Determinism"). */
#ifndef SRV_FINGERPRINT_H
#define SRV_FINGERPRINT_H

#include <stddef.h>

/* "fp_" and 12 hex digits of a hash over this executable's bytes and the
 * settings that change a request's bits: precision, KV dtype and kernel
 * path. Equal fingerprints (and model) mean equal tokens and logprobs for
 * equal requests. */
void srv_fingerprint(char *out, size_t cap, const char *precision, const char *kv_dtype, const char *kernel_path);

#endif
