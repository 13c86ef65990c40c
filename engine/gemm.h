/* The engine's own matrix kernel for inference (private).
 *
 * A weight W (N, K), row-major as stored in the model, is repacked once into
 * panels of 32 output features laid out k-major ([K][32] per panel, the last
 * panel zero-padded), so the AVX-512 kernel streams each panel linearly and
 * broadcasts X: out[m][n] = sum_k X[m][k] W[n][k]. */
#ifndef LATENT_GEMM_H
#define LATENT_GEMM_H

#include <stddef.h>

#define GEMM_PANEL 32

typedef struct gemm_packed {
    float *data;      /* (n_panels, k, GEMM_PANEL), huge-page aligned; owned */
    int n, k, n_panels;
} gemm_packed;

/* 1 when this CPU runs the packed kernel (AVX-512F); otherwise use BLAS. */
int gemm_available(void);
/* Bytes of n_panels panels over k (their memory comes from huge_alloc). */
size_t gemm_packed_bytes(int n_panels, int k);
/* Packs W (n, k); -1 when out of memory. */
int gemm_pack(gemm_packed *p, const float *w, int n, int k);
void gemm_packed_free(gemm_packed *p);
/* out[:, p0*32 .. min(p1*32, n)) = X (m, k) W^T for panels [p0, p1);
 * out has row stride ldo, X row stride k. */
void gemm_run(float *out, int ldo, const float *x, const gemm_packed *p, int m, int p0, int p1);

#endif
