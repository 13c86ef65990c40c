/* Every trainer op (train_ops.h) against an independent double-precision
 * forward written here: the float forward must match it, and each float
 * backward must match central finite differences of the double forward of
 * L = sum(proj * out) (proj random), on tiny shapes. Large inputs are
 * checked on a sample of their elements. */
#include <stdlib.h>
#include <string.h>

#include "latent/threads.h"
#include "train/train_ops.h"
#include "ref_ops.h"
#include "testutil.h"

#define FD_H 1e-6
#define FD_SAMPLES 48 /* elements checked per input */
#define TOL_FWD 2e-5
#define TOL_GRAD 2e-4

static uint64_t rng = 0x1234567887654321ULL;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (rng >> 11) * (1.0 / 9007199254740992.0);
}
/* float-representable values in [-s, s] */
static float frand(float s) { return (float)((urand() * 2 - 1) * s); }

/* One input of an op: the double values the reference reads, the float
 * copy the op reads, and the gradient the op's backward wrote. */
typedef struct {
    const char *name;
    int n;
    double *d;
    float *f, *g;
} input;

static input mk_input(const char *name, int n, float scale) {
    input in = {name, n, malloc(n * sizeof(double)), malloc(n * sizeof(float)), calloc(n, sizeof(float))};
    for (int i = 0; i < n; i++) in.f[i] = frand(scale), in.d[i] = in.f[i];
    return in;
}
static void free_input(input *in) { free(in->d), free(in->f), free(in->g); }

typedef void (*ref_fn)(void *ctx, double *out);

static double objective(ref_fn f, void *ctx, const double *proj, double *out, int nout) {
    f(ctx, out);
    double s = 0;
    for (int i = 0; i < nout; i++) s += proj[i] * out[i];
    return s;
}

/* Compares the op's forward output (float) with the reference, then every
 * input's gradient with finite differences on sampled elements. */
static void check_op(const char *op, ref_fn f, void *ctx, const float *fwd_out, const double *proj, int nout,
                     input *ins, int n_ins) {
    double *out = malloc(nout * sizeof(double));
    f(ctx, out);
    if (fwd_out) {
        double md = 0, mr = 0;
        for (int i = 0; i < nout; i++) {
            if (fabs(fwd_out[i] - out[i]) > md) md = fabs(fwd_out[i] - out[i]);
            if (fabs(out[i]) > mr) mr = fabs(out[i]);
        }
        CHECK(md <= TOL_FWD * (mr > 1 ? mr : 1), "%s forward: max diff %g (max %g)", op, md, mr);
    }
    for (int k = 0; k < n_ins; k++) {
        input *in = &ins[k];
        int samples = in->n < FD_SAMPLES ? in->n : FD_SAMPLES;
        double md = 0, mg = 0;
        for (int s = 0; s < samples; s++) {
            int i = in->n <= FD_SAMPLES ? s : (int)(urand() * in->n);
            double save = in->d[i];
            in->d[i] = save + FD_H;
            double lp = objective(f, ctx, proj, out, nout);
            in->d[i] = save - FD_H;
            double lm = objective(f, ctx, proj, out, nout);
            in->d[i] = save;
            double fd = (lp - lm) / (2 * FD_H);
            if (fabs(fd - in->g[i]) > md) md = fabs(fd - in->g[i]);
            if (fabs(fd) > mg) mg = fabs(fd);
        }
        CHECK(md <= TOL_GRAD * (mg > 1e-3 ? mg : 1e-3), "%s: d/d%s max diff %g (max |grad| %g)", op, in->name, md,
              mg);
        fprintf(stderr, "  %-22s d/d%-8s max |fd - analytic| %.3g, max |grad| %.3g\n", op, in->name, md, mg);
    }
    free(out);
}

static double *mk_proj(int n) {
    double *p = malloc(n * sizeof(double));
    for (int i = 0; i < n; i++) p[i] = (float)(urand() * 2 - 1);
    return p;
}
static float *to_float(const double *p, int n) {
    float *f = malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) f[i] = (float)p[i];
    return f;
}

/* ---- linear ------------------------------------------------------------- */
typedef struct { input *x, *w, *b; int n, in, out; } lin_ctx;
static void lin_ref(void *c, double *o) {
    lin_ctx *l = c;
    for (int r = 0; r < l->n; r++)
        for (int j = 0; j < l->out; j++) {
            double s = l->b ? l->b->d[j] : 0;
            for (int i = 0; i < l->in; i++) s += l->x->d[r * l->in + i] * l->w->d[j * l->in + i];
            o[r * l->out + j] = s;
        }
}
static void test_linear(int n, int in_dim, int out_dim, int bias) {
    input ins[3] = {mk_input("x", n * in_dim, 1), mk_input("w", out_dim * in_dim, 0.5f),
                    mk_input("b", out_dim, 0.5f)};
    lin_ctx c = {&ins[0], &ins[1], bias ? &ins[2] : NULL, n, in_dim, out_dim};
    int no = n * out_dim;
    float *out = malloc(no * sizeof(float));
    double *proj = mk_proj(no);
    float *pf = to_float(proj, no);
    latent_tr_linear_forward(NULL, out, ins[0].f, ins[1].f, bias ? ins[2].f : NULL, n, in_dim, out_dim);
    latent_tr_linear_backward(NULL, ins[0].g, ins[1].g, bias ? ins[2].g : NULL, pf, ins[0].f, ins[1].f, n, in_dim, out_dim);
    check_op(bias ? "linear+bias" : "linear", lin_ref, &c, out, proj, no, ins, bias ? 3 : 2);
    for (int i = 0; i < 3; i++) free_input(&ins[i]);
    free(out), free(proj), free(pf);
}

/* ---- RMSNorm ------------------------------------------------------------ */
typedef struct { input *x, *w; int n, d; double eps; } norm_ctx;
static void norm_ref(void *c, double *o) {
    norm_ctx *l = c;
    for (int r = 0; r < l->n; r++) {
        double ss = 0;
        for (int i = 0; i < l->d; i++) ss += l->x->d[r * l->d + i] * l->x->d[r * l->d + i];
        double inv = 1 / sqrt(ss / l->d + l->eps);
        for (int i = 0; i < l->d; i++) o[r * l->d + i] = l->x->d[r * l->d + i] * inv * l->w->d[i];
    }
}
static void test_rmsnorm(void) {
    int n = 37, d = 24;
    input ins[2] = {mk_input("x", n * d, 1), mk_input("w", d, 1)};
    norm_ctx c = {&ins[0], &ins[1], n, d, 1e-5};
    float *out = malloc(n * d * sizeof(float)), *rstd = malloc(n * sizeof(float));
    double *proj = mk_proj(n * d);
    float *pf = to_float(proj, n * d);
    latent_tr_rmsnorm_forward(out, rstd, ins[0].f, ins[1].f, n, d, 1e-5f);
    latent_tr_rmsnorm_backward(ins[0].g, ins[1].g, pf, ins[0].f, rstd, ins[1].f, n, d);
    check_op("rmsnorm", norm_ref, &c, out, proj, n * d, ins, 2);
    for (int i = 0; i < 2; i++) free_input(&ins[i]);
    free(out), free(rstd), free(proj), free(pf);
}

/* ---- RoPE --------------------------------------------------------------- */
typedef struct { input *x; const int *pos; int n, H, hd; double theta; } rope_ctx;
static void rope_ref(void *c, double *o) {
    rope_ctx *l = c;
    int half = l->hd / 2;
    for (int r = 0; r < l->n; r++)
        for (int h = 0; h < l->H; h++)
            for (int j = 0; j < half; j++) {
                double ang = l->pos[r] * pow(l->theta, -2.0 * j / l->hd);
                size_t o0 = ((size_t)r * l->H + h) * l->hd;
                double a = l->x->d[o0 + j], b = l->x->d[o0 + j + half];
                o[o0 + j] = a * cos(ang) - b * sin(ang);
                o[o0 + j + half] = b * cos(ang) + a * sin(ang);
            }
}
static void test_rope(void) {
    int n = 11, H = 3, hd = 8, npos = 40, pos[11];
    for (int r = 0; r < n; r++) pos[r] = (r * 7 + 2) % npos;
    input x = mk_input("x", n * H * hd, 1);
    rope_ctx c = {&x, pos, n, H, hd, 10000.0};
    float *ct = malloc(npos * hd / 2 * sizeof(float)), *st = malloc(npos * hd / 2 * sizeof(float));
    latent_tr_rope_tables(ct, st, npos, hd, 10000.0f);
    float *out = malloc(n * H * hd * sizeof(float));
    memcpy(out, x.f, n * H * hd * sizeof(float));
    latent_tr_rope_forward(out, pos, ct, st, n, H, hd);
    double *proj = mk_proj(n * H * hd);
    float *pf = to_float(proj, n * H * hd);
    latent_tr_rope_backward(pf, pos, ct, st, n, H, hd); /* in place: pf becomes dx */
    for (int i = 0; i < n * H * hd; i++) x.g[i] += pf[i];
    check_op("rope", rope_ref, &c, out, proj, n * H * hd, &x, 1);
    free_input(&x);
    free(ct), free(st), free(out), free(proj), free(pf);
}

/* ---- attention ---------------------------------------------------------- */
typedef struct { input *q, *k, *v; const int *qpos; int B, nq, T, H, KV, hd; } att_ctx;
static void att_ref(void *c, double *o) {
    att_ctx *a = c;
    int qd = a->H * a->hd, kvd = a->KV * a->hd;
    double *s = malloc(a->T * sizeof(double));
    for (int b = 0; b < a->B; b++)
        for (int j = 0; j < a->nq; j++)
            for (int h = 0; h < a->H; h++) {
                int g = h / (a->H / a->KV), np = a->qpos[j] + 1;
                const double *q = a->q->d + ((size_t)b * a->nq + j) * qd + h * a->hd;
                double mx = -1e300, sum = 0;
                for (int p = 0; p < np; p++) {
                    const double *k = a->k->d + ((size_t)b * a->T + p) * kvd + g * a->hd;
                    double dot = 0;
                    for (int i = 0; i < a->hd; i++) dot += q[i] * k[i];
                    s[p] = dot / sqrt(a->hd);
                    if (s[p] > mx) mx = s[p];
                }
                for (int p = 0; p < np; p++) sum += (s[p] = exp(s[p] - mx));
                double *out = o + ((size_t)b * a->nq + j) * qd + h * a->hd;
                for (int i = 0; i < a->hd; i++) {
                    double acc = 0;
                    for (int p = 0; p < np; p++) acc += s[p] / sum * a->v->d[((size_t)b * a->T + p) * kvd + g * a->hd + i];
                    out[i] = acc;
                }
            }
    free(s);
}
static void test_attention(const char *name, int B, int T, int H, int KV, int hd, int stride, int first) {
    int nq = 0, qpos[256];
    for (int t = first; t < T; t += stride) qpos[nq++] = t;
    int qd = H * hd, kvd = KV * hd;
    input ins[3] = {mk_input("q", B * nq * qd, 1.5f), mk_input("k", B * T * kvd, 1.5f), mk_input("v", B * T * kvd, 1)};
    att_ctx c = {&ins[0], &ins[1], &ins[2], qpos, B, nq, T, H, KV, hd};
    int no = B * nq * qd;
    float *out = malloc(no * sizeof(float)), *prob = malloc((size_t)B * H * nq * T * sizeof(float));
    double *proj = mk_proj(no);
    float *pf = to_float(proj, no);
    latent_tr_attention_forward(out, prob, ins[0].f, ins[1].f, ins[2].f, qpos, B, nq, T, H, KV, hd);
    latent_tr_attention_backward(ins[0].g, ins[1].g, ins[2].g, pf, prob, ins[0].f, ins[1].f, ins[2].f, qpos, B, nq, T, H, KV,
                          hd);
    check_op(name, att_ref, &c, out, proj, no, ins, 3);
    for (int i = 0; i < 3; i++) free_input(&ins[i]);
    free(out), free(prob), free(proj), free(pf);
}

/* ---- SwiGLU ------------------------------------------------------------- */
typedef struct { input *g, *u; int n; } sw_ctx;
static void sw_ref(void *c, double *o) {
    sw_ctx *s = c;
    for (int i = 0; i < s->n; i++) o[i] = s->g->d[i] / (1 + exp(-s->g->d[i])) * s->u->d[i];
}
static void test_swiglu(void) {
    int n = 333;
    input ins[2] = {mk_input("g", n, 4), mk_input("u", n, 2)};
    sw_ctx c = {&ins[0], &ins[1], n};
    float *out = malloc(n * sizeof(float));
    double *proj = mk_proj(n);
    float *pf = to_float(proj, n);
    latent_tr_swiglu_forward(out, ins[0].f, ins[1].f, n);
    latent_tr_swiglu_backward(ins[0].g, ins[1].g, pf, ins[0].f, ins[1].f, n);
    check_op("swiglu", sw_ref, &c, out, proj, n, ins, 2);
    for (int i = 0; i < 2; i++) free_input(&ins[i]);
    free(out), free(proj), free(pf);
}

/* ---- cross-entropy ------------------------------------------------------ */
typedef struct { input *x; const int32_t *tg; const uint8_t *mask; int n, V; double scale; } ce_ctx;
static void ce_ref(void *c, double *o) {
    ce_ctx *e = c;
    for (int r = 0; r < e->n; r++) {
        if (e->mask && !e->mask[r]) { o[r] = 0; continue; }
        const double *x = e->x->d + (size_t)r * e->V;
        double mx = -1e300, s = 0;
        for (int i = 0; i < e->V; i++) if (x[i] > mx) mx = x[i];
        for (int i = 0; i < e->V; i++) s += exp(x[i] - mx);
        o[r] = (log(s) + mx - x[e->tg[r]]) * e->scale;
    }
}
static void test_crossentropy(void) {
    int n = 13, V = 50;
    int32_t tg[13];
    uint8_t mask[13];
    for (int r = 0; r < n; r++) tg[r] = (r * 17 + 3) % V, mask[r] = r % 4 != 1;
    input x = mk_input("logits", n * V, 3);
    float scale = 1.0f / 9;
    ce_ctx c = {&x, tg, mask, n, V, scale};
    float *loss = malloc(n * sizeof(float));
    latent_tr_crossentropy_forward(loss, x.f, tg, mask, n, V);
    for (int r = 0; r < n; r++) loss[r] *= scale;
    double *proj = malloc(n * sizeof(double));
    for (int r = 0; r < n; r++) proj[r] = 1; /* L = scale * sum of the row losses */
    memcpy(x.g, x.f, n * V * sizeof(float));
    float *loss2 = malloc(n * sizeof(float));
    latent_tr_crossentropy_softmax_backward(x.g, loss2, tg, mask, scale, n, V);
    for (int r = 0; r < n; r++) CHECK(fabs(loss2[r] * scale - loss[r]) < 1e-6, "fused loss row %d", r);
    free(loss2);
    check_op("crossentropy", ce_ref, &c, loss, proj, n, &x, 1);
    free_input(&x);
    free(loss), free(proj);
}

/* ---- embedding ---------------------------------------------------------- */
typedef struct { input *e; const int32_t *tok; int n, d; } emb_ctx;
static void emb_ref(void *c, double *o) {
    emb_ctx *e = c;
    for (int r = 0; r < e->n; r++) memcpy(o + r * e->d, e->e->d + (size_t)e->tok[r] * e->d, e->d * sizeof(double));
}
static void test_embedding(void) {
    int n = 9, d = 80, V = 5;
    int32_t tok[9] = {3, 1, 3, 0, 4, 4, 3, 2, 1};
    input e = mk_input("embed", V * d, 1);
    emb_ctx c = {&e, tok, n, d};
    float *out = malloc(n * d * sizeof(float));
    double *proj = mk_proj(n * d);
    float *pf = to_float(proj, n * d);
    latent_tr_embedding_forward(out, tok, e.f, n, d);
    latent_tr_embedding_backward(e.g, pf, tok, n, d);
    check_op("embedding", emb_ref, &c, out, proj, n * d, &e, 1);
    free_input(&e);
    free(out), free(proj), free(pf);
}

/* ---- T2MLR fusion ------------------------------------------------------- */
typedef struct { input *h, *R, *wr, *fr, *br, *fc, *bc, *gr, *gc; const uint8_t *flow; int n, d; } fuse_ctx;
static double sigm(double x) { return 1 / (1 + exp(-x)); }
static void fuse_ref(void *c, double *o) {
    fuse_ctx *f = c;
    int d = f->d;
    double *u = malloc(d * sizeof(double)), *z = malloc(2 * d * sizeof(double));
    double tr = tanh(f->gr->d[0]), tc = tanh(f->gc->d[0]);
    for (int r = 0; r < f->n; r++) {
        const double *h = f->h->d + r * d, *R = f->R->d + r * d;
        if (f->flow[r] != 2) { /* not recurrent: out = h */
            memcpy(o + r * d, h, d * sizeof(double));
            continue;
        }
        for (int i = 0; i < d; i++) {
            double s = 0;
            for (int j = 0; j < d; j++) s += R[j] * f->wr->d[i * d + j];
            u[i] = s;
        }
        for (int i = 0; i < d; i++) z[i] = h[i], z[d + i] = u[i];
        for (int i = 0; i < d; i++) {
            double pr = f->br->d[i], pc = f->bc->d[i];
            for (int j = 0; j < 2 * d; j++) pr += z[j] * f->fr->d[i * 2 * d + j], pc += z[j] * f->fc->d[i * 2 * d + j];
            o[r * d + i] = h[i] + tr * sigm(pr) * u[i] + tc * sigm(pc) * h[i];
        }
    }
    free(u), free(z);
}
static void test_fuse(void) {
    int n = 7, d = 12;
    input ins[9] = {mk_input("h", n * d, 1), mk_input("R", n * d, 1), mk_input("w_rec", d * d, 0.4f),
                    mk_input("f_rec", d * 2 * d, 0.4f), mk_input("b_rec", d, 0.5f), mk_input("f_cur", d * 2 * d, 0.4f),
                    mk_input("b_cur", d, 0.5f), mk_input("g_rec", 1, 1), mk_input("g_cur", 1, 1)};
    uint8_t flow[7] = {2, 2, 1, 2, 2, 1, 2};
    fuse_ctx c = {&ins[0], &ins[1], &ins[2], &ins[3], &ins[4], &ins[5], &ins[6], &ins[7], &ins[8], flow, n, d};
    float *u = malloc(n * d * 4), *z = malloc(n * 2 * d * 4), *sr = malloc(n * d * 4), *sc = malloc(n * d * 4);
    float *out = malloc(n * d * 4), *scratch = malloc(n * (5 * d + 2) * 4);
    t2mlr_fuse_acts a = {u, z, sr, sc};
    t2mlr_fuse_w w = {ins[2].f, ins[3].f, ins[4].f, ins[5].f, ins[6].f, ins[7].f, ins[8].f};
    t2mlr_fuse_g g = {ins[2].g, ins[3].g, ins[4].g, ins[5].g, ins[6].g, ins[7].g, ins[8].g};
    double *proj = mk_proj(n * d);
    float *pf = to_float(proj, n * d);
    latent_tr_t2mlr_fuse_forward(NULL, out, &a, ins[0].f, ins[1].f, w, flow, n, d);
    latent_tr_t2mlr_fuse_backward(NULL, ins[0].g, ins[1].g, g, pf, &a, ins[0].f, ins[1].f, w, flow, scratch, n, d);
    check_op("t2mlr_fuse", fuse_ref, &c, out, proj, n * d, ins, 9);
    for (int i = 0; i < 9; i++) free_input(&ins[i]);
    free(u), free(z), free(sr), free(sc), free(out), free(scratch), free(proj), free(pf);
}

/* ---- T2MLR cache update (the rms factor held constant) ------------------ */
typedef struct { input *y, *p; const double *f; const uint8_t *flow; int residual, n, d; } upd_ctx;
static void upd_ref(void *c, double *o) {
    upd_ctx *u = c;
    for (int i = 0; i < u->n * u->d; i++)
        o[i] = u->residual && u->flow[i / u->d] == 2 ? (u->y->d[i] + u->p->d[i]) * u->f[i / u->d] : u->y->d[i];
}
static void test_update(int residual) {
    int n = 6, d = 10;
    input ins[2] = {mk_input("y", n * d, 2), mk_input("prev", n * d, 2)};
    /* one row tiny so the clamp engages */
    for (int i = 0; i < d; i++) ins[0].f[i] = ins[0].d[i] = 1e-3f * (i + 1), ins[1].f[i] = ins[1].d[i] = 0;
    double fd[6];
    for (int r = 0; r < n; r++) {
        double ss = 0;
        for (int i = 0; i < d; i++) ss += pow(ins[0].d[r * d + i] + ins[1].d[r * d + i], 2);
        double f = 1 / sqrt(ss / d + 1e-6);
        fd[r] = f > 5 ? 5 : (f < 0.2 ? 0.2 : f);
    }
    uint8_t flow[6] = {2, 2, 2, 1, 2, 2};
    upd_ctx c = {&ins[0], &ins[1], fd, flow, residual, n, d};
    float *out = malloc(n * d * 4), *f = malloc(n * 4);
    double *proj = mk_proj(n * d);
    float *pf = to_float(proj, n * d);
    latent_tr_t2mlr_update_forward(out, f, ins[0].f, ins[1].f, flow, residual, 5.0f, 1e-6f, n, d);
    latent_tr_t2mlr_update_backward(ins[0].g, ins[1].g, pf, f, n, d);
    check_op(residual ? "t2mlr_update" : "t2mlr_update(plain)", upd_ref, &c, out, proj, n * d, ins, residual ? 2 : 1);
    if (residual) CHECK(fabs(f[0] - 5.0f) < 1e-6, "clamped factor %g", f[0]);
    for (int i = 0; i < 2; i++) free_input(&ins[i]);
    free(out), free(f), free(proj), free(pf);
}

/* ---- shift -------------------------------------------------------------- */
typedef struct { input *x; int B, T, d; } shift_ctx;
static void shift_ref(void *c, double *o) {
    shift_ctx *s = c;
    for (int b = 0; b < s->B; b++)
        for (int t = 0; t < s->T; t++)
            for (int i = 0; i < s->d; i++)
                o[(b * s->T + t) * s->d + i] = t ? s->x->d[(b * s->T + t - 1) * s->d + i] : 0;
}
static void test_shift(void) {
    int B = 3, T = 5, d = 4, n = B * T * d;
    input x = mk_input("x", n, 1);
    shift_ctx c = {&x, B, T, d};
    float *out = malloc(n * 4);
    double *proj = mk_proj(n);
    float *pf = to_float(proj, n);
    latent_tr_shift_right_forward(out, x.f, B, T, d);
    latent_tr_shift_right_backward(x.g, pf, B, T, d);
    check_op("shift_right", shift_ref, &c, out, proj, n, &x, 1);
    free_input(&x);
    free(out), free(proj), free(pf);
}

/* ---- LRT residual injection --------------------------------------------- */
typedef struct { input *x, *m, *al, *ga; int n; } inj_ctx;
static void inj_ref(void *c, double *o) {
    inj_ctx *j = c;
    for (int i = 0; i < j->n; i++) o[i] = j->al->d[0] * j->x->d[i] + j->ga->d[0] * j->m->d[i];
}
static void test_lrt_residual(void) {
    int n = 2500; /* spans several partial-sum chunks */
    input ins[4] = {mk_input("x", n, 1), mk_input("m", n, 1), mk_input("alpha", 1, 1), mk_input("gamma", 1, 1)};
    inj_ctx c = {&ins[0], &ins[1], &ins[2], &ins[3], n};
    float *out = malloc(n * 4);
    double *proj = mk_proj(n);
    float *pf = to_float(proj, n);
    latent_tr_lrt_residual_forward(out, ins[0].f, ins[1].f, ins[2].f[0], ins[3].f[0], n);
    latent_tr_lrt_residual_backward(ins[0].g, ins[1].g, ins[2].g, ins[3].g, pf, ins[0].f, ins[1].f, ins[2].f[0], ins[3].f[0], n);
    check_op("lrt_residual", inj_ref, &c, out, proj, n, ins, 4);
    for (int i = 0; i < 4; i++) free_input(&ins[i]);
    free(out), free(proj), free(pf);
}

/* ---- LRT KV injection --------------------------------------------------- */
typedef struct { input *kl, *vl, *a, *m, *G, *K, *V; int n, d, nkv, hd; } kvi_ctx;
static void kvi_ref(void *c, double *o) {
    kvi_ctx *k = c;
    int kvd = k->nkv * k->hd, d = k->d;
    for (int r = 0; r < k->n; r++)
        for (int h = 0; h < k->nkv; h++) {
            double gl = 0, gf = 0;
            for (int i = 0; i < d; i++)
                gl += k->a->d[r * d + i] * k->G->d[h * d + i], gf += k->a->d[r * d + i] * k->G->d[(k->nkv + h) * d + i];
            gl = 2 * sigm(gl), gf = 2 * sigm(gf);
            for (int i = 0; i < k->hd; i++) {
                int row = h * k->hd + i;
                double mk = 0, mv = 0;
                for (int j = 0; j < d; j++) mk += k->m->d[r * d + j] * k->K->d[row * d + j], mv += k->m->d[r * d + j] * k->V->d[row * d + j];
                o[(size_t)r * 2 * kvd + row] = gl * k->kl->d[r * kvd + row] + gf * mk;
                o[(size_t)r * 2 * kvd + kvd + row] = gl * k->vl->d[r * kvd + row] + gf * mv;
            }
        }
}
static void test_lrt_kv(void) {
    int n = 5, d = 12, nkv = 2, hd = 4, kvd = nkv * hd;
    input ins[7] = {mk_input("kl", n * kvd, 1), mk_input("vl", n * kvd, 1), mk_input("a", n * d, 1), mk_input("m", n * d, 1),
                    mk_input("G", 2 * nkv * d, 0.5f), mk_input("K", kvd * d, 0.4f), mk_input("V", kvd * d, 0.4f)};
    kvi_ctx c = {&ins[0], &ins[1], &ins[2], &ins[3], &ins[4], &ins[5], &ins[6], n, d, nkv, hd};
    float *k = malloc(n * kvd * 4), *v = malloc(n * kvd * 4), *gate = malloc(n * 2 * nkv * 4);
    float *mk = malloc(n * kvd * 4), *mv = malloc(n * kvd * 4), *scratch = malloc(n * (2 * nkv + 2 * kvd) * 4);
    latent_tr_lrt_kv_forward(NULL, k, v, gate, mk, mv, ins[0].f, ins[1].f, ins[2].f, ins[3].f, ins[4].f, ins[5].f, ins[6].f, n, d, nkv, hd);
    int no = n * 2 * kvd;
    float *out = malloc(no * 4);
    for (int r = 0; r < n; r++) memcpy(out + r * 2 * kvd, k + r * kvd, kvd * 4), memcpy(out + r * 2 * kvd + kvd, v + r * kvd, kvd * 4);
    double *proj = mk_proj(no);
    float *dk = malloc(n * kvd * 4), *dv = malloc(n * kvd * 4);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < kvd; i++) dk[r * kvd + i] = (float)proj[r * 2 * kvd + i], dv[r * kvd + i] = (float)proj[r * 2 * kvd + kvd + i];
    latent_tr_lrt_kv_backward(NULL, ins[0].g, ins[1].g, ins[2].g, ins[3].g, ins[4].g, ins[5].g, ins[6].g, dk, dv, gate, mk, mv, ins[0].f,
                       ins[1].f, ins[2].f, ins[3].f, ins[4].f, ins[5].f, ins[6].f, scratch, n, d, nkv, hd);
    check_op("lrt_kv", kvi_ref, &c, out, proj, no, ins, 7);
    for (int i = 0; i < 7; i++) free_input(&ins[i]);
    free(k), free(v), free(gate), free(mk), free(mv), free(scratch), free(out), free(proj), free(dk), free(dv);
}

/* The multi-product forms equal separate calls bit for bit. */
static void test_linear_multi(void) {
    int n = 300, in = 40, dims[3] = {64, 24, 24}, total = 0;
    for (int i = 0; i < 3; i++) total += dims[i];
    float *x = malloc(n * in * 4), *w[3], *o1[3], *o2[3], *dw1[3], *dw2[3], *g[3];
    float *dx1 = calloc(n * in, 4), *dx2 = calloc(n * in, 4);
    for (int i = 0; i < n * in; i++) x[i] = frand(1);
    for (int k = 0; k < 3; k++) {
        w[k] = malloc(dims[k] * in * 4), g[k] = malloc(n * dims[k] * 4);
        o1[k] = malloc(n * dims[k] * 4), o2[k] = malloc(n * dims[k] * 4);
        dw1[k] = calloc(dims[k] * in, 4), dw2[k] = calloc(dims[k] * in, 4);
        for (int i = 0; i < dims[k] * in; i++) w[k][i] = frand(1);
        for (int i = 0; i < n * dims[k]; i++) g[k][i] = frand(1);
        latent_tr_linear_forward(NULL, o1[k], x, w[k], NULL, n, in, dims[k]);
        latent_tr_linear_backward(NULL, dx1, dw1[k], NULL, g[k], x, w[k], n, in, dims[k]);
    }
    latent_tr_linear_forward_multi(NULL, o2, x, (const float *const *)w, dims, 3, n, in);
    latent_tr_linear_backward_multi(NULL, dx2, dw2, (const float *const *)g, x, (const float *const *)w, dims, 3, n, in);
    int same = !memcmp(dx1, dx2, n * in * 4);
    for (int k = 0; k < 3; k++)
        same &= !memcmp(o1[k], o2[k], n * dims[k] * 4) && !memcmp(dw1[k], dw2[k], dims[k] * in * 4);
    CHECK(same, "linear multi forms differ from separate calls");
    for (int k = 0; k < 3; k++) free(w[k]), free(g[k]), free(o1[k]), free(o2[k]), free(dw1[k]), free(dw2[k]);
    free(x), free(dx1), free(dx2);
    (void)total;
}

int main(void) {
    latent_set_threads(2);
    test_linear(5, 7, 3, 0);
    test_linear(70, 33, 80, 1); /* enough rows and outputs to split over threads */
    test_linear_multi();
    test_rmsnorm();
    test_rope();
    test_attention("attention", 2, 70, 4, 2, 4, 1, 0); /* two query blocks */
    test_attention("attention(subset)", 2, 9, 2, 1, 6, 3, 1); /* LRT subset: positions 1, 4, 7 */
    test_swiglu();
    test_crossentropy();
    test_embedding();
    test_fuse();
    test_update(1);
    test_update(0);
    test_shift();
    test_lrt_residual();
    test_lrt_kv();
    return tu_finish("test_backward");
}
