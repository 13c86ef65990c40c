/* See train_rows.h. */
#include "train/train_rows.h"

#include "latent/threads.h"

void latent_tr_par_rows(tr_rows_fn fn, void *ctx, int n) {
    int threads = latent_get_threads();
    /* Two chunks per thread: the caller picks up what a descheduled worker left. */
    latent_parallel_chunks(fn, ctx, n, n >= 16 * threads ? 2 * threads : 1);
}
