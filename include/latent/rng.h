/* The engine's random numbers: sampling, weight initialisation and the
 * synthetic data tasks all draw from one seeded generator, so a seed gives
 * the same stream everywhere (xoshiro256**, seeded by splitmix64). */
#ifndef LATENT_RNG_H
#define LATENT_RNG_H

#include <stdint.h>

typedef struct latent_rng { uint64_t s[4]; } latent_rng;  /* xoshiro256** */
/* State from splitmix64 over `seed`. */
void latent_rng_seed(latent_rng *r, uint64_t seed);
uint64_t latent_rng_next(latent_rng *r);
double latent_rng_uniform(latent_rng *r);  /* [0, 1): (next >> 11) * 2^-53 */

#endif
