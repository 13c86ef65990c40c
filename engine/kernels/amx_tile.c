/* The tile layer's hardware table (latent_amx_hw, over the inline
 * instructions of amx_tile.h), and the per-thread tile configuration both
 * sides share. */
#include "kernels/amx_tile.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
/* The functions themselves are inline in amx_tile.h, for kernels that call
 * them directly; this table is how everything else reaches them. */
const latent_amx_ops latent_amx_hw = {"amx",           amx_hw_config,    amx_hw_zero,    amx_hw_load,
                                      amx_hw_store,    amx_hw_dpbf16ps, amx_hw_dpbssd, amx_hw_release};
#else
/* Not x86-64: latent_isa_tile_ops() never hands this out. */
static void no_config(const latent_amx_cfg *cfg) { abort(); }
static void no_tile(int t) { abort(); }
static void no_load(int t, const void *base, size_t stride) { abort(); }
static void no_store(int t, void *base, size_t stride) { abort(); }
static void no_dp(int i, int j) { abort(); }
static void no_release(void) {}
const latent_amx_ops latent_amx_hw = {"amx", no_config, no_tile, no_load, no_store, no_dp, no_dp, no_release};
#endif

/* ---- the thread's configuration ---- */

/* Thread-local, never a stack local (amx_tile.h). */
static _Thread_local latent_amx_cfg cfg;
static _Thread_local const latent_amx_ops *loaded_by;   /* NULL: nothing loaded on this thread */
static _Thread_local int loaded_rows0, loaded_rows1, loaded_p;

static pthread_key_t release_key;
static pthread_once_t release_once = PTHREAD_ONCE_INIT;

/* Runs on the ending thread itself, as TILERELEASE must. */
static void release_at_exit(void *ops) { ((const latent_amx_ops *)ops)->release(); }
static void release_key_init(void) { pthread_key_create(&release_key, release_at_exit); }

static void set_tile(int t, int rows, int colsb) {
    cfg.rows[t] = (uint8_t)(colsb ? rows : 0);
    cfg.colsb[t] = (uint16_t)(rows ? colsb : 0);
}

void latent_amx_shape(const latent_amx_ops *ops, int rows0, int rows1, int p) {
    if (loaded_by == ops && loaded_rows0 == rows0 && loaded_rows1 == rows1 && loaded_p == p) return;
    if (rows0 < 1 || rows0 > AMX_MAX_ROWS || rows1 < 0 || rows1 > AMX_MAX_ROWS || p < 1 || p > AMX_MAX_ROWS) abort();
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 2; i++) {
        int rows = i ? rows1 : rows0;
        set_tile(2 * i, rows, AMX_MAX_COLSB);   /* C[i][0] */
        set_tile(2 * i + 1, rows, AMX_MAX_COLSB); /* C[i][1] */
        set_tile(4 + i, rows, 4 * p);           /* A[i]: p pairs (or quads) a row */
        set_tile(6 + i, p, AMX_MAX_COLSB);      /* B[i]: p rows of 16 columns */
    }
    if (!loaded_by) { /* the thread's first shape: release its tiles when it ends */
        pthread_once(&release_once, release_key_init);
        pthread_setspecific(release_key, (void *)ops);
    } else if (loaded_by != ops) { /* tests switch between hardware and model on one thread */
        loaded_by->release();
        pthread_setspecific(release_key, (void *)ops);
    }
    ops->config(&cfg);
    loaded_by = ops, loaded_rows0 = rows0, loaded_rows1 = rows1, loaded_p = p;
}

void latent_amx_begin(void) { loaded_rows0 = -1; /* no shape matches: the next one loads */ }

void latent_amx_release(void) {
    if (!loaded_by) return;
    loaded_by->release();
    pthread_setspecific(release_key, NULL);
    loaded_by = NULL;
}
