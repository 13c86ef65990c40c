/* The tile layer's software model (amx_tile.h): the AMX instructions'
 * documented semantics on plain memory, per thread like the real tile
 * registers. Shapes and operands are checked where the hardware would fault
 * (#GP at LDTILECFG, #UD at a dot product of mismatched tiles): the model
 * aborts, so a kernel that runs here also runs on the hardware. Loads and
 * stores touch exactly the bytes the instruction would, so the sanitizers
 * see a kernel's reads and writes as the hardware makes them. */
#include "kernels/amx_tile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_TILES 8

static _Thread_local struct {
    int configured;
    uint16_t colsb[MODEL_TILES];
    uint8_t rows[MODEL_TILES];
    unsigned char t[MODEL_TILES][AMX_MAX_ROWS][AMX_MAX_COLSB];
} st;

static void model_release(void) { memset(&st, 0, sizeof st); }

static void model_config(const latent_amx_cfg *cfg) {
    if (cfg->palette == 0) { /* palette 0: the unconfigured state, as TILERELEASE */
        model_release();
        return;
    }
    if (cfg->palette != 1 || cfg->start_row != 0) abort();
    for (int i = 0; i < 14; i++)
        if (cfg->reserved[i]) abort();
    for (int t = 0; t < 16; t++) {
        int bad = t >= MODEL_TILES ? cfg->rows[t] || cfg->colsb[t]
                                   : cfg->rows[t] > AMX_MAX_ROWS || cfg->colsb[t] > AMX_MAX_COLSB || (cfg->rows[t] == 0) != (cfg->colsb[t] == 0);
        if (bad) abort();
    }
    memset(&st, 0, sizeof st);
    st.configured = 1;
    for (int t = 0; t < MODEL_TILES; t++) st.colsb[t] = cfg->colsb[t], st.rows[t] = cfg->rows[t];
}

/* A tile an instruction may name: configured, with a shape. */
static void check_tile(int t) {
    if (!st.configured || t < 0 || t >= MODEL_TILES || st.rows[t] == 0) abort();
}

static void model_zero(int t) {
    check_tile(t);
    memset(st.t[t], 0, sizeof st.t[t]);
}

/* Rows and bytes beyond the tile's shape read as zero, as on the hardware. */
static void model_load(int t, const void *base, size_t stride) {
    check_tile(t);
    memset(st.t[t], 0, sizeof st.t[t]);
    for (int r = 0; r < st.rows[t]; r++) memcpy(st.t[t][r], (const unsigned char *)base + r * stride, st.colsb[t]);
}

static void model_store(int t, void *base, size_t stride) {
    check_tile(t);
    for (int r = 0; r < st.rows[t]; r++) memcpy((unsigned char *)base + r * stride, st.t[t][r], st.colsb[t]);
}

/* The shapes a dot product needs: C rows x N, A rows x K groups, B K rows x N. */
static int dp_shape(int i, int j, int *rows, int *k, int *n) {
    int c = 2 * i + j, a = 4 + i, b = 6 + j;
    if (i < 0 || i > 1 || j < 0 || j > 1) abort();
    check_tile(c), check_tile(a), check_tile(b);
    *rows = st.rows[c], *k = st.colsb[a] / 4, *n = st.colsb[c] / 4;
    if (st.rows[a] != *rows || st.rows[b] != *k || st.colsb[b] != st.colsb[c] || st.colsb[a] % 4) abort();
    return c;
}

static float bf16_daz(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    if ((h & 0x7f80) == 0) h &= 0x8000; /* denormal (or zero): signed zero */
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float ftz(float f) { return fabsf(f) < 0x1p-126f ? copysignf(0.0f, f) : f; }

/* RNE_f32(p0 + p1) of two exact products (exact in double: 8-bit significands).
 * Their sum may not be: TwoSum gives its rounding error, and rounding to odd
 * in double (53 >= 24 + 2 bits) makes the final rounding to float exact. */
static float round_pair(double p0, double p1) {
    double s = p0 + p1, bp = s - p0;
    double err = (p0 - (s - bp)) + (p1 - bp);
    if (err != 0 && isfinite(s)) {
        uint64_t u;
        memcpy(&u, &s, 8);
        if (!(u & 1)) s = nextafter(s, err > 0 ? INFINITY : -INFINITY);
    }
    return (float)s;
}

/* Per row and column, the k pairs in order: C = RNE(C + RNE(a0 b0 + a1 b1)). */
static void model_dpbf16ps(int i, int j) {
    int rows, k, n, c = dp_shape(i, j, &rows, &k, &n);
    unsigned char(*A)[AMX_MAX_COLSB] = st.t[4 + i], (*B)[AMX_MAX_COLSB] = st.t[6 + j], (*C)[AMX_MAX_COLSB] = st.t[c];
    for (int m = 0; m < rows; m++)
        for (int col = 0; col < n; col++) {
            float acc;
            memcpy(&acc, C[m] + 4 * col, 4);
            acc = ftz(acc);
            for (int q = 0; q < k; q++) {
                double p0 = (double)bf16_daz(A[m] + 4 * q) * bf16_daz(B[q] + 4 * col);
                double p1 = (double)bf16_daz(A[m] + 4 * q + 2) * bf16_daz(B[q] + 4 * col + 2);
                acc = ftz(acc + ftz(round_pair(p0, p1)));
            }
            memcpy(C[m] + 4 * col, &acc, 4);
        }
}

/* Signed bytes, four per group; int32 sums wrap modulo 2^32 (unsigned here,
 * so the wrap is defined), which makes their order irrelevant: exact bits. */
static void model_dpbssd(int i, int j) {
    int rows, k, n, c = dp_shape(i, j, &rows, &k, &n);
    unsigned char(*A)[AMX_MAX_COLSB] = st.t[4 + i], (*B)[AMX_MAX_COLSB] = st.t[6 + j], (*C)[AMX_MAX_COLSB] = st.t[c];
    for (int m = 0; m < rows; m++)
        for (int col = 0; col < n; col++) {
            uint32_t acc;
            memcpy(&acc, C[m] + 4 * col, 4);
            for (int q = 0; q < k; q++)
                for (int t = 0; t < 4; t++)
                    acc += (uint32_t)((int32_t)(int8_t)A[m][4 * q + t] * (int8_t)B[q][4 * col + t]);
            memcpy(C[m] + 4 * col, &acc, 4);
        }
}

const latent_amx_ops latent_amx_model = {"amx-model",   model_config,   model_zero,   model_load,
                                         model_store, model_dpbf16ps, model_dpbssd, model_release};
