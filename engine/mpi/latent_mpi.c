/* latent-mpi.so: the few MPI calls data-parallel training needs, built with
 * mpicc against Debian's OpenMPI and loaded by `latent train` only when it
 * runs under mpirun (engine/cli/train_dist.c). Keeping MPI in a plugin means
 * a plain `latent train` neither links nor loads libmpi: no start-up cost
 * and no noise from MPI's progress threads. */
#include <limits.h>
#include <mpi.h>
#include <stddef.h>

#include "train_dist_ops.h"

static int init(int *rank, int *size) {
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return -1;
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 0;
}

/* MPI counts are ints: big buffers go in pieces. */
#define PIECE (1 << 28)

static int sum_floats(float *x, size_t n) {
    for (size_t at = 0; at < n; at += PIECE) {
        int k = n - at < PIECE ? (int)(n - at) : PIECE;
        if (MPI_Allreduce(MPI_IN_PLACE, x + at, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) return -1;
    }
    return 0;
}

static int sum_doubles(double *x, int n) {
    return MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}

static int bcast(void *buf, size_t bytes, int root) {
    for (size_t at = 0; at < bytes; at += PIECE) {
        int k = bytes - at < PIECE ? (int)(bytes - at) : PIECE;
        if (MPI_Bcast((char *)buf + at, k, MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS) return -1;
    }
    return 0;
}

static void finish(void) { MPI_Finalize(); }
static void abort_all(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static const latent_dist_ops ops = {LATENT_DIST_OPS_VERSION, init, sum_floats, sum_doubles, bcast, finish, abort_all};

const latent_dist_ops *latent_mpi_ops(void) { return &ops; }
