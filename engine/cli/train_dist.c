/* Data-parallel training: the MPI plugin, loaded only under mpirun. */
#include "train_dist.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "latent/clock.h"

/* $LATENT_MPI_PLUGIN, else latent-mpi.so beside this executable (the
 * build tree), else ../lib/latentd/latent-mpi.so from it (make install). */
static void plugin_path(char *out, size_t cap) {
    const char *env = getenv("LATENT_MPI_PLUGIN");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(out, cap, "latent-mpi.so");
        return;
    }
    exe[n] = 0;
    const char *dir = dirname(exe);
    snprintf(out, cap, "%s/latent-mpi.so", dir);
    if (access(out, R_OK) != 0) snprintf(out, cap, "%s/../lib/latentd/latent-mpi.so", dir);
}

int train_dist_start(train_dist *d) {
    memset(d, 0, sizeof *d);
    d->size = 1;
    if (!getenv("OMPI_COMM_WORLD_SIZE")) return 0;
    char path[PATH_MAX + 32];
    plugin_path(path, sizeof path);
    /* RTLD_GLOBAL: OpenMPI loads its own components with dlopen and needs
     * libmpi's symbols visible to them. */
    d->so = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    latent_mpi_ops_fn get = d->so ? (latent_mpi_ops_fn)dlsym(d->so, "latent_mpi_ops") : NULL;
    if (!get) {
        fprintf(stderr, "latent train: started by mpirun, but %s cannot be loaded: %s\n"
                        "  (build it with `make` where libopenmpi-dev is installed, or set LATENT_MPI_PLUGIN)\n",
                path, dlerror());
        return -1;
    }
    const latent_dist_ops *ops = get();
    if (ops->version != LATENT_DIST_OPS_VERSION) {
        fprintf(stderr, "latent train: %s is version %d, this latent needs %d (rebuild it)\n", path, ops->version,
                LATENT_DIST_OPS_VERSION);
        return -1;
    }
    if (ops->init(&d->rank, &d->size) != 0) {
        fprintf(stderr, "latent train: MPI_Init failed\n");
        return -1;
    }
    d->ops = ops;
    return 0;
}

void train_dist_finish(train_dist *d) {
    if (d->ops) d->ops->finish();
    /* the plugin stays loaded: OpenMPI's atexit handlers may still run */
    d->ops = NULL;
}

int train_dist_share(const train_dist *d, int B, int *b0) {
    *b0 = (int)((int64_t)B * d->rank / d->size);
    return (int)((int64_t)B * (d->rank + 1) / d->size) - *b0;
}

int train_dist_sum_floats(train_dist *d, float *x, size_t n) {
    if (!d->ops) return 0;
    double t0 = latent_now_seconds();
    int rc = d->ops->sum_floats(x, n);
    d->comm_seconds += latent_now_seconds() - t0;
    return rc;
}

int train_dist_sum_doubles(train_dist *d, double *x, int n) {
    if (!d->ops) return 0;
    double t0 = latent_now_seconds();
    int rc = d->ops->sum_doubles(x, n);
    d->comm_seconds += latent_now_seconds() - t0;
    return rc;
}

int train_dist_bcast(train_dist *d, void *buf, size_t bytes) {
    if (!d->ops) return 0;
    double t0 = latent_now_seconds();
    int rc = d->ops->bcast(buf, bytes, 0);
    d->comm_seconds += latent_now_seconds() - t0;
    return rc;
}

int train_dist_same(train_dist *d, const void *buf, size_t bytes) {
    if (!d->ops) return 1;
    uint64_t h = 0xcbf29ce484222325ULL;
    const unsigned char *p = buf;
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    uint64_t h0 = h;
    if (train_dist_bcast(d, &h0, sizeof h0) != 0) return 0;
    /* every rank learns whether any rank differs from rank 0 */
    double differs = h0 != h;
    if (train_dist_sum_doubles(d, &differs, 1) != 0) return 0;
    return differs == 0;
}

void train_dist_abort(train_dist *d, int code) {
    if (d->ops) d->ops->abort_all(code);
}
