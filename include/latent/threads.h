/* The engine's worker threads: a parallel-for that the caller's thread joins.
 *
 * OpenBLAS runs single-threaded inside each task; the engine splits its
 * matrix products by output rows across these threads itself, so the BLAS
 * pool and ours never compete for the cores. Workers spin briefly
 * between the many small parallel sections of a step (a decode step has
 * hundreds) and sleep once idle. One thread at a time may call
 * latent_parallel_for: the engine's step thread or the trainer. */
#ifndef LATENT_THREADS_H
#define LATENT_THREADS_H

/* fn(ctx, task) runs once for every task in [0, n_tasks), spread over the
 * threads. Called from inside a task (a nested section, as the engine's
 * parallel packing at load does), it runs every task inline on that thread. */
typedef void (*latent_task_fn)(void *ctx, int task);

/* Sets the thread count (default: online cores); 1 runs everything inline.
 * May be called again between parallel sections (tests run 1 and 2
 * threads in one process): more workers start, or the extra ones sit out. */
void latent_set_threads(int n);
int latent_get_threads(void);
void latent_parallel_for(latent_task_fn fn, void *ctx, int n_tasks);

/* fn(ctx, r0, r1) over row ranges that cover [0, n): spread over the
 * threads where n is at least min_rows, else one call on this thread (a
 * parallel section costs more than a few rows of elementwise work). For
 * work whose rows are independent, so the bits do not depend on the split. */
typedef void (*latent_rows_fn)(void *ctx, int r0, int r1);
void latent_parallel_rows(latent_rows_fn fn, void *ctx, int n, int min_rows);
/* The same over exactly `chunks` contiguous ranges of ceil(n / chunks) rows
 * (empty ones skipped), whatever the threads: for callers whose results
 * depend on where the ranges fall. */
void latent_parallel_chunks(latent_rows_fn fn, void *ctx, int n, int chunks);

#endif
