/* The trainer's state and the pieces of its step that its files share
 * (engine/train/train_model.c: layout, life, the plain step and the entry
 * points; train_block.c: blocks and heads; train_jacobi.c: the T2MLR Jacobi
 * step; train_lrt.c: the LRT interleaved step). Private to engine/train/;
 * the layout is described at the top of train_model.c. */
#ifndef LATENT_TRAINER_INTERNAL_H
#define LATENT_TRAINER_INTERNAL_H

#include <string.h>

#include "latent/train.h"
#include "train/train_ops.h"

typedef struct blk {          /* one block's saved activations over n rows */
    float *x;                 /* (n, d) input (before LRT residual injection) */
    float *xi;                /* (n, d) after residual injection; == x without */
    float *rs1, *a;           /* (n), (n, d) attention RMSNorm: 1/rms and output */
    float *q;                 /* (n, q_dim) after RoPE */
    float *k, *v;             /* (n, kv_dim) after KV injection; k after RoPE */
    float *kl, *vl;           /* (n, kv_dim) local k, v before KV injection (NULL without) */
    float *mk, *mv;           /* (n, kv_dim) memory projections (NULL without memory) */
    float *gate;              /* (n, 2 n_kv) KV injection gates, 2 sigmoid(a G^T) */
    float *p;                 /* (B, n_heads, nq, T) attention probabilities */
    float *o;                 /* (n, q_dim) attention output, before Wo */
    float *x2;                /* (n, d) after the attention residual */
    float *rs2, *mn;          /* (n), (n, d) MLP RMSNorm */
    float *hg, *hu;           /* (n, ffn) gate and up projections */
    float *hs;                /* (n, ffn) silu(hg) * hu, the down projection's input */
    float *out;               /* (n, d) output == the next block's x */
    int inject;               /* LRT injection runs in this block */
} blk;

typedef struct chain {        /* blocks l0..l1 over n = B * nq rows */
    int l0, l1, n, nq;
    const int *pos;           /* (n) position of each row in its sequence */
    const int *qpos;          /* (nq) positions of one sequence's rows, ascending */
    blk *b;                   /* b[i] is block l0 + i */
    float *in, *out;          /* (n, d) b[0].x and the last block's out */
    float *mem;               /* (n, d) LRT memory of each row, NULL: none (m = 0) */
    t2mlr_fuse_acts fuse;     /* T2MLR: the fusion at the input (fused chains) */
    float *f;                 /* (n) T2MLR cache update factors (middle chains) */
} chain;

typedef struct head {
    float *rs, *fn;           /* (n), (n, d) final RMSNorm */
    float *logits;            /* (n, V): logits, then their gradient */
    float *loss;              /* (n) per-row cross-entropy */
} head;

struct latent_trainer {
    const latent_model *m;
    const latent_config *c;
    latent_train_shape s;
    int B, T, N, D, G;        /* G: Jacobi middle passes that carry gradient */
    float *slab;
    size_t slab_floats;
    blk *blks;                /* every chain's blocks, one allocation */

    float *rope_cos, *rope_sin;  /* (T, head_dim/2) */
    int *pos, *qpos;          /* (N) t of row b*T+t; (T) 0..T-1 */
    int32_t *tok, *tgt;       /* (N) inputs and targets of the batch */
    uint8_t *mask;            /* (N) targets scored */
    const int64_t *scored_total; /* the step's loss denominators per head, or NULL (latent_train_batch) */
    uint8_t *flow;            /* (N) control flow of each input, NULL when all are 2 */
    uint8_t *flow_buf;

    /* backward scratch over up to N rows */
    float *dres, *dres2, *tmp, *da, *dq, *dk, *dv, *dO, *dhs, *dhg, *dhu, *dkl, *dvl, *kvscr, *fscr;

    chain main;
    head hmain;

    /* Jacobi */
    chain fin, *mid;
    head hfin;
    int n_mid, n_R;
    float **R;                /* a ring: R^(j) in R[j % n_R], the last n_R = max(G + 1, 2) kept */
    float *M, *dX, *dR, *dR2, *dM;
    /* adaptive Jacobi's frontier skipping (jacobi_skipping; else NULL) */
    int *sfx_pos, *sfx_glob;  /* (N) t and row b*T+t of the suffix pass's rows, sequence after sequence */
    uint8_t *sfx_flow;        /* (N) their control flow */
    float *kmid, *vmid;       /* (l_end-l_start+1, N, kv_dim) each middle block's k, v from the newest pass
                                 that computed the row */

    /* LRT */
    int S, *sub_n;
    chain *sub;
    head *hsub;
    int **sub_pos, **sub_qpos, **sub_glob;  /* per subset: (n_s B) t, (n_s) t, (n_s B) row b*T+t */
    int32_t **sub_tok, **sub_tgt;
    uint8_t **sub_mask;
    float *krec, *vrec;       /* (L, N, kv_dim) recomputed k, v of each position */
    float *kview, *vview, *dkview, *dvview;  /* (N, kv_dim) */
    float *dK0, *dV0, *dKr, *dVr;            /* (L, N, kv_dim) */
    float *Hrec, *dH0, *dHr, *dmem;          /* (N, d) */

    tr_gemm gemm;             /* the products' context (train_gemm.h): bf16 or F32, the weights'
                                 panels of the open step, the buffers kept between calls */
    int fwd_only;             /* last step ran without backward: logits intact */
    latent_gate_stats stats;
};

/* Adaptive Jacobi skips converged rows in its middle passes that carry no
 * gradient (jacobi_iterate_skipping): tol > 0, not switched off, and some
 * middle pass without gradient (D - 1 > G). Needs t->D and t->G set. */
static inline int latent_trm_jacobi_skipping(const latent_trainer *t) {
    return t->s.mode == LATENT_TRAIN_JACOBI && t->s.jacobi_tol > 0 && !t->s.jacobi_no_skip && t->D - 1 > t->G;
}

/* ---- rows of a batch ---------------------------------------------------- */

/* dst row i = src row idx[i] (rows of `width` floats) */
static inline void latent_trm_gather(float *dst, const float *src, const int *idx, int n, int width) {
    for (int i = 0; i < n; i++) memcpy(dst + (size_t)i * width, src + (size_t)idx[i] * width, width * sizeof(float));
}

/* dst row idx[i] = src row i */
static inline void latent_trm_scatter(float *dst, const float *src, const int *idx, int n, int width) {
    for (int i = 0; i < n; i++) memcpy(dst + (size_t)idx[i] * width, src + (size_t)i * width, width * sizeof(float));
}

/* One block's forward over a chain's rows: q, k, v (and RoPE), then the
 * rest after attention; _forward does both around the attention; the
 * backward ADDS into g. */
void latent_trm_blk_fwd_qkv(latent_trainer *t, int l, blk *A, const chain *ch);
void latent_trm_blk_fwd_out(latent_trainer *t, int l, blk *A, const chain *ch);
void latent_trm_blk_forward(latent_trainer *t, int l, blk *A, const chain *ch);
void latent_trm_blk_backward(latent_trainer *t, int l, const blk *A, const chain *ch, latent_weights *g);
/* The backward's two halves around the attention (LRT routes its keys'
 * gradient between them): from t->dres at the block output through the MLP
 * and Wo to t->dres at x2's residual path and t->dO; then from dq, dk, dv
 * (after RoPE, written in place) and t->dres at xi to t->dres at the block
 * input, dmem (n, d) accumulating the memory's gradient (when ch->mem). */
void latent_trm_blk_bwd_out(latent_trainer *t, int l, const blk *A, const chain *ch, latent_layer *G);
void latent_trm_blk_bwd_qkv(latent_trainer *t, int l, const blk *A, const chain *ch, latent_layer *G, float *dq,
                            float *dk, float *dv, float *dmem);
/* The final norm, LM head and loss over n rows (head_loss: the mean over
 * the scored rows; with bwd the logits become their gradient), and back to
 * t->dres. */
void latent_trm_head_forward(latent_trainer *t, head *h, const float *x, int n);
double latent_trm_head_loss(latent_trainer *t, head *h, int idx, const int32_t *tgt, const uint8_t *mask, int n,
                            double weight, int bwd);
void latent_trm_head_backward(latent_trainer *t, head *h, const float *x, int n, const float *dfn_extra,
                              latent_weights *g);

/* The T2MLR Jacobi step (train_jacobi.c) and the LRT interleaved step
 * (train_lrt.c): loss, gradients into g unless NULL. */
double latent_trm_jacobi_step(latent_trainer *t, latent_weights *g);
double latent_trm_lrt_step(latent_trainer *t, latent_weights *g);

#endif
