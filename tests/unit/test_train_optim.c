/* The trainer's optimizer, schedule and token files:
 *  - AdamW and SGD updates against the PyTorch formulas computed here in
 *    double (decay on 2-D tensors only, clipping, frozen tensors);
 *  - the learning-rate schedule (warmup, cosine, constant);
 *  - token files: the §5 window order, the shuffled order visiting every
 *    window once per epoch, labels / mask / flow companions, refusals. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "latent/threads.h"
#include "latent/train.h"
#include "testutil.h"
#include "tiny_model.h"

static void test_optim(int adamw) {
    latent_config c = tm_config(16, 1, 2, 1, 24, 20);
    latent_model m;
    tm_model(&m, c, 1, 0);
    latent_err err;
    latent_weights g, w0;
    latent_weights_alloc(&g, &c, &err);
    latent_weights_alloc(&w0, &c, &err);
    latent_optim_opts o = {.adamw = adamw, .lr = 0.01f, .weight_decay = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f,
                           .eps = 1e-8f, .grad_clip = 0.5f, .cosine = 1, .steps = 10};
    latent_optim opt;
    CHECK(latent_optim_init(&opt, &c, &o, &err) == 0, "optim init: %s", err.msg);
    opt.frozen[1] = 1; /* the first layer norm never moves */
    double *m1 = calloc(m.w.slab_floats, sizeof(double)), *v1 = calloc(m.w.slab_floats, sizeof(double));
    double *ref = malloc(m.w.slab_floats * sizeof(double));
    for (int64_t i = 0; i < m.w.slab_floats; i++) ref[i] = m.w.slab[i];
    tm_rng = 5;
    for (int step = 1; step <= 3; step++) {
        for (int64_t i = 0; i < g.slab_floats; i++) g.slab[i] = tm_normal() * (step == 2 ? 0.001f : 1.0f);
        double gn = latent_grad_norm(&g, opt.frozen), ss = 0;
        for (int p = 0; p < g.n_params; p++)
            if (!opt.frozen[p])
                for (int64_t j = 0; j < g.params[p].numel; j++) ss += (double)(*g.params[p].slot)[j] * (*g.params[p].slot)[j];
        CHECK_NEAR(gn, sqrt(ss), 1e-9 * sqrt(ss), "grad norm");
        double scale = gn > o.grad_clip ? o.grad_clip / (gn + 1e-6) : 1.0;
        double lr = latent_optim_step(&opt, &m.w, &g, gn);
        CHECK_NEAR(lr, 0.01 * 0.5 * (1 + cos(M_PI * (step - 1) / 10.0)), 1e-7, "cosine lr");
        for (int p = 0; p < m.w.n_params; p++) {
            const latent_param *pp = &m.w.params[p];
            size_t off = *pp->slot - m.w.slab;
            double wd = pp->ndim == 2 ? o.weight_decay : 0;
            for (int64_t j = 0; j < pp->numel; j++) {
                size_t i = off + j;
                if (opt.frozen[p]) continue;
                double gr = (*g.params[p].slot)[j] * scale;
                if (adamw) {
                    m1[i] = 0.9 * m1[i] + 0.1 * gr;
                    v1[i] = 0.99 * v1[i] + 0.01 * gr * gr;
                    double bc1 = 1 - pow(0.9, step), bc2 = 1 - pow(0.99, step);
                    ref[i] *= 1 - lr * wd;
                    ref[i] -= lr / bc1 * m1[i] / (sqrt(v1[i]) / sqrt(bc2) + 1e-8);
                } else {
                    ref[i] -= lr * (gr + wd * ref[i]);
                }
            }
        }
    }
    double worst = 0;
    for (int p = 0; p < m.w.n_params; p++) {
        const latent_param *pp = &m.w.params[p];
        size_t off = *pp->slot - m.w.slab;
        for (int64_t j = 0; j < pp->numel; j++) {
            double e = fabs(m.w.slab[off + j] - ref[off + j]);
            if (e > worst) worst = e;
        }
    }
    CHECK(worst < 2e-6, "%s: weights differ from the PyTorch formula by %g", adamw ? "adamw" : "sgd", worst);
    /* (the frozen tensor's reference stayed at its initial values) */
    fprintf(stderr, "%s: max |w - reference| after 3 steps %.3g\n", adamw ? "adamw" : "sgd", worst);
    free(m1), free(v1), free(ref);
    latent_optim_free(&opt);
    latent_weights_free(&g);
    latent_weights_free(&w0);
    latent_weights_free(&m.w);
}

static void test_schedule(void) {
    latent_optim_opts o = {.lr = 1.0f, .warmup = 4, .cosine = 1, .steps = 14};
    CHECK_NEAR(latent_optim_lr(&o, 0), 0.25, 1e-12, "warmup step 0");
    CHECK_NEAR(latent_optim_lr(&o, 3), 1.0, 1e-12, "warmup end");
    CHECK_NEAR(latent_optim_lr(&o, 4), 1.0, 1e-12, "cosine start");
    CHECK_NEAR(latent_optim_lr(&o, 9), 0.5, 1e-12, "cosine middle");
    CHECK_NEAR(latent_optim_lr(&o, 14), 0.0, 1e-12, "cosine end");
    o.cosine = 0;
    CHECK_NEAR(latent_optim_lr(&o, 13), 1.0, 1e-12, "constant");
}

static char dir[64];

static void write_file(const char *name, const void *data, size_t n) {
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static void test_tokens(void) {
    snprintf(dir, sizeof dir, "/tmp/latent-test-tok.XXXXXX");
    if (!mkdtemp(dir)) return;
    enum { n = 103, T = 8, B = 3 };
    uint32_t ids[n], labels[n];
    uint8_t mask[n], flow[n];
    for (int i = 0; i < n; i++) ids[i] = i % 50, labels[i] = 49 - i % 50, mask[i] = i % 3 != 0, flow[i] = i % 4 ? 2 : 1;
    write_file("a.bin", ids, sizeof ids);
    write_file("a.labels", labels, sizeof labels);
    write_file("a.mask", mask, sizeof mask);
    write_file("a.flow", flow, sizeof flow);
    latent_tokens f;
    latent_err err;
    char p[128];
    snprintf(p, sizeof p, "%s/a.bin", dir);
    CHECK(latent_tokens_open(&f, p, 50, T, &err) == 0, "open: %s", err.msg);
    CHECK(f.labels && f.mask && f.flow, "companion files found");
    int32_t tok[B * T], tgt[B * T];
    uint8_t mk[B * T], fl[B * T];
    latent_train_batch b = {.tokens = tok, .targets = tgt, .mask = mk, .flow = fl};
    int bad = 0;
    for (int s = 0; s < 9; s++) {
        latent_tokens_batch(&f, s, B, T, 0, 0, &b);
        for (int r = 0; r < B; r++) {
            int o = ((s * B + r) * T) % (n - T - 1);
            for (int j = 0; j < T; j++) {
                int i = r * T + j;
                bad += tok[i] != (int32_t)ids[o + j] || tgt[i] != (int32_t)labels[o + j + 1] || mk[i] != mask[o + j + 1] ||
                       fl[i] != flow[o + j];
            }
        }
    }
    CHECK(bad == 0, "§5 order with labels/mask/flow: %d mismatches", bad);
    /* shuffled: windows at multiples of T, each once per epoch, a new order per epoch */
    int nw = (n - T - 1) / T + 1, seen[64], same_order = 1;
    int64_t first[64];
    for (int e = 0; e < 3; e++) {
        memset(seen, 0, sizeof seen);
        for (int k = 0; k < nw; k++) {
            int64_t i = (int64_t)e * nw + k, o = latent_tokens_offset(&f, i / B, (int)(i % B), B, T, 1, 42);
            CHECK(o % T == 0 && o + T + 1 <= n, "shuffled offset %lld", (long long)o);
            if (o % T == 0 && o / T < nw) seen[o / T]++;
            if (e == 0) first[k] = o;
            else if (first[k] != o) same_order = 0;
        }
        int once = 1;
        for (int k = 0; k < nw; k++) once &= seen[k] == 1;
        CHECK(once, "epoch %d visits every window once", e);
    }
    CHECK(!same_order, "epochs are reshuffled");
    latent_tokens_close(&f);
    /* refusals */
    uint8_t short_mask[n - 1];
    memset(short_mask, 1, sizeof short_mask);
    write_file("a.mask", short_mask, sizeof short_mask);
    CHECK(latent_tokens_open(&f, p, 50, T, &err) != 0 && strstr(err.msg, "a.mask"), "short mask refused: %s", err.msg);
    write_file("a.mask", mask, sizeof mask);
    flow[5] = 3;
    write_file("a.flow", flow, sizeof flow);
    CHECK(latent_tokens_open(&f, p, 50, T, &err) != 0 && strstr(err.msg, "1 or 2"), "flow 3 refused: %s", err.msg);
    CHECK(latent_tokens_open(&f, p, 40, T, &err) != 0 && strstr(err.msg, "vocabulary"), "ids >= vocab refused: %s", err.msg);
    CHECK(latent_tokens_open(&f, p, 50, 200, &err) != 0, "file shorter than a window refused");
    const char *names[] = {"a.bin", "a.labels", "a.mask", "a.flow"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

int main(void) {
    latent_set_threads(2);
    test_optim(1);
    test_optim(0);
    test_schedule();
    test_tokens();
    return tu_finish("test_train_optim");
}
