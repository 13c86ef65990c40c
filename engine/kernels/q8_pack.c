/* Int8 quantization (q8.h): the block quantizer shared by weights and
 * activations, the weights' panel layout, and the activation rows a product
 * reads. Weights are quantized once at load; activations at every product,
 * each row from its own values alone, so a row's bits never depend on the
 * rows beside it. */
#include "kernels/q8.h"
#include "kernels/kernels.h"
#include "hugemem.h"
#include "latent/threads.h"

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

static size_t row_bytes(int k) { return ((size_t)latent_q8_blocks(k) * Q8_XBLOCK + 63) / 64 * 64; }

size_t latent_q8_rows_bytes(int m, int k) { return (size_t)m * row_bytes(k); }

static void quantize_record(q8_xblock *xb, const float *x, int len) {
    xb->scale = latent_q8_quantize_block(xb->q, x, len);
    int32_t s = 0;
    for (int kk = 0; kk < Q8_BLOCK; kk++) s += xb->q[kk];
    xb->corr = -128 * s;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* latent_q8_quantize_block on the row's full blocks, 32 values in two
 * registers: the same max, the same 127 / max and products, and vcvtps2dq
 * rounds to nearest even (the default MXCSR mode) as round_even does, so the
 * same bytes. Blocks with a non-finite value go to the scalar code. Returns
 * the blocks done. */
__attribute__((target("avx512f,avx512bw"))) static int quantize_row_avx512(q8_xblock *out, const float *x, int k) {
    const __m512 big = _mm512_set1_ps(FLT_MAX);
    const __m512i hi = _mm512_set1_epi32(127), lo = _mm512_set1_epi32(-127);
    int b = 0;
    for (; (b + 1) * Q8_BLOCK <= k; b++) {
        __m512 a = _mm512_loadu_ps(x + b * Q8_BLOCK), c = _mm512_loadu_ps(x + b * Q8_BLOCK + 16);
        __m512 aa = _mm512_abs_ps(a), ca = _mm512_abs_ps(c);
        if (_mm512_cmp_ps_mask(aa, big, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(ca, big, _CMP_NLE_UQ)) {
            quantize_record(&out[b], x + b * Q8_BLOCK, Q8_BLOCK);
            continue;
        }
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(aa, ca)), inv = 127.0f / amax;
        if (amax == 0.0f || !(inv <= FLT_MAX)) {
            memset(out[b].q, 0, Q8_BLOCK), out[b].scale = 0.0f, out[b].corr = 0;
            continue;
        }
        __m512 vi = _mm512_set1_ps(inv);
        __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, vi)), qc = _mm512_cvtps_epi32(_mm512_mul_ps(c, vi));
        qa = _mm512_max_epi32(_mm512_min_epi32(qa, hi), lo), qc = _mm512_max_epi32(_mm512_min_epi32(qc, hi), lo);
        _mm_storeu_si128((__m128i *)out[b].q, _mm512_cvtepi32_epi8(qa));
        _mm_storeu_si128((__m128i *)(out[b].q + 16), _mm512_cvtepi32_epi8(qc));
        out[b].scale = amax / 127.0f;
        out[b].corr = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qc));
    }
    return b;
}
#endif

typedef struct {
    q8_rows *r;
    const float *x;
    int rows_per_task, vector;
} quantize_job;

static void quantize_rows(void *ctx, int task) {
    const quantize_job *j = ctx;
    const q8_rows *r = j->r;
    int r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task < r->m ? r0 + j->rows_per_task : r->m;
    for (int i = r0; i < r1; i++) {
        q8_xblock *out = (q8_xblock *)(r->data + (size_t)i * r->ld);
        const float *xr = j->x + (size_t)i * r->k;
        int b = 0;
#if defined(__x86_64__) && defined(__GNUC__)
        if (j->vector) b = quantize_row_avx512(out, xr, r->k);
#endif
        for (; b < r->nb; b++) {
            int len = r->k - b * Q8_BLOCK < Q8_BLOCK ? r->k - b * Q8_BLOCK : Q8_BLOCK;
            quantize_record(&out[b], xr + (size_t)b * Q8_BLOCK, len);
        }
    }
}

void latent_q8_rows_quantize(q8_rows *r, void *buf, const float *x, int m, int k) {
    r->data = buf, r->ld = row_bytes(k), r->m = m, r->k = k, r->nb = latent_q8_blocks(k);
    quantize_job j = {r, x, m, latent_kernels_active()->avx512};
    /* a prefill's rows over the threads; a few rows are not worth a section */
    int threads = latent_get_threads();
    if (threads > 1 && (size_t)m * k >= 32768) {
        j.rows_per_task = (m + threads - 1) / threads;
        latent_parallel_for(quantize_rows, &j, (m + j.rows_per_task - 1) / j.rows_per_task);
    } else {
        quantize_rows(&j, 0);
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
