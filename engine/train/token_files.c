/* Token files (models.md section 5): NAME.bin holds uint32 token ids and
 * the optional companions NAME.labels (uint32 targets), NAME.mask (0/1 scored)
 * and NAME.flow (1/2 control flow) hold one entry per token. This file is
 * their one reader, used by the trainer and by the task datasets. */
#include "train/token_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

char *latent_token_companion(const char *bin_path, const char *ext) {
    size_t plen = strlen(bin_path), stem = plen > 4 && !strcmp(bin_path + plen - 4, ".bin") ? plen - 4 : plen;
    char *p = malloc(stem + strlen(ext) + 1);
    if (!p) return NULL;
    memcpy(p, bin_path, stem);
    strcpy(p + stem, ext);
    return p;
}

/* Maps `path` read-only; *len its size. Missing file: NULL with errno ENOENT. */
static void *map_file(const char *path, size_t *len, latent_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e != ENOENT) latent_err_set(err, LATENT_E_IO, "%s: cannot open: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size == 0) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: %s", path, st.st_size == 0 ? "empty file" : strerror(errno));
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: cannot map: %s", path, strerror(errno));
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
    if (!f->path) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
    errno = 0;
    f->maps[0] = map_file(path, &f->lens[0], err);
    if (!f->maps[0]) {
        if (errno == ENOENT) latent_err_set(err, LATENT_E_FORMAT, "%s: no such token file", path);
        latent_tokens_close(f);
        return -1;
    }
    if (f->lens[0] % 4) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: %zu bytes is not a whole number of uint32 token ids", path, f->lens[0]);
        latent_tokens_close(f);
        return -1;
    }
    f->ids = f->maps[0];
    f->n = (int64_t)(f->lens[0] / 4);
    if (f->n < (int64_t)seq + 2) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: %lld tokens; --seq %d needs at least %d", path, (long long)f->n, seq, seq + 2);
        latent_tokens_close(f);
        return -1;
    }
    for (int64_t i = 0; i < f->n; i++)
        if (f->ids[i] >= (uint32_t)vocab) {
            latent_err_set(err, LATENT_E_FORMAT, "%s: token %lld is id %u, outside the model's vocabulary (0..%d)", path, (long long)i,
                           f->ids[i], vocab - 1);
            latent_tokens_close(f);
            return -1;
        }
    /* the companions: NAME.labels, NAME.mask, NAME.flow */
    static const char *ext[] = {".labels", ".mask", ".flow"};
    static const size_t esz[] = {4, 1, 1};
    for (int k = 0; k < 3; k++) {
        char *p = latent_token_companion(path, ext[k]);
        if (!p) {
            latent_tokens_close(f);
            return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
        }
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
                latent_err_set(err, LATENT_E_FORMAT, "%s: %zu bytes, expected %lld (one %s per token of %s)", p, f->lens[k + 1],
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
                    latent_err_set(err, LATENT_E_FORMAT, "%s: entry %lld is %u, expected %s", p, (long long)i,
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
