/* Model directories end to end: tiny plain / T2MLR / LRT models written with
 * latent_config_save + latent_weights_save (F32 and BF16, single file and
 * sharded) are loaded back and compared; F16 is checked against known bit
 * patterns; corrupt files are refused with messages naming file + tensor. */
#include "testutil.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "latent/config.h"
#include "latent/engine.h"
#include "latent/model.h"
#include "safetensors.h"

/* ---- helpers ------------------------------------------------------------- */

static char g_root[64];
static int g_dirs;

static void rm_rf(const char *path) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", path);
}

/* A fresh empty directory under the test's mkdtemp root. */
static void new_dir(char *out, size_t cap, const char *tag) {
    snprintf(out, cap, "%s/%02d-%s", g_root, g_dirs++, tag);
    CHECK(mkdir(out, 0755) == 0, "mkdir %s", out);
}

static void path_in(char *out, size_t cap, const char *dir, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static latent_config tiny_config(void) {
    latent_config c;
    memset(&c, 0, sizeof c);
    c.d = 16; c.ffn = 24; c.n_layers = 3; c.n_heads = 4; c.n_kv_heads = 2; c.head_dim = 4;
    c.vocab = 40; c.max_pos = 64; c.rms_eps = 1e-5f; c.rope_theta = 10000.0f;
    c.tie_embeddings = false; c.bos_id = 1; c.eos_id = 2; c.n_eos = 1; c.eos_ids[0] = 2;
    return c;
}

static latent_config t2mlr_config(void) {
    latent_config c = tiny_config();
    c.rec = LATENT_REC_T2MLR;
    c.t2mlr = (latent_t2mlr_config){1, 2, true, 5.0f, 1e-6f, true};
    return c;
}

static latent_config lrt_config(bool shared, bool residual, bool kv) {
    latent_config c = tiny_config();
    c.rec = LATENT_REC_LRT;
    c.lrt = (latent_lrt_config){1, 1, 2, residual, kv, shared};
    return c;
}

/* Deterministic, distinct per parameter and element, not bf16-exact. */
static void fill_pattern(latent_weights *w) {
    for (int i = 0; i < w->n_params; i++) {
        float *p = *w->params[i].slot;
        for (int64_t j = 0; j < w->params[i].numel; j++)
            p[j] = sinf(0.731f * (float)i + 0.113f * (float)j) * (1.0f + 0.05f * (float)i);
    }
}

/* Reference bf16 rounding (round to nearest even), for expected values. */
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t lsb = (u >> 16) & 1;
    u = (u + 0x7fff + lsb) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* Writes config.json and model.safetensors for cfg; the weights stay in *w. */
static void write_model(const char *dir, const latent_config *cfg, latent_weights *w, int bf16) {
    latent_err e = {0};
    char path[512];
    path_in(path, sizeof path, dir, "config.json");
    CHECK(latent_config_save(cfg, path, &e) == 0, "%s", e.msg);
    CHECK(latent_weights_alloc(w, cfg, &e) == 0, "%s", e.msg);
    fill_pattern(w);
    CHECK(latent_weights_save(w, dir, bf16, &e) == 0, "%s", e.msg);
}

/* Every param of `ref` equals the loaded one (bf16-rounded when bf16). */
/* `bf16`: 1 for a BF16 file, 0 for F32, -1 for F16 (exact values, converted). */
static void compare_weights(const latent_weights *ref, const latent_weights *got, int bf16,
                            const char *what) {
    CHECK(ref->n_params == got->n_params, "%s: %d vs %d params", what, ref->n_params, got->n_params);
    for (int i = 0; i < ref->n_params; i++) {
        const latent_param *p = &ref->params[i];
        const latent_param *q = latent_weights_find(got, p->name);
        CHECK(q != NULL, "%s: %s not in loaded table", what, p->name);
        if (!q) continue;
        CHECK(q->numel == p->numel, "%s: %s numel", what, p->name);
        int64_t bad = 0;
        for (int64_t j = 0; j < p->numel; j++) {
            float want = bf16 == 1 ? bf16_round((*p->slot)[j]) : (*p->slot)[j];
            if ((*q->slot)[j] != want) bad++;
        }
        CHECK(bad == 0, "%s: %s: %lld values differ", what, p->name, (long long)bad);
        CHECK(((uintptr_t)*q->slot & 3) == 0, "%s: %s not float-aligned", what, p->name);
        /* F32 tensors are used in place from the file mapping, not copied. */
        int in_slab = *q->slot >= got->slab && *q->slot < got->slab + got->slab_floats;
        if (bf16 == 0) CHECK(!in_slab, "%s: %s was copied instead of mapped", what, p->name);
        if (bf16 != 0) CHECK(in_slab, "%s: %s was not converted into the slab", what, p->name);
    }
}

/* Loading must fail with every `want` substring in the message. */
static void expect_fail(const char *dir, const char *what, const char *w1, const char *w2,
                        const char *w3) {
    latent_model m;
    latent_err e = {0};
    int rc = latent_model_load(&m, dir, &e);
    CHECK(rc == -1, "%s: loaded a bad model", what);
    if (rc == 0) { latent_model_free(&m); return; }
    CHECK(m.dir == NULL && m.w.slab == NULL && m.tok == NULL, "%s: not cleaned up", what);
    CHECK(e.code == LATENT_E_FORMAT || e.code == LATENT_E_IO || e.code == LATENT_E_UNSUPPORTED,
          "%s: a broken model is a format, I/O or unsupported error, not %s", what, latent_err_name(e.code));
    const char *want[3] = {w1, w2, w3};
    for (int i = 0; i < 3; i++)
        if (want[i]) CHECK(strstr(e.msg, want[i]) != NULL, "%s: '%s' not in: %s", what, want[i], e.msg);
    fprintf(stderr, "  ok (%s): %s\n", what, e.msg);
}

/* Raw safetensors writer for hand-built headers: length prefix `hlen_field`
 * (or the true header length when 0), header text, then `data`. */
static void write_raw_st(const char *path, const char *header, uint64_t hlen_field,
                         const void *data, size_t data_len) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    uint64_t n = hlen_field ? hlen_field : strlen(header);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(n >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (data_len) fwrite(data, 1, data_len, f);
    fclose(f);
}

/* st_file_open must fail with the substrings in the message. */
static void st_expect_fail(const char *path, const char *what, const char *w1, const char *w2,
                           const char *w3) {
    st_file f;
    latent_err e = {0};
    int rc = latent_st_file_open(&f, path, &e);
    CHECK(rc == -1, "%s: opened a bad file", what);
    if (rc == 0) { latent_st_file_close(&f); return; }
    CHECK(f.map == NULL && f.tensors == NULL, "%s: not cleaned up", what);
    CHECK(e.code == LATENT_E_FORMAT || e.code == LATENT_E_IO || e.code == LATENT_E_UNSUPPORTED, "%s: code %s", what,
          latent_err_name(e.code));
    const char *want[3] = {w1, w2, w3};
    for (int i = 0; i < 3; i++)
        if (want[i]) CHECK(strstr(e.msg, want[i]) != NULL, "%s: '%s' not in: %s", what, want[i], e.msg);
    fprintf(stderr, "  ok (%s): %s\n", what, e.msg);
}

/* ---- round trips --------------------------------------------------------- */

static void roundtrip(const latent_config *cfg, int bf16, const char *tag) {
    char dir[256];
    new_dir(dir, sizeof dir, tag);
    latent_weights ref;
    write_model(dir, cfg, &ref, bf16);
    latent_model m;
    latent_err e = {0};
    int rc = latent_model_load(&m, dir, &e);
    CHECK(rc == 0, "%s: %s", tag, e.msg);
    if (rc == 0) {
        CHECK(memcmp(&m.cfg, cfg, sizeof *cfg) == 0, "%s: config differs", tag);
        CHECK(m.tok == NULL, "%s: no tokenizer.json, yet a tokenizer", tag);
        CHECK(m.dir && strcmp(m.dir, dir) == 0, "%s: dir", tag);
        compare_weights(&ref, &m.w, bf16, tag);
        const latent_weights *w = &m.w;
        if (cfg->tie_embeddings)
            CHECK(w->lm_head == w->embed && !latent_weights_find(w, "lm_head.weight"), "%s: tied", tag);
        else
            CHECK(w->lm_head && w->lm_head != w->embed, "%s: untied lm_head", tag);
        for (int i = 0; i < cfg->n_layers; i++) {
            const latent_layer *l = &w->layers[i];
            CHECK(l->attn_norm && l->wq && l->wk && l->wv && l->wo && l->mlp_norm && l->wg &&
                  l->wu && l->wd, "%s: layer %d pointers", tag, i);
            bool inj = cfg->rec == LATENT_REC_LRT && i >= cfg->lrt.inject_start &&
                       i <= cfg->lrt.inject_end;
            bool res = inj && cfg->lrt.residual_injection, kv = inj && cfg->lrt.kv_injection;
            CHECK((l->lrt_alpha != NULL) == res && (l->lrt_gamma != NULL) == res,
                  "%s: layer %d residual injection pointers", tag, i);
            CHECK((l->lrt_gate != NULL) == kv && (l->lrt_k != NULL) == kv && (l->lrt_v != NULL) == kv,
                  "%s: layer %d kv injection pointers", tag, i);
            if (kv && cfg->lrt.shared_kv_projection)
                CHECK(l->lrt_k == w->lrt_shared_k && l->lrt_v == w->lrt_shared_v,
                      "%s: layer %d shared projection", tag, i);
        }
        if (cfg->rec == LATENT_REC_T2MLR)
            CHECK(w->t2mlr.w_rec && w->t2mlr.f_cur_w && w->t2mlr.f_cur_b && w->t2mlr.f_rec_w &&
                  w->t2mlr.f_rec_b && w->t2mlr.gamma_cur && w->t2mlr.gamma_rec, "%s: t2mlr", tag);
        else
            CHECK(!w->t2mlr.w_rec && !w->t2mlr.gamma_rec, "%s: no t2mlr", tag);
        latent_model_free(&m);
        latent_model_free(&m); /* zeroed: a second free is harmless */
    }
    latent_weights_free(&ref);
}

static void test_table(void) {
    latent_config c = t2mlr_config();
    latent_weights w;
    latent_err e = {0};
    CHECK(latent_weights_alloc(&w, &c, &e) == 0, "%s", e.msg);
    /* 1 embed + 9 per layer + norm + 7 t2mlr + lm_head */
    CHECK(w.n_params == 1 + 9 * 3 + 1 + 7 + 1, "t2mlr param count %d", w.n_params);
    const latent_param *p = latent_weights_find(&w, "model.layers.2.self_attn.o_proj.weight");
    CHECK(p && p->ndim == 2 && p->shape[0] == 16 && p->shape[1] == 16, "o_proj shape");
    p = latent_weights_find(&w, "model.layers.0.self_attn.k_proj.weight");
    CHECK(p && p->shape[0] == 8 && p->shape[1] == 16 && p->numel == 128, "k_proj shape");
    p = latent_weights_find(&w, "model.t2mlr.f_rec.weight");
    CHECK(p && p->shape[0] == 16 && p->shape[1] == 32, "f_rec shape");
    p = latent_weights_find(&w, "model.t2mlr.gamma_cur");
    CHECK(p && p->ndim == 1 && p->shape[0] == 1 && p->numel == 1, "gamma shape");
    p = latent_weights_find(&w, "model.layers.1.mlp.down_proj.weight");
    CHECK(p && p->shape[0] == 16 && p->shape[1] == 24, "down_proj shape");
    CHECK(latent_weights_find(&w, "nope") == NULL, "find unknown");
    for (int64_t i = 0; i < w.slab_floats; i++)
        if (w.slab[i] != 0) { CHECK(0, "slab not zeroed at %lld", (long long)i); break; }
    latent_weights_free(&w);
    latent_weights_free(&w);

    c = lrt_config(true, true, true);
    CHECK(latent_weights_alloc(&w, &c, &e) == 0, "%s", e.msg);
    /* 1 + 27 + 2 injected * (alpha, gamma, gate) + shared k, v + norm + lm_head */
    CHECK(w.n_params == 1 + 27 + 2 * 3 + 2 + 1 + 1, "lrt shared param count %d", w.n_params);
    p = latent_weights_find(&w, "model.layers.2.lrt.gate.weight");
    CHECK(p && p->shape[0] == 4 && p->shape[1] == 16, "gate shape");
    CHECK(latent_weights_find(&w, "model.lrt.k_proj.weight") != NULL, "shared k");
    CHECK(latent_weights_find(&w, "model.layers.1.lrt.k_proj.weight") == NULL, "no per-block k");
    CHECK(latent_weights_find(&w, "model.layers.0.lrt.alpha") == NULL, "block 0 not injected");
    latent_weights_free(&w);
}

static void test_roundtrips(void) {
    latent_config c = tiny_config();
    roundtrip(&c, 0, "plain-f32");
    roundtrip(&c, 1, "plain-bf16");
    c.tie_embeddings = true;
    roundtrip(&c, 0, "tied-f32");
    roundtrip(&c, 1, "tied-bf16");
    c = t2mlr_config();
    roundtrip(&c, 0, "t2mlr-f32");
    roundtrip(&c, 1, "t2mlr-bf16");
    c = lrt_config(false, true, true);
    roundtrip(&c, 0, "lrt-perblock-f32");
    roundtrip(&c, 1, "lrt-perblock-bf16");
    c = lrt_config(true, true, true);
    roundtrip(&c, 0, "lrt-shared-f32");
    roundtrip(&c, 1, "lrt-shared-bf16");
    c = lrt_config(false, true, false);
    roundtrip(&c, 0, "lrt-residual-only");
    c = lrt_config(true, false, true);
    c.tie_embeddings = true;
    roundtrip(&c, 1, "lrt-kv-only-tied");
}

static float bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Every position's logits of a 9-token prompt and 3 decoded tokens under a
 * bf16 engine with options o; 0, or -1 with err set (nothing allocated). */
static int bf16_logits(const latent_model *m, const latent_engine_opts *o, float *out, size_t *released, latent_err *err) {
    const int n = 12, n_prompt = 9, V = m->cfg.vocab;
    int32_t tok[12];
    for (int i = 0; i < n; i++) tok[i] = (i * 7 + 3) % V;
    latent_kv_pool pool;
    latent_seq s;
    if (latent_kv_pool_init(&pool, &m->cfg, 4, latent_kv_page_bytes(&m->cfg, 4, LATENT_KV_BF16) * 8, LATENT_KV_BF16, err) != 0)
        return -1;
    latent_engine *eng = latent_engine_new_opts(m, o, err);
    if (!eng) {
        latent_kv_pool_free(&pool);
        return -1;
    }
    CHECK(latent_engine_precision(eng) == LATENT_PRECISION_BF16, "a bf16 engine");
    *released = latent_engine_release_unpacked(eng);
    CHECK(latent_engine_release_unpacked(eng) == 0, "released twice");
    CHECK(latent_seq_init(&s, &pool, &m->cfg, err) == 0, "seq: %s", err->msg);
    for (int from = 0; from < n;) {
        int to = from < n_prompt ? n_prompt : from + 1;
        latent_batch_entry b = {.seq = &s, .tokens = tok + from, .n_tokens = to - from, .prompt = from < n_prompt,
                                .logits = LATENT_LOGITS_ALL, .out = out + (size_t)from * V};
        CHECK(latent_engine_step(eng, &b, 1, err) == 0, "step: %s", err->msg);
        from = to;
    }
    latent_seq_free(&s);
    latent_engine_free(eng);
    latent_kv_pool_free(&pool);
    return 0;
}

/* latent_load_opts.keep_bf16: BF16 matrices stay in the file and a bf16
 * engine packs them from there, with the same logits bit for bit as from
 * the widened copy; F32 engines and saving refuse such a model; an F32
 * checkpoint keeps nothing. */
static void keep_bf16(const latent_config *cfg, const char *tag) {
    char dir[256];
    new_dir(dir, sizeof dir, tag);
    latent_weights ref;
    write_model(dir, cfg, &ref, 1);
    latent_model wide, kept;
    latent_err e = {0};
    latent_load_opts lo = {.keep_bf16 = 1};
    CHECK(latent_model_load(&wide, dir, &e) == 0, "%s: %s", tag, e.msg);
    CHECK(latent_model_load_opts(&kept, dir, &lo, &e) == 0, "%s: %s", tag, e.msg);
    int matrices = 0;
    for (int i = 0; i < kept.w.n_params; i++) {
        const latent_param *p = &kept.w.params[i], *q = &wide.w.params[i];
        matrices += p->ndim == 2;
        CHECK((p->bf16 != NULL) == (p->ndim == 2) && !q->bf16, "%s: %s kept %d", tag, p->name, p->bf16 != NULL);
        if (p->ndim == 1)
            CHECK(memcmp(*p->slot, *q->slot, (size_t)p->numel * sizeof(float)) == 0, "%s: %s", tag, p->name);
        else
            for (int64_t j = 0; j < p->numel; j++)
                if (bf16_value(p->bf16[j]) != (*q->slot)[j] || (*p->slot)[j] != 0.0f) {
                    CHECK(0, "%s: %s[%lld] kept as %g, widened %g, slot %g", tag, p->name, (long long)j,
                          bf16_value(p->bf16[j]), (*q->slot)[j], (*p->slot)[j]);
                    break;
                }
    }
    CHECK(kept.bf16_kept == matrices && wide.bf16_kept == 0, "%s: %d of %d matrices kept", tag, kept.bf16_kept, matrices);
    size_t sz = (size_t)12 * cfg->vocab * sizeof(float), rel_wide = 0, rel_kept = 0;
    float *a = malloc(sz), *b = malloc(sz);
    latent_engine_opts bf = {.precision = LATENT_PRECISION_BF16}, autop = {0}, f32 = {.precision = LATENT_PRECISION_F32};
    CHECK(bf16_logits(&wide, &bf, a, &rel_wide, &e) == 0, "%s: %s", tag, e.msg);
    CHECK(bf16_logits(&kept, &bf, b, &rel_kept, &e) == 0, "%s: %s", tag, e.msg);
    CHECK(memcmp(a, b, sz) == 0, "%s: logits from kept BF16 matrices differ from the widened ones", tag);
    CHECK(bf16_logits(&kept, &autop, b, &rel_kept, &e) == 0 && memcmp(a, b, sz) == 0, "%s: auto: %s", tag, e.msg);
    latent_engine *eng = latent_engine_new_opts(&kept, &f32, &e);
    CHECK(!eng && e.code == LATENT_E_INVALID && strstr(e.msg, "bf16"), "%s: an F32 engine on kept matrices: %s", tag,
          eng ? "built" : e.msg);
    latent_engine_free(eng);
    char path[512];
    path_in(path, sizeof path, dir, "copy.safetensors");
    CHECK(latent_weights_save(&kept.w, path, 1, &e) != 0 && e.code == LATENT_E_INVALID, "%s: saving kept matrices", tag);
    free(a), free(b);
    latent_model_free(&kept);
    latent_model_free(&wide);
    latent_weights_free(&ref);
    /* F32 checkpoint: nothing to keep, the F32 engine works */
    new_dir(dir, sizeof dir, tag);
    write_model(dir, cfg, &ref, 0);
    CHECK(latent_model_load_opts(&kept, dir, &lo, &e) == 0 && kept.bf16_kept == 0, "%s f32: %s", tag, e.msg);
    eng = latent_engine_new_opts(&kept, &f32, &e);
    CHECK(eng != NULL, "%s f32: %s", tag, e.msg);
    latent_engine_free(eng);
    latent_model_free(&kept);
    latent_weights_free(&ref);
}

static void test_keep_bf16(void) {
    latent_config c = tiny_config();
    keep_bf16(&c, "keep-plain");
    c.tie_embeddings = true;
    keep_bf16(&c, "keep-tied");
    c = t2mlr_config();
    keep_bf16(&c, "keep-t2mlr");
    c = lrt_config(false, true, true);
    keep_bf16(&c, "keep-lrt-perblock");
    c = lrt_config(true, true, true);
    c.tie_embeddings = true;
    keep_bf16(&c, "keep-lrt-shared-tied");
}

/* Splits the table over two shards at param `split` and writes the index. */
static void write_sharded(const char *dir, const latent_weights *w, int split, int bf16,
                          const char *shard2_name) {
    latent_err e = {0};
    int n = w->n_params;
    const char **names = malloc((size_t)n * sizeof *names);
    const float **data = malloc((size_t)n * sizeof *data);
    int *ndims = malloc((size_t)n * sizeof *ndims);
    int64_t(*shapes)[ST_MAX_DIMS] = calloc((size_t)n, sizeof *shapes);
    for (int i = 0; i < n; i++) {
        names[i] = w->params[i].name;
        data[i] = *w->params[i].slot;
        ndims[i] = w->params[i].ndim;
        shapes[i][0] = w->params[i].shape[0];
        shapes[i][1] = w->params[i].shape[1];
    }
    char path[512];
    st_dtype dt = bf16 ? ST_BF16 : ST_F32;
    path_in(path, sizeof path, dir, "model-00001-of-00002.safetensors");
    CHECK(latent_st_write(path, split, names, data, ndims, (const int64_t(*)[ST_MAX_DIMS])shapes, dt, &e) == 0,
          "%s", e.msg);
    path_in(path, sizeof path, dir, "model-00002-of-00002.safetensors");
    CHECK(latent_st_write(path, n - split, names + split, data + split, ndims + split,
                   (const int64_t(*)[ST_MAX_DIMS])(shapes + split), dt, &e) == 0, "%s", e.msg);
    size_t cap = 64 + (size_t)n * 200, k = 0;
    char *idx = malloc(cap);
    k += (size_t)snprintf(idx + k, cap - k, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(idx + k, cap - k, "%s\"%s\": \"%s\"", i ? ", " : "", names[i],
                              i < split ? "model-00001-of-00002.safetensors" : shard2_name);
    snprintf(idx + k, cap - k, "}}\n");
    path_in(path, sizeof path, dir, "model.safetensors.index.json");
    write_text(path, idx);
    free(idx);
    free(names);
    free(data);
    free(ndims);
    free(shapes);
}

static void test_sharded(void) {
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        char dir[256];
        new_dir(dir, sizeof dir, bf16 ? "sharded-bf16" : "sharded-f32");
        latent_config c = t2mlr_config();
        latent_err e = {0};
        char path[512];
        path_in(path, sizeof path, dir, "config.json");
        CHECK(latent_config_save(&c, path, &e) == 0, "%s", e.msg);
        latent_weights w;
        CHECK(latent_weights_alloc(&w, &c, &e) == 0, "%s", e.msg);
        fill_pattern(&w);
        write_sharded(dir, &w, w.n_params / 2, bf16, "model-00002-of-00002.safetensors");
        latent_model m;
        int rc = latent_model_load(&m, dir, &e);
        CHECK(rc == 0, "sharded: %s", e.msg);
        if (rc == 0) {
            compare_weights(&w, &m.w, bf16, "sharded");
            latent_model_free(&m);
        }
        latent_weights_free(&w);
    }

    /* A shard the index names but the directory lacks. */
    char dir[256], path[512];
    new_dir(dir, sizeof dir, "shard-missing");
    latent_config c = tiny_config();
    latent_err e = {0};
    path_in(path, sizeof path, dir, "config.json");
    CHECK(latent_config_save(&c, path, &e) == 0, "%s", e.msg);
    latent_weights w;
    CHECK(latent_weights_alloc(&w, &c, &e) == 0, "%s", e.msg);
    write_sharded(dir, &w, 5, 0, "model-00002-of-00002.safetensors");
    path_in(path, sizeof path, dir, "model-00002-of-00002.safetensors");
    remove(path);
    expect_fail(dir, "missing shard", "model.safetensors.index.json",
                "\"model-00002-of-00002.safetensors\"", "missing");

    /* A name the index does not map. */
    new_dir(dir, sizeof dir, "index-incomplete");
    path_in(path, sizeof path, dir, "config.json");
    CHECK(latent_config_save(&c, path, &e) == 0, "%s", e.msg);
    write_sharded(dir, &w, 5, 0, "model-00002-of-00002.safetensors");
    path_in(path, sizeof path, dir, "model.safetensors.index.json");
    write_text(path, "{\"weight_map\": {\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\"}}");
    expect_fail(dir, "index lacks a tensor", "model.safetensors.index.json",
                "\"model.layers.0.input_layernorm.weight\"", "missing");

    /* A shard name that leaves the directory. */
    write_text(path, "{\"weight_map\": {\"model.embed_tokens.weight\": \"../x.safetensors\"}}");
    expect_fail(dir, "index escapes dir", "model.safetensors.index.json", "../x.safetensors", NULL);
    write_text(path, "{\"weight_map\": [1]}");
    expect_fail(dir, "index without weight_map", "model.safetensors.index.json", "weight_map", NULL);
    write_text(path, "{\"weight_map\": ");
    expect_fail(dir, "index bad json", "model.safetensors.index.json", "not valid JSON", NULL);
    latent_weights_free(&w);
}

/* ---- dtypes -------------------------------------------------------------- */

static void test_f16(void) {
    /* bit pattern -> value, incl. signed zero, subnormals, max, inf, nan */
    static const struct { uint16_t h; float f; } cases[] = {
        {0x0000, 0.0f}, {0x8000, -0.0f}, {0x3c00, 1.0f}, {0xc000, -2.0f},
        {0x3555, 0.333251953125f}, {0x7bff, 65504.0f}, {0x0400, 6.103515625e-05f},
        {0x0001, 5.9604644775390625e-08f}, {0x03ff, 6.0975551605224609375e-05f},
        {0x8001, -5.9604644775390625e-08f}, {0x7c00, INFINITY}, {0xfc00, -INFINITY},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    unsigned char data[2 * (N + 1)];
    for (int i = 0; i < N; i++) { data[2 * i] = cases[i].h & 0xff; data[2 * i + 1] = cases[i].h >> 8; }
    data[2 * N] = 0x00; data[2 * N + 1] = 0x7e; /* nan */
    char dir[256], path[512], hdr[256];
    new_dir(dir, sizeof dir, "f16");
    path_in(path, sizeof path, dir, "f16.safetensors");
    snprintf(hdr, sizeof hdr,
             "{\"__metadata__\": {\"format\": \"pt\"}, \"h\": {\"dtype\": \"F16\", \"shape\": [%d],"
             " \"data_offsets\": [0, %d]}}", N + 1, 2 * (N + 1));
    write_raw_st(path, hdr, 0, data, sizeof data);
    st_file f;
    latent_err e = {0};
    CHECK(latent_st_file_open(&f, path, &e) == 0, "%s", e.msg);
    const st_tensor *t = latent_st_file_find(&f, "h");
    CHECK(t && t->dtype == ST_F16 && t->ndim == 1 && t->shape[0] == N + 1, "f16 tensor");
    CHECK(latent_st_file_find(&f, "__metadata__") == NULL && f.n_tensors == 1, "metadata skipped");
    if (t) {
        float out[N + 1];
        latent_st_to_f32(out, t->data, ST_F16, N + 1);
        for (int i = 0; i < N; i++) {
            CHECK(out[i] == cases[i].f && signbit(out[i]) == signbit(cases[i].f),
                  "f16 0x%04x -> %.10g, want %.10g", cases[i].h, out[i], cases[i].f);
        }
        CHECK(isnan(out[N]), "f16 nan -> %g", out[N]);
    }
    latent_st_file_close(&f);
    latent_st_file_close(&f);

    /* A whole model stored as F16 (values k/8 are exact in half). */
    new_dir(dir, sizeof dir, "model-f16");
    latent_config c = tiny_config();
    c.tie_embeddings = true;
    path_in(path, sizeof path, dir, "config.json");
    CHECK(latent_config_save(&c, path, &e) == 0, "%s", e.msg);
    latent_weights w;
    CHECK(latent_weights_alloc(&w, &c, &e) == 0, "%s", e.msg);
    size_t total = 0, hk = 0, hcap = 64 + (size_t)w.n_params * 160;
    for (int i = 0; i < w.n_params; i++) total += (size_t)w.params[i].numel * 2;
    unsigned char *blob = malloc(total);
    char *h = malloc(hcap);
    hk += (size_t)snprintf(h + hk, hcap - hk, "{");
    size_t off = 0;
    for (int i = 0; i < w.n_params; i++) {
        const latent_param *p = &w.params[i];
        for (int64_t j = 0; j < p->numel; j++) {
            float v = (float)((j * 7 + i) % 41 - 20) / 8.0f;
            (*p->slot)[j] = v;
            /* v = m / 8 with |m| <= 20: encode as half by hand */
            uint16_t bits = 0;
            if (v != 0) {
                float a = fabsf(v);
                int ex = 0;
                while (a >= 2.0f) { a /= 2; ex++; }
                while (a < 1.0f) { a *= 2; ex--; }
                bits = (uint16_t)(((v < 0) << 15) | ((ex + 15) << 10) | (uint16_t)((a - 1.0f) * 1024.0f));
            }
            blob[off + 2 * j] = bits & 0xff;
            blob[off + 2 * j + 1] = bits >> 8;
        }
        char shape[64];
        if (p->ndim == 2)
            snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)p->shape[0], (long long)p->shape[1]);
        else
            snprintf(shape, sizeof shape, "[%lld]", (long long)p->shape[0]);
        hk += (size_t)snprintf(h + hk, hcap - hk,
                               "%s\"%s\": {\"dtype\": \"F16\", \"shape\": %s, \"data_offsets\": [%zu, %zu]}",
                               i ? ", " : "", p->name, shape, off, off + (size_t)p->numel * 2);
        off += (size_t)p->numel * 2;
    }
    snprintf(h + hk, hcap - hk, "}");
    path_in(path, sizeof path, dir, "model.safetensors");
    write_raw_st(path, h, 0, blob, total);
    latent_model m;
    int rc = latent_model_load(&m, dir, &e);
    CHECK(rc == 0, "f16 model: %s", e.msg);
    if (rc == 0) {
        compare_weights(&w, &m.w, -1, "f16 model");
        latent_model_free(&m);
    }
    free(blob);
    free(h);
    latent_weights_free(&w);
}

static void test_bf16_rounding(void) {
    char dir[256], path[512];
    new_dir(dir, sizeof dir, "bf16-round");
    path_in(path, sizeof path, dir, "r.safetensors");
    const float in[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -1.0f - 0x1p-8f - 0x1p-12f, 3.4028235e38f,
                        1e-40f, -0.0f, INFINITY, NAN, 0.1f};
    const float want[] = {1.0f, 1.0f + 0x1p-6f, -1.0f - 0x1p-7f, INFINITY, bf16_round(1e-40f),
                          -0.0f, INFINITY, NAN, bf16_round(0.1f)};
    enum { N = sizeof in / sizeof in[0] };
    const char *names[] = {"x"};
    const float *data[] = {in};
    int ndims[] = {1};
    int64_t shapes[1][ST_MAX_DIMS] = {{N}};
    latent_err e = {0};
    CHECK(latent_st_write(path, 1, names, data, ndims, (const int64_t(*)[ST_MAX_DIMS])shapes, ST_BF16, &e) == 0,
          "%s", e.msg);
    st_file f;
    CHECK(latent_st_file_open(&f, path, &e) == 0, "%s", e.msg);
    CHECK(f.data_start % 8 == 0, "data section at %zu, not 8-aligned", f.data_start);
    const st_tensor *t = latent_st_file_find(&f, "x");
    CHECK(t && t->dtype == ST_BF16 && t->nbytes == 2 * N, "bf16 tensor");
    if (t) {
        float out[N];
        latent_st_to_f32(out, t->data, ST_BF16, N);
        for (int i = 0; i < N; i++) {
            if (isnan(want[i])) CHECK(isnan(out[i]), "bf16 nan");
            else CHECK(out[i] == want[i] && signbit(out[i]) == signbit(want[i]),
                       "bf16(%.10g) = %.10g, want %.10g", in[i], out[i], want[i]);
        }
    }
    latent_st_file_close(&f);
    CHECK(access(path, F_OK) == 0, "file written");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "temp file left behind");
}

/* ---- corruptions --------------------------------------------------------- */

static void test_corrupt_files(void) {
    char dir[256], path[512];
    new_dir(dir, sizeof dir, "corrupt");
    path_in(path, sizeof path, dir, "model.safetensors");
    unsigned char data[64] = {0};

    FILE *f = fopen(path, "wb");
    fwrite("\x10\0\0", 1, 3, f);
    fclose(f);
    st_expect_fail(path, "3-byte file", "model.safetensors", "too short", NULL);

    write_raw_st(path, "{}", 1000000, NULL, 0);
    st_expect_fail(path, "header length past end", "model.safetensors", "header length 1000000",
                   "past the end");

    write_raw_st(path, "{\"a\": {\"dtype\": ", 0, data, 8);
    st_expect_fail(path, "bad header json", "model.safetensors", "not valid JSON", NULL);

    write_raw_st(path, "[1, 2]", 0, NULL, 0);
    st_expect_fail(path, "header not an object", "model.safetensors", "not a JSON object", NULL);

    write_raw_st(path, "{\"model.layers.0.self_attn.q_proj.weight\": {\"dtype\": \"F32\","
                 " \"shape\": [4], \"data_offsets\": [0, 999999]}}", 0, data, 16);
    st_expect_fail(path, "offsets past end", "model.safetensors: tensor \"model.layers.0.self_attn.q_proj.weight\"",
                   "data_offsets [0, 999999] run past the end", "data section is 16 bytes");

    write_raw_st(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
                 " \"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}", 0, data, 24);
    st_expect_fail(path, "overlap", "model.safetensors: tensor \"b\"", "overlap tensor \"a\"", NULL);

    write_raw_st(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 12]}}",
                 0, data, 16);
    st_expect_fail(path, "size vs shape", "model.safetensors: tensor \"w\"", "hold 12 bytes",
                   "[2, 2] of F32 needs 16");

    write_raw_st(path, "{\"ids\": {\"dtype\": \"I64\", \"shape\": [2], \"data_offsets\": [0, 16]}}",
                 0, data, 16);
    st_expect_fail(path, "I64", "model.safetensors: tensor \"ids\"", "dtype \"I64\" is not supported", NULL);
    write_raw_st(path, "{\"x\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [0, 16]}}",
                 0, data, 16);
    st_expect_fail(path, "F64", "tensor \"x\"", "dtype \"F64\"", NULL);

    write_raw_st(path, "{\"x\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", 0, data, 8);
    st_expect_fail(path, "no dtype", "tensor \"x\"", "\"dtype\"", NULL);
    write_raw_st(path, "{\"x\": {\"dtype\": \"F32\", \"data_offsets\": [0, 8]}}", 0, data, 8);
    st_expect_fail(path, "no shape", "tensor \"x\"", "\"shape\"", NULL);
    write_raw_st(path, "{\"x\": {\"dtype\": \"F32\", \"shape\": [2]}}", 0, data, 8);
    st_expect_fail(path, "no offsets", "tensor \"x\"", "\"data_offsets\"", NULL);
    write_raw_st(path, "{\"x\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", 0, data, 8);
    st_expect_fail(path, "negative dim", "tensor \"x\"", "shape", NULL);
    write_raw_st(path, "{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", 0, data, 8);
    st_expect_fail(path, "reversed offsets", "tensor \"x\"", "[8, 0]", NULL);
    write_raw_st(path, "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                 " \"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 0, data, 8);
    st_expect_fail(path, "duplicate names", "model.safetensors", "not valid JSON", NULL);

    /* Valid edge cases: __metadata__, an empty tensor, a scalar, unaligned F32 */
    write_raw_st(path, "{\"__metadata__\": {\"format\": \"pt\"}, \"e\": {\"dtype\": \"F32\", \"shape\": [0],"
                 " \"data_offsets\": [2, 2]}, \"h\": {\"dtype\": \"BF16\", \"shape\": [], \"data_offsets\": [0, 2]},"
                 " \"u\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [2, 6]}}", 0,
                 "\x80\x3f\x00\x00\x80\x3f", 6);
    st_file sf;
    latent_err e = {0};
    CHECK(latent_st_file_open(&sf, path, &e) == 0, "edge cases: %s", e.msg);
    const st_tensor *t = latent_st_file_find(&sf, "u");
    CHECK(sf.n_tensors == 3 && t && t->nbytes == 4, "edge tensors");
    if (t) {
        float v = 0;
        latent_st_to_f32(&v, t->data, t->dtype, 1);
        CHECK(v == 1.0f, "unaligned f32 %g", v);
    }
    t = latent_st_file_find(&sf, "h");
    CHECK(t && t->ndim == 0 && t->nbytes == 2, "scalar");
    latent_st_file_close(&sf);

    st_expect_fail("/nonexistent/model.safetensors", "no file", "/nonexistent/model.safetensors",
                   "cannot open", NULL);
}

/* Truncating a real model file names the first tensor that no longer fits. */
static void test_truncated_model(void) {
    char dir[256], path[512];
    new_dir(dir, sizeof dir, "truncated");
    latent_config c = tiny_config();
    latent_weights w;
    write_model(dir, &c, &w, 0);
    path_in(path, sizeof path, dir, "model.safetensors");
    struct stat st;
    CHECK(stat(path, &st) == 0, "stat");
    CHECK(truncate(path, st.st_size - 100) == 0, "truncate");
    expect_fail(dir, "truncated model", "model.safetensors: tensor \"lm_head.weight\"",
                "run past the end of the file", NULL);
    CHECK(truncate(path, 4) == 0, "truncate");
    expect_fail(dir, "truncated to 4 bytes", "model.safetensors", "too short", NULL);
    latent_weights_free(&w);
}

/* Writes cfg's table with one tensor dropped or reshaped. */
static void write_tweaked(const char *dir, const latent_config *cfg, const latent_config *weights_cfg,
                          const char *drop, const char *reshape, const char *extra) {
    latent_err e = {0};
    char path[512];
    path_in(path, sizeof path, dir, "config.json");
    CHECK(latent_config_save(cfg, path, &e) == 0, "%s", e.msg);
    latent_weights w;
    CHECK(latent_weights_alloc(&w, weights_cfg, &e) == 0, "%s", e.msg);
    fill_pattern(&w);
    int n = 0;
    const char *names[256];
    const float *data[256];
    int ndims[256];
    int64_t shapes[256][ST_MAX_DIMS];
    memset(shapes, 0, sizeof shapes);
    for (int i = 0; i < w.n_params && n < 250; i++) {
        const latent_param *p = &w.params[i];
        if (drop && strcmp(p->name, drop) == 0) continue;
        names[n] = p->name;
        data[n] = *p->slot;
        ndims[n] = p->ndim;
        shapes[n][0] = p->shape[0];
        shapes[n][1] = p->shape[1];
        if (reshape && strcmp(p->name, reshape) == 0) {
            shapes[n][0] = p->shape[1];
            shapes[n][1] = p->shape[0];
        }
        n++;
    }
    if (extra) {
        names[n] = extra;
        data[n] = w.slab;
        ndims[n] = 1;
        shapes[n][0] = 4;
        n++;
    }
    path_in(path, sizeof path, dir, "model.safetensors");
    CHECK(latent_st_write(path, n, names, data, ndims, (const int64_t(*)[ST_MAX_DIMS])shapes, ST_F32, &e) == 0,
          "%s", e.msg);
    latent_weights_free(&w);
}

static void test_model_errors(void) {
    char dir[256], path[512];
    latent_config c = tiny_config();

    new_dir(dir, sizeof dir, "wrong-shape");
    write_tweaked(dir, &c, &c, NULL, "model.layers.1.self_attn.k_proj.weight", NULL);
    expect_fail(dir, "wrong shape", "model.safetensors: tensor \"model.layers.1.self_attn.k_proj.weight\"",
                "expected shape [8, 16]", "found [16, 8]");

    new_dir(dir, sizeof dir, "missing-tensor");
    write_tweaked(dir, &c, &c, "model.norm.weight", NULL, NULL);
    expect_fail(dir, "missing tensor", "model.safetensors: tensor \"model.norm.weight\"", "is missing",
                "expected shape [16]");

    new_dir(dir, sizeof dir, "untied-no-head");
    write_tweaked(dir, &c, &c, "lm_head.weight", NULL, NULL);
    expect_fail(dir, "untied without lm_head", "tensor \"lm_head.weight\"", "is missing", NULL);

    /* A T2MLR config over plain weights: the recurrent tensors are missing. */
    latent_config t = t2mlr_config();
    new_dir(dir, sizeof dir, "t2mlr-missing");
    write_tweaked(dir, &t, &c, NULL, NULL, NULL);
    expect_fail(dir, "t2mlr tensors missing", "model.safetensors: tensor \"model.t2mlr.w_rec.weight\"",
                "is missing", "[16, 16]");

    latent_config l = lrt_config(false, true, true);
    new_dir(dir, sizeof dir, "lrt-missing");
    write_tweaked(dir, &l, &l, "model.layers.2.lrt.v_proj.weight", NULL, NULL);
    expect_fail(dir, "lrt tensor missing", "tensor \"model.layers.2.lrt.v_proj.weight\"", "is missing",
                "[8, 16]");

    /* Plain config over T2MLR weights: the recurrence would be dropped silently. */
    new_dir(dir, sizeof dir, "t2mlr-undeclared");
    write_tweaked(dir, &c, &t, NULL, NULL, NULL);
    expect_fail(dir, "undeclared t2mlr tensors", "model.safetensors: tensor \"model.t2mlr.",
                "latent_recurrence", NULL);
    new_dir(dir, sizeof dir, "lrt-outside-range");
    write_tweaked(dir, &l, &l, NULL, NULL, "model.layers.0.lrt.alpha");
    expect_fail(dir, "lrt tensor outside inject range", "tensor \"model.layers.0.lrt.alpha\"",
                "latent_recurrence", NULL);

    /* Extra tensors HF may ship are ignored: a tied lm_head and rotary buffers. */
    latent_config tied = c;
    tied.tie_embeddings = true;
    new_dir(dir, sizeof dir, "extras-ok");
    write_tweaked(dir, &tied, &c, NULL, NULL, "model.layers.0.self_attn.rotary_emb.inv_freq");
    latent_model m;
    latent_err e = {0};
    CHECK(latent_model_load(&m, dir, &e) == 0, "extras: %s", e.msg);
    if (m.w.slab) {
        CHECK(m.w.lm_head == m.w.embed, "extras: tied");
        latent_model_free(&m);
    }

    /* config.json problems */
    new_dir(dir, sizeof dir, "bad-config");
    write_tweaked(dir, &c, &c, NULL, NULL, NULL);
    path_in(path, sizeof path, dir, "config.json");
    write_text(path, "{\"hidden_size\": 16,,}");
    expect_fail(dir, "bad config json", "config.json", "not valid JSON", NULL);
    write_text(path, "{\"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": \"abc\"}");
    expect_fail(dir, "bad config field", "config.json", "\"num_hidden_layers\"", "abc");
    /* config and weights disagree on d: every tensor's shape is wrong */
    latent_config wide = c;
    wide.d = 32;
    wide.head_dim = 8;
    CHECK(latent_config_save(&wide, path, &e) == 0, "%s", e.msg);
    expect_fail(dir, "config vs weights", "tensor \"model.embed_tokens.weight\"", "expected shape [40, 32]",
                "found [40, 16]");
    remove(path);
    expect_fail(dir, "no config", "config.json", "cannot open", NULL);

    new_dir(dir, sizeof dir, "no-weights");
    path_in(path, sizeof path, dir, "config.json");
    CHECK(latent_config_save(&c, path, &e) == 0, "%s", e.msg);
    expect_fail(dir, "no weights", "model.safetensors", "model.safetensors.index.json", NULL);

    /* A corrupt tensor inside a model directory names the file and tensor. */
    path_in(path, sizeof path, dir, "model.safetensors");
    write_raw_st(path, "{\"model.embed_tokens.weight\": {\"dtype\": \"I64\", \"shape\": [40, 16],"
                 " \"data_offsets\": [0, 5120]}}", 0, NULL, 0);
    expect_fail(dir, "bad dtype in model", "model.safetensors: tensor \"model.embed_tokens.weight\"",
                "\"I64\"", NULL);

    latent_model z;
    memset(&z, 0, sizeof z);
    latent_model_free(&z);
    latent_model_free(NULL);
    latent_weights_free(NULL);
    latent_st_file_close(NULL);
}

/* weights_save to an explicit file path (not a directory). */
static void test_save_to_file(void) {
    char dir[256], path[512];
    new_dir(dir, sizeof dir, "save-file");
    latent_config c = lrt_config(true, true, true);
    latent_weights w;
    latent_err e = {0};
    CHECK(latent_weights_alloc(&w, &c, &e) == 0, "%s", e.msg);
    fill_pattern(&w);
    path_in(path, sizeof path, dir, "ckpt.safetensors");
    CHECK(latent_weights_save(&w, path, 0, &e) == 0, "%s", e.msg);
    st_file f;
    CHECK(latent_st_file_open(&f, path, &e) == 0, "%s", e.msg);
    CHECK(f.n_tensors == w.n_params, "all params written: %d vs %d", f.n_tensors, w.n_params);
    for (int i = 0; i < f.n_tensors && i < w.n_params; i++)
        CHECK(strcmp(f.tensors[i].name, w.params[i].name) == 0, "file order %d", i);
    latent_st_file_close(&f);
    latent_weights_free(&w);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "/tmp/latent_loader_XXXXXX");
    if (!mkdtemp(g_root)) { perror("mkdtemp"); return 1; }
    test_table();
    test_roundtrips();
    test_sharded();
    test_f16();
    test_bf16_rounding();
    test_corrupt_files();
    test_truncated_model();
    test_model_errors();
    test_save_to_file();
    test_keep_bf16();
    if (tu_failures == 0) rm_rf(g_root);
    else fprintf(stderr, "kept %s for inspection\n", g_root);
    return tu_finish("test_loader");
}
