/* The trainer's ops: a `_forward` and a `_backward` for every step of the
 * forward (models.md §1-3), llm.c style.
 *
 * Layouts are row-major over n token rows; a training batch is B sequences of
 * T positions laid out sequence after sequence, row b*T + t. Argument order is
 * fixed: outputs (and what the forward keeps for the backward) first, then
 * inputs, then weights, then sizes. Every `_backward` ADDS into its gradient
 * outputs (activation and weight gradients alike); the caller zeroes them
 * once. Work is spread over the engine threads (threads.h) and is
 * deterministic for a given thread count: each output element is always
 * computed by the same task in the same order. Must not be called from inside
 * a latent_parallel_for task.
 *
 * The ops with matrix products (linear, and the T2MLR fusion and LRT KV
 * injection built on them) take the trainer's product context first
 * (train_gemm.h): bf16 or F32, and the buffers kept between calls; NULL runs
 * them in F32. */
#ifndef LATENT_TRAIN_OPS_H
#define LATENT_TRAIN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "train/train_gemm.h"
#include "train/train_rows.h"

/* out (n, d) = embed[tokens[r]] */
void latent_tr_embedding_forward(float *out, const int32_t *tokens, const float *embed, int n, int d);
/* dembed[tokens[r]] += dout[r] */
void latent_tr_embedding_backward(float *dembed, const float *dout, const int32_t *tokens, int n, int d);

/* out (n, out_dim) = x (n, in_dim) W^T (+ bias (out_dim) when not NULL). */
void latent_tr_linear_forward(tr_gemm *g, float *out, const float *x, const float *w, const float *bias, int n, int in_dim,
                    int out_dim);
/* dx += dout W; dw += dout^T x; dbias += column sums of dout. Any of dx, dw,
 * dbias may be NULL (not wanted). */
void latent_tr_linear_backward(tr_gemm *g, float *dx, float *dw, float *dbias, const float *dout, const float *x, const float *w,
                     int n, int in_dim, int out_dim);

/* Up to 4 products of one input in one parallel section (q, k, v; gate, up):
 * outs[i] (n, out_dims[i]) = x ws[i]^T. Same results as separate calls. */
void latent_tr_linear_forward_multi(tr_gemm *g, float *const *outs, const float *x, const float *const *ws, const int *out_dims, int k,
                             int n, int in_dim);
/* Their backward in one parallel section: dx += sum_i douts[i] ws[i] (in
 * order i = 0..k-1, as separate calls would) and dws[i] += douts[i]^T x. */
void latent_tr_linear_backward_multi(tr_gemm *g, float *dx, float *const *dws, const float *const *douts, const float *x,
                              const float *const *ws, const int *out_dims, int k, int n, int in_dim);

/* out = x * rstd * w, rstd (n) = 1 / sqrt(mean(x^2) + eps) (kept for the backward). */
void latent_tr_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int n, int d, float eps);
/* dx += rstd * (dout*w) - x * rstd^3 * mean(dout*w*x); dw += sum_rows dout * x * rstd. */
void latent_tr_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *rstd,
                      const float *w, int n, int d);

/* RoPE tables for positions 0..n_pos-1: cos/sin (n_pos, head_dim/2). */
void latent_tr_rope_tables(float *cos_t, float *sin_t, int n_pos, int head_dim, float theta);
/* In place on n rows of n_heads heads; row r is at position pos[r]. */
void latent_tr_rope_forward(float *x, const int *pos, const float *cos_t, const float *sin_t, int n, int n_heads,
                        int head_dim);
/* dx (in place) = the rotation's transpose applied to dout. */
void latent_tr_rope_backward(float *dx, const int *pos, const float *cos_t, const float *sin_t, int n, int n_heads,
                   int head_dim);

/* Causal GQA attention over contiguous sequences. Per sequence b: queries
 * q[b*nq + j] at positions qpos[j] (ascending), keys/values k, v[b*T + p],
 * p <= qpos[j]. out (B*nq, n_heads*hd); prob (B, n_heads, nq, T) keeps the
 * softmax rows (entries past a row's position are zero or never read). */
void latent_tr_attention_forward(float *out, float *prob, const float *q, const float *k, const float *v,
                             const int *qpos, int B, int nq, int T, int n_heads, int n_kv_heads, int hd);
/* dq, dk, dv += the attention's gradients, given dout and the forward's prob. */
void latent_tr_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *prob, const float *q,
                        const float *k, const float *v, const int *qpos, int B, int nq, int T, int n_heads,
                        int n_kv_heads, int hd);

/* out (n) = silu(g) * u */
void latent_tr_swiglu_forward(float *out, const float *g, const float *u, size_t n);
/* dg += dout * u * silu'(g); du += dout * silu(g) */
void latent_tr_swiglu_backward(float *dg, float *du, const float *dout, const float *g, const float *u, size_t n);

/* out = a + b (n floats); its backward is the identity into both. */
void latent_tr_residual_forward(float *out, const float *a, const float *b, size_t n);
/* dst += src (n floats), threaded. */
void latent_tr_add(float *dst, const float *src, size_t n);

/* Cross-entropy of n rows of logits (n, V): loss[r] = logsumexp - logit[target].
 * Rows with mask[r] == 0 (mask may be NULL) get loss 0. */
void latent_tr_crossentropy_forward(float *loss, const float *logits, const int32_t *targets, const uint8_t *mask, int n,
                          int V);
/* In place: logits become scale * (softmax - onehot(target)) on scored rows,
 * 0 on the others (a fused softmax + cross-entropy backward). When loss is
 * not NULL it also gets the forward's row losses (one exp per logit for both). */
void latent_tr_crossentropy_softmax_backward(float *logits, float *loss, const int32_t *targets, const uint8_t *mask,
                                      float scale, int n, int V);

/* T2MLR fusion (models.md §2) at rows with control flow 2 (flow NULL: all):
 *   u = R W_rec^T, z = [h ; u], sr = sigmoid(z F_rec^T + b_rec), sc = sigmoid(z F_cur^T + b_cur)
 *   out = h + tanh(g_rec) sr * u + tanh(g_cur) sc * h
 * and out = h at rows with flow 1. Keeps u (n, d), z (n, 2d), sr, sc (n, d)
 * for the backward. */
typedef struct t2mlr_fuse_acts {
    float *u, *z, *sr, *sc;
} t2mlr_fuse_acts;
typedef struct t2mlr_fuse_w {
    const float *w_rec, *f_rec_w, *f_rec_b, *f_cur_w, *f_cur_b, *gamma_rec, *gamma_cur;
} t2mlr_fuse_w;
typedef struct t2mlr_fuse_g {
    float *w_rec, *f_rec_w, *f_rec_b, *f_cur_w, *f_cur_b, *gamma_rec, *gamma_cur;
} t2mlr_fuse_g;
void latent_tr_t2mlr_fuse_forward(tr_gemm *gm, float *out, const t2mlr_fuse_acts *a, const float *h, const float *R, t2mlr_fuse_w w,
                           const uint8_t *flow, int n, int d);
/* dh += , dR += (dR may be NULL), weight grads into g; scratch holds
 * n * (5d + 2) floats. */
void latent_tr_t2mlr_fuse_backward(tr_gemm *gm, float *dh, float *dR, t2mlr_fuse_g g, const float *dout, const t2mlr_fuse_acts *a,
                            const float *h, const float *R, t2mlr_fuse_w w, const uint8_t *flow, float *scratch,
                            int n, int d);

/* T2MLR cache update of every row: at flow 2 (flow NULL: all) with
 * residual, out = (y + prev) * f, f = clamp(1/sqrt(mean((y+prev)^2) + eps),
 * 1/clamp, clamp) (kept in f (n)); otherwise out = y (f = 0 marks it). The
 * factor is a constant in the backward. */
void latent_tr_t2mlr_update_forward(float *out, float *f, const float *y, const float *prev, const uint8_t *flow,
                             int residual, float clamp, float eps, int n, int d);
/* dy += f * dout and dprev += f * dout (dprev may be NULL) at rows with a
 * factor; dy += dout at the others. */
void latent_tr_t2mlr_update_backward(float *dy, float *dprev, const float *dout, const float *f, int n, int d);

/* Jacobi's shift: out row t of each of B sequences = in row t-1, row 0 = 0. */
void latent_tr_shift_right_forward(float *out, const float *in, int B, int T, int d);
/* din row t-1 += dout row t. */
void latent_tr_shift_right_backward(float *din, const float *dout, int B, int T, int d);

/* LRT residual injection: out = alpha x + gamma m (m may be NULL: zero). */
void latent_tr_lrt_residual_forward(float *out, const float *x, const float *m, float alpha, float gamma, size_t n);
/* dx += alpha dout; dm += gamma dout (when m and dm); dalpha += sum dout x; dgamma += sum dout m. */
void latent_tr_lrt_residual_backward(float *dx, float *dm, float *dalpha, float *dgamma, const float *dout, const float *x,
                           const float *m, float alpha, float gamma, size_t n);

/* LRT KV injection on n rows (pre-RoPE): gate (n, 2 nkv) = 2 sigmoid(a G^T);
 * mk, mv = m K^T, m V^T (skipped when m is NULL: zero memory);
 * k_j = g_loc_j kl_j + g_fb_j mk_j, likewise v. k, v may not alias kl, vl. */
void latent_tr_lrt_kv_forward(tr_gemm *gm, float *k, float *v, float *gate, float *mk, float *mv, const float *kl, const float *vl,
                    const float *a, const float *m, const float *G, const float *K, const float *V, int n,
                    int d, int n_kv_heads, int hd);
/* From dk, dv: dkl, dvl += (the local projections' output grads), da += (gate
 * path), dm += (memory path, when m and dm), dG, dK, dV += . Scratch: (n, 2nkv + 2kv_dim). */
void latent_tr_lrt_kv_backward(tr_gemm *gm, float *dkl, float *dvl, float *da, float *dm, float *dG, float *dK, float *dV,
                     const float *dk, const float *dv, const float *gate, const float *mk, const float *mv,
                     const float *kl, const float *vl, const float *a, const float *m, const float *G,
                     const float *K, const float *V, float *scratch, int n, int d, int n_kv_heads, int hd);

#endif
