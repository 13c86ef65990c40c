/* Which kernel serves which path: the one place the level decides a kernel.
 * isa.c calls latent_kernels_choose once the level is known (at start-up, and
 * again when a test changes it); every kernel file says through its _pick
 * which of its functions serve a level. Nothing here runs a product. */
#include "kernels/amx_tile.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"

#include <stdlib.h>
#include <string.h>

/* The tile kernel through each implementation of the tile layer. */
static void bf16_amx_hw(float *out, int ldo, const uint16_t *xb, int m, int n, int k, const uint16_t *panels, int p0,
                        int p1, int acc) {
    latent_gemm_amx_run(&latent_amx_hw, out, ldo, xb, m, n, k, panels, p0, p1, acc);
}

static void bf16_amx_model(float *out, int ldo, const uint16_t *xb, int m, int n, int k, const uint16_t *panels, int p0,
                           int p1, int acc) {
    latent_gemm_amx_run(&latent_amx_model, out, ldo, xb, m, n, k, panels, p0, p1, acc);
}

void latent_kernels_choose(latent_kernels *k, latent_isa isa, const latent_amx_ops *tiles, const char *path) {
    k->isa = isa, k->path = path, k->tiles = tiles;
    k->gemm_f32 = latent_gemm_f32_pick(isa);
    k->gemm_bf16 = !tiles ? latent_gemm_bf16_vec_pick(isa, 0) : tiles == &latent_amx_hw ? bf16_amx_hw : bf16_amx_model;
    k->gemm_bf16_pm = latent_gemm_bf16_vec_pick(isa, 1);
    /* only vdpbf16ps has a pair-major kernel of its own; the tiles read rows */
    k->bf16_pair_major = isa >= LATENT_ISA_AVX512BF16 && !tiles;
    k->bf16_round_span = latent_bf16_span_pick(isa);
    k->bf16_pack_pairs = latent_bf16_pairs_pick(isa);
    k->bf16_pack_panels = latent_bf16_panels_pick(isa);
    k->gemm_q8 = latent_gemm_q8_pick(isa, &k->q8_path);
    /* Through the model, tiles serve every q8 product (so tests cover them).
     * On the hardware they serve none unless LATENT_Q8_TILES=1: measured on
     * the Xeon (docs/benchmarks.md, 2026-12-06) the tile path, which must
     * take each 32-deep block's sums out of the tiles to scale them, runs
     * prefill at 0.66x VNNI's. With it set, products of Q8_AMX_MIN_ROWS rows
     * or more (fewer fill too little of a tile). */
    const char *want = getenv("LATENT_Q8_TILES");
    int hw_tiles = want && !strcmp(want, "1");
    k->q8_tile_rows = !tiles ? 0 : tiles == &latent_amx_hw ? (hw_tiles ? Q8_AMX_MIN_ROWS : 0) : 1;
    if (k->q8_tile_rows) k->q8_path = tiles->name;
    k->avx512 = isa >= LATENT_ISA_AVX512;
    k->f32_blas_faster = isa < LATENT_ISA_AVX512;
}
