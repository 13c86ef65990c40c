/* bf16 numbers: one F32 rounded to bf16 and widened back. The KV pages
 * (kv.c), the kernels (kernels/) and the trainer share these; they need
 * nothing else (private to libengine and its tests). */
#ifndef LATENT_BF16_H
#define LATENT_BF16_H

#include <stdint.h>

/* Round to nearest even; NaN stays NaN (quietened). */
static inline uint16_t latent_f32_to_bf16(float f) {
    uint32_t u;
    __builtin_memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* Exact. */
static inline float latent_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    __builtin_memcpy(&f, &u, sizeof f);
    return f;
}

#endif
