/* Atomic small-file writes (file_atomic.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_atomic.h"

/* The directory entry of path, so that its rename survives a crash. */
static void fsync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(dir);
}

int latent_write_text_atomic(const char *path, const char *text, int newline, latent_err *err) {
    size_t n = strlen(path) + sizeof ".tmp";
    char *tmp = malloc(n);
    if (!tmp) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
    snprintf(tmp, n, "%s.tmp", path);
    int rc = -1;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        latent_err_set(err, LATENT_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
    size_t len = strlen(text);
    int ok = fwrite(text, 1, len, f) == len && (!newline || fputc('\n', f) != EOF) && fflush(f) == 0 &&
             fsync(fileno(f)) == 0;
    int serr = errno;
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        latent_err_set(err, LATENT_E_IO, "%s: write failed: %s", tmp, strerror(serr));
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, path) != 0) {
        latent_err_set(err, LATENT_E_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        goto done;
    }
    fsync_parent(path);
    rc = 0;
done:
    free(tmp);
    return rc;
}
