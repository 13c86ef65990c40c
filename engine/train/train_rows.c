/* See train_rows.h. */
#include "train/train_rows.h"

#include "latent/threads.h"

typedef struct {
    tr_rows_fn fn;
    void *ctx;
    int n, chunk;
} rows_job;

static void rows_task(void *ctx, int task) {
    const rows_job *j = ctx;
    int r0 = task * j->chunk, r1 = r0 + j->chunk > j->n ? j->n : r0 + j->chunk;
    if (r0 < r1) j->fn(j->ctx, r0, r1);
}

void latent_tr_par_rows(tr_rows_fn fn, void *ctx, int n) {
    if (n <= 0) return;
    int threads = latent_get_threads();
    /* Two chunks per thread: the caller picks up what a descheduled worker left. */
    int tasks = n >= 16 * threads ? 2 * threads : 1;
    rows_job j = {fn, ctx, n, (n + tasks - 1) / tasks};
    latent_parallel_for(rows_task, &j, tasks);
}
