/* Int8 quantization (q8.h): the block quantizer shared by weights and
 * activations, the weights' panel layout, and the activation rows a product
 * reads. Weights are quantized once at load; activations at every product,
 * each row from its own values alone, so a row's bits never depend on the
 * rows beside it. */
#include "kernels/q8.h"
#include "kernels/kernels.h"
#include "hugemem.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Nearest-even of t for |t| <= 2^22 without libm's rint (not inlined on the
 * x86-64 baseline): adding 1.5 * 2^23 leaves the rounded integer in the low
 * mantissa bits; the subtraction gives it back exactly. */
static inline int round_even(float t) {
    const float magic = 12582912.0f; /* exact IEEE arithmetic: the build has no -ffast-math */
    return (int)((t + magic) - magic);
}

float latent_q8_quantize_block(int8_t q[Q8_BLOCK], const float *x, int len) {
    float amax = 0.0f;
    int finite = 1;
    for (int i = 0; i < len; i++) {
        float a = fabsf(x[i]);
        if (!(a <= FLT_MAX)) finite = 0;
        else if (a > amax) amax = a;
    }
    memset(q, 0, Q8_BLOCK);
    if (!finite) return NAN;
    float inv = 127.0f / amax;
    /* all zero, or so small (< 1e-36) that 127 / max overflows: an all-zero block */
    if (amax == 0.0f || !(inv <= FLT_MAX)) return 0.0f;
    for (int i = 0; i < len; i++) {
        int v = round_even(x[i] * inv);
        q[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    return amax / 127.0f;
}

size_t latent_q8_bytes(int n_panels, int k) { return (size_t)n_panels * latent_q8_blocks(k) * Q8_BLOCK_BYTES; }

int latent_q8_pack(uint8_t **out, int *n_panels, const float *w, int n, int k) {
    int np = (n + Q8_PANEL - 1) / Q8_PANEL, nb = latent_q8_blocks(k);
    uint8_t *d = latent_huge_alloc(latent_q8_bytes(np, k));
    if (!d) return -1;
    for (int pn = 0; pn < np; pn++)
        for (int b = 0; b < nb; b++) {
            uint8_t *blk = d + ((size_t)pn * nb + b) * Q8_BLOCK_BYTES;
            float *scale = (float *)(blk + Q8_BLOCK * Q8_PANEL);
            int len = k - b * Q8_BLOCK < Q8_BLOCK ? k - b * Q8_BLOCK : Q8_BLOCK;
            for (int j = 0; j < Q8_PANEL; j++) {
                int row = pn * Q8_PANEL + j;
                int8_t q[Q8_BLOCK];
                scale[j] = row < n ? latent_q8_quantize_block(q, w + (size_t)row * k + (size_t)b * Q8_BLOCK, len) : 0.0f;
                if (row >= n) memset(q, 0, sizeof q);
                /* k = 4 quad + i of feature j at quad 128 + 4 j + i */
                for (int kk = 0; kk < Q8_BLOCK; kk++) blk[(kk / 4) * 4 * Q8_PANEL + 4 * j + kk % 4] = (uint8_t)(q[kk] + 128);
            }
        }
    *out = d, *n_panels = np;
    return 0;
}

void latent_q8_free(uint8_t *panels, int n_panels, int k) {
    if (panels) latent_huge_free(panels, latent_q8_bytes(n_panels, k));
}

float latent_q8_weight(const uint8_t *panels, int k, int row, int col) {
    int nb = latent_q8_blocks(k), pn = row / Q8_PANEL, j = row % Q8_PANEL, b = col / Q8_BLOCK, kk = col % Q8_BLOCK;
    const uint8_t *blk = panels + ((size_t)pn * nb + b) * Q8_BLOCK_BYTES;
    float scale;
    memcpy(&scale, blk + Q8_BLOCK * Q8_PANEL + 4 * j, sizeof scale);
    return (float)((int)blk[(kk / 4) * 4 * Q8_PANEL + 4 * j + kk % 4] - 128) * scale;
}

static size_t up64(size_t b) { return (b + 63) / 64 * 64; }

size_t latent_q8_rows_bytes(int m, int k) {
    size_t blocks = (size_t)m * latent_q8_blocks(k);
    return up64(blocks * Q8_BLOCK) + up64(blocks * sizeof(float)) + up64(blocks * sizeof(int32_t));
}

void latent_q8_rows_quantize(q8_rows *r, void *buf, const float *x, int m, int k) {
    int nb = latent_q8_blocks(k);
    size_t blocks = (size_t)m * nb;
    r->q = buf;
    r->scale = (float *)((char *)buf + up64(blocks * Q8_BLOCK));
    r->corr = (int32_t *)((char *)r->scale + up64(blocks * sizeof(float)));
    r->m = m, r->k = k, r->nb = nb;
    for (int i = 0; i < m; i++)
        for (int b = 0; b < nb; b++) {
            size_t at = (size_t)i * nb + b;
            int len = k - b * Q8_BLOCK < Q8_BLOCK ? k - b * Q8_BLOCK : Q8_BLOCK;
            int8_t *q = r->q + at * Q8_BLOCK;
            r->scale[at] = latent_q8_quantize_block(q, x + (size_t)i * k + (size_t)b * Q8_BLOCK, len);
            int32_t s = 0;
            for (int kk = 0; kk < Q8_BLOCK; kk++) s += q[kk];
            r->corr[at] = -128 * s;
        }
}

int latent_linear_init_q8(latent_linear *l, const float *w, int out_dim, int in_dim) {
    memset(l, 0, sizeof *l);
    l->w = w, l->out_dim = out_dim, l->in_dim = in_dim, l->q8 = 1;
    uint8_t *p;
    if (latent_q8_pack(&p, &l->n_panels, w, out_dim, in_dim) != 0) return -1;
    l->packed = p;
    return 0;
}
