/* The batched step against itself in every arrangement that must not change
 * the result: token-at-a-time decoding vs one prefill, chunked prefills,
 * several sequences in one step, forks and truncations vs recomputation,
 * and the recurrent paths against their backbone. */
#include <stdlib.h>
#include <string.h>

#include "latent/engine.h"
#include "latent/kv.h"
#include "testutil.h"
#include "tiny_model.h"

#define PAGE 4
#define T 23
/* Different row counts take different BLAS kernels (sgemv vs sgemm), so
 * arrangements agree to float rounding, amplified a little by the recurrence. */
#define TOL 1e-4

typedef struct { latent_kv_pool pool; latent_engine *eng; } rig;

static void rig_init(rig *r, const latent_model *m, int pages) {
    latent_err err;
    if (latent_kv_pool_init(&r->pool, &m->cfg, PAGE, latent_kv_page_bytes(&m->cfg, PAGE, LATENT_KV_F32) * pages, LATENT_KV_F32, &err) != 0 ||
        !(r->eng = latent_engine_new(m, &err))) {
        fprintf(stderr, "rig: %s\n", err.msg);
        exit(1);
    }
}

static void rig_free(rig *r) {
    CHECK(r->pool.n_free == r->pool.n_pages, "every page back in the pool (%d of %d free)", r->pool.n_free, r->pool.n_pages);
    latent_engine_free(r->eng);
    latent_kv_pool_free(&r->pool);
}

/* Feeds tokens[from, to) as one entry; logits of every position into out. */
static void feed(rig *r, latent_seq *s, const int32_t *tokens, int from, int to, int n_prompt, float *out, int V) {
    latent_err err;
    /* An entry holds prompt tokens or generated ones, never both. */
    while (from < to) {
        int end = from < n_prompt && to > n_prompt ? n_prompt : to;
        latent_batch_entry b = {.seq = s, .tokens = tokens + from, .n_tokens = end - from, .prompt = from < n_prompt,
                                .logits = LATENT_LOGITS_ALL, .out = out + (size_t)from * V};
        if (latent_engine_step(r->eng, &b, 1, &err) != 0) {
            fprintf(stderr, "step: %s\n", err.msg);
            exit(1);
        }
        from = end;
    }
}

static void full_logits(const latent_model *m, const int32_t *tokens, int n, int n_prompt, float *out) {
    rig r;
    rig_init(&r, m, 64);
    latent_seq s;
    latent_err err;
    latent_seq_init(&s, &r.pool, &m->cfg, &err);
    feed(&r, &s, tokens, 0, n, n_prompt, out, m->cfg.vocab);
    latent_seq_free(&s);
    rig_free(&r);
}

static void check_kind(const char *name, latent_config c) {
    latent_model m;
    if (tm_model(&m, c, 7, 0) != 0) { CHECK(0, "%s: cannot build model", name); return; }
    const int V = c.vocab, n_prompt = 13;
    int32_t tok[T], tok2[T];
    for (int i = 0; i < T; i++) tok[i] = (i * 7 + 3) % V, tok2[i] = (i * 11 + 5) % V;
    size_t sz = (size_t)T * V;
    float *ref = malloc(sz * sizeof(float)), *got = malloc(sz * sizeof(float)), *ref2 = malloc(sz * sizeof(float));
    float *got2 = malloc(sz * sizeof(float));
    latent_err err;
    full_logits(&m, tok, T, n_prompt, ref);
    full_logits(&m, tok2, T, n_prompt, ref2);

    /* 1. one token per step */
    {
        rig r; rig_init(&r, &m, 64);
        latent_seq s; latent_seq_init(&s, &r.pool, &c, &err);
        for (int i = 0; i < T; i++) feed(&r, &s, tok, i, i + 1, n_prompt, got, V);
        CHECK(tu_rel_err(got, ref, sz) < TOL, "%s: token-at-a-time vs one prefill: rel err %g", name, tu_rel_err(got, ref, sz));
        latent_seq_free(&s); rig_free(&r);
    }
    /* 2. chunked prefill, uneven splits that straddle pages */
    {
        int cuts[] = {0, 3, 4, 9, 13, 14, 21, T};
        rig r; rig_init(&r, &m, 64);
        latent_seq s; latent_seq_init(&s, &r.pool, &c, &err);
        for (int i = 0; i + 1 < (int)(sizeof cuts / sizeof cuts[0]); i++) feed(&r, &s, tok, cuts[i], cuts[i + 1], n_prompt, got, V);
        CHECK(tu_rel_err(got, ref, sz) < TOL, "%s: chunked prefill: rel err %g", name, tu_rel_err(got, ref, sz));
        latent_seq_free(&s); rig_free(&r);
    }
    /* 3. two sequences in every step: A prefills in chunks while B goes token by token */
    {
        rig r; rig_init(&r, &m, 64);
        latent_seq a, b;
        latent_seq_init(&a, &r.pool, &c, &err);
        latent_seq_init(&b, &r.pool, &c, &err);
        int pa = 0, pb = 0;
        while (pa < T || pb < T) {
            latent_batch_entry es[2];
            int n = 0;
            if (pa < T) {
                int end = pa + 5 > T ? T : pa + 5;
                if (pa < n_prompt && end > n_prompt) end = n_prompt;
                es[n++] = (latent_batch_entry){.seq = &a, .tokens = tok + pa, .n_tokens = end - pa, .prompt = pa < n_prompt,
                                               .logits = LATENT_LOGITS_ALL, .out = got + (size_t)pa * V};
                pa = end;
            }
            if (pb < T) {
                es[n++] = (latent_batch_entry){.seq = &b, .tokens = tok2 + pb, .n_tokens = 1, .prompt = pb < n_prompt,
                                               .logits = LATENT_LOGITS_LAST, .out = got2 + (size_t)pb * V};
                pb++;
            }
            CHECK(latent_engine_step(r.eng, es, n, &err) == 0, "%s: batched step: %s", name, err.msg);
        }
        CHECK(tu_rel_err(got, ref, sz) < TOL, "%s: batched A: rel err %g", name, tu_rel_err(got, ref, sz));
        CHECK(tu_rel_err(got2, ref2, sz) < TOL, "%s: batched B: rel err %g", name, tu_rel_err(got2, ref2, sz));
        latent_seq_free(&a); latent_seq_free(&b); rig_free(&r);
    }
    /* 4. fork at a page boundary and at the end, truncate mid-page: the kept
     * prefix continues exactly as a recomputation of prefix + new tokens */
    {
        rig r; rig_init(&r, &m, 64);
        latent_seq a, f;
        latent_seq_init(&a, &r.pool, &c, &err);
        feed(&r, &a, tok, 0, 15, n_prompt, got, V);
        latent_seq_init(&f, &r.pool, &c, &err);
        int kept = latent_seq_fork(&f, &a, 10, &err);
        CHECK(kept == (c.rec ? 8 : 10), "%s: fork at 10 kept %d", name, kept);
        /* the fork continues with tok2's tokens: compare with tok[0..kept) + tok2[kept..) */
        int32_t mix[T];
        for (int i = 0; i < T; i++) mix[i] = i < kept ? tok[i] : tok2[i];
        float *mref = malloc(sz * sizeof(float));
        full_logits(&m, mix, T, n_prompt, mref);
        feed(&r, &f, mix, kept, T, n_prompt, got2, V);
        size_t off = (size_t)kept * V;
        CHECK(tu_rel_err(got2 + off, mref + off, sz - off) < TOL, "%s: fork continuation: rel err %g", name,
              tu_rel_err(got2 + off, mref + off, sz - off));
        /* the original is untouched by its fork: finish it and compare */
        feed(&r, &a, tok, 15, T, n_prompt, got, V);
        CHECK(tu_rel_err(got, ref, sz) < TOL, "%s: original after fork: rel err %g", name, tu_rel_err(got, ref, sz));
        /* truncate the original mid-page, continue with mix */
        int t = latent_seq_truncate(&a, 11);
        CHECK(t == (c.rec ? 8 : 11), "%s: truncate to 11 kept %d", name, t);
        feed(&r, &a, mix, t, T, n_prompt, got, V);
        off = (size_t)t * V;
        if (t == kept) {
            CHECK(tu_rel_err(got + off, mref + off, sz - off) < TOL, "%s: truncate continuation: rel err %g", name,
                  tu_rel_err(got + off, mref + off, sz - off));
        }
        /* fork of the whole sequence shares every full page and copies the partial one */
        latent_seq g;
        latent_seq_init(&g, &r.pool, &c, &err);
        CHECK(latent_seq_fork(&g, &f, f.n_pos, &err) == T, "%s: full fork", name);
        CHECK(latent_seq_common_prefix(&g, mix, f.flows, T) == T, "%s: fork keeps the token ids", name);
        CHECK(latent_seq_common_prefix(&g, f.tokens, g.flows, T) == T, "%s: fork keeps the control flow", name);
        if (c.rec) {
            uint8_t *other = malloc(T);
            for (int i = 0; i < T; i++) other[i] = f.flows[i];
            other[3] = other[3] == 2 ? 1 : 2;
            CHECK(latent_seq_common_prefix(&g, mix, other, T) == 3, "%s: prefix ends where the control flow differs", name);
            free(other);
        }
        latent_seq_free(&g);
        free(mref);
        latent_seq_free(&a); latent_seq_free(&f); rig_free(&r);
    }
    /* 5. pool exhaustion is an error that changes nothing */
    {
        rig r; rig_init(&r, &m, 3);
        latent_seq s; latent_seq_init(&s, &r.pool, &c, &err);
        feed(&r, &s, tok, 0, 10, n_prompt, got, V);
        int free_before = r.pool.n_free;
        latent_batch_entry b = {.seq = &s, .tokens = tok + 10, .n_tokens = 5, .prompt = 1, .logits = LATENT_LOGITS_LAST, .out = got};
        CHECK(latent_engine_step(r.eng, &b, 1, &err) != 0, "%s: step past the pool must fail", name);
        CHECK(err.code == LATENT_E_KV_FULL && strstr(err.msg, "exhausted") != NULL, "%s: code %s, message: %s", name,
              latent_err_name(err.code), err.msg);
        CHECK(s.n_pos == 10 && r.pool.n_free == free_before, "%s: failed step changed state", name);
        /* a bad token id is refused before anything runs */
        int32_t bad = V;
        b = (latent_batch_entry){.seq = &s, .tokens = &bad, .n_tokens = 1, .prompt = 0, .logits = LATENT_LOGITS_LAST, .out = got};
        CHECK(latent_engine_step(r.eng, &b, 1, &err) != 0 && s.n_pos == 10, "%s: bad token id accepted", name);
        latent_seq_free(&s); rig_free(&r);
    }
    free(ref), free(got), free(ref2), free(got2);
    latent_weights_free(&m.w);
}

/* A recurrent model with its path switched off, or T2MLR with gammas 0, is
 * its backbone bit for bit. */
static void check_backbone_equivalence(void) {
    latent_config base = tm_config(32, 4, 4, 2, 48, 64);
    latent_model plain, t2, t2zero, lrt;
    tm_model(&plain, base, 3, 0);
    tm_model(&t2, tm_t2mlr(base, 1, 2, 1), 3, 0);
    tm_model(&t2zero, tm_t2mlr(base, 1, 2, 1), 3, 1);
    tm_model(&lrt, tm_lrt(base, 2, 0, 3, 0), 3, 0);
    int32_t tok[T];
    for (int i = 0; i < T; i++) tok[i] = (i * 5 + 1) % 64;
    size_t sz = (size_t)T * 64;
    float *a = malloc(sz * sizeof(float)), *b = malloc(sz * sizeof(float));
    /* Token by token both models run the same kernels, so equality is exact;
     * a prefill runs T2MLR's window in waves (other kernels): rounding only. */
    latent_model *pair[2] = {&plain, &t2zero};
    for (int k = 0; k < 2; k++) {
        rig r; rig_init(&r, pair[k], 64);
        latent_seq s; latent_err err;
        latent_seq_init(&s, &r.pool, &pair[k]->cfg, &err);
        for (int i = 0; i < T; i++) feed(&r, &s, tok, i, i + 1, 9, k ? b : a, 64);
        latent_seq_free(&s); rig_free(&r);
    }
    CHECK(memcmp(a, b, sz * sizeof(float)) == 0, "T2MLR with gammas 0 differs from its backbone (rel %g)", tu_rel_err(b, a, sz));
    full_logits(&plain, tok, T, 9, a);
    full_logits(&t2zero, tok, T, 9, b);
    CHECK(tu_rel_err(b, a, sz) < 1e-6, "T2MLR with gammas 0, prefill: rel %g", tu_rel_err(b, a, sz));
    full_logits(&t2, tok, T, 9, b);
    CHECK(tu_rel_err(b, a, sz) > 1e-3, "T2MLR with gammas != 0 should change the logits");
    latent_model *rec[2] = {&t2, &lrt};
    for (int k = 0; k < 2; k++) {
        rig r; rig_init(&r, rec[k], 64);
        latent_engine_set_recurrence(r.eng, 0);
        latent_seq s; latent_err err;
        latent_seq_init(&s, &r.pool, &rec[k]->cfg, &err);
        feed(&r, &s, tok, 0, T, 9, b, 64);
        CHECK(memcmp(a, b, sz * sizeof(float)) == 0, "%s with recurrence off differs from its backbone",
              k ? "LRT" : "T2MLR");
        latent_seq_free(&s); rig_free(&r);
    }
    free(a), free(b);
    latent_weights_free(&plain.w); latent_weights_free(&t2.w); latent_weights_free(&t2zero.w); latent_weights_free(&lrt.w);
}

/* latent_engine_release_unpacked: the same logits afterwards, and (where the
 * packed kernel runs) the released matrices really gone: an anonymous page
 * given back with MADV_DONTNEED reads as zero. Matrices of many pages. */
static void check_release(const char *name, latent_config c, int untied) {
    c.tie_embeddings = !untied;
    latent_model m;
    if (tm_model(&m, c, 11, 0) != 0) { CHECK(0, "%s: cannot build model", name); return; }
    const int V = c.vocab, n = 9;
    int32_t tok[9];
    for (int i = 0; i < n; i++) tok[i] = (i * 13 + 1) % V;
    float *ref = malloc((size_t)n * V * sizeof(float)), *got = malloc((size_t)n * V * sizeof(float));
    float probe = m.w.layers[0].wg[(size_t)c.ffn * c.d / 2];
    full_logits(&m, tok, n, 4, ref);
    rig r;
    rig_init(&r, &m, 64);
    size_t released = latent_engine_release_unpacked(r.eng);
    latent_seq s;
    latent_err err;
    latent_seq_init(&s, &r.pool, &m.cfg, &err);
    feed(&r, &s, tok, 0, n, 4, got, V);
    latent_seq_free(&s);
    rig_free(&r);
    CHECK(memcmp(ref, got, (size_t)n * V * sizeof(float)) == 0, "%s: logits after releasing %zu bytes differ", name,
          released);
    if (released > 0) {
        CHECK(probe != 0.0f && m.w.layers[0].wg[(size_t)c.ffn * c.d / 2] == 0.0f,
              "%s: a released matrix still holds its values", name);
        CHECK(m.w.embed[(size_t)V * c.d / 2] != 0.0f, "%s: the embedding must be kept", name);
    }
    printf("%s: released %zu of the model's bytes\n", name, released);
    free(ref), free(got);
    latent_model_free(&m);
}

int main(void) {
    latent_config base = tm_config(32, 4, 4, 2, 48, 64);
    check_kind("plain", base);
    check_kind("t2mlr", tm_t2mlr(base, 1, 2, 1));
    check_kind("t2mlr-no-prompt-recurrence", tm_t2mlr(base, 1, 2, 0));
    latent_config nores = tm_t2mlr(base, 0, 3, 1);
    nores.t2mlr.cache_residual = 0;
    check_kind("t2mlr-no-cache-residual", nores);
    check_kind("lrt", tm_lrt(base, 2, 0, 3, 0));
    check_kind("lrt-final-norm-source-shared", tm_lrt(base, -1, 1, 2, 1));
    check_kind("lrt-source-below", tm_lrt(base, 0, 1, 3, 0));
    check_backbone_equivalence();
    latent_config big = tm_config(256, 2, 4, 2, 512, 300);
    check_release("release-t2mlr", tm_t2mlr(big, 0, 1, 1), 0);
    check_release("release-lrt-shared-untied", tm_lrt(big, 1, 0, 1, 1), 1);
    return tu_finish("test_engine");
}
