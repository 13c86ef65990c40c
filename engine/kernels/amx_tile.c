/* The tile layer's hardware side (amx_tile.h): each operation is one AMX
 * instruction, enabled for its function alone by a target attribute (the
 * build stays x86-64 baseline); and the per-thread tile configuration both
 * sides share. The instructions take tile numbers as constants, hence the
 * switches over the fixed roles of amx_tile.h. */
#include "kernels/amx_tile.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,amx-int8")))

AMX_TARGET static void hw_config(const latent_amx_cfg *cfg) { _tile_loadconfig(cfg); }

AMX_TARGET static void hw_zero(int t) {
    switch (t) {
    case 0: _tile_zero(0); break;
    case 1: _tile_zero(1); break;
    case 2: _tile_zero(2); break;
    case 3: _tile_zero(3); break;
    case 4: _tile_zero(4); break;
    case 5: _tile_zero(5); break;
    case 6: _tile_zero(6); break;
    case 7: _tile_zero(7); break;
    default: abort();
    }
}

AMX_TARGET static void hw_load(int t, const void *base, size_t stride) {
    switch (t) {
    case 0: _tile_loadd(0, base, stride); break;
    case 1: _tile_loadd(1, base, stride); break;
    case 2: _tile_loadd(2, base, stride); break;
    case 3: _tile_loadd(3, base, stride); break;
    case 4: _tile_loadd(4, base, stride); break;
    case 5: _tile_loadd(5, base, stride); break;
    case 6: _tile_loadd(6, base, stride); break;
    case 7: _tile_loadd(7, base, stride); break;
    default: abort();
    }
}

AMX_TARGET static void hw_store(int t, void *base, size_t stride) {
    switch (t) {
    case 0: _tile_stored(0, base, stride); break;
    case 1: _tile_stored(1, base, stride); break;
    case 2: _tile_stored(2, base, stride); break;
    case 3: _tile_stored(3, base, stride); break;
    case 4: _tile_stored(4, base, stride); break;
    case 5: _tile_stored(5, base, stride); break;
    case 6: _tile_stored(6, base, stride); break;
    case 7: _tile_stored(7, base, stride); break;
    default: abort();
    }
}

/* C[i][j] is tile 2i + j, A[i] tile 4 + i, B[j] tile 6 + j. */
AMX_TARGET static void hw_dpbf16ps(int i, int j) {
    switch (2 * i + j) {
    case 0: _tile_dpbf16ps(0, 4, 6); break;
    case 1: _tile_dpbf16ps(1, 4, 7); break;
    case 2: _tile_dpbf16ps(2, 5, 6); break;
    case 3: _tile_dpbf16ps(3, 5, 7); break;
    default: abort();
    }
}

AMX_TARGET static void hw_dpbssd(int i, int j) {
    switch (2 * i + j) {
    case 0: _tile_dpbssd(0, 4, 6); break;
    case 1: _tile_dpbssd(1, 4, 7); break;
    case 2: _tile_dpbssd(2, 5, 6); break;
    case 3: _tile_dpbssd(3, 5, 7); break;
    default: abort();
    }
}

AMX_TARGET static void hw_release(void) { _tile_release(); }

const latent_amx_ops latent_amx_hw = {"amx", hw_config, hw_zero, hw_load, hw_store, hw_dpbf16ps, hw_dpbssd, hw_release};
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

void latent_amx_release(void) {
    if (!loaded_by) return;
    loaded_by->release();
    pthread_setspecific(release_key, NULL);
    loaded_by = NULL;
}
