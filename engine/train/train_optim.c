/* AdamW and SGD over the parameter table, the learning-rate schedule and the
 * global gradient norm. AdamW follows PyTorch's torch.optim.AdamW (decoupled
 * decay, bias-corrected moments, eps added to the corrected sqrt(v)); SGD
 * adds the decay to the gradient (torch.optim.SGD's weight_decay). Decay
 * applies to 2-D tensors only: norms, biases and the recurrent scalars are
 * not pulled toward zero. */
#include "latent/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_ops.h"

int latent_optim_init(latent_optim *opt, const latent_config *cfg, const latent_optim_opts *o, latent_err *err) {
    memset(opt, 0, sizeof *opt);
    opt->o = *o;
    if (o->adamw) {
        if (latent_weights_alloc(&opt->m, cfg, err) != 0 || latent_weights_alloc(&opt->v, cfg, err) != 0) {
            latent_optim_free(opt);
            return -1;
        }
    }
    latent_weights probe; /* the parameter count, for the frozen flags */
    if (latent_weights_alloc(&probe, cfg, err) != 0) {
        latent_optim_free(opt);
        return -1;
    }
    opt->frozen = calloc(probe.n_params ? probe.n_params : 1, 1);
    latent_weights_free(&probe);
    if (!opt->frozen) {
        latent_optim_free(opt);
        return latent_err_set(err, LATENT_E_NOMEM, "optimizer: out of memory");
    }
    return 0;
}

void latent_optim_free(latent_optim *opt) {
    if (!opt) return;
    latent_weights_free(&opt->m);
    latent_weights_free(&opt->v);
    free(opt->frozen);
    memset(opt, 0, sizeof *opt);
}

double latent_optim_lr(const latent_optim_opts *o, int64_t s) {
    if (o->warmup > 0 && s < o->warmup) return o->lr * (double)(s + 1) / o->warmup;
    if (!o->cosine) return o->lr;
    int64_t span = o->steps - o->warmup;
    double p = span > 0 ? (double)(s - o->warmup) / span : 1.0;
    if (p > 1) p = 1;
    return o->lr * 0.5 * (1.0 + cos(M_PI * p));
}

double latent_grad_norm(const latent_weights *g, const uint8_t *frozen) {
    double ss = 0;
    for (int i = 0; i < g->n_params; i++) {
        if (frozen && frozen[i]) continue;
        const float *x = *g->params[i].slot;
        double s = 0;
        for (int64_t j = 0; j < g->params[i].numel; j++) s += (double)x[j] * x[j];
        ss += s;
    }
    return sqrt(ss);
}

typedef struct {
    float *w, *g, *m, *v;
    float lr, wd, b1, b2, eps, bc1, bc2, gscale;
    int adamw;
} upd_job;

static void upd_rows(void *ctx, int i0, int i1) {
    const upd_job *j = ctx;
    if (j->adamw) {
        float step = j->lr / j->bc1, sbc2 = sqrtf(j->bc2), decay = 1.0f - j->lr * j->wd;
        for (int i = i0; i < i1; i++) {
            float g = j->g[i] * j->gscale;
            j->m[i] = j->b1 * j->m[i] + (1.0f - j->b1) * g;
            j->v[i] = j->b2 * j->v[i] + (1.0f - j->b2) * g * g;
            float w = j->w[i] * decay;
            j->w[i] = w - step * j->m[i] / (sqrtf(j->v[i]) / sbc2 + j->eps);
        }
    } else {
        for (int i = i0; i < i1; i++) j->w[i] -= j->lr * (j->g[i] * j->gscale + j->wd * j->w[i]);
    }
}

double latent_optim_step(latent_optim *opt, latent_weights *w, latent_weights *g, double grad_norm) {
    const latent_optim_opts *o = &opt->o;
    double lr = latent_optim_lr(o, opt->step);
    opt->step++;
    float gscale = 1.0f;
    if (o->grad_clip > 0 && grad_norm > o->grad_clip) gscale = (float)(o->grad_clip / (grad_norm + 1e-6));
    double bc1 = 1.0 - pow(o->beta1, (double)opt->step), bc2 = 1.0 - pow(o->beta2, (double)opt->step);
    for (int i = 0; i < w->n_params; i++) {
        if (opt->frozen[i]) continue;
        const latent_param *p = &w->params[i];
        upd_job j = {*p->slot, *g->params[i].slot, o->adamw ? *opt->m.params[i].slot : NULL,
                     o->adamw ? *opt->v.params[i].slot : NULL, (float)lr, p->ndim == 2 ? o->weight_decay : 0.0f,
                     o->beta1, o->beta2, o->eps, (float)bc1, (float)bc2, gscale, o->adamw};
        latent_tr_par_rows(upd_rows, &j, (int)p->numel);
    }
    return lr;
}
