/* The AMX tile instructions behind one thin layer, with two implementations
 * of the same table of operations:
 *
 *   latent_amx_hw     the instructions (AMX-TILE, AMX-BF16, AMX-INT8), enabled
 *                     per function by target attributes. Only where
 *                     latent_isa_tile_ops() hands it out: the CPU has AMX and
 *                     the OS granted tile data (isa.c asks once).
 *   latent_amx_model  a software model of the same instructions on any CPU,
 *                     so kernels written against this table are tested
 *                     everywhere (LATENT_ISA=amx-model, tests/unit/test_amx.c).
 *
 * Tiles are numbered by role, the 2x2 register blocking every kernel here
 * uses (palette 1: 8 tiles of at most 16 rows x 64 bytes):
 *     tiles 0..3  accumulators C[i][j] = tile 2i + j   (i, j in 0..1)
 *     tiles 4, 5  A operands A[i]      = tile 4 + i    (rows of the left matrix)
 *     tiles 6, 7  B operands B[j]      = tile 6 + j    (k groups x 16 columns)
 * so a dot product names only (i, j): C[i][j] += A[i] . B[j]. (The
 * instructions take tile numbers as compile-time constants; a fixed blocking
 * keeps the hardware side a small switch instead of 512 cases.)
 *
 * bf16 (TDPBF16PS): A rows hold 2p bf16 (p k pairs, colsb 4p); B has p rows
 * of 16 columns x one pair (colsb 64); C is 16 F32 per row.
 *
 * int8 (TDPBSSD, for Q8 weights, issue 22): the same shapes with k in groups
 * of four bytes instead of pairs: A rows hold 4p signed bytes (colsb 4p), B
 * has p rows of 16 columns x four signed bytes (colsb 64), and
 *     C[m][n] += sum over g < p, t < 4 of A[m][4g+t] * B[g][4n+t]     (int32)
 * exactly, wrapping modulo 2^32 like the hardware; the model gives the same
 * bits as the instruction by construction (integer sums do not depend on
 * their order). Configure it with latent_amx_shape below (pairs = groups).
 *
 * Arithmetic of the bf16 model (the hardware's is documented only loosely;
 * docs/architecture.md, "AMX", and /work/shared/spec/amx-notes.md):
 * per row m, column n, for each k pair in order,
 *     C = RNE_f32(C + RNE_f32(a0*b0 + a1*b1))     (the pair's exact sum rounded once)
 * with bf16 denormal inputs read as zero and denormal results flushed to zero
 * (the SDM's DAZ/FTZ for this instruction). With one pair per instruction
 * this is what the hardware measured in 768,000 of 768,000 cases; with 16
 * pairs the hardware sums a tile's pairs in its own internal order, so model
 * and hardware agree within the F32 summation bound of the block
 * (test_amx states it), not bit for bit. NaN payloads are not modelled. */
#ifndef LATENT_AMX_TILE_H
#define LATENT_AMX_TILE_H

#include <stddef.h>
#include <stdint.h>

#define AMX_MAX_ROWS 16
#define AMX_MAX_COLSB 64

/* LDTILECFG's 64-byte operand (palette 1). Keep it in static or thread-local
 * storage, never a stack local: loaded from a stack local it raised a
 * general-protection fault at -O1/-O2 on the team's Xeon (amx-notes). */
typedef struct __attribute__((aligned(64))) latent_amx_cfg {
    uint8_t palette;        /* 1 */
    uint8_t start_row;      /* 0 */
    uint8_t reserved[14];   /* must be 0: anything else faults */
    uint16_t colsb[16];     /* bytes per row of tiles 0..15 (0..7 used) */
    uint8_t rows[16];       /* rows of tiles 0..15 */
} latent_amx_cfg;

typedef struct latent_amx_ops {
    const char *name;                                           /* "amx" or "amx-model" */
    void (*config)(const latent_amx_cfg *cfg);                  /* LDTILECFG: shapes every tile, zeroes them all */
    void (*zero)(int t);                                        /* TILEZERO */
    void (*load)(int t, const void *base, size_t stride);       /* TILELOADD: rows[t] rows of colsb[t] bytes, stride bytes apart */
    void (*store)(int t, void *base, size_t stride);            /* TILESTORED */
    void (*dpbf16ps)(int i, int j);                             /* TDPBF16PS C[i][j] += A[i] . B[j], bf16 pairs -> F32 */
    void (*dpbssd)(int i, int j);                               /* TDPBSSD   C[i][j] += A[i] . B[j], s8 x s8 -> int32 */
    void (*release)(void);                                      /* TILERELEASE: back to the unconfigured state */
} latent_amx_ops;

extern const latent_amx_ops latent_amx_hw, latent_amx_model;

/* Fills the thread's config for the 2x2 blocking: A[0] and the C[0][*] with
 * rows0 rows, A[1] and C[1][*] with rows1 (0: those tiles unused), p k pairs
 * (bf16) or byte quads (int8) per instruction, 1..16; then loads it through
 * ops, unless the thread already has exactly this shape loaded by these ops.
 * LDTILECFG zeroes every tile, so change shapes only between accumulations.
 * The first call on a thread arranges TILERELEASE when the thread ends. */
void latent_amx_shape(const latent_amx_ops *ops, int rows0, int rows1, int p);
/* TILERELEASE now on this thread (the next latent_amx_shape loads again). */
void latent_amx_release(void);
/* A product starts on this thread: its first latent_amx_shape loads the
 * config even where the same shape is loaded. Code outside ours may have
 * released the tiles since (oneDNN's kernels end with TILERELEASE), and a
 * tile instruction on unconfigured tiles raises SIGILL: onednn_compare died
 * so on the Xeon. One LDTILECFG a product call. */
void latent_amx_begin(void);

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdlib.h>

/* The hardware side, one instruction per function, each enabled alone by a
 * target attribute (the build stays x86-64 baseline). latent_amx_hw's table
 * points at these; a kernel compiled for AMX may call them directly, so the
 * constant tile numbers fold the switches away (gemm_amx.c). The
 * instructions take tile numbers as constants, hence the switches over the
 * fixed roles above. Only where latent_isa_tile_ops() gives latent_amx_hw. */
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,amx-int8")))

/* GCC 12's intrinsics under-declare the memory these instructions read:
 * _tile_loadconfig's asm names only the first 8 bytes of the 64-byte config,
 * and _tile_loadd names no memory at all. Stores to the other 56 bytes of a
 * config in a stack local are then dead to the compiler: at -O2, GCC 12
 * drops every store past byte 16 of such a config and LDTILECFG reads stack
 * garbage (seen in its assembly here; the faults amx-notes reports at -O1/-O2
 * and not at -O0). A store just before a tile load could likewise move past
 * it. A compiler barrier before each makes every earlier store land first;
 * the config stays in thread-local storage all the same. */
#define AMX_MEMORY_BARRIER() __asm__ volatile("" ::: "memory")

AMX_TARGET static inline void amx_hw_config(const latent_amx_cfg *cfg) {
    AMX_MEMORY_BARRIER();
    _tile_loadconfig(cfg);
}

AMX_TARGET static inline void amx_hw_zero(int t) {
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

AMX_TARGET static inline void amx_hw_load(int t, const void *base, size_t stride) {
    AMX_MEMORY_BARRIER();
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

AMX_TARGET static inline void amx_hw_store(int t, void *base, size_t stride) {
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
AMX_TARGET static inline void amx_hw_dpbf16ps(int i, int j) {
    switch (2 * i + j) {
    case 0: _tile_dpbf16ps(0, 4, 6); break;
    case 1: _tile_dpbf16ps(1, 4, 7); break;
    case 2: _tile_dpbf16ps(2, 5, 6); break;
    case 3: _tile_dpbf16ps(3, 5, 7); break;
    default: abort();
    }
}

AMX_TARGET static inline void amx_hw_dpbssd(int i, int j) {
    switch (2 * i + j) {
    case 0: _tile_dpbssd(0, 4, 6); break;
    case 1: _tile_dpbssd(1, 4, 7); break;
    case 2: _tile_dpbssd(2, 5, 6); break;
    case 3: _tile_dpbssd(3, 5, 7); break;
    default: abort();
    }
}

AMX_TARGET static inline void amx_hw_release(void) { _tile_release(); }
#endif

#endif
