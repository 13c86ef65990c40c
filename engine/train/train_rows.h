/* Rows of the trainer's work over the engine threads (train_rows.c): the
 * split every trainer op and its products use (private to engine/train/). */
#ifndef LATENT_TRAIN_ROWS_H
#define LATENT_TRAIN_ROWS_H

/* Runs fn(ctx, r0, r1) over [0, n) in contiguous chunks on the engine threads;
 * the chunks depend only on n and the thread count. Not from inside a task. */
typedef void (*tr_rows_fn)(void *ctx, int r0, int r1);
void latent_tr_par_rows(tr_rows_fn fn, void *ctx, int n);

#endif
