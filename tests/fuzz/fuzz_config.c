/* libFuzzer target for the config.json parser (engine/config.c) and the
 * parameter table built from what it accepts (engine/weights.c).
 *
 * Input: the text of a config.json. Checks, beyond "no crash, no leak, no
 * undefined behaviour":
 *   - a refusal has a message naming the origin and leaves the config zeroed;
 *   - an accepted config holds what the header promises (positive sizes, KV
 *     heads dividing the heads, an even head_dim, finite positive eps and
 *     theta, token ids inside the vocabulary, the recurrence's block indices
 *     inside the model and in order);
 *   - it survives latent_config_save + latent_config_load unchanged, field
 *     for field (floats bit for bit);
 *   - latent_weights_alloc on it either refuses with a message or builds a
 *     table whose parameters' sizes are their shapes' products and fit the
 *     slab (it is mapped lazily, so even big models cost nothing here).
 * build: make build/fuzz/fuzz_config; run: build/fuzz/fuzz_config DIR */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_NAME "fuzz_config"
#include "fuzz_util.h"

#include "latent/config.h"
#include "latent/model.h"

static char dir[512], path[600];

static void remove_dir(void) {
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_tmpdir(dir, sizeof dir, "cfg");
    snprintf(path, sizeof path, "%s/config.json", dir);
    atexit(remove_dir);
    return 0;
}

static int same_float(float a, float b) { return !memcmp(&a, &b, sizeof a); }

static void check_valid(const latent_config *c) {
    check(c->d >= 1 && c->ffn >= 1 && c->n_layers >= 1 && c->n_heads >= 1 && c->vocab >= 1 && c->max_pos >= 1, "sizes >= 1");
    check(c->n_kv_heads >= 1 && c->n_kv_heads <= c->n_heads && c->n_heads % c->n_kv_heads == 0, "KV heads divide the heads");
    check(c->head_dim >= 2 && c->head_dim % 2 == 0, "head_dim even");
    check(c->rms_eps > 0 && c->rms_eps < __builtin_inff(), "rms_norm_eps > 0 as a float");
    check(c->rope_theta > 0 && c->rope_theta < __builtin_inff(), "rope_theta > 0 as a float");
    check(c->bos_id >= -1 && c->bos_id < c->vocab, "bos id");
    check(c->n_eos >= 0 && c->n_eos <= 8 && (c->n_eos == 0) == (c->eos_id < 0), "eos ids");
    for (int i = 0; i < c->n_eos; i++) check(c->eos_ids[i] >= 0 && c->eos_ids[i] < c->vocab, "eos id in range");
    if (c->n_eos) check(c->eos_id == c->eos_ids[0], "eos_id is the first");
    if (c->rec == LATENT_REC_T2MLR) {
        const latent_t2mlr_config *t = &c->t2mlr;
        check(t->l_start >= 0 && t->l_start <= t->l_end && t->l_end < c->n_layers, "t2mlr window");
        check(t->cache_norm_clamp >= 1 && t->cache_norm_clamp < __builtin_inff(), "cache_norm_clamp >= 1");
        check(t->cache_norm_eps > 0 && t->cache_norm_eps < __builtin_inff(), "cache_norm_eps > 0 as a float");
    } else if (c->rec == LATENT_REC_LRT) {
        const latent_lrt_config *l = &c->lrt;
        check(l->source_layer >= -1 && l->source_layer < c->n_layers, "lrt source");
        check(l->inject_start >= 0 && l->inject_start <= l->inject_end && l->inject_end < c->n_layers, "lrt window");
    } else {
        check(c->rec == LATENT_REC_NONE, "recurrence type");
    }
}

static void check_same(const latent_config *a, const latent_config *b) {
    check(a->d == b->d && a->ffn == b->ffn && a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
              a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim && a->vocab == b->vocab &&
              a->max_pos == b->max_pos, "sizes survive save + load");
    check(same_float(a->rms_eps, b->rms_eps) && same_float(a->rope_theta, b->rope_theta), "eps and theta survive save + load");
    check(a->tie_embeddings == b->tie_embeddings && a->bos_id == b->bos_id && a->eos_id == b->eos_id &&
              a->n_eos == b->n_eos && !memcmp(a->eos_ids, b->eos_ids, (size_t)a->n_eos * sizeof a->eos_ids[0]),
          "token ids survive save + load");
    check(a->rec == b->rec, "recurrence type survives save + load");
    if (a->rec == LATENT_REC_T2MLR) {
        const latent_t2mlr_config *x = &a->t2mlr, *y = &b->t2mlr;
        check(x->l_start == y->l_start && x->l_end == y->l_end && x->cache_residual == y->cache_residual &&
                  same_float(x->cache_norm_clamp, y->cache_norm_clamp) && same_float(x->cache_norm_eps, y->cache_norm_eps) &&
                  x->recur_on_prompt == y->recur_on_prompt, "t2mlr block survives save + load");
    } else if (a->rec == LATENT_REC_LRT) {
        const latent_lrt_config *x = &a->lrt, *y = &b->lrt;
        check(x->source_layer == y->source_layer && x->inject_start == y->inject_start && x->inject_end == y->inject_end &&
                  x->residual_injection == y->residual_injection && x->kv_injection == y->kv_injection &&
                  x->shared_kv_projection == y->shared_kv_projection, "lrt block survives save + load");
    }
}

static void check_weights(const latent_config *c) {
    latent_weights w;
    latent_err err = {0};
    if (latent_weights_alloc(&w, c, &err) < 0) {
        check(err.msg[0] != 0, "a weights refusal has a message");
        return;
    }
    int64_t off = 0;
    for (int i = 0; i < w.n_params; i++) {
        const latent_param *p = &w.params[i];
        check(p->ndim == 1 || p->ndim == 2, "param ndim");
        check(p->shape[0] >= 1 && (p->ndim == 1 || p->shape[1] >= 1), "param shape");
        check(p->numel == (p->ndim == 2 ? p->shape[0] * p->shape[1] : p->shape[0]), "numel = product of the shape");
        check(*p->slot != NULL, "param slot set");
        check(p->numel <= w.slab_floats - off, "param inside the slab");
        off += (p->numel + 15) / 16 * 16;
        check(off <= w.slab_floats, "params inside the slab");
    }
    check((size_t)w.slab_floats * sizeof(float) <= w.slab_bytes, "slab size");
    latent_weights_free(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    check(text != NULL, "malloc");
    memcpy(text, data, size);
    text[size] = 0;
    latent_config cfg;
    latent_err err = {0};
    if (latent_config_parse(text, "fuzz.json", &cfg, &err) < 0) {
        static const latent_config zero;
        check(!strncmp(err.msg, "fuzz.json", 9), "a refusal names the origin");
        check(!memcmp(&cfg, &zero, sizeof cfg), "a refused config is zeroed");
        free(text);
        return 0;
    }
    free(text);
    check_valid(&cfg);
    latent_config back;
    check(latent_config_save(&cfg, path, &err) == 0, "save");
    if (latent_config_load(path, &back, &err) < 0) {
        fprintf(stderr, "fuzz_config: the saved config does not load: %s\n", err.msg);
        abort();
    }
    check_same(&cfg, &back);
    check_weights(&cfg);
    return 0;
}
