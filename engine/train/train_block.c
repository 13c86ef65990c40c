/* The trainer's blocks and heads (trainer_internal.h): one block's forward
 * and backward over a chain's rows, in parts the modes' steps reassemble
 * (plain and Jacobi attend to their own pass's keys, LRT's subsets to a
 * view of every pass's), and the final norm, LM head and loss. */
#include <string.h>

#include "train/trainer_internal.h"

/* ---- blocks ------------------------------------------------------------- */

/* Input injection, attention norm, q/k/v (KV injection), RoPE. */
void latent_trm_blk_fwd_qkv(latent_trainer *t, int l, blk *A, const chain *ch) {
    const latent_config *c = t->c;
    const latent_layer *L = &t->m->w.layers[l];
    int n = ch->n, d = c->d, qd = latent_config_q_dim(c), kvd = latent_config_kv_dim(c);
    int kvi = A->inject && c->lrt.kv_injection;
    if (A->inject && c->lrt.residual_injection)
        latent_tr_lrt_residual_forward(A->xi, A->x, ch->mem, L->lrt_alpha[0], L->lrt_gamma[0], (size_t)n * d);
    latent_tr_rmsnorm_forward(A->a, A->rs1, A->xi, L->attn_norm, n, d, c->rms_eps);
    float *qkv[3] = {A->q, kvi ? A->kl : A->k, kvi ? A->vl : A->v};
    const float *wqkv[3] = {L->wq, L->wk, L->wv};
    int dims[3] = {qd, kvd, kvd};
    latent_tr_linear_forward_multi(&t->gemm, qkv, A->a, wqkv, dims, 3, n, d);
    if (kvi)
        latent_tr_lrt_kv_forward(&t->gemm, A->k, A->v, A->gate, A->mk, A->mv, A->kl, A->vl, A->a, ch->mem, L->lrt_gate, L->lrt_k,
                          L->lrt_v, n, d, c->n_kv_heads, c->head_dim);
    latent_tr_rope_forward(A->q, ch->pos, t->rope_cos, t->rope_sin, n, c->n_heads, c->head_dim);
    latent_tr_rope_forward(A->k, ch->pos, t->rope_cos, t->rope_sin, n, c->n_kv_heads, c->head_dim);
}

/* Wo and the attention residual, then the MLP and its residual. */
void latent_trm_blk_fwd_out(latent_trainer *t, int l, blk *A, const chain *ch) {
    const latent_config *c = t->c;
    const latent_layer *L = &t->m->w.layers[l];
    int n = ch->n, d = c->d, qd = latent_config_q_dim(c);
    size_t nd = (size_t)n * d, nf = (size_t)n * c->ffn;
    latent_tr_linear_forward(&t->gemm, t->tmp, A->o, L->wo, NULL, n, qd, d);
    latent_tr_residual_forward(A->x2, A->xi, t->tmp, nd);
    latent_tr_rmsnorm_forward(A->mn, A->rs2, A->x2, L->mlp_norm, n, d, c->rms_eps);
    float *gu[2] = {A->hg, A->hu};
    const float *wgu[2] = {L->wg, L->wu};
    int dims[2] = {c->ffn, c->ffn};
    latent_tr_linear_forward_multi(&t->gemm, gu, A->mn, wgu, dims, 2, n, d);
    latent_tr_swiglu_forward(A->hs, A->hg, A->hu, nf);
    latent_tr_linear_forward(&t->gemm, t->tmp, A->hs, L->wd, NULL, n, c->ffn, d);
    latent_tr_residual_forward(A->out, A->x2, t->tmp, nd);
}

/* A block attending to its own pass's keys. */
void latent_trm_blk_forward(latent_trainer *t, int l, blk *A, const chain *ch) {
    const latent_config *c = t->c;
    latent_trm_blk_fwd_qkv(t, l, A, ch);
    latent_tr_attention_forward(A->o, A->p, A->q, A->k, A->v, ch->qpos, t->B, ch->nq, t->T, c->n_heads, c->n_kv_heads,
                         c->head_dim);
    latent_trm_blk_fwd_out(t, l, A, ch);
}

/* From the gradient at the block output (t->dres), through the MLP and Wo:
 * t->dres becomes the gradient at x2's residual path (the input side of the
 * attention residual), t->dO the gradient of the attention output. */
void latent_trm_blk_bwd_out(latent_trainer *t, int l, const blk *A, const chain *ch, latent_layer *G) {
    const latent_config *c = t->c;
    const latent_layer *L = &t->m->w.layers[l];
    int n = ch->n, d = c->d, qd = latent_config_q_dim(c), f = c->ffn;
    size_t nf = (size_t)n * f;
    /* out = x2 + hs Wd^T, hs = silu(hg) * hu */
    memset(t->dhs, 0, nf * sizeof(float));
    latent_tr_linear_backward(&t->gemm, t->dhs, G->wd, NULL, t->dres, A->hs, L->wd, n, f, d);
    memset(t->dhg, 0, nf * sizeof(float));
    memset(t->dhu, 0, nf * sizeof(float));
    latent_tr_swiglu_backward(t->dhg, t->dhu, t->dhs, A->hg, A->hu, nf);
    /* hg, hu = mn Wg^T, mn Wu^T */
    memset(t->da, 0, (size_t)n * d * sizeof(float));
    float *dgu[2] = {G->wg, G->wu};
    const float *gdu[2] = {t->dhg, t->dhu}, *wgu[2] = {L->wg, L->wu};
    int dims[2] = {f, f};
    latent_tr_linear_backward_multi(&t->gemm, t->da, dgu, gdu, A->mn, wgu, dims, 2, n, d);
    /* mn = RMSNorm(x2): dres becomes d x2 */
    latent_tr_rmsnorm_backward(t->dres, G->mlp_norm, t->da, A->x2, A->rs2, L->mlp_norm, n, d);
    /* x2 = xi + o Wo^T */
    memset(t->dO, 0, (size_t)n * qd * sizeof(float));
    latent_tr_linear_backward(&t->gemm, t->dO, G->wo, NULL, t->dres, A->o, L->wo, n, qd, d);
}

/* From dq, dk, dv (after RoPE; written in place) and the residual gradient
 * in t->dres at xi: through RoPE, KV injection, the projections, the norm
 * and the residual injection. t->dres becomes the gradient at the block
 * input x; dmem (n, d) accumulates the memory's gradient (when ch->mem). */
void latent_trm_blk_bwd_qkv(latent_trainer *t, int l, const blk *A, const chain *ch, latent_layer *G, float *dq,
                        float *dk, float *dv, float *dmem) {
    const latent_config *c = t->c;
    const latent_layer *L = &t->m->w.layers[l];
    int n = ch->n, d = c->d, qd = latent_config_q_dim(c), kvd = latent_config_kv_dim(c);
    size_t nd = (size_t)n * d;
    latent_tr_rope_backward(dq, ch->pos, t->rope_cos, t->rope_sin, n, c->n_heads, c->head_dim);
    latent_tr_rope_backward(dk, ch->pos, t->rope_cos, t->rope_sin, n, c->n_kv_heads, c->head_dim);
    memset(t->da, 0, nd * sizeof(float));
    const float *gk = dk, *gv = dv;
    if (A->inject && c->lrt.kv_injection) {
        /* k = g_loc kl + g_fb (m K^T) per kv head (likewise v) */
        memset(t->dkl, 0, (size_t)n * kvd * sizeof(float));
        memset(t->dvl, 0, (size_t)n * kvd * sizeof(float));
        latent_tr_lrt_kv_backward(&t->gemm, t->dkl, t->dvl, t->da, ch->mem ? dmem : NULL, G->lrt_gate, G->lrt_k, G->lrt_v, dk, dv,
                           A->gate, A->mk, A->mv, A->kl, A->vl, A->a, ch->mem, L->lrt_gate, L->lrt_k, L->lrt_v,
                           t->kvscr, n, d, c->n_kv_heads, c->head_dim);
        gk = t->dkl, gv = t->dvl;
    }
    /* q, k, v = a Wq^T, a Wk^T, a Wv^T */
    float *dw[3] = {G->wq, G->wk, G->wv};
    const float *gs[3] = {dq, gk, gv}, *ws[3] = {L->wq, L->wk, L->wv};
    int dims[3] = {qd, kvd, kvd};
    latent_tr_linear_backward_multi(&t->gemm, t->da, dw, gs, A->a, ws, dims, 3, n, d);
    /* a = RMSNorm(xi): dres (already the residual path's d xi) += */
    latent_tr_rmsnorm_backward(t->dres, G->attn_norm, t->da, A->xi, A->rs1, L->attn_norm, n, d);
    if (A->inject && c->lrt.residual_injection) {
        /* xi = alpha x + gamma m */
        memset(t->dres2, 0, nd * sizeof(float));
        latent_tr_lrt_residual_backward(t->dres2, ch->mem ? dmem : NULL, G->lrt_alpha, G->lrt_gamma, t->dres, A->x, ch->mem,
                                 L->lrt_alpha[0], L->lrt_gamma[0], nd);
        float *sw = t->dres;
        t->dres = t->dres2, t->dres2 = sw;
    }
}

/* A block that attended to its own pass's keys, backward. */
void latent_trm_blk_backward(latent_trainer *t, int l, const blk *A, const chain *ch, latent_weights *g) {
    const latent_config *c = t->c;
    int n = ch->n, qd = latent_config_q_dim(c), kvd = latent_config_kv_dim(c);
    latent_layer *G = &g->layers[l];
    latent_trm_blk_bwd_out(t, l, A, ch, G);
    memset(t->dq, 0, (size_t)n * qd * sizeof(float));
    memset(t->dk, 0, (size_t)n * kvd * sizeof(float));
    memset(t->dv, 0, (size_t)n * kvd * sizeof(float));
    latent_tr_attention_backward(t->dq, t->dk, t->dv, t->dO, A->p, A->q, A->k, A->v, ch->qpos, t->B, ch->nq, t->T,
                          c->n_heads, c->n_kv_heads, c->head_dim);
    latent_trm_blk_bwd_qkv(t, l, A, ch, G, t->dq, t->dk, t->dv, NULL);
}

/* ---- heads -------------------------------------------------------------- */

void latent_trm_head_forward(latent_trainer *t, head *h, const float *x, int n) {
    const latent_config *c = t->c;
    latent_tr_rmsnorm_forward(h->fn, h->rs, x, t->m->w.final_norm, n, c->d, c->rms_eps);
    /* The LM head stays F32 under bf16: its logits feed the loss directly,
     * and with them in bf16 the default recipe's loss strayed further from
     * F32 (2.65% against 1.98%) for no measured speed-up
     * (clients/bf16_curve.sh; docs/training.md, "Precision"). */
    latent_tr_linear_forward(NULL, h->logits, h->fn, t->m->w.lm_head, NULL, n, c->d, c->vocab);
}

static int count_scored(const uint8_t *mask, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) k += mask[i] != 0;
    return k;
}

/* Mean cross-entropy over the scored rows (0 when none): over this batch's
 * scored rows, or the step's given denominator for head `idx` (a share of a
 * global batch); with bwd the logits become the gradient of weight * that
 * mean. */
double latent_trm_head_loss(latent_trainer *t, head *h, int idx, const int32_t *tgt, const uint8_t *mask, int n,
                        double weight, int bwd) {
    int64_t k = t->scored_total ? t->scored_total[idx] : count_scored(mask, n);
    if (bwd)
        latent_tr_crossentropy_softmax_backward(h->logits, h->loss, tgt, mask, k ? (float)(weight / k) : 0.0f, n,
                                         t->c->vocab);
    else
        latent_tr_crossentropy_forward(h->loss, h->logits, tgt, mask, n, t->c->vocab);
    double s = 0;
    for (int i = 0; i < n; i++) s += h->loss[i];
    return k ? s / k : 0.0;
}

/* From the logits' gradient to t->dres (n, d) at the head's input x;
 * dfn_extra (n, d) adds a gradient at the final norm's output (LRT memory
 * from the final norm), may be NULL. */
void latent_trm_head_backward(latent_trainer *t, head *h, const float *x, int n, const float *dfn_extra,
                          latent_weights *g) {
    const latent_config *c = t->c;
    size_t nd = (size_t)n * c->d;
    memset(t->da, 0, nd * sizeof(float));
    /* the LM head in F32 (latent_trm_head_forward) */
    latent_tr_linear_backward(NULL, t->da, g->lm_head, NULL, h->logits, h->fn, t->m->w.lm_head, n, c->d, c->vocab);
    if (dfn_extra) latent_tr_add(t->da, dfn_extra, nd);
    memset(t->dres, 0, nd * sizeof(float));
    latent_tr_rmsnorm_backward(t->dres, g->final_norm, t->da, x, h->rs, t->m->w.final_norm, n, c->d);
}
