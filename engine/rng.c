/* xoshiro256** seeded by splitmix64: see include/latent/rng.h. */
#include "latent/rng.h"

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void latent_rng_seed(latent_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {  /* splitmix64: distinct outputs, so never all zero */
        uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        r->s[i] = z ^ (z >> 31);
    }
}

uint64_t latent_rng_next(latent_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double latent_rng_uniform(latent_rng *r) {
    return (double)(latent_rng_next(r) >> 11) * 0x1.0p-53;  /* 53 random mantissa bits */
}
