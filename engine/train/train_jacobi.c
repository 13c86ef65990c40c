/* The T2MLR step trained with Jacobi iterations (models.md §2; the chains
 * are described at the top of train_model.c): pass 1, the middle passes
 * (fixed D, or adaptive with its frontier skipping), the final pass and
 * the backward through the last G iterations. */
#include <math.h>
#include <string.h>

#include "train/trainer_internal.h"

/* Where R^(j) lives: a ring holding the last max(G + 1, 2), which are the
 * ones the backward reads, however many iterations ran. */
static float *jacobi_R(latent_trainer *t, int j) { return t->R[j % t->n_R]; }

/* max |a[i] - b[i]| over n floats. */
static float max_abs_diff(const float *a, const float *b, size_t n) {
    float mx = 0;
    for (size_t i = 0; i < n; i++) {
        float x = fabsf(a[i] - b[i]);
        mx = x > mx ? x : mx;
    }
    return mx;
}

/* max |R^(k) - R^(k-1)| over the batch, R^(k) = shift_right(M) (position 0
 * is 0 in both): how far this iteration moved the recurrent state. */
static float jacobi_delta(const float *M, const float *Rp, int B, int T, int d) {
    float mx = 0;
    for (int b = 0; b < B; b++) {
        float x = max_abs_diff(M + (size_t)b * T * d, Rp + (size_t)b * T * d + d, (size_t)(T - 1) * d);
        mx = x > mx ? x : mx;
    }
    return mx;
}

static t2mlr_fuse_w fuse_weights(const latent_weights *w) {
    const latent_t2mlr_weights *p = &w->t2mlr;
    return (t2mlr_fuse_w){p->w_rec, p->f_rec_w, p->f_rec_b, p->f_cur_w, p->f_cur_b, p->gamma_rec, p->gamma_cur};
}

static t2mlr_fuse_g fuse_grads(latent_weights *g) {
    latent_t2mlr_weights *p = &g->t2mlr;
    return (t2mlr_fuse_g){p->w_rec, p->f_rec_w, p->f_rec_b, p->f_cur_w, p->f_cur_b, p->gamma_rec, p->gamma_cur};
}

/* Middle pass k over every row, its activations in ch: M = s(blocks(Phi(X,
 * R^(k-1))) + R^(k-1)), R^(k) = shift_right(M). With tol > 0 returns
 * whether it moved the state by less than tol (converged), else 0. */
static int jacobi_full_pass(latent_trainer *t, chain *ch, const float *X, int k, t2mlr_fuse_w fw, double tol) {
    const latent_t2mlr_config *tc = &t->c->t2mlr;
    int ls = tc->l_start, le = tc->l_end, N = t->N, d = t->c->d;
    const float *Rp = jacobi_R(t, k - 1);
    latent_tr_t2mlr_fuse_forward(&t->gemm, ch->in, &ch->fuse, X, Rp, fw, t->flow, N, d);
    for (int l = ls; l <= le; l++) latent_trm_blk_forward(t, l, &ch->b[l - ls], ch);
    latent_tr_t2mlr_update_forward(t->M, ch->f, ch->out, Rp, t->flow, tc->cache_residual, tc->cache_norm_clamp,
                                   tc->cache_norm_eps, N, d);
    int converged = tol > 0 && jacobi_delta(t->M, Rp, t->B, t->T, d) < tol;
    latent_tr_shift_right_forward(jacobi_R(t, k), t->M, t->B, t->T, d);
    return converged;
}

/* The first position, over the batch, whose state moved by tol or more from
 * R^(k-1) to R^(k) (max over the row of |R^(k) - R^(k-1)|); T when none did,
 * i.e. exactly when jacobi_delta says the iteration converged (same values,
 * same comparison). */
static int jacobi_frontier(const float *Rk, const float *Rp, int B, int T, int d, double tol) {
    int front = T;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < front; t++) {
            size_t row = ((size_t)b * T + t) * d;
            if (max_abs_diff(Rk + row, Rp + row, d) >= tol) {
                front = t;
                break;
            }
        }
    return front;
}

/* mid[0]'s buffers as a chain over positions front..T-1 of each sequence
 * (its first B * (T - front) rows); fills the rows' positions and batch rows. */
static chain jacobi_suffix_chain(latent_trainer *t, int front) {
    chain sc = t->mid[0];
    int nq = t->T - front;
    sc.nq = nq, sc.n = t->B * nq;
    sc.qpos = t->qpos + front;
    sc.pos = t->sfx_pos;
    for (int b = 0; b < t->B; b++)
        for (int j = 0; j < nq; j++) {
            t->sfx_pos[b * nq + j] = front + j;
            t->sfx_glob[b * nq + j] = b * t->T + front + j;
        }
    return sc;
}

/* The suffix rows' control flow (NULL: all 2). */
static const uint8_t *jacobi_suffix_flow(latent_trainer *t, int n) {
    if (!t->flow) return NULL;
    for (int i = 0; i < n; i++) t->sfx_flow[i] = t->flow[t->sfx_glob[i]];
    return t->sfx_flow;
}

/* Middle pass k without gradient, over positions front..T-1 only. Input row
 * t of the pass is Phi(X, R^(k-1))[t] and attention reads rows <= t, so rows
 * before the frontier (whose R moved by less than tol in the last iteration)
 * keep M from the previous pass, and so do their k, v in kmid/vmid: the
 * suffix's queries attend to those and to the suffix's new k, v. */
static void jacobi_suffix_pass(latent_trainer *t, const float *X, int k, int front, t2mlr_fuse_w fw) {
    const latent_config *c = t->c;
    const latent_t2mlr_config *tc = &c->t2mlr;
    int ls = tc->l_start, le = tc->l_end, d = c->d, kvd = latent_config_kv_dim(c);
    chain sc = jacobi_suffix_chain(t, front);
    int n = sc.n;
    /* the backward's scratch, free during the forward: the suffix's X, R^(k-1), M */
    float *xs = t->dX, *rs = t->dR, *ms = t->dR2;
    latent_trm_gather(xs, X, t->sfx_glob, n, d);
    latent_trm_gather(rs, jacobi_R(t, k - 1), t->sfx_glob, n, d);
    const uint8_t *flow = jacobi_suffix_flow(t, n);
    latent_tr_t2mlr_fuse_forward(&t->gemm, sc.in, &sc.fuse, xs, rs, fw, flow, n, d);
    for (int l = ls; l <= le; l++) {
        blk *A = &sc.b[l - ls];
        float *K = t->kmid + (size_t)(l - ls) * t->N * kvd, *V = t->vmid + (size_t)(l - ls) * t->N * kvd;
        latent_trm_blk_fwd_qkv(t, l, A, &sc);
        latent_trm_scatter(K, A->k, t->sfx_glob, n, kvd);
        latent_trm_scatter(V, A->v, t->sfx_glob, n, kvd);
        latent_tr_attention_forward(A->o, A->p, A->q, K, V, sc.qpos, t->B, sc.nq, t->T, c->n_heads, c->n_kv_heads,
                                    c->head_dim);
        latent_trm_blk_fwd_out(t, l, A, &sc);
    }
    latent_tr_t2mlr_update_forward(ms, sc.f, sc.out, rs, flow, tc->cache_residual, tc->cache_norm_clamp,
                                   tc->cache_norm_eps, n, d);
    latent_trm_scatter(t->M, ms, t->sfx_glob, n, d);
    latent_tr_shift_right_forward(jacobi_R(t, k), t->M, t->B, t->T, d);
}

/* Fixed D, or adaptive without skipping: up to D-1 full passes, iteration
 * k's activations in mid[k % G] (a ring: the last G run keep theirs, for the
 * backward); adaptive stops after the first iteration that moves the state
 * by less than tol. Returns D, the iterations run (pass 1 included). */
static int jacobi_iterate(latent_trainer *t, const float *X, t2mlr_fuse_w fw) {
    int G = t->G;
    t->stats.jacobi_rows = 1;
    for (int k = 1; k < t->D; k++)
        if (jacobi_full_pass(t, &t->mid[G > 0 ? k % G : 0], X, k, fw, t->s.jacobi_tol)) return k + 1;
    return t->D;
}

/* Adaptive with skipping, in two phases:
 *  1. passes without gradient, each over the positions from the frontier on
 *     (the first position whose state moved by tol or more in the previous
 *     iteration; 0 for the first pass), until one moves no position by tol
 *     (converged) or D-1-G of them ran. Rows before the frontier keep their
 *     M, so R^(k) equals R^(k-1) up to it and the frontier advances by at
 *     least one position a pass: at most T of them run.
 *  2. the G passes that carry gradient, always full passes and never cut
 *     short (stopping among them would leave fewer than G).
 * The gradient thus flows through the last G iterations actually run, as
 * without skipping, but converging costs G more passes than there (which
 * stops at the converged iteration and differentiates the G before it).
 * Returns D, the iterations run (pass 1 included); sets stats.jacobi_rows. */
static int jacobi_iterate_skipping(latent_trainer *t, const float *X, t2mlr_fuse_w fw) {
    int G = t->G, T = t->T, no_grad_cap = t->D - 1 - G, front = 0, k = 1;
    long long rows = 0; /* per sequence */
    for (; k <= no_grad_cap && front < T; k++) {
        jacobi_suffix_pass(t, X, k, front, fw);
        rows += T - front;
        front = jacobi_frontier(jacobi_R(t, k), jacobi_R(t, k - 1), t->B, T, t->c->d, t->s.jacobi_tol);
    }
    for (int j = 0; j < G; j++, k++) {
        jacobi_full_pass(t, &t->mid[k % G], X, k, fw, 0);
        rows += T;
    }
    t->stats.jacobi_rows = (double)rows / ((double)(k - 1) * T);
    return k;
}

double latent_trm_jacobi_step(latent_trainer *t, latent_weights *g) {
    const latent_config *c = t->c;
    const latent_t2mlr_config *tc = &c->t2mlr;
    int ls = tc->l_start, le = tc->l_end, L = c->n_layers, D = t->D, G = t->G, N = t->N, d = c->d;
    size_t nd = (size_t)N * d;
    t2mlr_fuse_w fw = fuse_weights(&t->m->w);
    chain *A = &t->main;

    /* 1. full forward with no fusion, up to l_end (later blocks would not
     * reach the loss); X = the input of block l_start. R^(0) = shift(Y0). */
    latent_tr_embedding_forward(A->in, t->tok, t->m->w.embed, N, d);
    for (int l = 0; l <= le; l++) latent_trm_blk_forward(t, l, &A->b[l], A);
    const float *X = A->b[ls].x;
    latent_tr_shift_right_forward(jacobi_R(t, 0), A->out, t->B, t->T, d);

    /* 2. up to D-1 middle passes on X; adaptive (jacobi_tol > 0) stops
     * early, D and G are then the iterations run and the last G of them. */
    D = latent_trm_jacobi_skipping(t) ? jacobi_iterate_skipping(t, X, fw) : jacobi_iterate(t, X, fw);
    if (G > D - 1) G = D - 1;
    t->stats.jacobi_iters = D;

    /* 3. final pass: blocks l_start..L-1 on Phi(X, R^(D-1)), loss. */
    chain *F = &t->fin;
    latent_tr_t2mlr_fuse_forward(&t->gemm, F->in, &F->fuse, X, jacobi_R(t, D - 1), fw, t->flow, N, d);
    for (int l = ls; l < L; l++) latent_trm_blk_forward(t, l, &F->b[l - ls], F);
    latent_trm_head_forward(t, &t->hfin, F->out, N);
    double loss = latent_trm_head_loss(t, &t->hfin, 0, t->tgt, t->mask, N, 1.0, g != NULL);
    if (!g) return loss;

    t2mlr_fuse_g fg = fuse_grads(g);
    latent_trm_head_backward(t, &t->hfin, F->out, N, NULL, g);
    for (int l = L - 1; l >= ls; l--) latent_trm_blk_backward(t, l, &F->b[l - ls], F, g);
    memset(t->dX, 0, nd * sizeof(float));
    memset(t->dR, 0, nd * sizeof(float));
    /* R^(j) carries gradient when the pass that wrote it does (j >= 1), or
     * for j = 0 when B >= D (R^(0) not detached). */
    int grad_from_A = t->s.jacobi_grad_iters >= D;
#define R_LIVE(j) ((j) >= 1 ? (j) >= D - G : grad_from_A)
    latent_tr_t2mlr_fuse_backward(&t->gemm, t->dX, R_LIVE(D - 1) ? t->dR : NULL, fg, t->dres, &F->fuse, X, jacobi_R(t, D - 1), fw,
                           t->flow, t->fscr, N, d);
    for (int k = D - 1; k >= D - G && k >= 1; k--) {
        chain *ch = &t->mid[k % t->G];
        /* R^(k) = shift_right(M) */
        memset(t->dM, 0, nd * sizeof(float));
        latent_tr_shift_right_backward(t->dM, t->dR, t->B, t->T, d);
        /* M = s(Y + R^(k-1)) with the factor constant (or Y) */
        int live = R_LIVE(k - 1);
        memset(t->dres, 0, nd * sizeof(float));
        memset(t->dR2, 0, nd * sizeof(float));
        latent_tr_t2mlr_update_backward(t->dres, live ? t->dR2 : NULL, t->dM, ch->f, N, d);
        for (int l = le; l >= ls; l--) latent_trm_blk_backward(t, l, &ch->b[l - ls], ch, g);
        latent_tr_t2mlr_fuse_backward(&t->gemm, t->dX, live ? t->dR2 : NULL, fg, t->dres, &ch->fuse, X, jacobi_R(t, k - 1), fw,
                               t->flow, t->fscr, N, d);
        float *sw = t->dR;
        t->dR = t->dR2, t->dR2 = sw;
    }
#undef R_LIVE
    if (grad_from_A) {
        /* R^(0) = shift_right(Y0): back through pass 1's middle blocks to X */
        memset(t->dres, 0, nd * sizeof(float));
        latent_tr_shift_right_backward(t->dres, t->dR, t->B, t->T, d);
        for (int l = le; l >= ls; l--) latent_trm_blk_backward(t, l, &A->b[l], A, g);
        latent_tr_add(t->dres, t->dX, nd);
    } else {
        memcpy(t->dres, t->dX, nd * sizeof(float));
    }
    for (int l = ls - 1; l >= 0; l--) latent_trm_blk_backward(t, l, &A->b[l], A, g);
    latent_tr_embedding_backward(g->embed, t->dres, t->tok, N, d);
    return loss;
}
