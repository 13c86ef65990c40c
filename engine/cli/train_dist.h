/* Data-parallel training across processes (docs/training.md, "Data
 * parallel"): under mpirun every rank runs its share of each global batch
 * and the gradients are summed with MPI_Allreduce; without mpirun
 * everything here is a no-op on one process and MPI is never loaded. */
#ifndef LATENT_CLI_TRAIN_DIST_H
#define LATENT_CLI_TRAIN_DIST_H

#include <stddef.h>

#include "../mpi/train_dist_ops.h"

typedef struct train_dist {
    int rank, size;
    const latent_dist_ops *ops;   /* NULL on one process */
    void *so;                     /* latent-mpi.so, dlopen'ed */
    double comm_seconds;          /* time spent in the collectives so far */
} train_dist;

/* One process, unless started by OpenMPI's mpirun (OMPI_COMM_WORLD_SIZE in
 * the environment): then loads latent-mpi.so (beside the executable, or
 * $LATENT_MPI_PLUGIN) and joins the job. 0, or -1 after printing why. */
int train_dist_start(train_dist *d);
void train_dist_finish(train_dist *d);
/* This rank's sequences of a global batch of B: [*b0, *b0 + return value).
 * Contiguous and in global order, so the global batch is the same for any
 * number of ranks. */
int train_dist_share(const train_dist *d, int B, int *b0);
/* In-place sums over the ranks (identity on one process); 0 or -1. */
int train_dist_sum_floats(train_dist *d, float *x, size_t n);
int train_dist_sum_doubles(train_dist *d, double *x, int n);
/* Rank 0's bytes to every rank; 0 or -1. */
int train_dist_bcast(train_dist *d, void *buf, size_t bytes);
/* 1 when every rank holds the same bytes (checked by hash); 1 on one process. */
int train_dist_same(train_dist *d, const void *buf, size_t bytes);
/* Ends the whole job at once (a rank that cannot go on). */
void train_dist_abort(train_dist *d, int code);

#endif
