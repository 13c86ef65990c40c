/* The trainer's ops of the recurrences (train_ops.h): T2MLR's fusion and
 * cache update, and LRT's injections, forward and backward, over the
 * engine threads, deterministic as the rest of the ops (train_ops.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_ops.h"
#include "train/train_ops_private.h"

/* ---- T2MLR fusion and cache update -------------------------------------- */

typedef struct {
    float *out, *dh, *du, *dpre_r, *dpre_c, *part_r, *part_c;
    const t2mlr_fuse_acts *a;
    const float *h, *dout;
    const uint8_t *flow;
    float tr, tc;
    const float *br, *bc;
    int d;
} fuse_job;

static void fuse_fwd_rows(void *ctx, int r0, int r1) {
    const fuse_job *j = ctx;
    int d = j->d;
    for (int r = r0; r < r1; r++) {
        const float *h = j->h + (size_t)r * d;
        memcpy(j->a->z + (size_t)r * 2 * d, h, d * sizeof(float));
        memcpy(j->a->z + (size_t)r * 2 * d + d, j->a->u + (size_t)r * d, d * sizeof(float));
        /* not recurrent: the block input is h */
        if (j->flow && j->flow[r] != 2) memcpy(j->out + (size_t)r * d, h, d * sizeof(float));
    }
}

static void fuse_gate_rows(void *ctx, int r0, int r1) {
    const fuse_job *j = ctx;
    int d = j->d;
    for (int r = r0; r < r1; r++) {
        const float *h = j->h + (size_t)r * d, *u = j->a->u + (size_t)r * d;
        float *sr = j->a->sr + (size_t)r * d, *sc = j->a->sc + (size_t)r * d;
        float *o = j->out + (size_t)r * d;
        int rec = !j->flow || j->flow[r] == 2;
#pragma omp simd
        for (int i = 0; i < d; i++) {
            sr[i] = fsigmoid(sr[i] + j->br[i]);
            sc[i] = fsigmoid(sc[i] + j->bc[i]);
        }
        if (!rec) continue;
#pragma omp simd
        for (int i = 0; i < d; i++) o[i] = h[i] + j->tr * sr[i] * u[i] + j->tc * sc[i] * h[i];
    }
}

void latent_tr_t2mlr_fuse_forward(tr_gemm *gm, float *out, const t2mlr_fuse_acts *a, const float *h, const float *R, t2mlr_fuse_w w,
                           const uint8_t *flow, int n, int d) {
    fuse_job j = {.out = out, .a = a, .h = h, .flow = flow, .tr = tanhf(w.gamma_rec[0]), .tc = tanhf(w.gamma_cur[0]),
                  .br = w.f_rec_b, .bc = w.f_cur_b, .d = d};
    latent_tr_linear_forward(gm, a->u, R, w.w_rec, NULL, n, d, d); /* u = R W_rec^T */
    latent_tr_par_rows(fuse_fwd_rows, &j, n);                  /* z = [h ; u]; flow-1 rows pass h */
    latent_tr_linear_forward(gm, a->sr, a->z, w.f_rec_w, NULL, n, 2 * d, d);
    latent_tr_linear_forward(gm, a->sc, a->z, w.f_cur_w, NULL, n, 2 * d, d);
    latent_tr_par_rows(fuse_gate_rows, &j, n);
}

static void fuse_bwd_rows(void *ctx, int r0, int r1) {
    const fuse_job *j = ctx;
    int d = j->d;
    for (int r = r0; r < r1; r++) {
        size_t o = (size_t)r * d;
        const float *g = j->dout + o, *h = j->h + o, *u = j->a->u + o, *sr = j->a->sr + o, *sc = j->a->sc + o;
        float *dh = j->dh + o, *du = j->du + o, *pr = j->dpre_r + o, *pc = j->dpre_c + o;
        if (j->flow && j->flow[r] != 2) {
            /* out = h */
            for (int i = 0; i < d; i++) dh[i] += g[i], du[i] = pr[i] = pc[i] = 0.0f;
            j->part_r[r] = j->part_c[r] = 0.0f;
            continue;
        }
        float s_r = 0, s_c = 0;
#pragma omp simd reduction(+ : s_r, s_c)
        for (int i = 0; i < d; i++) {
            /* out = h + tr sr u + tc sc h */
            dh[i] += g[i] * (1.0f + j->tc * sc[i]);
            du[i] = g[i] * j->tr * sr[i];
            pr[i] = g[i] * j->tr * u[i] * sr[i] * (1.0f - sr[i]);
            pc[i] = g[i] * j->tc * h[i] * sc[i] * (1.0f - sc[i]);
            s_r += g[i] * sr[i] * u[i];
            s_c += g[i] * sc[i] * h[i];
        }
        j->part_r[r] = s_r;
        j->part_c[r] = s_c;
    }
}

typedef struct {
    float *dh, *du;
    const float *dz;
    int d;
} split_job;

static void split_rows(void *ctx, int r0, int r1) {
    const split_job *j = ctx;
    int d = j->d;
    for (int r = r0; r < r1; r++) {
        const float *dz = j->dz + (size_t)r * 2 * d;
        float *dh = j->dh + (size_t)r * d, *du = j->du + (size_t)r * d;
        for (int i = 0; i < d; i++) {
            dh[i] += dz[i];
            du[i] += dz[d + i];
        }
    }
}

void latent_tr_t2mlr_fuse_backward(tr_gemm *gm, float *dh, float *dR, t2mlr_fuse_g g, const float *dout, const t2mlr_fuse_acts *a,
                            const float *h, const float *R, t2mlr_fuse_w w, const uint8_t *flow, float *scratch,
                            int n, int d) {
    /* scratch: dpre_r, dpre_c (n, d each) | dz (n, 2d) | du (n, d) | the
     * per-row partial sums of the gamma gradients (2n) */
    float *dpre_r = scratch, *dpre_c = scratch + (size_t)n * d, *dz = scratch + (size_t)2 * n * d;
    float *du = scratch + (size_t)4 * n * d, *part = scratch + (size_t)5 * n * d;
    fuse_job j = {.dh = dh, .du = du, .dpre_r = dpre_r, .dpre_c = dpre_c, .part_r = part, .part_c = part + n,
                  .a = a, .h = h, .dout = dout, .flow = flow, .tr = tanhf(w.gamma_rec[0]),
                  .tc = tanhf(w.gamma_cur[0]), .d = d};
    latent_tr_par_rows(fuse_bwd_rows, &j, n);
    double sr = 0, sc = 0;
    for (int r = 0; r < n; r++) sr += part[r], sc += part[n + r];
    /* tr = tanh(gamma_rec): d tr / d gamma = 1 - tr^2 */
    g.gamma_rec[0] += (float)(sr * (1.0 - (double)j.tr * j.tr));
    g.gamma_cur[0] += (float)(sc * (1.0 - (double)j.tc * j.tc));
    /* pre = z F^T + b */
    memset(dz, 0, (size_t)n * 2 * d * sizeof(float));
    latent_tr_linear_backward(gm, dz, g.f_rec_w, g.f_rec_b, dpre_r, a->z, w.f_rec_w, n, 2 * d, d);
    latent_tr_linear_backward(gm, dz, g.f_cur_w, g.f_cur_b, dpre_c, a->z, w.f_cur_w, n, 2 * d, d);
    split_job sj = {dh, du, dz, d};
    latent_tr_par_rows(split_rows, &sj, n);
    /* u = R W_rec^T */
    latent_tr_linear_backward(gm, dR, g.w_rec, NULL, du, R, w.w_rec, n, d, d);
}

typedef struct {
    float *out, *f, *dy, *dprev;
    const float *y, *prev, *dout;
    const uint8_t *flow;
    int residual, d;
    float clamp, eps;
} upd_job;

static void upd_fwd_rows(void *ctx, int r0, int r1) {
    const upd_job *j = ctx;
    int d = j->d;
    for (int r = r0; r < r1; r++) {
        const float *y = j->y + (size_t)r * d, *p = j->prev + (size_t)r * d;
        float *o = j->out + (size_t)r * d;
        if (!j->residual || (j->flow && j->flow[r] != 2)) {
            memcpy(o, y, d * sizeof(float));
            j->f[r] = 0.0f;
            continue;
        }
        /* the same arithmetic as the engine's update: sums in double */
        double ss = 0;
        for (int i = 0; i < d; i++) {
            o[i] = y[i] + p[i];
            ss += (double)o[i] * o[i];
        }
        double f = 1.0 / sqrt(ss / d + j->eps), cl = j->clamp;
        if (f > cl) f = cl;
        if (f < 1.0 / cl) f = 1.0 / cl;
        for (int i = 0; i < d; i++) o[i] = (float)(o[i] * f);
        j->f[r] = (float)f;
    }
}

void latent_tr_t2mlr_update_forward(float *out, float *f, const float *y, const float *prev, const uint8_t *flow,
                             int residual, float clamp, float eps, int n, int d) {
    upd_job j = {.out = out, .f = f, .y = y, .prev = prev, .flow = flow, .residual = residual, .d = d,
                 .clamp = clamp, .eps = eps};
    latent_tr_par_rows(upd_fwd_rows, &j, n);
}

static void upd_bwd_rows(void *ctx, int r0, int r1) {
    const upd_job *j = ctx;
    int d = j->d;
    for (int r = r0; r < r1; r++) {
        const float *g = j->dout + (size_t)r * d;
        float *dy = j->dy + (size_t)r * d, f = j->f[r];
        if (f == 0.0f) { /* out = y */
            for (int i = 0; i < d; i++) dy[i] += g[i];
            continue;
        }
        /* out = (y + prev) * f, f constant */
        for (int i = 0; i < d; i++) dy[i] += f * g[i];
        if (j->dprev) {
            float *dp = j->dprev + (size_t)r * d;
            for (int i = 0; i < d; i++) dp[i] += f * g[i];
        }
    }
}

void latent_tr_t2mlr_update_backward(float *dy, float *dprev, const float *dout, const float *f, int n, int d) {
    upd_job j = {.f = (float *)f, .dy = dy, .dprev = dprev, .dout = dout, .d = d};
    latent_tr_par_rows(upd_bwd_rows, &j, n);
}

void latent_tr_shift_right_forward(float *out, const float *in, int B, int T, int d) {
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * T * d;
        memset(o, 0, (size_t)d * sizeof(float));
        memcpy(o + d, in + (size_t)b * T * d, (size_t)(T - 1) * d * sizeof(float));
    }
}

void latent_tr_shift_right_backward(float *din, const float *dout, int B, int T, int d) {
    for (int b = 0; b < B; b++) latent_tr_add(din + (size_t)b * T * d, dout + ((size_t)b * T + 1) * d, (size_t)(T - 1) * d);
}

/* ---- LRT injections ----------------------------------------------------- */

typedef struct {
    float *out, *dx, *dm, *part_a, *part_g;
    const float *x, *m, *dout;
    float alpha, gamma;
    size_t n;
} inj_job;

static void inj_fwd_rows(void *ctx, int r0, int r1) {
    const inj_job *j = ctx;
    if (j->m) {
#pragma omp simd
        for (int i = r0; i < r1; i++) j->out[i] = j->alpha * j->x[i] + j->gamma * j->m[i];
    } else {
#pragma omp simd
        for (int i = r0; i < r1; i++) j->out[i] = j->alpha * j->x[i];
    }
}

void latent_tr_lrt_residual_forward(float *out, const float *x, const float *m, float alpha, float gamma, size_t n) {
    inj_job j = {.out = out, .x = x, .m = m, .alpha = alpha, .gamma = gamma};
    par_elems(inj_fwd_rows, &j, n);
}

#define INJ_PART 1024 /* floats per partial sum of the scalar gradients */

static void inj_bwd_task(void *ctx, int r0, int r1) {
    const inj_job *j = ctx;
    for (int i = r0; i < r1; i++) {
        j->dx[i] += j->alpha * j->dout[i];
        if (j->m && j->dm) j->dm[i] += j->gamma * j->dout[i];
    }
}

static void inj_part_rows(void *ctx, int c0, int c1) {
    const inj_job *j = ctx;
    /* chunk c sums [c*INJ_PART, (c+1)*INJ_PART) of the flat range */
    size_t n = j->n;
    for (int c = c0; c < c1; c++) {
        size_t i0 = (size_t)c * INJ_PART, i1 = i0 + INJ_PART > n ? n : i0 + INJ_PART;
        float sa = 0, sg = 0;
        for (size_t i = i0; i < i1; i++) {
            sa += j->dout[i] * j->x[i];
            if (j->m) sg += j->dout[i] * j->m[i];
        }
        j->part_a[c] = sa;
        j->part_g[c] = sg;
    }
}

void latent_tr_lrt_residual_backward(float *dx, float *dm, float *dalpha, float *dgamma, const float *dout, const float *x,
                           const float *m, float alpha, float gamma, size_t n) {
    int nc = (int)((n + INJ_PART - 1) / INJ_PART);
    float *part = malloc((size_t)2 * (nc ? nc : 1) * sizeof(float));
    if (!part) abort();
    inj_job j = {.n = n, .dx = dx, .dm = dm, .part_a = part, .part_g = part + nc, .x = x,
                 .m = m, .dout = dout, .alpha = alpha, .gamma = gamma};
    latent_tr_par_rows(inj_part_rows, &j, nc);
    double sa = 0, sg = 0;
    for (int c = 0; c < nc; c++) sa += part[c], sg += part[nc + c];
    if (dalpha) dalpha[0] += (float)sa;
    if (dgamma && m) dgamma[0] += (float)sg;
    free(part);
    if (dx) par_elems(inj_bwd_task, &j, n);
}

typedef struct {
    float *k, *v, *gate, *dkl, *dvl, *dmk, *dmv, *dgl;
    const float *mk, *mv, *kl, *vl, *dk, *dv;
    int nkv, hd;
} kvi_job;

static void kvi_fwd_rows(void *ctx, int r0, int r1) {
    const kvi_job *j = ctx;
    int nkv = j->nkv, hd = j->hd, kvd = nkv * hd;
    for (int r = r0; r < r1; r++) {
        float *g = j->gate + (size_t)r * 2 * nkv;
        for (int i = 0; i < 2 * nkv; i++) g[i] = 2.0f * fsigmoid(g[i]);
        for (int h = 0; h < nkv; h++) {
            size_t o = (size_t)r * kvd + (size_t)h * hd;
            float gl = g[h], gf = g[nkv + h];
            for (int i = 0; i < hd; i++) {
                j->k[o + i] = gl * j->kl[o + i] + (j->mk ? gf * j->mk[o + i] : 0.0f);
                j->v[o + i] = gl * j->vl[o + i] + (j->mv ? gf * j->mv[o + i] : 0.0f);
            }
        }
    }
}

void latent_tr_lrt_kv_forward(tr_gemm *gm, float *k, float *v, float *gate, float *mk, float *mv, const float *kl, const float *vl,
                    const float *a, const float *m, const float *G, const float *K, const float *V, int n,
                    int d, int n_kv_heads, int hd) {
    int kvd = n_kv_heads * hd;
    latent_tr_linear_forward(gm, gate, a, G, NULL, n, d, 2 * n_kv_heads);
    if (m) {
        latent_tr_linear_forward(gm, mk, m, K, NULL, n, d, kvd);
        latent_tr_linear_forward(gm, mv, m, V, NULL, n, d, kvd);
    }
    kvi_job j = {.k = k, .v = v, .gate = gate, .mk = m ? mk : NULL, .mv = m ? mv : NULL, .kl = kl, .vl = vl,
                 .nkv = n_kv_heads, .hd = hd};
    latent_tr_par_rows(kvi_fwd_rows, &j, n);
}

static void kvi_bwd_rows(void *ctx, int r0, int r1) {
    const kvi_job *j = ctx;
    int nkv = j->nkv, hd = j->hd, kvd = nkv * hd;
    for (int r = r0; r < r1; r++) {
        const float *g = j->gate + (size_t)r * 2 * nkv;
        float *dgl = j->dgl + (size_t)r * 2 * nkv;
        for (int h = 0; h < nkv; h++) {
            size_t o = (size_t)r * kvd + (size_t)h * hd;
            float gl = g[h], gf = g[nkv + h], sl = 0, sf = 0;
            /* k = gl kl + gf mk (likewise v) */
            for (int i = 0; i < hd; i++) {
                float dk = j->dk[o + i], dv = j->dv[o + i];
                j->dkl[o + i] += gl * dk;
                j->dvl[o + i] += gl * dv;
                sl += dk * j->kl[o + i] + dv * j->vl[o + i];
                if (j->mk) {
                    j->dmk[o + i] = gf * dk;
                    j->dmv[o + i] = gf * dv;
                    sf += dk * j->mk[o + i] + dv * j->mv[o + i];
                }
            }
            /* g = 2 sigmoid(l): dg/dl = 2 s (1 - s) = g (1 - g/2) */
            dgl[h] = sl * gl * (1.0f - 0.5f * gl);
            dgl[nkv + h] = sf * gf * (1.0f - 0.5f * gf);
        }
    }
}

void latent_tr_lrt_kv_backward(tr_gemm *gm, float *dkl, float *dvl, float *da, float *dm, float *dG, float *dK, float *dV,
                     const float *dk, const float *dv, const float *gate, const float *mk, const float *mv,
                     const float *kl, const float *vl, const float *a, const float *m, const float *G,
                     const float *K, const float *V, float *scratch, int n, int d, int n_kv_heads, int hd) {
    int kvd = n_kv_heads * hd;
    float *dgl = scratch, *dmk = scratch + (size_t)n * 2 * n_kv_heads, *dmv = dmk + (size_t)n * kvd;
    kvi_job j = {.gate = (float *)gate, .dkl = dkl, .dvl = dvl, .dmk = dmk, .dmv = dmv, .dgl = dgl,
                 .mk = m ? mk : NULL, .mv = m ? mv : NULL, .kl = kl, .vl = vl, .dk = dk, .dv = dv,
                 .nkv = n_kv_heads, .hd = hd};
    latent_tr_par_rows(kvi_bwd_rows, &j, n);
    latent_tr_linear_backward(gm, da, dG, NULL, dgl, a, G, n, d, 2 * n_kv_heads);
    if (m) {
        latent_tr_linear_backward(gm, dm, dK, NULL, dmk, m, K, n, d, kvd);
        latent_tr_linear_backward(gm, dm, dV, NULL, dmv, m, V, n, d, kvd);
    }
}
