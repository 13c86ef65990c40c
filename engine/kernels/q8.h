/* Int8 weights (--weights q8): one scale per block of 32 weights along K,
 * activations quantized the same way per row at each product (W8A8), integer
 * dot products summed exactly, each block's sum scaled and added in k order.
 * Private to libengine (engine/kernels/q8_pack.c, gemm_q8.c); the contract
 * is in docs/model-format.md, "Int8 weights". */
#ifndef LATENT_Q8_H
#define LATENT_Q8_H

#include <stddef.h>
#include <stdint.h>

#define Q8_BLOCK 32                          /* k per scale */
#define Q8_PANEL 32                          /* output features per panel (GEMM_PANEL) */
#define Q8_BLOCK_BYTES (Q8_BLOCK * Q8_PANEL + Q8_PANEL * (int)sizeof(float)) /* 1024 weights + 32 scales */

/* Layout of W (n, k): panels of 32 output features; a panel is nb = ceil(k/32)
 * blocks in k order, each 1152 bytes, 64-byte aligned:
 *     uint8 w[8][32][4]   quad q, feature j, k = 32 b + 4 q + 0..3: w_q + 128
 *     float scale[32]     feature j's scale for this block
 * so one 64-byte load is 16 features x 4 consecutive k, the unsigned operand
 * of vpdpbusd. The weights are stored offset by 128 (w_q in [-127, 127] ->
 * [1, 255]); the product subtracts 128 * sum(x_q) per row and block, which
 * the activations carry (q8_rows.corr). K is padded with w_q = 0. */
static inline int latent_q8_blocks(int k) { return (k + Q8_BLOCK - 1) / Q8_BLOCK; }
size_t latent_q8_bytes(int n_panels, int k);
/* Quantizes W (n, k) into panels (latent_huge_alloc memory); -1 when out of memory. */
int latent_q8_pack(uint8_t **out, int *n_panels, const float *w, int n, int k);
void latent_q8_free(uint8_t *panels, int n_panels, int k);
/* W[row][col] as the product sees it: w_q * scale. */
float latent_q8_weight(const uint8_t *panels, int k, int row, int col);

/* One block of up to 32 values: scale = max|x| / 127, q = nearest-even of
 * x * (127 / max|x|), clamped to [-127, 127] (all 0 when max|x| is 0; a
 * non-finite value makes the scale NaN, so the products it feeds are NaN).
 * q[len..32) = 0. Returns the scale. The one quantizer of weights and
 * activations on every path. */
float latent_q8_quantize_block(int8_t q[Q8_BLOCK], const float *x, int len);

/* Activation rows quantized for a product. Row r's block b is one record
 * of Q8_XBLOCK bytes at data + r ld + b Q8_XBLOCK: its 32 q, its scale, and
 * corr = -128 * sum of its q; one pointer a row walks every block (the
 * kernels keep a register per row, not three). */
typedef struct q8_xblock {
    int8_t q[Q8_BLOCK];
    float scale;
    int32_t corr;
} q8_xblock;
#define Q8_XBLOCK ((int)sizeof(q8_xblock)) /* 40 */

typedef struct q8_rows {
    unsigned char *data;  /* (m, ld) bytes */
    size_t ld;            /* bytes between rows: nb records, rounded up to 64 */
    int m, k, nb;
} q8_rows;

static inline const q8_xblock *latent_q8_xblock(const q8_rows *x, int r, int b) {
    return (const q8_xblock *)(x->data + (size_t)r * x->ld + (size_t)b * Q8_XBLOCK);
}

/* Bytes of the buffer q8_rows_quantize carves for (m, k). */
size_t latent_q8_rows_bytes(int m, int k);
/* Quantizes X (m, k) into `buf` (latent_q8_rows_bytes, 64-byte aligned). */
void latent_q8_rows_quantize(q8_rows *r, void *buf, const float *x, int m, int k);

/* out[:, p0*32 .. min(p1*32, n)) = X W^T for panels [p0, p1), out row stride
 * ldo. Per output element: for each block b in k order, acc = fma((float)
 * isum_b, w_scale * x_scale, acc) from acc = 0, isum_b the block's exact
 * integer dot product; so every path, row count and thread split gives the
 * same bits. The path, from the kernel table (kernels.h): AMX tiles (below),
 * else AVX512-VNNI when the CPU has it and the level allows AVX-512, else
 * generic C (gemm_path.c). */
void latent_gemm_q8_run(float *out, int ldo, const q8_rows *x, int n, const uint8_t *panels, int p0, int p1);
/* The path latent_gemm_q8_run takes now for products of at least
 * Q8_AMX_MIN_ROWS rows: "amx" or "amx-model" (tiles, where
 * latent_isa_tile_ops() gives them), "avx512vnni" or "generic" (gemm_path.c). */
const char *latent_q8_path(void);

/* The product on AMX tiles through ops (gemm_q8_amx.c), the same bits. On
 * the hardware it serves products of Q8_AMX_MIN_ROWS rows or more (fewer
 * fill too little of a 16-row tile: VNNI is faster); through the model,
 * every product, so that tests cover it at every row count. */
#define Q8_AMX_MIN_ROWS 16
struct latent_amx_ops;
void latent_gemm_q8_amx(const struct latent_amx_ops *ops, float *out, int ldo, const q8_rows *x, int n,
                        const uint8_t *panels, int p0, int p1);

#endif
