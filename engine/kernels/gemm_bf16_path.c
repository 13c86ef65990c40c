/* The bf16 products and conversions on the path the kernels run on
 * (isa.c): the tile kernel (gemm_amx.c) where latent_isa_tile_ops() gives
 * tiles, else the vector kernels (gemm_bf16.c) of the active level; the
 * conversions (bf16_pack.c) on the active level. The entry points the engine
 * and the trainer call; the kernels below take their path as an argument. */
#include "kernels/kernels.h"

void latent_gemm_bf16_run_on(latent_isa isa, const struct latent_amx_ops *tiles, float *out, int ldo, const uint16_t *xb,
                             int m, int n, int k, const uint16_t *panels, int p0, int p1, int acc) {
    if (tiles) latent_gemm_amx_run(tiles, out, ldo, xb, m, n, k, panels, p0, p1, acc);
    else latent_gemm_bf16_vec_run(isa, out, ldo, xb, m, n, k, panels, p0, p1, acc);
}

void latent_gemm_bf16_run(float *out, int ldo, const uint16_t *xb, int m, int n, int k, const uint16_t *panels, int p0,
                          int p1) {
    latent_gemm_bf16_run_on(latent_isa_active(), latent_isa_tile_ops(), out, ldo, xb, m, n, k, panels, p0, p1, 0);
}

void latent_gemm_bf16_run_acc(float *out, int ldo, const uint16_t *xb, int m, int n, int k, const uint16_t *panels,
                              int p0, int p1) {
    latent_gemm_bf16_run_on(latent_isa_active(), latent_isa_tile_ops(), out, ldo, xb, m, n, k, panels, p0, p1, 1);
}

int latent_gemm_bf16_pair_major(void) { return latent_isa_active() >= LATENT_ISA_AVX512BF16 && !latent_isa_tile_ops(); }

void latent_gemm_bf16_run_pm(float *out, int ldo, const uint16_t *xq, int m, int n, int k, const uint16_t *panels, int p0,
                             int p1, int acc) {
    latent_gemm_bf16_vec_run_pm(latent_isa_active(), out, ldo, xq, m, n, k, panels, p0, p1, acc);
}

void latent_bf16_round_span(uint16_t *dst, const float *src, int n) {
    latent_bf16_round_span_on(latent_isa_active(), dst, src, n);
}

void latent_bf16_pack_pairs(uint16_t *dst, const float *a, const float *b, int n) {
    latent_bf16_pack_pairs_on(latent_isa_active(), dst, a, b, n);
}

void latent_bf16_round_rows(uint16_t *dst, const float *x, int m, int k) {
    latent_bf16_round_rows_on(latent_isa_active(), dst, x, (size_t)k, 1, m, k);
}

void latent_bf16_pack_panels(uint16_t *d, const float *w, size_t rs, size_t cs, int n, int k, int p0, int p1) {
    latent_bf16_pack_panels_on(latent_isa_active(), d, w, NULL, rs, cs, n, k, p0, p1);
}

int latent_gemm_bf16_pack(uint16_t **out, int *n_panels, const float *w, int n, int k) {
    return latent_gemm_bf16_pack_on(latent_isa_active(), 1, out, n_panels, w, NULL, n, k);
}

int latent_gemm_bf16_pack_bf16(uint16_t **out, int *n_panels, const uint16_t *w, int n, int k) {
    return latent_gemm_bf16_pack_on(latent_isa_active(), 1, out, n_panels, NULL, w, n, k);
}
