/* The calls latent-mpi.so provides to engine/cli/train_dist.c (both sides
 * include this header; the version guards against a stale plugin). */
#ifndef LATENT_TRAIN_DIST_OPS_H
#define LATENT_TRAIN_DIST_OPS_H

#include <stddef.h>

#define LATENT_DIST_OPS_VERSION 1

typedef struct latent_dist_ops {
    int version;
    int (*init)(int *rank, int *size);               /* MPI_Init; 0 or -1 */
    int (*sum_floats)(float *x, size_t n);           /* in-place Allreduce, SUM */
    int (*sum_doubles)(double *x, int n);
    int (*bcast)(void *buf, size_t bytes, int root);
    void (*finish)(void);                            /* MPI_Finalize */
    void (*abort_all)(int code);                     /* MPI_Abort */
} latent_dist_ops;

/* The plugin's one exported symbol. */
typedef const latent_dist_ops *(*latent_mpi_ops_fn)(void);

#endif
