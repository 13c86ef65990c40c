/* Token files for training (models.md §5) and the order their windows are
 * read in. The files are mapped read-only; a batch copies its windows out. */
#include "latent/train.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Maps `path` read-only; *len its size. Missing file: NULL with errno ENOENT. */
static void *map_file(const char *path, size_t *len, latent_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e != ENOENT) latent_err_set(err, "%s: cannot open: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size == 0) {
        latent_err_set(err, "%s: %s", path, st.st_size == 0 ? "empty file" : strerror(errno));
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        latent_err_set(err, "%s: cannot map: %s", path, strerror(errno));
        errno = EINVAL;
        return NULL;
    }
    *len = (size_t)st.st_size;
    return p;
}

void latent_tokens_close(latent_tokens *f) {
    if (!f) return;
    for (int i = 0; i < 4; i++)
        if (f->maps[i]) munmap(f->maps[i], f->lens[i]);
    free(f->path);
    memset(f, 0, sizeof *f);
}

int latent_tokens_open(latent_tokens *f, const char *path, int vocab, int seq, latent_err *err) {
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path) return latent_err_set(err, "%s: out of memory", path);
    errno = 0;
    f->maps[0] = map_file(path, &f->lens[0], err);
    if (!f->maps[0]) {
        if (errno == ENOENT) latent_err_set(err, "%s: no such token file", path);
        latent_tokens_close(f);
        return -1;
    }
    if (f->lens[0] % 4) {
        latent_err_set(err, "%s: %zu bytes is not a whole number of uint32 token ids", path, f->lens[0]);
        latent_tokens_close(f);
        return -1;
    }
    f->ids = f->maps[0];
    f->n = (int64_t)(f->lens[0] / 4);
    if (f->n < (int64_t)seq + 2) {
        latent_err_set(err, "%s: %lld tokens; --seq %d needs at least %d", path, (long long)f->n, seq, seq + 2);
        latent_tokens_close(f);
        return -1;
    }
    for (int64_t i = 0; i < f->n; i++)
        if (f->ids[i] >= (uint32_t)vocab) {
            latent_err_set(err, "%s: token %lld is id %u, outside the model's vocabulary (0..%d)", path, (long long)i,
                           f->ids[i], vocab - 1);
            latent_tokens_close(f);
            return -1;
        }
    /* the companions: NAME.labels, NAME.mask, NAME.flow (NAME = path minus .bin) */
    static const char *ext[] = {".labels", ".mask", ".flow"};
    static const size_t esz[] = {4, 1, 1};
    size_t plen = strlen(path), stem = plen > 4 && !strcmp(path + plen - 4, ".bin") ? plen - 4 : plen;
    for (int k = 0; k < 3; k++) {
        char *p = malloc(stem + 16);
        if (!p) {
            latent_tokens_close(f);
            return latent_err_set(err, "%s: out of memory", path);
        }
        memcpy(p, path, stem);
        strcpy(p + stem, ext[k]);
        errno = 0;
        void *m = map_file(p, &f->lens[k + 1], err);
        if (!m && errno != ENOENT) {
            free(p);
            latent_tokens_close(f);
            return -1;
        }
        if (m) {
            f->maps[k + 1] = m;
            if (f->lens[k + 1] != (size_t)f->n * esz[k]) {
                latent_err_set(err, "%s: %zu bytes, expected %lld (one %s per token of %s)", p, f->lens[k + 1],
                               (long long)f->n * (long long)esz[k], esz[k] == 4 ? "uint32" : "byte", path);
                free(p);
                latent_tokens_close(f);
                return -1;
            }
            for (int64_t i = 0; i < f->n; i++) {
                int bad = k == 0 ? ((const uint32_t *)m)[i] >= (uint32_t)vocab
                                 : k == 1 ? ((const uint8_t *)m)[i] > 1
                                          : ((const uint8_t *)m)[i] != 1 && ((const uint8_t *)m)[i] != 2;
                if (bad) {
                    latent_err_set(err, "%s: entry %lld is %u, expected %s", p, (long long)i,
                                   k == 0 ? ((const uint32_t *)m)[i] : ((const uint8_t *)m)[i],
                                   k == 0 ? "a token id in the vocabulary" : k == 1 ? "0 or 1" : "1 or 2");
                    free(p);
                    latent_tokens_close(f);
                    return -1;
                }
            }
        }
        free(p);
    }
    f->labels = f->maps[1];
    f->mask = f->maps[2];
    f->flow = f->maps[3];
    return 0;
}

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
