/* The products and conversions on the active path: the entry points the
 * engine and the trainer call. Each reads the kernel table (isa.c fills it,
 * kernel_table.c says what serves which path) and calls what it holds; the
 * kernels below take their level or tiles as an argument. */
#include "kernels/kernels.h"
#include "kernels/q8.h"

/* ---- F32 ---- */

void latent_gemm_run(float *out, int ldo, const float *x, const gemm_packed *p, int m, int p0, int p1) {
    latent_kernels_active()->gemm_f32(out, ldo, x, p, m, p0, p1);
}

/* ---- bf16 ---- */

void latent_gemm_bf16_run_on(latent_isa isa, const struct latent_amx_ops *tiles, float *out, int ldo, const uint16_t *xb,
                             int m, int n, int k, const uint16_t *panels, int p0, int p1, int acc) {
    if (tiles) latent_gemm_amx_run(tiles, out, ldo, xb, m, n, k, panels, p0, p1, acc);
    else latent_gemm_bf16_vec_run(isa, out, ldo, xb, m, n, k, panels, p0, p1, acc);
}

void latent_gemm_bf16_run(float *out, int ldo, const uint16_t *xb, int m, int n, int k, const uint16_t *panels, int p0,
                          int p1) {
    latent_kernels_active()->gemm_bf16(out, ldo, xb, m, n, k, panels, p0, p1, 0);
}

void latent_gemm_bf16_run_acc(float *out, int ldo, const uint16_t *xb, int m, int n, int k, const uint16_t *panels,
                              int p0, int p1) {
    latent_kernels_active()->gemm_bf16(out, ldo, xb, m, n, k, panels, p0, p1, 1);
}

int latent_gemm_bf16_pair_major(void) { return latent_kernels_active()->bf16_pair_major; }

void latent_gemm_bf16_run_pm(float *out, int ldo, const uint16_t *xq, int m, int n, int k, const uint16_t *panels, int p0,
                             int p1, int acc) {
    latent_kernels_active()->gemm_bf16_pm(out, ldo, xq, m, n, k, panels, p0, p1, acc);
}

void latent_bf16_round_span(uint16_t *dst, const float *src, int n) {
    latent_kernels_active()->bf16_round_span(dst, src, n);
}

void latent_bf16_pack_pairs(uint16_t *dst, const float *a, const float *b, int n) {
    latent_kernels_active()->bf16_pack_pairs(dst, a, b, n);
}

void latent_bf16_round_rows(uint16_t *dst, const float *x, int m, int k) {
    latent_bf16_round_rows_on(latent_kernels_active()->isa, dst, x, (size_t)k, 1, m, k);
}

void latent_bf16_pack_panels(uint16_t *d, const float *w, size_t rs, size_t cs, int n, int k, int p0, int p1) {
    latent_kernels_active()->bf16_pack_panels(d, w, NULL, rs, cs, n, k, p0, p1);
}

int latent_gemm_bf16_pack(uint16_t **out, int *n_panels, const float *w, int n, int k) {
    return latent_gemm_bf16_pack_on(latent_kernels_active()->isa, 1, out, n_panels, w, NULL, n, k);
}

int latent_gemm_bf16_pack_bf16(uint16_t **out, int *n_panels, const uint16_t *w, int n, int k) {
    return latent_gemm_bf16_pack_on(latent_kernels_active()->isa, 1, out, n_panels, NULL, w, n, k);
}

/* ---- q8 ---- */

const char *latent_q8_path(void) { return latent_kernels_active()->q8_path; }

void latent_gemm_q8_run(float *out, int ldo, const q8_rows *x, int n, const uint8_t *panels, int p0, int p1) {
    const latent_kernels *k = latent_kernels_active();
    /* by row count: the same bits either way (integer block sums are exact) */
    if (k->q8_tile_rows && x->m >= k->q8_tile_rows) latent_gemm_q8_amx(k->tiles, out, ldo, x, n, panels, p0, p1);
    else k->gemm_q8(out, ldo, x, n, panels, p0, p1);
}
