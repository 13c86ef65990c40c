/* Shared by the fuzz targets (header-only; each target is one program):
 * checks that abort with a message, so libFuzzer reports the input, and a
 * private temporary directory for the files a target writes. Define
 * FUZZ_NAME before including. */
#ifndef LATENT_FUZZ_UTIL_H
#define LATENT_FUZZ_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void check(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "%s: check failed: %s\n", FUZZ_NAME, what);
        abort();
    }
}

/* dir (cap >= 512) becomes a new directory under $TMPDIR, else /dev/shm
 * (a fuzzer writes files at every execution), else /tmp. */
static void fuzz_tmpdir(char *dir, size_t cap, const char *tag) {
    const char *tmp = getenv("TMPDIR");
    struct stat st;
    const char *base = tmp && *tmp ? tmp : stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    check(strlen(base) < 400 && cap >= 512, "TMPDIR is too long");
    snprintf(dir, cap, "%s/latent-fuzz-%s.XXXXXX", base, tag);
    check(mkdtemp(dir) != NULL, "mkdtemp");
}

#endif
