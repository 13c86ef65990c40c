/* Token files for training (models.md §5) and the order their windows are
 * read in. The files are mapped read-only; a batch copies its windows out. */
#include "latent/train.h"

#include <stdlib.h>
#include <string.h>

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* A seeded permutation of [0, n): rounds of invertible maps on k-bit values
 * (odd multiply, add, xor-shift), cycle-walked back into range. */
static int64_t permute(int64_t j, int64_t n, uint64_t key) {
    int k = 1;
    while (((int64_t)1 << k) < n) k++;
    uint64_t mask = k >= 64 ? ~0ULL : (((uint64_t)1 << k) - 1), x = (uint64_t)j;
    do {
        for (int r = 0; r < 4; r++) {
            uint64_t a = mix64(key + 2 * r) | 1, c = mix64(key + 2 * r + 1);
            x = (x * a + c) & mask;
            x ^= x >> (k / 2 + 1);
        }
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}

int64_t latent_tokens_offset(const latent_tokens *f, int64_t s, int b, int B, int T, int shuffle, uint64_t seed) {
    int64_t i = s * B + b;
    if (!shuffle) return (i * T) % (f->n - T - 1);
    int64_t nw = (f->n - T - 1) / T + 1; /* windows k*T with k*T + T + 1 <= n */
    int64_t epoch = i / nw;
    return permute(i % nw, nw, mix64(seed ^ mix64((uint64_t)epoch))) * T;
}

void latent_tokens_batch(const latent_tokens *f, int64_t s, int B, int T, int shuffle, uint64_t seed,
                         latent_train_batch *out) {
    for (int b = 0; b < B; b++) {
        int64_t o = latent_tokens_offset(f, s, b, B, T, shuffle, seed);
        for (int j = 0; j < T; j++) {
            size_t r = (size_t)b * T + j;
            out->tokens[r] = (int32_t)f->ids[o + j];
            out->targets[r] = (int32_t)(f->labels ? f->labels[o + j + 1] : f->ids[o + j + 1]);
            out->mask[r] = f->mask ? f->mask[o + j + 1] : 1;
            out->flow[r] = f->flow ? f->flow[o + j] : 2;
        }
    }
}
