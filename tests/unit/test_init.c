/* Model creation: from-scratch init (values, determinism, backbone shared
 * across recurrence kinds), retrofit (logits of the base, bit for bit, when
 * decoding token by token), and the atomic model directory writer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "latent/engine.h"
#include "latent/kv.h"
#include "latent/model_init.h"
#include "testutil.h"
#include "tiny_model.h"

/* Every position's logits, one token per step (decode path). */
static int decode_logits(const latent_model *m, const int32_t *tok, int n, float *out) {
    latent_err err;
    latent_kv_pool pool = {0};
    latent_seq seq = {0};
    latent_engine *e = NULL;
    int rc = -1;
    if (latent_kv_pool_init(&pool, &m->cfg, 16, latent_kv_page_bytes(&m->cfg, 16, LATENT_KV_F32) * 4, LATENT_KV_F32, &err) != 0 ||
        latent_seq_init(&seq, &pool, &m->cfg, &err) != 0 || !(e = latent_engine_new(m, &err)))
        goto done;
    for (int t = 0; t < n; t++) {
        latent_batch_entry b = {.seq = &seq, .tokens = tok + t, .n_tokens = 1, .prompt = t < n / 2,
                                .logits = LATENT_LOGITS_LAST, .out = out + (size_t)t * m->cfg.vocab};
        if (latent_engine_step(e, &b, 1, &err) != 0) goto done;
    }
    rc = 0;
done:
    latent_engine_free(e);
    latent_seq_free(&seq);
    latent_kv_pool_free(&pool);
    return rc;
}

static void check_retrofit(const char *name, latent_config rc) {
    latent_model base, rm;
    latent_config pc = rc;
    pc.rec = LATENT_REC_NONE;
    CHECK(tm_model(&base, pc, 3, 0) == 0, "%s: base model", name);
    memset(&rm, 0, sizeof rm);
    rm.cfg = rc;
    latent_err err;
    CHECK(latent_weights_alloc(&rm.w, &rm.cfg, &err) == 0, "%s: alloc: %s", name, err.msg);
    CHECK(latent_weights_copy_backbone(&rm.w, &base.w, &err) == 0, "%s: copy: %s", name, err.msg);
    latent_weights_init_retrofit(&rm.w, &rm.cfg, 9);
    enum { N = 12 };
    int32_t tok[N] = {1, 5, 9, 33, 2, 0, 17, 17, 40, 63, 8, 3};
    const int V = rc.vocab;
    float *a = calloc((size_t)N * V, sizeof *a), *b = calloc((size_t)N * V, sizeof *b);
    CHECK(decode_logits(&base, tok, N, a) == 0 && decode_logits(&rm, tok, N, b) == 0, "%s: decode", name);
    CHECK(memcmp(a, b, (size_t)N * V * sizeof *a) == 0, "%s: retrofit logits differ from the base's (rel %.3g)",
          name, tu_rel_err(b, a, (size_t)N * V));
    /* the new tensors are not all zero (alpha, w_rec), except for KV-only LRT,
     * whose gates and projections are all 0 and learn through g_fb = 1 */
    int nonzero = 0;
    for (int i = 0; i < rm.w.n_params; i++) {
        const latent_param *p = &rm.w.params[i];
        if (!latent_param_is_recurrent(p->name)) continue;
        for (int64_t j = 0; j < p->numel; j++) nonzero += (*p->slot)[j] != 0;
    }
    int kv_only = rc.rec == LATENT_REC_LRT && !rc.lrt.residual_injection;
    CHECK(kv_only ? nonzero == 0 : nonzero > 0, "%s: %d non-zero recurrent values", name, nonzero);
    free(a);
    free(b);
    latent_weights_free(&rm.w);
    latent_weights_free(&base.w);
}

static double mean_std(const float *x, int64_t n, double *std) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) s += x[i], s2 += (double)x[i] * x[i];
    double m = s / n;
    *std = sqrt(s2 / n - m * m);
    return m;
}

static void check_scratch(void) {
    latent_config c = tm_t2mlr(tm_config(64, 4, 4, 2, 128, 300), 1, 2, 1);
    latent_init_opts o;
    latent_init_defaults(&o);
    o.seed = 42;
    latent_weights w1, w2, wp;
    latent_err err;
    CHECK(latent_weights_alloc(&w1, &c, &err) == 0 && latent_weights_alloc(&w2, &c, &err) == 0, "alloc");
    latent_weights_init(&w1, &c, &o);
    latent_weights_init(&w2, &c, &o);
    CHECK(memcmp(w1.slab, w2.slab, (size_t)w1.slab_floats * sizeof(float)) == 0, "same seed, different weights");
    double sd, m = mean_std(w1.embed, (int64_t)c.vocab * c.d, &sd);
    CHECK(fabs(sd - 0.02) < 0.001 && fabs(m) < 0.001, "embedding mean %g std %g", m, sd);
    m = mean_std(w1.layers[1].wd, (int64_t)c.d * c.ffn, &sd);
    CHECK(fabs(sd - 0.02 / sqrt(8.0)) < 0.001, "down_proj std %g", sd);
    m = mean_std(w1.t2mlr.w_rec, (int64_t)c.d * c.d, &sd);
    CHECK(fabs(sd - 1 / 8.0) < 0.01, "w_rec std %g", sd);
    CHECK(w1.layers[3].attn_norm[5] == 1 && w1.final_norm[0] == 1, "norms are not 1");
    CHECK(w1.t2mlr.gamma_rec[0] == 0.1f && w1.t2mlr.gamma_cur[0] == 0.1f && w1.t2mlr.f_rec_b[3] == 0,
          "gammas 0.1, biases 0");
    CHECK(memcmp(w1.layers[0].wq, w1.layers[1].wq, 64 * sizeof(float)) != 0, "two tensors share a stream");
    /* the backbone does not depend on the recurrence */
    latent_config pc = c;
    pc.rec = LATENT_REC_NONE;
    CHECK(latent_weights_alloc(&wp, &pc, &err) == 0, "alloc plain");
    latent_weights_init(&wp, &pc, &o);
    int same = 1;
    for (int i = 0; i < wp.n_params; i++) {
        const latent_param *q = latent_weights_find(&w1, wp.params[i].name);
        same &= q && memcmp(*q->slot, *wp.params[i].slot, (size_t)q->numel * sizeof(float)) == 0;
    }
    CHECK(same, "plain and T2MLR inits of one seed differ in the backbone");
    o.seed = 43;
    latent_weights_init(&w2, &c, &o);
    CHECK(memcmp(w1.embed, w2.embed, 64 * sizeof(float)) != 0, "another seed, same weights");
    latent_weights_free(&w1);
    latent_weights_free(&w2);
    latent_weights_free(&wp);

    latent_config lc = tm_lrt(tm_config(64, 3, 4, 2, 128, 300), 1, 0, 2, 1);
    latent_weights wl;
    CHECK(latent_weights_alloc(&wl, &lc, &err) == 0, "alloc lrt");
    latent_weights_init(&wl, &lc, &o);
    CHECK(wl.layers[2].lrt_alpha[0] == 1 && wl.layers[2].lrt_gamma[0] == 0.1f && wl.layers[0].lrt_gate[7] == 0,
          "LRT alpha 1, gamma 0.1, gates 0");
    m = mean_std(wl.lrt_shared_k, (int64_t)latent_config_kv_dim(&lc) * lc.d, &sd);
    CHECK(fabs(sd - 0.02) < 0.002, "shared k_proj std %g", sd);
    latent_weights_free(&wl);
}

static void check_dir_write(void) {
    char root[] = "/tmp/latent-test-init.XXXXXX";
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    char dir[128];
    snprintf(dir, sizeof dir, "%s/model", root);
    latent_model m;
    CHECK(tm_model(&m, tm_lrt(tm_config(32, 2, 2, 1, 64, 100), -1, 0, 1, 0), 5, 0) == 0, "model");
    latent_err err;
    CHECK(latent_model_dir_write(dir, &m.cfg, &m.w, 0, NULL, 0, &err) == 0, "write: %s", err.msg);
    latent_model back = {0};
    CHECK(latent_model_load(&back, dir, &err) == 0, "load: %s", err.msg);
    /* Compared tensor by tensor: F32 tensors are used in place from the file. */
    int same = back.w.n_params == m.w.n_params;
    for (int i = 0; same && i < m.w.n_params; i++)
        same = memcmp(*back.w.params[i].slot, *m.w.params[i].slot, (size_t)m.w.params[i].numel * sizeof(float)) == 0;
    CHECK(same, "weights round trip");
    CHECK(back.cfg.rec == LATENT_REC_LRT && back.cfg.lrt.source_layer == -1, "config round trip");
    CHECK(back.tok == NULL, "no tokenizer expected");
    latent_model_free(&back);
    CHECK(latent_model_dir_write(dir, &m.cfg, &m.w, 0, NULL, 0, &err) != 0 && strstr(err.msg, "exists"),
          "existing dir not refused: %s", err.msg);
    m.w.embed[0] = 0.5f;
    CHECK(latent_model_dir_write(dir, &m.cfg, &m.w, 1, NULL, 1, &err) == 0, "replace: %s", err.msg);
    CHECK(latent_model_load(&back, dir, &err) == 0 && back.w.embed[0] == 0.5f, "replaced weights: %s", err.msg);
    latent_model_free(&back);
    char bad[160];
    snprintf(bad, sizeof bad, "%s/no/such/dir", root);
    CHECK(latent_model_dir_write(bad, &m.cfg, &m.w, 0, NULL, 0, &err) != 0, "missing parent accepted");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp- >/dev/null", root);
    CHECK(system(cmd) != 0, "a temp dir was left behind");
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0, "cleanup");
    latent_weights_free(&m.w);
}

int main(void) {
    latent_config base = tm_config(64, 4, 4, 2, 128, 64);
    check_retrofit("t2mlr", tm_t2mlr(base, 1, 2, 1));
    check_retrofit("t2mlr no prompt recurrence", tm_t2mlr(base, 0, 3, 0));
    check_retrofit("lrt", tm_lrt(base, 2, 0, 3, 0));
    check_retrofit("lrt shared", tm_lrt(base, -1, 1, 2, 1));
    latent_config r = tm_lrt(base, 1, 0, 3, 0);
    r.lrt.kv_injection = 0;
    check_retrofit("lrt residual only", r);
    r = tm_lrt(base, 1, 0, 3, 0);
    r.lrt.residual_injection = 0;
    check_retrofit("lrt kv only", r);
    check_scratch();
    check_dir_write();
    return tu_finish("test_init");
}
