/* The engine's numeric kernels (private to libengine): matrix products
 * (OpenBLAS or the packed AVX-512 kernel), RMSNorm, RoPE, SwiGLU, softmax,
 * and causal attention over paged KV caches. Inference (engine.c) and the
 * trainer (engine/train/) call them; nothing outside libengine does. */
#ifndef LATENT_KERNELS_H
#define LATENT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "bf16.h"
#include "latent/config.h"
#include "latent/kv.h"

/* ---- matrix products and elementwise ops ---- */

/* out (n, out_dim) = x (n, in_dim) W^T, W (out_dim, in_dim). sgemv when n == 1;
 * output features split over the engine threads (threads.h). */
void latent_matmul_forward(float *out, const float *x, const float *w, int n, int in_dim, int out_dim);

/* A weight matrix prepared for inference: repacked once into the engine's
 * own panel layout (a second copy of the weights; the original stays for
 * training and lookups until latent_engine_release_unpacked), whose products
 * are batch invariant on every ISA path (gemm_f32.c); or, with
 * latent_linear_init_blas, left to OpenBLAS on the original (faster on CPUs
 * without AVX-512, but a row's rounding depends on its batch). */
typedef struct latent_linear {
    const float *w;       /* (out_dim, in_dim), not owned */
    int out_dim, in_dim;
    void *packed;         /* owned: F32 panels, or bf16 panels when bf16; NULL when BLAS is used */
    int n_panels;
    int bf16;             /* products in bf16 (weights and inputs rounded), F32 sums */
    int q8;               /* int8 panels (q8.h): weights and inputs quantized per 32-block */
} latent_linear;

int latent_linear_init(latent_linear *l, const float *w, int out_dim, int in_dim);
int latent_linear_init_blas(latent_linear *l, const float *w, int out_dim, int in_dim);
/* The same matrix held in bf16 panels (latent_gemm_bf16_*), on every ISA. */
int latent_linear_init_bf16(latent_linear *l, const float *w, int out_dim, int in_dim);
/* The same from W stored in BF16 (not owned, read only here); l->w stays NULL. */
int latent_linear_init_from_bf16(latent_linear *l, const uint16_t *w, int out_dim, int in_dim);
/* The same matrix quantized to int8 panels (q8.h, --weights q8), on every ISA. */
int latent_linear_init_q8(latent_linear *l, const float *w, int out_dim, int in_dim);
/* Row `row` of W as F32 (bf16 or dequantized q8 values): embedding lookups from a
 * tied LM head without an F32 copy. */
void latent_linear_row(const latent_linear *l, int row, float *out);
void latent_linear_free(latent_linear *l);
/* out (n, out_dim) = x (n, in_dim) W^T */
void latent_linear_forward(float *out, const float *x, const latent_linear *l, int n);
/* Several products of the same x in one parallel section (q, k, v; gate, up):
 * outs[i] (n, ls[i]->out_dim) = x ls[i]^T. */
void latent_linear_forward_multi(float *const *outs, const latent_linear *const *ls, int n_ls, const float *x, int n);

/* out = x / sqrt(mean(x^2) + eps) * weight, per row; sums in double. */
void latent_rmsnorm_forward(float *out, const float *x, const float *weight, int n, int dim, float eps);

/* RoPE in HF's rotate_half layout: pairs (j, j + head_dim/2) rotated by the
 * angle pos * theta^(-2j/head_dim). rope_tables fills cos/sin (head_dim/2
 * each) for one position, once per row and step; rope_forward rotates, in
 * place, n_heads heads of one row with them. */
void latent_rope_tables(float *cos_out, float *sin_out, int head_dim, int pos, float theta);
void latent_rope_forward(float *x, int n_heads, int head_dim, const float *cos_t, const float *sin_t);

/* out (n, ffn) = silu(g) * u. */
void latent_swiglu_forward(float *out, const float *g, const float *u, size_t n);

/* In-place softmax of x[0..n); max-subtracted, sum in double. */
void latent_softmax_forward(float *x, int n);

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }


/* ---- instruction sets, chosen at run time ---- */

/* Ordered: each level has everything the ones before it have. */
typedef enum {
    LATENT_ISA_GENERIC = 0, /* x86-64 baseline (or not x86) */
    LATENT_ISA_AVX2,        /* AVX2 + FMA */
    LATENT_ISA_AVX512,      /* AVX-512 F + BW, ZMM state saved by the OS */
    LATENT_ISA_AVX512BF16,  /* + AVX512_BF16 (vdpbf16ps) */
    LATENT_ISA_AMX          /* + AMX-BF16 tiles, permitted by the kernel (bf16 products: gemm_amx.c) */
} latent_isa;

/* The best level this machine and OS allow (asks for AMX permission once). */
latent_isa latent_isa_detected(void);
/* The level the kernels use: detected, capped by LATENT_ISA (read once). */
latent_isa latent_isa_active(void);
/* Tests: sets the active level (capped by what is detected); returns it.
 * Engines and matrices prepared afterwards use it. */
latent_isa latent_isa_set(latent_isa isa);
const char *latent_isa_name(latent_isa isa);
int latent_isa_parse(const char *s, latent_isa *out);   /* 0, or -1 for an unknown name */
/* 1 when the CPU has AMX but the kernel refused the tile-data permission. */
int latent_isa_amx_refused(void);

/* The path the kernels run on, by name: a level above, or "amx-model": the
 * tile kernel (gemm_amx.c) through the software model of the tile
 * instructions (amx_tile.h) on any CPU, every other kernel on the best level
 * up to avx512bf16. LATENT_ISA takes the same names. */
const char *latent_isa_path(void);
/* Tests: sets the path by name (levels capped as latent_isa_set); -1 for an
 * unknown name. Engines and matrices prepared afterwards use it. */
int latent_isa_set_path(const char *name);
/* The tile operations bf16 products run on: latent_amx_hw on the amx path,
 * latent_amx_model on amx-model, NULL on the vector paths. */
struct latent_amx_ops;
const struct latent_amx_ops *latent_isa_tile_ops(void);
/* 1 when the CPU has AMX but the tile kernel failed its start-up self-check
 * (the products then run on avx512bf16). */
int latent_isa_amx_check_failed(void);

/* ---- bf16 numbers (latent_f32_to_bf16, latent_bf16_to_f32: bf16.h) ---- */

/* The first `cols` of 16 lanes (0..16 of them): the store mask of a
 * partial 16-feature vector (an __mmask16). */
static inline uint16_t latent_lane_mask16(int cols) {
    return cols >= 16 ? 0xFFFF : cols <= 0 ? 0 : (uint16_t)((1u << cols) - 1);
}

/* ---- the packed matrix kernel ---- */

#define GEMM_PANEL 32

typedef struct gemm_packed {
    float *data;      /* (n_panels, k, GEMM_PANEL), huge-page aligned; owned */
    int n, k, n_panels;
} gemm_packed;

/* Bytes of n_panels panels over k (their memory comes from huge_alloc). */
size_t latent_gemm_packed_bytes(int n_panels, int k);
/* Packs W (n, k); -1 when out of memory. */
int latent_gemm_pack(gemm_packed *p, const float *w, int n, int k);
void latent_gemm_packed_free(gemm_packed *p);
/* out[:, p0*32 .. min(p1*32, n)) = X (m, k) W^T for panels [p0, p1);
 * out has row stride ldo, X row stride k. Batch invariant, the same bits on
 * every path (gemm_f32.c); the kernel table's (gemm_path.c). */
void latent_gemm_run(float *out, int ldo, const float *x, const gemm_packed *p, int m, int p0, int p1);
/* latent_gemm_run's product on one level (gemm_f32.c); _pick gives the
 * level's function (the kernel table is filled with it). */
typedef void (*latent_gemm_f32_fn)(float *out, int ldo, const float *x, const gemm_packed *p, int m, int p0, int p1);
latent_gemm_f32_fn latent_gemm_f32_pick(latent_isa isa);

/* BF16 panels: W (n, k) as [k/2][32][2] bf16 per 32-feature panel (see
 * gemm_bf16.c for the layout and the fixed reduction order). */
size_t latent_gemm_bf16_bytes(int n_panels, int k);
/* Fresh panels of W (n, k) row-major, on the active level, over the engine
 * threads (gemm_path.c); -1 when out of memory. */
int latent_gemm_bf16_pack(uint16_t **out, int *n_panels, const float *w, int n, int k);
/* The same from W already in BF16 (a checkpoint's values): no rounding. */
int latent_gemm_bf16_pack_bf16(uint16_t **out, int *n_panels, const uint16_t *w, int n, int k);
/* The same on level isa, from F32 (wf) or BF16 (wb, when wf is NULL); with
 * `spread`, a big matrix is split over the engine threads (0: on the caller's
 * thread alone, as the AMX self-check needs while the level is decided). */
int latent_gemm_bf16_pack_on(latent_isa isa, int spread, uint16_t **out, int *n_panels, const float *wf,
                             const uint16_t *wb, int n, int k);
void latent_gemm_bf16_free(uint16_t *panels, int n_panels, int k);
float latent_gemm_bf16_weight(const uint16_t *panels, int k, int row, int col);

/* The bf16 products on the active path (gemm_path.c, from the kernel table:
 * the tiles of gemm_amx.c where the path has them, else the vector kernels of
 * gemm_bf16.c of the active level).
 * out[:, p0*32 .. min(p1*32, n)) = Xb (m, k) W^T for panels [p0, p1), Xb from
 * latent_bf16_round_rows. */
void latent_gemm_bf16_run(float *out, int ldo, const uint16_t *xb, int m, int n, int k, const uint16_t *panels, int p0,
                          int p1);
/* The same added to out (the trainer's gradient products): out + each
 * block's sum, in k order. */
void latent_gemm_bf16_run_acc(float *out, int ldo, const uint16_t *xb, int m, int n, int k, const uint16_t *panels,
                              int p0, int p1);
/* The same product with X pair-major, [k/2][m][2] (pair q of row r at
 * (q m + r) 2): the layout of a transposed operand packed two of its rows at
 * a time (the trainer's weight gradients, dY^T X). acc: add to out. The
 * vdpbf16ps path where the CPU has it, else plain C in the same order. */
void latent_gemm_bf16_run_pm(float *out, int ldo, const uint16_t *xq, int m, int n, int k, const uint16_t *panels, int p0,
                             int p1, int acc);
/* 1 when a transposed operand is best packed pair-major for run_pm (the
 * vdpbf16ps path); 0 when rounded into rows for latent_gemm_bf16_run (the
 * tiles read rows of pairs; the other paths are as fast either way). */
int latent_gemm_bf16_pair_major(void);
/* latent_gemm_bf16_run (acc 0) or _run_acc (1) on a path given here instead
 * of the active one: the vector kernels of level isa, or the tile kernel
 * through tiles when not NULL (tests). */
void latent_gemm_bf16_run_on(latent_isa isa, const struct latent_amx_ops *tiles, float *out, int ldo, const uint16_t *xb,
                             int m, int n, int k, const uint16_t *panels, int p0, int p1, int acc);

/* The vector kernels (gemm_bf16.c) of level isa: X in rows (pair_major 0)
 * or pair-major (1); acc: add to out. _run and _run_pm pick and call. */
typedef void (*latent_gemm_bf16_fn)(float *out, int ldo, const uint16_t *xb, int m, int n, int k, const uint16_t *panels,
                                    int p0, int p1, int acc);
latent_gemm_bf16_fn latent_gemm_bf16_vec_pick(latent_isa isa, int pair_major);
void latent_gemm_bf16_vec_run(latent_isa isa, float *out, int ldo, const uint16_t *xb, int m, int n, int k,
                              const uint16_t *panels, int p0, int p1, int acc);
void latent_gemm_bf16_vec_run_pm(latent_isa isa, float *out, int ldo, const uint16_t *xq, int m, int n, int k,
                                 const uint16_t *panels, int p0, int p1, int acc);

/* The tile kernel (gemm_amx.c): latent_gemm_bf16_run's product on AMX tiles
 * through ops (latent_amx_hw or latent_amx_model), with its own fixed
 * reduction order (batch invariant; its bits differ from the vector paths'). */
void latent_gemm_amx_run(const struct latent_amx_ops *ops, float *out, int ldo, const uint16_t *xb, int m, int n, int k,
                         const uint16_t *panels, int p0, int p1, int acc);
/* One small product (remainders of rows, K and N included) through the tile
 * kernel on ops and through the vector kernels of level vec; 0 when every
 * element agrees within the bf16 products' F32 summation bound, else -1.
 * *worst: the largest difference as a fraction of that bound. */
int latent_gemm_amx_selfcheck(const struct latent_amx_ops *ops, latent_isa vec, double *worst);

/* ---- F32 to bf16 (bf16_pack.c): the one rounder and packer of the engine
 * and the trainer, nearest even as latent_f32_to_bf16. The _on forms run on
 * level isa (the self-check's, while the level is being decided); the others
 * from the kernel table (gemm_path.c). ---- */

/* Each level's converters (bf16_pack.c); the _on forms pick and call. */
typedef void (*latent_bf16_span_fn)(uint16_t *dst, const float *src, int n);
typedef void (*latent_bf16_pairs_fn)(uint16_t *dst, const float *a, const float *b, int n);
typedef void (*latent_bf16_panels_fn)(uint16_t *d, const float *wf, const uint16_t *wb, size_t rs, size_t cs, int n,
                                      int k, int p0, int p1);
latent_bf16_span_fn latent_bf16_span_pick(latent_isa isa);
latent_bf16_pairs_fn latent_bf16_pairs_pick(latent_isa isa);
latent_bf16_panels_fn latent_bf16_panels_pick(latent_isa isa);
/* src (n) -> bf16; and two rows a, b (n) as pairs: dst[2j] = a[j], dst[2j+1]
 * = b[j] (b NULL: 0). */
void latent_bf16_round_span(uint16_t *dst, const float *src, int n);
void latent_bf16_pack_pairs(uint16_t *dst, const float *a, const float *b, int n);
void latent_bf16_round_span_on(latent_isa isa, uint16_t *dst, const float *src, int n);
void latent_bf16_pack_pairs_on(latent_isa isa, uint16_t *dst, const float *a, const float *b, int n);
/* X (m, k) F32 -> bf16 rows of even length (k rounded up, padded with 0). */
void latent_bf16_round_rows(uint16_t *dst, const float *x, int m, int k);
/* The same from A read as A[i rs + c cs] (row i, column c): cs == 1 row by
 * row; otherwise (a transposed operand) in tiles of 32 of A's rows. */
void latent_bf16_round_rows_on(latent_isa isa, uint16_t *dst, const float *a, size_t rs, size_t cs, int m, int k);
/* Panels [p0, p1) of W (n, k), W[r][c] = w[r rs + c cs], zero padded, into d
 * (latent_gemm_bf16_bytes of all of them). rs == 1: pairs of contiguous
 * source rows interleaved 16 at a time; otherwise one feature at a time. */
void latent_bf16_pack_panels(uint16_t *d, const float *w, size_t rs, size_t cs, int n, int k, int p0, int p1);
/* The same from F32 (wf, rounded) or, when wf is NULL, from BF16 (wb: as is,
 * NaN quietened): the same panels for the same values. */
void latent_bf16_pack_panels_on(latent_isa isa, uint16_t *d, const float *wf, const uint16_t *wb, size_t rs, size_t cs,
                                int n, int k, int p0, int p1);

/* ---- the kernel table: each kernel chosen once ----
 * isa.c fills it at start-up (the detected level capped by LATENT_ISA, after
 * the AMX self-check) and again whenever latent_isa_set or
 * latent_isa_set_path changes the path (tests); kernel_table.c says which
 * kernel serves which path, each kernel file which of its functions serves a
 * level (its _pick). Callers read the table instead of testing the level. */
struct q8_rows;
typedef void (*latent_gemm_q8_fn)(float *out, int ldo, const struct q8_rows *x, int n, const uint8_t *panels, int p0,
                                  int p1);
/* The q8 vector product of level isa (gemm_q8.c: VNNI where the CPU has it
 * and isa allows AVX-512, else generic C); *name: "avx512vnni" or "generic". */
latent_gemm_q8_fn latent_gemm_q8_pick(latent_isa isa, const char **name);

typedef struct latent_kernels {
    latent_isa isa;                      /* the vector level; level-taking kernels (_on) run on it */
    const char *path;                    /* latent_isa_path(): a level's name or "amx-model" */
    const struct latent_amx_ops *tiles;  /* bf16 (and q8) products on tiles: latent_amx_hw, _model, or NULL */
    latent_gemm_f32_fn gemm_f32;         /* F32 panels (gemm_f32.c) */
    latent_gemm_bf16_fn gemm_bf16;       /* bf16 panels, X in rows: the tile kernel or the vector one */
    latent_gemm_bf16_fn gemm_bf16_pm;    /* bf16 panels, X pair-major (vector kernels) */
    int bf16_pair_major;                 /* the trainer packs transposed operands pair-major (vdpbf16ps; tiles read rows) */
    latent_bf16_span_fn bf16_round_span; /* conversions to bf16 (bf16_pack.c) */
    latent_bf16_pairs_fn bf16_pack_pairs;
    latent_bf16_panels_fn bf16_pack_panels;
    latent_gemm_q8_fn gemm_q8;           /* q8 products on vectors (gemm_q8.c) */
    int q8_tile_rows;                    /* q8 products of this many rows or more on tiles (0: none) */
    const char *q8_path;                 /* latent_q8_path() */
    int avx512;                          /* the AVX-512 forms of SwiGLU, attention's chunks, the q8 row quantizer
                                          * and the trainer's elementwise ops (the same bits as their C forms) */
    int f32_blas_faster;                 /* OpenBLAS outruns the F32 panels (no AVX-512): taken where bits may
                                          * depend on the batch (--deterministic false) */
} latent_kernels;

/* Fills k for vector level isa and tile operations tiles (NULL: none), path
 * named `path` (kernel_table.c). */
void latent_kernels_choose(latent_kernels *k, latent_isa isa, const struct latent_amx_ops *tiles, const char *path);
/* The table of the active path (isa.c). Two tables alternate: a change of
 * path (latent_isa_set, latent_isa_set_path) fills the other and publishes
 * it, so a table read before a change stays intact until the change after. */
const latent_kernels *latent_kernels_active(void);

/* ---- attention ---- */

/* One token row of a step: where its k, v go and what it attends to. */
typedef struct row_meta {
    latent_seq *seq;
    int pos;          /* 0-based position in its sequence */
    int entry;        /* index of its batch entry */
    int row;          /* index in the step's row layout (its RoPE tables) */
    uint8_t flow;     /* 2 recurrent, 1 not */
} row_meta;

typedef struct attn_item_buf attn_item_buf;
typedef struct attn_scratch {
    float *buf;       /* (threads, per_thread) */
    size_t per_thread;
    size_t rowp_offset;   /* floats into a thread's slot where a chunk's row pointers start */
    size_t state_offset;  /* ...where the rows' running softmax states start */
    int batch_variant;    /* 1: runs of rows through sgemm (faster; a row's bits depend on its run) */
    int threads, ctx; /* sized for this many threads and context length */
    float *parts;     /* partial results of rows split over key ranges */
    struct attn_item_buf *items; size_t items_cap; /* work items of big steps */
    size_t parts_cap; /* floats */
} attn_scratch;

/* Grows the scratch for contexts up to ctx tokens; -1 when out of memory. */
/* Sized for contexts up to ctx, steps of `rows` rows and the current thread
 * count; -1 when out of memory (the scratch is then as it was, or bigger). */
int latent_attn_scratch_reserve(attn_scratch *s, const latent_config *c, int ctx, int rows);
void latent_attn_scratch_free(attn_scratch *s);

/* att (n, q_dim) = softmax(q k^T / sqrt(head_dim) + causal) v for n rows whose
 * k, v (of `layer`) are already in their sequences' pages. Each row reduces
 * its keys in fixed chunks merged in order, reading the pages directly, so
 * its bits do not depend on the other rows or the threads; with
 * s->batch_variant, runs of rows of one sequence use sgemm over gathered
 * keys instead. Work is spread over the engine threads. */
void latent_attention_forward(float *att, const float *q, const row_meta *rows, int n, int layer,
                       const latent_config *c, attn_scratch *s);

#endif
