/* See dir_io.h. */
#include "train/dir_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *latent_path_join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s/%s", a, b);
    return s;
}

int latent_fsync_path(const char *path, int directory) {
    int fd = open(path, (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

void latent_remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *p = latent_path_join(dir, e->d_name);
            if (p) unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
}
