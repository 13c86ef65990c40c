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
 *           pass-0 and recomputed rows: see lrt_view in train_lrt.c).
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

/* The shape against the model: 0, or -1 with err set. */
static int check_shape(const latent_config *c, const latent_train_shape *s, latent_err *err) {
    if (s->batch < 1 || s->seq < 2)
        return latent_err_set(err, LATENT_E_INVALID, "train: batch must be >= 1 and seq >= 2 (got %d, %d)", s->batch, s->seq);
    if (s->seq > c->max_pos)
        return latent_err_set(err, LATENT_E_INVALID, "train: seq %d exceeds the model's max_position_embeddings %d", s->seq,
                              c->max_pos);
    if ((size_t)s->batch * s->seq > (size_t)1 << 24)
        return latent_err_set(err, LATENT_E_INVALID, "train: batch * seq = %lld rows is too many",
                              (long long)s->batch * s->seq);
    if (s->mode == LATENT_TRAIN_JACOBI && c->rec != LATENT_REC_T2MLR)
        return latent_err_set(err, LATENT_E_INVALID,
                              "train: Jacobi mode needs a T2MLR model (config has no t2mlr latent_recurrence)");
    if (s->mode == LATENT_TRAIN_LRT && c->rec != LATENT_REC_LRT)
        return latent_err_set(err, LATENT_E_INVALID,
                              "train: LRT mode needs an LRT model (config has no lrt latent_recurrence)");
    if (s->mode == LATENT_TRAIN_JACOBI && (s->jacobi_iters < 1 || s->jacobi_grad_iters < 0))
        return latent_err_set(err, LATENT_E_INVALID, "train: --jacobi-iters must be >= 1 and --jacobi-grad-iters >= 0");
    if (s->mode == LATENT_TRAIN_LRT && (s->lrt_subsets < 1 || s->lrt_subsets > s->seq))
        return latent_err_set(err, LATENT_E_INVALID, "train: --lrt-subsets must be in 1..seq (%d), got %d", s->seq,
                              s->lrt_subsets);
    return 0;
}

/* Jacobi's iteration counts, chains and R ring, and the suffix rows of
 * adaptive skipping; the number of blocks, or -1 when out of memory. */
static int jacobi_new(latent_trainer *t) {
    const latent_config *c = t->c;
    int L = c->n_layers, ls = c->t2mlr.l_start, le = c->t2mlr.l_end;
    t->D = t->s.jacobi_iters;
    t->G = t->s.jacobi_grad_iters < t->D - 1 ? t->s.jacobi_grad_iters : t->D - 1;
    t->n_mid = t->G > 0 ? t->G : (t->D > 1 ? 1 : 0);
    t->n_R = t->G + 1 < 2 ? 2 : t->G + 1;
    t->mid = calloc(t->n_mid ? t->n_mid : 1, sizeof *t->mid);
    t->R = calloc(t->n_R, sizeof *t->R);
    if (!t->mid || !t->R) return -1;
    if (latent_trm_jacobi_skipping(t)) {
        t->sfx_pos = malloc(t->N * sizeof(int)), t->sfx_glob = malloc(t->N * sizeof(int));
        t->sfx_flow = malloc(t->N);
        if (!t->sfx_pos || !t->sfx_glob || !t->sfx_flow) return -1;
    }
    return le + 1 + t->n_mid * (le - ls + 1) + (L - ls);
}

/* LRT's subsets: chains, heads and their rows (position t = k + j S of each
 * sequence in subset k); the number of blocks, or -1 when out of memory. */
static int lrt_new(latent_trainer *t) {
    t->S = t->s.lrt_subsets;
    t->sub = calloc(t->S, sizeof *t->sub);
    t->hsub = calloc(t->S, sizeof *t->hsub);
    t->sub_n = calloc(t->S, sizeof *t->sub_n);
    t->sub_pos = calloc(t->S, sizeof *t->sub_pos), t->sub_qpos = calloc(t->S, sizeof *t->sub_qpos);
    t->sub_glob = calloc(t->S, sizeof *t->sub_glob);
    t->sub_tok = calloc(t->S, sizeof *t->sub_tok), t->sub_tgt = calloc(t->S, sizeof *t->sub_tgt);
    t->sub_mask = calloc(t->S, sizeof *t->sub_mask);
    if (!t->sub || !t->hsub || !t->sub_n || !t->sub_pos || !t->sub_qpos || !t->sub_glob || !t->sub_tok ||
        !t->sub_tgt || !t->sub_mask)
        return -1;
    for (int k = 0; k < t->S; k++) {
        int ns = (t->T - k + t->S - 1) / t->S, n = ns * t->B;
        t->sub_n[k] = ns;
        t->sub_pos[k] = malloc(n * sizeof(int)), t->sub_qpos[k] = malloc(ns * sizeof(int));
        t->sub_glob[k] = malloc(n * sizeof(int));
        t->sub_tok[k] = malloc(n * sizeof(int32_t)), t->sub_tgt[k] = malloc(n * sizeof(int32_t));
        t->sub_mask[k] = malloc(n);
        if (!t->sub_pos[k] || !t->sub_qpos[k] || !t->sub_glob[k] || !t->sub_tok[k] || !t->sub_tgt[k] || !t->sub_mask[k])
            return -1;
        for (int j = 0; j < ns; j++) t->sub_qpos[k][j] = k + j * t->S;
        for (int b = 0; b < t->B; b++)
            for (int j = 0; j < ns; j++) {
                t->sub_pos[k][b * ns + j] = k + j * t->S;
                t->sub_glob[k][b * ns + j] = b * t->T + k + j * t->S;
            }
    }
    return t->c->n_layers * (1 + t->S);
}

/* The blocks' table and the batch's rows; -1 when out of memory. */
static int rows_new(latent_trainer *t, int n_blks) {
    t->blks = calloc(n_blks, sizeof *t->blks);
    t->pos = malloc(t->N * sizeof(int)), t->qpos = malloc(t->T * sizeof(int));
    t->tok = malloc(t->N * sizeof(int32_t)), t->tgt = malloc(t->N * sizeof(int32_t)), t->mask = malloc(t->N);
    t->flow_buf = malloc(t->N);
    if (!t->blks || !t->pos || !t->qpos || !t->tok || !t->tgt || !t->mask || !t->flow_buf) return -1;
    for (int i = 0; i < t->N; i++) t->pos[i] = i % t->T;
    for (int i = 0; i < t->T; i++) t->qpos[i] = i;
    return 0;
}

/* The slab every activation and the backward's scratch are carved from;
 * 0, or -1 with err set. */
static int slab_new(latent_trainer *t, latent_err *err) {
    carver cv = {NULL, 0};
    trainer_layout(t, &cv);
    t->slab_floats = cv.off;
    /* 2 MiB aligned and advised for transparent huge pages: the first touch
     * of fresh memory is slow on this VM (about 0.1 GB/s with 4 KiB pages,
     * twice that with huge ones), and a step walks hundreds of MiB. */
    size_t bytes = ((cv.off ? cv.off : 16) * sizeof(float) + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
    t->slab = aligned_alloc((size_t)2 << 20, bytes);
    if (!t->slab)
        return latent_err_set(err, LATENT_E_NOMEM,
                              "train: cannot allocate %.1f MiB of activations (try a smaller --batch or --seq)",
                              cv.off * 4.0 / (1 << 20));
    madvise(t->slab, bytes, MADV_HUGEPAGE); /* advice only */
    /* Touch it once: page faults now, not inside the first step's kernels. */
    memset(t->slab, 0, cv.off * sizeof(float));
    cv = (carver){t->slab, 0};
    trainer_layout(t, &cv);
    return 0;
}

/* Every chain's positions: the batch's, or its subset's. */
static void chains_link(latent_trainer *t) {
    for (int k = 0; k < t->S; k++) {
        t->sub[k].pos = t->sub_pos[k];
        t->sub[k].qpos = t->sub_qpos[k];
    }
    t->main.pos = t->pos, t->main.qpos = t->qpos;
    t->fin.pos = t->pos, t->fin.qpos = t->qpos;
    for (int i = 0; i < t->n_mid; i++) t->mid[i].pos = t->pos, t->mid[i].qpos = t->qpos;
}

latent_trainer *latent_trainer_new(const latent_model *m, const latent_train_shape *s, latent_err *err) {
    const latent_config *c = &m->cfg;
    if (check_shape(c, s, err) != 0) return NULL;
    latent_trainer *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->m = m, t->c = c, t->s = *s;
    latent_tr_gemm_init(&t->gemm, s->bf16);
    t->B = s->batch, t->T = s->seq, t->N = s->batch * s->seq;
    int n_blks = s->mode == LATENT_TRAIN_JACOBI ? jacobi_new(t) : s->mode == LATENT_TRAIN_LRT ? lrt_new(t) : c->n_layers;
    if (n_blks < 0 || rows_new(t, n_blks) != 0) goto oom;
    if (slab_new(t, err) != 0) {
        latent_trainer_free(t);
        return NULL;
    }
    latent_tr_rope_tables(t->rope_cos, t->rope_sin, t->T, c->head_dim, c->rope_theta);
    chains_link(t);
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
    case LATENT_TRAIN_LRT: l = latent_trm_lrt_step(t, grads); break;
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
