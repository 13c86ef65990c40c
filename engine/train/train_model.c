/* The trainer's forward and backward over one batch, in the three modes of
 * models.md: plain LM, T2MLR Jacobi (§2) and LRT interleaved (§3).
 *
 * A batch is B sequences of T positions, row b*T + t. A "chain" is a run of
 * blocks over some rows whose activations are all kept (one `blk` per block);
 * a "head" is the final norm, LM head and cross-entropy over a chain's output.
 *   plain:  main = blocks 0..L-1, head.
 *   Jacobi: main = pass 1, blocks 0..l_end (its input of block l_start is the
 *           saved X); mid[] = the middle passes that carry gradient (the
 *           others run in mid[0] before them and are overwritten); fin =
 *           the final pass, blocks l_start..L-1 on Phi(X, R^(D-1)), head.
 *           Adaptive with skipping, the passes without gradient run on the
 *           rows of a suffix of each sequence only, in mid[0]'s buffers,
 *           attending to a buffer of every middle block's k, v (the newest
 *           pass's over each row: see jacobi_suffix_pass in train_jacobi.c).
 *   LRT:    main = the full pass with m = 0, head; sub[s] = subset s's pass
 *           over its own rows (position t = s + j*S of each sequence), head,
 *           attending to a buffer of every block's k, v (rebuilt as a view of
 *           pass-0 and recomputed rows: see lrt_view).
 * Every saved activation is carved from one slab; backward scratch too. */
#include "latent/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "train/train_ops.h"
#include "train/trainer_internal.h"


/* ---- slab layout -------------------------------------------------------- */

typedef struct carver {
    float *base;              /* NULL while sizing */
    size_t off;
} carver;

static float *take(carver *cv, size_t n) {
    float *p = cv->base ? cv->base + cv->off : NULL;
    cv->off += (n + 15) / 16 * 16; /* 64-byte aligned slices */
    return p;
}


static int injected(const latent_trainer *t, int l) {
    const latent_config *c = t->c;
    return t->s.mode == LATENT_TRAIN_LRT && l >= c->lrt.inject_start && l <= c->lrt.inject_end;
}

static void chain_layout(latent_trainer *t, carver *cv, chain *ch, int l0, int l1, int nq, int has_mem, int fused,
                         int middle) {
    const latent_config *c = t->c;
    size_t d = c->d, qd = latent_config_q_dim(c), kvd = latent_config_kv_dim(c), f = c->ffn;
    size_t n = (size_t)t->B * nq;
    ch->l0 = l0, ch->l1 = l1, ch->n = (int)n, ch->nq = nq;
    float *x = take(cv, n * d);
    ch->in = x;
    for (int l = l0; l <= l1; l++) {
        blk *A = &ch->b[l - l0];
        memset(A, 0, sizeof *A);
        A->inject = injected(t, l);
        A->x = x;
        A->xi = A->inject && c->lrt.residual_injection ? take(cv, n * d) : x;
        A->rs1 = take(cv, n), A->a = take(cv, n * d);
        A->q = take(cv, n * qd), A->k = take(cv, n * kvd), A->v = take(cv, n * kvd);
        if (A->inject && c->lrt.kv_injection) {
            A->kl = take(cv, n * kvd), A->vl = take(cv, n * kvd);
            A->gate = take(cv, n * 2 * c->n_kv_heads);
            if (has_mem) A->mk = take(cv, n * kvd), A->mv = take(cv, n * kvd);
        }
        A->p = take(cv, (size_t)t->B * c->n_heads * nq * t->T);
        A->o = take(cv, n * qd), A->x2 = take(cv, n * d);
        A->rs2 = take(cv, n), A->mn = take(cv, n * d);
        A->hg = take(cv, n * f), A->hu = take(cv, n * f), A->hs = take(cv, n * f);
        x = A->out = take(cv, n * d);
    }
    ch->out = x;
    ch->mem = has_mem ? take(cv, n * d) : NULL;
    if (fused) {
        ch->fuse.u = take(cv, n * d), ch->fuse.z = take(cv, n * 2 * d);
        ch->fuse.sr = take(cv, n * d), ch->fuse.sc = take(cv, n * d);
    }
    if (middle) ch->f = take(cv, n);
}

static void head_layout(latent_trainer *t, carver *cv, head *h, int n) {
    h->rs = take(cv, n), h->fn = take(cv, (size_t)n * t->c->d);
    h->logits = take(cv, (size_t)n * t->c->vocab), h->loss = take(cv, n);
}

/* Sets every pointer; with cv->base NULL only measures. */
static void trainer_layout(latent_trainer *t, carver *cv) {
    const latent_config *c = t->c;
    size_t N = t->N, d = c->d, qd = latent_config_q_dim(c), kvd = latent_config_kv_dim(c), f = c->ffn;
    size_t L = c->n_layers;
    t->rope_cos = take(cv, (size_t)t->T * (c->head_dim / 2));
    t->rope_sin = take(cv, (size_t)t->T * (c->head_dim / 2));
    t->dres = take(cv, N * d), t->dres2 = take(cv, N * d), t->tmp = take(cv, N * d), t->da = take(cv, N * d);
    t->dq = take(cv, N * qd), t->dk = take(cv, N * kvd), t->dv = take(cv, N * kvd), t->dO = take(cv, N * qd);
    t->dhs = take(cv, N * f), t->dhg = take(cv, N * f), t->dhu = take(cv, N * f);
    int lrt_kv = t->s.mode == LATENT_TRAIN_LRT && c->lrt.kv_injection;
    if (lrt_kv) {
        t->dkl = take(cv, N * kvd), t->dvl = take(cv, N * kvd);
        t->kvscr = take(cv, N * (2 * c->n_kv_heads + 2 * kvd));
    }
    blk *next = t->blks;
    if (t->s.mode == LATENT_TRAIN_PLAIN) {
        t->main.b = next, next += L;
        chain_layout(t, cv, &t->main, 0, (int)L - 1, t->T, 0, 0, 0);
        head_layout(t, cv, &t->hmain, (int)N);
    } else if (t->s.mode == LATENT_TRAIN_JACOBI) {
        int ls = c->t2mlr.l_start, le = c->t2mlr.l_end;
        t->main.b = next, next += le + 1;
        chain_layout(t, cv, &t->main, 0, le, t->T, 0, 0, 0);
        for (int i = 0; i < t->n_mid; i++) {
            t->mid[i].b = next, next += le - ls + 1;
            chain_layout(t, cv, &t->mid[i], ls, le, t->T, 0, 1, 1);
        }
        t->fin.b = next, next += L - ls;
        chain_layout(t, cv, &t->fin, ls, (int)L - 1, t->T, 0, 1, 0);
        head_layout(t, cv, &t->hfin, (int)N);
        for (int i = 0; i < t->n_R; i++) t->R[i] = take(cv, N * d);
        t->M = take(cv, N * d), t->dX = take(cv, N * d), t->dR = take(cv, N * d), t->dR2 = take(cv, N * d);
        t->dM = take(cv, N * d);
        t->fscr = take(cv, N * (5 * d + 2));
        if (latent_trm_jacobi_skipping(t)) {
            size_t n_mid_blocks = le - ls + 1;
            t->kmid = take(cv, n_mid_blocks * N * kvd), t->vmid = take(cv, n_mid_blocks * N * kvd);
        }
    } else {
        t->main.b = next, next += L;
        chain_layout(t, cv, &t->main, 0, (int)L - 1, t->T, 0, 0, 0);
        head_layout(t, cv, &t->hmain, (int)N);
        for (int s = 0; s < t->S; s++) {
            t->sub[s].b = next, next += L;
            chain_layout(t, cv, &t->sub[s], 0, (int)L - 1, t->sub_n[s], 1, 0, 0);
            head_layout(t, cv, &t->hsub[s], t->B * t->sub_n[s]);
        }
        t->krec = take(cv, L * N * kvd), t->vrec = take(cv, L * N * kvd);
        t->kview = take(cv, N * kvd), t->vview = take(cv, N * kvd);
        t->dkview = take(cv, N * kvd), t->dvview = take(cv, N * kvd);
        t->dK0 = take(cv, L * N * kvd), t->dV0 = take(cv, L * N * kvd);
        t->dKr = take(cv, L * N * kvd), t->dVr = take(cv, L * N * kvd);
        t->Hrec = take(cv, N * d), t->dH0 = take(cv, N * d), t->dHr = take(cv, N * d), t->dmem = take(cv, N * d);
    }
}

latent_trainer *latent_trainer_new(const latent_model *m, const latent_train_shape *s, latent_err *err) {
    const latent_config *c = &m->cfg;
    if (s->batch < 1 || s->seq < 2) {
        latent_err_set(err, LATENT_E_INVALID, "train: batch must be >= 1 and seq >= 2 (got %d, %d)", s->batch, s->seq);
        return NULL;
    }
    if (s->seq > c->max_pos) {
        latent_err_set(err, LATENT_E_INVALID, "train: seq %d exceeds the model's max_position_embeddings %d", s->seq, c->max_pos);
        return NULL;
    }
    if ((size_t)s->batch * s->seq > (size_t)1 << 24) {
        latent_err_set(err, LATENT_E_INVALID, "train: batch * seq = %lld rows is too many", (long long)s->batch * s->seq);
        return NULL;
    }
    if (s->mode == LATENT_TRAIN_JACOBI && c->rec != LATENT_REC_T2MLR) {
        latent_err_set(err, LATENT_E_INVALID, "train: Jacobi mode needs a T2MLR model (config has no t2mlr latent_recurrence)");
        return NULL;
    }
    if (s->mode == LATENT_TRAIN_LRT && c->rec != LATENT_REC_LRT) {
        latent_err_set(err, LATENT_E_INVALID, "train: LRT mode needs an LRT model (config has no lrt latent_recurrence)");
        return NULL;
    }
    if (s->mode == LATENT_TRAIN_JACOBI && (s->jacobi_iters < 1 || s->jacobi_grad_iters < 0)) {
        latent_err_set(err, LATENT_E_INVALID, "train: --jacobi-iters must be >= 1 and --jacobi-grad-iters >= 0");
        return NULL;
    }
    if (s->mode == LATENT_TRAIN_LRT && (s->lrt_subsets < 1 || s->lrt_subsets > s->seq)) {
        latent_err_set(err, LATENT_E_INVALID, "train: --lrt-subsets must be in 1..seq (%d), got %d", s->seq, s->lrt_subsets);
        return NULL;
    }
    latent_trainer *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->m = m, t->c = c, t->s = *s;
    latent_tr_gemm_init(&t->gemm, s->bf16);
    t->B = s->batch, t->T = s->seq, t->N = s->batch * s->seq;
    int L = c->n_layers, n_blks = 0;
    if (s->mode == LATENT_TRAIN_PLAIN) {
        n_blks = L;
    } else if (s->mode == LATENT_TRAIN_JACOBI) {
        int ls = c->t2mlr.l_start, le = c->t2mlr.l_end;
        t->D = s->jacobi_iters;
        t->G = s->jacobi_grad_iters < t->D - 1 ? s->jacobi_grad_iters : t->D - 1;
        t->n_mid = t->G > 0 ? t->G : (t->D > 1 ? 1 : 0);
        t->n_R = t->G + 1 < 2 ? 2 : t->G + 1;
        t->mid = calloc(t->n_mid ? t->n_mid : 1, sizeof *t->mid);
        t->R = calloc(t->n_R, sizeof *t->R);
        if (!t->mid || !t->R) goto oom;
        n_blks = le + 1 + t->n_mid * (le - ls + 1) + (L - ls);
        if (latent_trm_jacobi_skipping(t)) {
            t->sfx_pos = malloc(t->N * sizeof(int)), t->sfx_glob = malloc(t->N * sizeof(int));
            t->sfx_flow = malloc(t->N);
            if (!t->sfx_pos || !t->sfx_glob || !t->sfx_flow) goto oom;
        }
    } else {
        t->S = s->lrt_subsets;
        t->sub = calloc(t->S, sizeof *t->sub);
        t->hsub = calloc(t->S, sizeof *t->hsub);
        t->sub_n = calloc(t->S, sizeof *t->sub_n);
        t->sub_pos = calloc(t->S, sizeof *t->sub_pos), t->sub_qpos = calloc(t->S, sizeof *t->sub_qpos);
        t->sub_glob = calloc(t->S, sizeof *t->sub_glob);
        t->sub_tok = calloc(t->S, sizeof *t->sub_tok), t->sub_tgt = calloc(t->S, sizeof *t->sub_tgt);
        t->sub_mask = calloc(t->S, sizeof *t->sub_mask);
        if (!t->sub || !t->hsub || !t->sub_n || !t->sub_pos || !t->sub_qpos || !t->sub_glob || !t->sub_tok ||
            !t->sub_tgt || !t->sub_mask)
            goto oom;
        for (int k = 0; k < t->S; k++) {
            int ns = (t->T - k + t->S - 1) / t->S, n = ns * t->B;
            t->sub_n[k] = ns;
            t->sub_pos[k] = malloc(n * sizeof(int)), t->sub_qpos[k] = malloc(ns * sizeof(int));
            t->sub_glob[k] = malloc(n * sizeof(int));
            t->sub_tok[k] = malloc(n * sizeof(int32_t)), t->sub_tgt[k] = malloc(n * sizeof(int32_t));
            t->sub_mask[k] = malloc(n);
            if (!t->sub_pos[k] || !t->sub_qpos[k] || !t->sub_glob[k] || !t->sub_tok[k] || !t->sub_tgt[k] ||
                !t->sub_mask[k])
                goto oom;
            for (int j = 0; j < ns; j++) t->sub_qpos[k][j] = k + j * t->S;
            for (int b = 0; b < t->B; b++)
                for (int j = 0; j < ns; j++) {
                    t->sub_pos[k][b * ns + j] = k + j * t->S;
                    t->sub_glob[k][b * ns + j] = b * t->T + k + j * t->S;
                }
        }
        n_blks = L * (1 + t->S);
    }
    t->blks = calloc(n_blks, sizeof *t->blks);
    t->pos = malloc(t->N * sizeof(int)), t->qpos = malloc(t->T * sizeof(int));
    t->tok = malloc(t->N * sizeof(int32_t)), t->tgt = malloc(t->N * sizeof(int32_t)), t->mask = malloc(t->N);
    t->flow_buf = malloc(t->N);
    if (!t->blks || !t->pos || !t->qpos || !t->tok || !t->tgt || !t->mask || !t->flow_buf) goto oom;
    for (int i = 0; i < t->N; i++) t->pos[i] = i % t->T;
    for (int i = 0; i < t->T; i++) t->qpos[i] = i;

    carver cv = {NULL, 0};
    trainer_layout(t, &cv);
    t->slab_floats = cv.off;
    /* 2 MiB aligned and advised for transparent huge pages: the first touch
     * of fresh memory is slow on this VM (about 0.1 GB/s with 4 KiB pages,
     * twice that with huge ones), and a step walks hundreds of MiB. */
    size_t bytes = ((cv.off ? cv.off : 16) * sizeof(float) + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
    t->slab = aligned_alloc((size_t)2 << 20, bytes);
    if (t->slab) madvise(t->slab, bytes, MADV_HUGEPAGE); /* advice only */
    if (!t->slab) {
        latent_err_set(err, LATENT_E_NOMEM, "train: cannot allocate %.1f MiB of activations (try a smaller --batch or --seq)",
                       cv.off * 4.0 / (1 << 20));
        latent_trainer_free(t);
        return NULL;
    }
    /* Touch it once: page faults now, not inside the first step's kernels. */
    memset(t->slab, 0, cv.off * sizeof(float));
    cv = (carver){t->slab, 0};
    trainer_layout(t, &cv);
    latent_tr_rope_tables(t->rope_cos, t->rope_sin, t->T, c->head_dim, c->rope_theta);
    for (int k = 0; k < t->S; k++) {
        t->sub[k].pos = t->sub_pos[k];
        t->sub[k].qpos = t->sub_qpos[k];
    }
    t->main.pos = t->pos, t->main.qpos = t->qpos;
    t->fin.pos = t->pos, t->fin.qpos = t->qpos;
    for (int i = 0; i < t->n_mid; i++) t->mid[i].pos = t->pos, t->mid[i].qpos = t->qpos;
    return t;
oom:
    latent_err_set(err, LATENT_E_NOMEM, "train: out of memory");
    latent_trainer_free(t);
    return NULL;
}

void latent_trainer_free(latent_trainer *t) {
    if (!t) return;
    latent_tr_gemm_free(&t->gemm);
    for (int k = 0; k < t->S; k++) {
        if (t->sub_pos) free(t->sub_pos[k]);
        if (t->sub_qpos) free(t->sub_qpos[k]);
        if (t->sub_glob) free(t->sub_glob[k]);
        if (t->sub_tok) free(t->sub_tok[k]);
        if (t->sub_tgt) free(t->sub_tgt[k]);
        if (t->sub_mask) free(t->sub_mask[k]);
    }
    free(t->sub_pos), free(t->sub_qpos), free(t->sub_glob), free(t->sub_tok), free(t->sub_tgt), free(t->sub_mask);
    free(t->sub), free(t->hsub), free(t->sub_n);
    free(t->mid), free(t->R), free(t->sfx_pos), free(t->sfx_glob), free(t->sfx_flow);
    free(t->blks), free(t->pos), free(t->qpos), free(t->tok), free(t->tgt), free(t->mask), free(t->flow_buf);
    free(t->slab);
    free(t);
}

size_t latent_trainer_activation_bytes(const latent_trainer *t) { return t->slab_floats * sizeof(float); }

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
static void blk_bwd_out(latent_trainer *t, int l, const blk *A, const chain *ch, latent_layer *G) {
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
static void blk_bwd_qkv(latent_trainer *t, int l, const blk *A, const chain *ch, latent_layer *G, float *dq,
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
    blk_bwd_out(t, l, A, ch, G);
    memset(t->dq, 0, (size_t)n * qd * sizeof(float));
    memset(t->dk, 0, (size_t)n * kvd * sizeof(float));
    memset(t->dv, 0, (size_t)n * kvd * sizeof(float));
    latent_tr_attention_backward(t->dq, t->dk, t->dv, t->dO, A->p, A->q, A->k, A->v, ch->qpos, t->B, ch->nq, t->T,
                          c->n_heads, c->n_kv_heads, c->head_dim);
    blk_bwd_qkv(t, l, A, ch, G, t->dq, t->dk, t->dv, NULL);
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

/* ---- plain -------------------------------------------------------------- */

static double plain_step(latent_trainer *t, latent_weights *g) {
    const latent_config *c = t->c;
    chain *ch = &t->main;
    latent_tr_embedding_forward(ch->in, t->tok, t->m->w.embed, t->N, c->d);
    for (int l = 0; l < c->n_layers; l++) latent_trm_blk_forward(t, l, &ch->b[l], ch);
    latent_trm_head_forward(t, &t->hmain, ch->out, t->N);
    double loss = latent_trm_head_loss(t, &t->hmain, 0, t->tgt, t->mask, t->N, 1.0, g != NULL);
    if (!g) return loss;
    latent_trm_head_backward(t, &t->hmain, ch->out, t->N, NULL, g);
    for (int l = c->n_layers - 1; l >= 0; l--) latent_trm_blk_backward(t, l, &ch->b[l], ch, g);
    latent_tr_embedding_backward(g->embed, t->dres, t->tok, t->N, c->d);
    return loss;
}


/* ---- LRT interleaved (models.md §3) ------------------------------------- */

typedef struct {
    float *dst;
    const float *a, *b;
    const int *idx;
    int width, S, s, T;
} rows_job;

/* view row p = recomputed row when its subset is <= s, else pass 0's */
static void view_rows(void *ctx, int r0, int r1) {
    const rows_job *j = ctx;
    for (int p = r0; p < r1; p++) {
        int t = p % j->T;
        const float *src = (t % j->S <= j->s ? j->a : j->b) + (size_t)p * j->width;
        memcpy(j->dst + (size_t)p * j->width, src, j->width * sizeof(float));
    }
}

/* The k, v buffer of block l as subset s sees it: rows of subsets <= s hold
 * their recomputed values (written back), the others pass 0's. */
static void lrt_view(latent_trainer *t, int l, int s) {
    size_t kvd = latent_config_kv_dim(t->c), off = (size_t)l * t->N * kvd;
    rows_job jk = {t->kview, t->krec + off, t->main.b[l].k, NULL, (int)kvd, t->S, s, t->T};
    rows_job jv = {t->vview, t->vrec + off, t->main.b[l].v, NULL, (int)kvd, t->S, s, t->T};
    latent_tr_par_rows(view_rows, &jk, t->N);
    latent_tr_par_rows(view_rows, &jv, t->N);
}

/* The view's gradient back to where its rows came from. */
static void route_rows(void *ctx, int r0, int r1) {
    const rows_job *j = ctx;
    for (int p = r0; p < r1; p++) {
        int t = p % j->T;
        float *dst = (float *)(t % j->S <= j->s ? j->a : j->b) + (size_t)p * j->width;
        const float *src = j->dst + (size_t)p * j->width;
        for (int i = 0; i < j->width; i++) dst[i] += src[i];
    }
}

static void lrt_route(latent_trainer *t, int l, int s) {
    size_t kvd = latent_config_kv_dim(t->c), off = (size_t)l * t->N * kvd;
    rows_job jk = {t->dkview, t->dKr + off, t->dK0 + off, NULL, (int)kvd, t->S, s, t->T};
    rows_job jv = {t->dvview, t->dVr + off, t->dV0 + off, NULL, (int)kvd, t->S, s, t->T};
    latent_tr_par_rows(route_rows, &jk, t->N);
    latent_tr_par_rows(route_rows, &jv, t->N);
}

/* h^(source_layer) of a pass: a block's output or the final norm's. */
static float *lrt_source(latent_trainer *t, chain *ch, head *h) {
    int src = t->c->lrt.source_layer;
    return src >= 0 ? ch->b[src].out : h->fn;
}

static double lrt_step(latent_trainer *t, latent_weights *g) {
    const latent_config *c = t->c;
    int L = c->n_layers, N = t->N, d = c->d, S = t->S, T = t->T, src = c->lrt.source_layer;
    int kvd = latent_config_kv_dim(c), qd = latent_config_q_dim(c);
    size_t nd = (size_t)N * d, lkv = (size_t)L * N * kvd;
    double w = 1.0 / (S + 1);

    /* 1. full pass with m = 0: L_0, every block's k, v, and h^(src) */
    chain *P0 = &t->main;
    latent_tr_embedding_forward(P0->in, t->tok, t->m->w.embed, N, d);
    for (int l = 0; l < L; l++) latent_trm_blk_forward(t, l, &P0->b[l], P0);
    latent_trm_head_forward(t, &t->hmain, P0->out, N);
    double loss = w * latent_trm_head_loss(t, &t->hmain, 0, t->tgt, t->mask, N, w, g != NULL);
    const float *H0 = lrt_source(t, P0, &t->hmain);

    /* 2. subsets in order */
    for (int s = 0; s < S; s++) {
        chain *ch = &t->sub[s];
        head *h = &t->hsub[s];
        int n = ch->n;
        const int *glob = t->sub_glob[s];
        for (int i = 0; i < n; i++) {
            t->sub_tok[s][i] = t->tok[glob[i]];
            t->sub_tgt[s][i] = t->tgt[glob[i]];
            t->sub_mask[s][i] = t->mask[glob[i]];
            /* m_{t-1}: the newest h^(src) of position t-1 (written back by its
             * subset when that ran before this one), 0 at t = 0 */
            int tt = ch->pos[i];
            float *m = ch->mem + (size_t)i * d;
            if (tt == 0)
                memset(m, 0, d * sizeof(float));
            else
                memcpy(m, ((tt - 1) % S < s ? t->Hrec : H0) + (size_t)(glob[i] - 1) * d, d * sizeof(float));
        }
        latent_tr_embedding_forward(ch->in, t->sub_tok[s], t->m->w.embed, n, d);
        for (int l = 0; l < L; l++) {
            blk *A = &ch->b[l];
            latent_trm_blk_fwd_qkv(t, l, A, ch);
            /* the subset's own k, v are written back before attention */
            latent_trm_scatter(t->krec + (size_t)l * N * kvd, A->k, glob, n, kvd);
            latent_trm_scatter(t->vrec + (size_t)l * N * kvd, A->v, glob, n, kvd);
            lrt_view(t, l, s);
            latent_tr_attention_forward(A->o, A->p, A->q, t->kview, t->vview, ch->qpos, t->B, ch->nq, T, c->n_heads,
                                 c->n_kv_heads, c->head_dim);
            latent_trm_blk_fwd_out(t, l, A, ch);
        }
        latent_trm_head_forward(t, h, ch->out, n);
        loss += w * latent_trm_head_loss(t, h, 1 + s, t->sub_tgt[s], t->sub_mask[s], n, w, g != NULL);
        latent_trm_scatter(t->Hrec, lrt_source(t, ch, h), glob, n, d);
    }
    if (!g) return loss;

    /* Backward, subsets in reverse: every consumer of a subset's outputs
     * (later subsets' attention and memory) has run its backward first. */
    memset(t->dK0, 0, lkv * sizeof(float)), memset(t->dV0, 0, lkv * sizeof(float));
    memset(t->dKr, 0, lkv * sizeof(float)), memset(t->dVr, 0, lkv * sizeof(float));
    memset(t->dH0, 0, nd * sizeof(float)), memset(t->dHr, 0, nd * sizeof(float));
    for (int s = S - 1; s >= 0; s--) {
        chain *ch = &t->sub[s];
        head *h = &t->hsub[s];
        int n = ch->n;
        const int *glob = t->sub_glob[s];
        size_t snd = (size_t)n * d;
        float *dsrc = t->tmp; /* gradient of this subset's written-back h^(src) */
        latent_trm_gather(dsrc, t->dHr, glob, n, d);
        latent_trm_head_backward(t, h, ch->out, n, src < 0 ? dsrc : NULL, g);
        memset(t->dmem, 0, snd * sizeof(float));
        for (int l = L - 1; l >= 0; l--) {
            blk *A = &ch->b[l];
            latent_layer *G = &g->layers[l];
            if (l == src) {
                latent_trm_gather(dsrc, t->dHr, glob, n, d);
                latent_tr_add(t->dres, dsrc, snd);
            }
            blk_bwd_out(t, l, A, ch, G);
            lrt_view(t, l, s);
            memset(t->dq, 0, (size_t)n * qd * sizeof(float));
            memset(t->dkview, 0, (size_t)N * kvd * sizeof(float));
            memset(t->dvview, 0, (size_t)N * kvd * sizeof(float));
            latent_tr_attention_backward(t->dq, t->dkview, t->dvview, t->dO, A->p, A->q, t->kview, t->vview, ch->qpos, t->B,
                                  ch->nq, T, c->n_heads, c->n_kv_heads, c->head_dim);
            lrt_route(t, l, s);
            /* the subset's own k, v: every reader (this and later subsets) is done */
            latent_trm_gather(t->dk, t->dKr + (size_t)l * N * kvd, glob, n, kvd);
            latent_trm_gather(t->dv, t->dVr + (size_t)l * N * kvd, glob, n, kvd);
            blk_bwd_qkv(t, l, A, ch, G, t->dq, t->dk, t->dv, t->dmem);
        }
        latent_tr_embedding_backward(g->embed, t->dres, t->sub_tok[s], n, d);
        /* the memory came from position t-1's newest h^(src) */
        for (int i = 0; i < n; i++) {
            int tt = ch->pos[i];
            if (tt == 0) continue;
            float *dst = ((tt - 1) % S < s ? t->dHr : t->dH0) + (size_t)(glob[i] - 1) * d;
            const float *sg = t->dmem + (size_t)i * d;
            for (int k = 0; k < d; k++) dst[k] += sg[k];
        }
    }
    latent_trm_head_backward(t, &t->hmain, P0->out, N, src < 0 ? t->dH0 : NULL, g);
    for (int l = L - 1; l >= 0; l--) {
        blk *A = &P0->b[l];
        latent_layer *G = &g->layers[l];
        if (l == src) latent_tr_add(t->dres, t->dH0, nd);
        blk_bwd_out(t, l, A, P0, G);
        /* pass 0's k, v: its own attention plus every subset that read them */
        memcpy(t->dk, t->dK0 + (size_t)l * N * kvd, (size_t)N * kvd * sizeof(float));
        memcpy(t->dv, t->dV0 + (size_t)l * N * kvd, (size_t)N * kvd * sizeof(float));
        memset(t->dq, 0, (size_t)N * qd * sizeof(float));
        latent_tr_attention_backward(t->dq, t->dk, t->dv, t->dO, A->p, A->q, A->k, A->v, P0->qpos, t->B, P0->nq, T,
                              c->n_heads, c->n_kv_heads, c->head_dim);
        blk_bwd_qkv(t, l, A, P0, G, t->dq, t->dk, t->dv, NULL);
    }
    latent_tr_embedding_backward(g->embed, t->dres, t->tok, N, d);
    return loss;
}

/* ---- entry points ------------------------------------------------------- */

static void gate_stats(latent_trainer *t) {
    const latent_config *c = t->c;
    const latent_weights *w = &t->m->w;
    latent_gate_stats *st = &t->stats;
    int iters = st->jacobi_iters; /* set by jacobi_step */
    double rows = st->jacobi_rows;
    memset(st, 0, sizeof *st);
    st->jacobi_iters = iters, st->jacobi_rows = rows;
    if (t->s.mode == LATENT_TRAIN_JACOBI) {
        st->tanh_gamma_rec = tanh(w->t2mlr.gamma_rec[0]);
        st->tanh_gamma_cur = tanh(w->t2mlr.gamma_cur[0]);
        double sr = 0, sc = 0;
        size_t n = (size_t)t->N * c->d;
        for (size_t i = 0; i < n; i++) sr += t->fin.fuse.sr[i], sc += t->fin.fuse.sc[i];
        st->gate_rec = sr / n, st->gate_cur = sc / n;
    } else if (t->s.mode == LATENT_TRAIN_LRT) {
        int k = 0;
        double gl = 0, gf = 0;
        size_t cnt = 0;
        for (int l = c->lrt.inject_start; l <= c->lrt.inject_end; l++, k++) {
            if (c->lrt.residual_injection) st->alpha += w->layers[l].lrt_alpha[0], st->gamma += w->layers[l].lrt_gamma[0];
            if (!c->lrt.kv_injection) continue;
            for (int s = 0; s < t->S; s++) {
                const float *g = t->sub[s].b[l].gate;
                int nkv = c->n_kv_heads;
                for (int r = 0; r < t->sub[s].n; r++) {
                    for (int j = 0; j < nkv; j++) gl += g[r * 2 * nkv + j], gf += g[r * 2 * nkv + nkv + j];
                    cnt += nkv;
                }
            }
        }
        if (k) st->alpha /= k, st->gamma /= k;
        if (cnt) st->gate_loc = gl / cnt, st->gate_fb = gf / cnt;
    }
}

int latent_trainer_step(latent_trainer *t, const latent_train_batch *batch, latent_weights *grads, double *loss,
                        latent_err *err) {
    int V = t->c->vocab;
    for (int i = 0; i < t->N; i++) {
        int32_t a = batch->tokens[i], b = batch->targets[i];
        if (a < 0 || a >= V || b < 0 || b >= V)
            return latent_err_set(err, LATENT_E_INVALID, "train: token id %d is outside the vocabulary (0..%d)", a < 0 || a >= V ? a : b,
                                  V - 1);
    }
    memcpy(t->tok, batch->tokens, t->N * sizeof(int32_t));
    memcpy(t->tgt, batch->targets, t->N * sizeof(int32_t));
    for (int i = 0; i < t->N; i++) t->mask[i] = batch->mask ? batch->mask[i] != 0 : 1;
    t->scored_total = batch->scored_total;
    t->flow = NULL;
    if (batch->flow)
        for (int i = 0; i < t->N; i++) {
            t->flow_buf[i] = batch->flow[i] == 1 ? 1 : 2;
            if (t->flow_buf[i] != 2) t->flow = t->flow_buf;
        }
    double l;
    latent_tr_gemm_step_begin(&t->gemm); /* the weights hold still until step_end: pack each once */
    switch (t->s.mode) {
    case LATENT_TRAIN_JACOBI: l = latent_trm_jacobi_step(t, grads); break;
    case LATENT_TRAIN_LRT: l = lrt_step(t, grads); break;
    default: l = plain_step(t, grads); break;
    }
    if (latent_tr_gemm_step_end(&t->gemm) != 0)
        return latent_err_set(err, LATENT_E_NOMEM, "train: out of memory for the bf16 products' buffers");
    t->fwd_only = grads == NULL;
    gate_stats(t);
    *loss = l;
    return 0;
}

void latent_trainer_logits(const latent_trainer *t, float *out) {
    size_t V = t->c->vocab;
    if (t->s.mode == LATENT_TRAIN_LRT) {
        for (int s = 0; s < t->S; s++)
            for (int i = 0; i < t->sub[s].n; i++)
                memcpy(out + (size_t)t->sub_glob[s][i] * V, t->hsub[s].logits + (size_t)i * V, V * sizeof(float));
        return;
    }
    const head *h = t->s.mode == LATENT_TRAIN_JACOBI ? &t->hfin : &t->hmain;
    memcpy(out, h->logits, (size_t)t->N * V * sizeof(float));
}

void latent_trainer_gate_stats(const latent_trainer *t, latent_gate_stats *out) { *out = t->stats; }

int latent_trainer_count_scored(const latent_trainer *t, const latent_train_batch *batch, int64_t *counts) {
    const uint8_t *m = batch->mask;
    counts[0] = 0;
    for (int i = 0; i < t->N; i++) counts[0] += m ? m[i] != 0 : 1;
    if (t->s.mode != LATENT_TRAIN_LRT) return 1;
    for (int s = 0; s < t->S; s++) {
        counts[1 + s] = 0;
        for (int i = 0; i < t->sub[s].n; i++) counts[1 + s] += m ? m[t->sub_glob[s][i]] != 0 : 1;
    }
    return 1 + t->S;
}
