/* The LRT step trained interleaved (models.md §3; the chains are described
 * at the top of train_model.c): the full pass with m = 0, then each subset's
 * pass over its own rows attending to a view of every block's k, v, and the
 * backward through the subsets in reverse, then pass 0. */
#include <string.h>

#include "train/trainer_internal.h"

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

/* 1. The full pass with m = 0: its weighted loss (w L_0), every block's k,
 * v, and h^(src) (lrt_source of it). */
static double lrt_pass0_forward(latent_trainer *t, double w, int bwd) {
    const latent_config *c = t->c;
    chain *P0 = &t->main;
    latent_tr_embedding_forward(P0->in, t->tok, t->m->w.embed, t->N, c->d);
    for (int l = 0; l < c->n_layers; l++) latent_trm_blk_forward(t, l, &P0->b[l], P0);
    latent_trm_head_forward(t, &t->hmain, P0->out, t->N);
    return w * latent_trm_head_loss(t, &t->hmain, 0, t->tgt, t->mask, t->N, w, bwd);
}

/* Subset s's rows of the batch (tokens, targets, mask), and their memory:
 * m_{t-1}, the newest h^(src) of position t-1 (written back by its subset
 * when that ran before this one), 0 at t = 0. */
static void lrt_subset_rows(latent_trainer *t, int s, const float *H0) {
    chain *ch = &t->sub[s];
    int d = t->c->d, S = t->S;
    const int *glob = t->sub_glob[s];
    for (int i = 0; i < ch->n; i++) {
        t->sub_tok[s][i] = t->tok[glob[i]];
        t->sub_tgt[s][i] = t->tgt[glob[i]];
        t->sub_mask[s][i] = t->mask[glob[i]];
        int tt = ch->pos[i];
        float *m = ch->mem + (size_t)i * d;
        if (tt == 0)
            memset(m, 0, d * sizeof(float));
        else
            memcpy(m, ((tt - 1) % S < s ? t->Hrec : H0) + (size_t)(glob[i] - 1) * d, d * sizeof(float));
    }
}

/* 2. Subset s's pass over its rows, attending to the view of every block's
 * k, v; its weighted loss. Its h^(src) is written back (Hrec). */
static double lrt_subset_forward(latent_trainer *t, int s, const float *H0, double w, int bwd) {
    const latent_config *c = t->c;
    int N = t->N, d = c->d, kvd = latent_config_kv_dim(c);
    chain *ch = &t->sub[s];
    head *h = &t->hsub[s];
    int n = ch->n;
    const int *glob = t->sub_glob[s];
    lrt_subset_rows(t, s, H0);
    latent_tr_embedding_forward(ch->in, t->sub_tok[s], t->m->w.embed, n, d);
    for (int l = 0; l < c->n_layers; l++) {
        blk *A = &ch->b[l];
        latent_trm_blk_fwd_qkv(t, l, A, ch);
        /* the subset's own k, v are written back before attention */
        latent_trm_scatter(t->krec + (size_t)l * N * kvd, A->k, glob, n, kvd);
        latent_trm_scatter(t->vrec + (size_t)l * N * kvd, A->v, glob, n, kvd);
        lrt_view(t, l, s);
        latent_tr_attention_forward(A->o, A->p, A->q, t->kview, t->vview, ch->qpos, t->B, ch->nq, t->T, c->n_heads,
                                    c->n_kv_heads, c->head_dim);
        latent_trm_blk_fwd_out(t, l, A, ch);
    }
    latent_trm_head_forward(t, h, ch->out, n);
    double loss = w * latent_trm_head_loss(t, h, 1 + s, t->sub_tgt[s], t->sub_mask[s], n, w, bwd);
    latent_trm_scatter(t->Hrec, lrt_source(t, ch, h), glob, n, d);
    return loss;
}

/* Subset s's memory gradient (t->dmem) back to where the memory came from:
 * position t-1's newest h^(src), recomputed (dHr) or pass 0's (dH0). */
static void lrt_memory_backward(latent_trainer *t, int s) {
    const chain *ch = &t->sub[s];
    int d = t->c->d;
    const int *glob = t->sub_glob[s];
    for (int i = 0; i < ch->n; i++) {
        int tt = ch->pos[i];
        if (tt == 0) continue;
        float *dst = ((tt - 1) % t->S < s ? t->dHr : t->dH0) + (size_t)(glob[i] - 1) * d;
        const float *sg = t->dmem + (size_t)i * d;
        for (int k = 0; k < d; k++) dst[k] += sg[k];
    }
}

/* Subset s's backward: its head, its blocks (attention through the view,
 * whose gradient is routed back to the rows it came from), its embedding
 * and memory. Every later subset has run its backward. */
static void lrt_subset_backward(latent_trainer *t, int s, latent_weights *g) {
    const latent_config *c = t->c;
    int N = t->N, d = c->d, src = c->lrt.source_layer;
    int kvd = latent_config_kv_dim(c), qd = latent_config_q_dim(c);
    chain *ch = &t->sub[s];
    head *h = &t->hsub[s];
    int n = ch->n;
    const int *glob = t->sub_glob[s];
    size_t snd = (size_t)n * d;
    float *dsrc = t->tmp; /* gradient of this subset's written-back h^(src) */
    latent_trm_gather(dsrc, t->dHr, glob, n, d);
    latent_trm_head_backward(t, h, ch->out, n, src < 0 ? dsrc : NULL, g);
    memset(t->dmem, 0, snd * sizeof(float));
    for (int l = c->n_layers - 1; l >= 0; l--) {
        blk *A = &ch->b[l];
        latent_layer *G = &g->layers[l];
        if (l == src) {
            latent_trm_gather(dsrc, t->dHr, glob, n, d);
            latent_tr_add(t->dres, dsrc, snd);
        }
        latent_trm_blk_bwd_out(t, l, A, ch, G);
        lrt_view(t, l, s);
        memset(t->dq, 0, (size_t)n * qd * sizeof(float));
        memset(t->dkview, 0, (size_t)N * kvd * sizeof(float));
        memset(t->dvview, 0, (size_t)N * kvd * sizeof(float));
        latent_tr_attention_backward(t->dq, t->dkview, t->dvview, t->dO, A->p, A->q, t->kview, t->vview, ch->qpos, t->B,
                                     ch->nq, t->T, c->n_heads, c->n_kv_heads, c->head_dim);
        lrt_route(t, l, s);
        /* the subset's own k, v: every reader (this and later subsets) is done */
        latent_trm_gather(t->dk, t->dKr + (size_t)l * N * kvd, glob, n, kvd);
        latent_trm_gather(t->dv, t->dVr + (size_t)l * N * kvd, glob, n, kvd);
        latent_trm_blk_bwd_qkv(t, l, A, ch, G, t->dq, t->dk, t->dv, t->dmem);
    }
    latent_tr_embedding_backward(g->embed, t->dres, t->sub_tok[s], n, d);
    lrt_memory_backward(t, s);
}

/* Pass 0's backward, after every subset's: its k, v gradients are its own
 * attention's plus every subset's that read them (dK0, dV0). */
static void lrt_pass0_backward(latent_trainer *t, latent_weights *g) {
    const latent_config *c = t->c;
    int N = t->N, src = c->lrt.source_layer, kvd = latent_config_kv_dim(c), qd = latent_config_q_dim(c);
    chain *P0 = &t->main;
    latent_trm_head_backward(t, &t->hmain, P0->out, N, src < 0 ? t->dH0 : NULL, g);
    for (int l = c->n_layers - 1; l >= 0; l--) {
        blk *A = &P0->b[l];
        latent_layer *G = &g->layers[l];
        if (l == src) latent_tr_add(t->dres, t->dH0, (size_t)N * c->d);
        latent_trm_blk_bwd_out(t, l, A, P0, G);
        memcpy(t->dk, t->dK0 + (size_t)l * N * kvd, (size_t)N * kvd * sizeof(float));
        memcpy(t->dv, t->dV0 + (size_t)l * N * kvd, (size_t)N * kvd * sizeof(float));
        memset(t->dq, 0, (size_t)N * qd * sizeof(float));
        latent_tr_attention_backward(t->dq, t->dk, t->dv, t->dO, A->p, A->q, A->k, A->v, P0->qpos, t->B, P0->nq, t->T,
                                     c->n_heads, c->n_kv_heads, c->head_dim);
        latent_trm_blk_bwd_qkv(t, l, A, P0, G, t->dq, t->dk, t->dv, NULL);
    }
    latent_tr_embedding_backward(g->embed, t->dres, t->tok, N, c->d);
}

double latent_trm_lrt_step(latent_trainer *t, latent_weights *g) {
    const latent_config *c = t->c;
    size_t nd = (size_t)t->N * c->d, lkv = (size_t)c->n_layers * t->N * latent_config_kv_dim(c);
    double w = 1.0 / (t->S + 1);
    double loss = lrt_pass0_forward(t, w, g != NULL);
    const float *H0 = lrt_source(t, &t->main, &t->hmain);
    for (int s = 0; s < t->S; s++) loss += lrt_subset_forward(t, s, H0, w, g != NULL);
    if (!g) return loss;

    /* Backward, subsets in reverse: every consumer of a subset's outputs
     * (later subsets' attention and memory) has run its backward first. */
    memset(t->dK0, 0, lkv * sizeof(float)), memset(t->dV0, 0, lkv * sizeof(float));
    memset(t->dKr, 0, lkv * sizeof(float)), memset(t->dVr, 0, lkv * sizeof(float));
    memset(t->dH0, 0, nd * sizeof(float)), memset(t->dHr, 0, nd * sizeof(float));
    for (int s = t->S - 1; s >= 0; s--) lrt_subset_backward(t, s, g);
    lrt_pass0_backward(t, g);
    return loss;
}
