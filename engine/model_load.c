/* A model directory (models.md §4): config.json, model.safetensors or the
 * shards named by model.safetensors.index.json, and tokenizer.json. Every
 * tensor of the parameter table must be present with its shape; values are
 * converted to float32 once into the weights slab and the files are closed,
 * except F32 tensors (used in place from the mapping) and, when the caller
 * asks (latent_load_opts.keep_bf16), BF16 matrices (left in the mapping for
 * a bf16 engine to pack from). */
#include "latent/model.h"
#include "safetensors.h"
#include "latent/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#define ML_SINGLE "model.safetensors"
#define ML_INDEX "model.safetensors.index.json"

static char *ml_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int ml_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static void ml_fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* A tensor with shape [] holds one value: accept it for a [1] parameter
 * (PyTorch scalars are saved that way). */
static int ml_shape_ok(const latent_param *p, const st_tensor *t) {
    if (p->ndim == 1 && p->shape[0] == 1 && t->ndim == 0) return 1;
    if (t->ndim != p->ndim) return 0;
    for (int i = 0; i < p->ndim; i++)
        if (t->shape[i] != p->shape[i]) return 0;
    return 1;
}

/* Names that belong to a recurrence: if the table does not expect them the
 * config and the weights disagree, and running would silently drop them. */
static int ml_is_recurrent_name(const char *name) {
    return strncmp(name, "model.t2mlr.", 12) == 0 || strncmp(name, "model.lrt.", 10) == 0 ||
           (strncmp(name, "model.layers.", 13) == 0 && strstr(name, ".lrt.") != NULL);
}

/* The shard set: one file, or every distinct file of the index's weight_map. */
typedef struct ml_sources {
    st_file *files; int n_files;
    json_t *weight_map;   /* NULL for a single file */
    char *index_path;
} ml_sources;

static void ml_sources_free(ml_sources *s) {
    for (int i = 0; i < s->n_files; i++) latent_st_file_close(&s->files[i]);
    free(s->files);
    if (s->weight_map) json_decref(s->weight_map);
    free(s->index_path);
    memset(s, 0, sizeof *s);
}

static int ml_shard_index(const ml_sources *s, const char *file) {
    for (int i = 0; i < s->n_files; i++) {
        const char *p = s->files[i].path, *slash = strrchr(p, '/');
        if (strcmp(slash ? slash + 1 : p, file) == 0) return i;
    }
    return -1;
}

static int ml_open_sources(ml_sources *s, const char *dir, latent_err *err) {
    memset(s, 0, sizeof *s);
    char *single = ml_join(dir, ML_SINGLE);
    if (!single) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir);
    if (ml_is_file(single)) { /* as transformers does: the single file wins */
        s->files = calloc(1, sizeof *s->files);
        if (!s->files) { free(single); return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir); }
        int rc = latent_st_file_open(&s->files[0], single, err);
        free(single);
        if (rc < 0) { ml_sources_free(s); return -1; }
        s->n_files = 1;
        return 0;
    }
    s->index_path = ml_join(dir, ML_INDEX);
    if (!s->index_path) { free(single); return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir); }
    if (!ml_is_file(s->index_path)) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: no weights: neither %s nor %s exists", dir, ML_SINGLE, ML_INDEX);
        free(single);
        ml_sources_free(s);
        return -1;
    }
    free(single);
    json_error_t jerr;
    json_t *root = json_load_file(s->index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: not valid JSON: %s (line %d, column %d)", s->index_path,
                       jerr.text, jerr.line, jerr.column);
        ml_sources_free(s);
        return -1;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        json_decref(root);
        latent_err_set(err, LATENT_E_FORMAT, "%s: \"weight_map\" is missing or not an object", s->index_path);
        ml_sources_free(s);
        return -1;
    }
    s->weight_map = json_incref(wm);
    json_decref(root);
    size_t n = json_object_size(wm);
    s->files = calloc(n ? n : 1, sizeof *s->files);
    if (!s->files) { ml_sources_free(s); return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir); }
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        if (!json_is_string(v)) {
            latent_err_set(err, LATENT_E_FORMAT, "%s: weight_map[\"%s\"] is not a file name", s->index_path, name);
            ml_sources_free(s);
            return -1;
        }
        const char *file = json_string_value(v);
        /* Shards live in the model directory, nowhere else. */
        if (!*file || strchr(file, '/') || strcmp(file, "..") == 0 || strcmp(file, ".") == 0) {
            latent_err_set(err, LATENT_E_FORMAT, "%s: weight_map[\"%s\"] = \"%s\" is not a file in the model directory",
                           s->index_path, name, file);
            ml_sources_free(s);
            return -1;
        }
        if (ml_shard_index(s, file) >= 0) continue;
        char *path = ml_join(dir, file);
        if (!path) { ml_sources_free(s); return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir); }
        if (!ml_is_file(path)) {
            latent_err_set(err, LATENT_E_FORMAT, "%s: shard \"%s\" (holding tensor \"%s\") is missing: %s",
                           s->index_path, file, name, path);
            free(path);
            ml_sources_free(s);
            return -1;
        }
        int rc = latent_st_file_open(&s->files[s->n_files], path, err);
        free(path);
        if (rc < 0) { ml_sources_free(s); return -1; }
        s->n_files++;
    }
    return 0;
}

/* Fills every parameter of m->w from the sources; returns how many are used
 * in place from the mappings (F32 tensors, and BF16 matrices under
 * keep_bf16), or -1. */
static int ml_fill(latent_model *m, const ml_sources *s, int keep_bf16, latent_err *err) {
    int in_place = 0; /* tensors read from the mappings directly */
    latent_weights *w = &m->w;
    for (int i = 0; i < w->n_params; i++) {
        latent_param *p = &w->params[i];
        char want[64], got[96];
        ml_fmt_shape(want, sizeof want, p->ndim, p->shape);
        const st_file *f = &s->files[0];
        if (s->weight_map) {
            const json_t *v = json_object_get(s->weight_map, p->name);
            if (!v)
                return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\" is missing from \"weight_map\" "
                                      "(expected shape %s)",
                                      s->index_path, p->name, want);
            f = &s->files[ml_shard_index(s, json_string_value(v))];
        }
        const st_tensor *t = latent_st_file_find(f, p->name);
        if (!t)
            return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\" is missing (expected shape %s)", f->path,
                                  p->name, want);
        if (!ml_shape_ok(p, t)) {
            ml_fmt_shape(got, sizeof got, t->ndim, t->shape);
            return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": expected shape %s, found %s", f->path,
                                  p->name, want, got);
        }
        if (p->ndim == 2 && t->dtype == ST_BF16) m->checkpoint_bf16 = 1;
        if (t->dtype == ST_F32 && (uintptr_t)t->data % sizeof(float) == 0) {
            /* Already the compute type: use it in place from the mapping. */
            *p->slot = (float *)t->data;
            in_place++;
        } else if (keep_bf16 && p->ndim == 2 && t->dtype == ST_BF16 && (uintptr_t)t->data % sizeof(uint16_t) == 0) {
            /* Packed into bf16 panels straight from the file: the slot's
             * slab pages are never written, so they cost no memory. */
            p->bf16 = t->data;
            m->bf16_kept++;
            in_place++;
        } else {
            latent_st_to_f32(*p->slot, t->data, t->dtype, (size_t)p->numel);
        }
    }
    /* Tensors the table does not have: ignored (HF ships e.g. a tied
     * lm_head.weight or rotary inv_freq buffers), unless they belong to a
     * recurrence this config does not declare. */
    for (int k = 0; k < s->n_files; k++) {
        const st_file *f = &s->files[k];
        for (int j = 0; j < f->n_tensors; j++) {
            const char *name = f->tensors[j].name;
            if (ml_is_recurrent_name(name) && !latent_weights_find(w, name))
                return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\" belongs to a recurrence that config.json "
                                      "does not declare (check its \"latent_recurrence\")",
                                      f->path, name);
        }
    }
    return in_place;
}

int latent_model_load(latent_model *m, const char *dir, latent_err *err) { return latent_model_load_opts(m, dir, NULL, err); }

int latent_model_load_opts(latent_model *m, const char *dir, const latent_load_opts *o, latent_err *err) {
    memset(m, 0, sizeof *m);
    m->dir = strdup(dir);
    char *cfg_path = ml_join(dir, "config.json");
    char *tok_path = ml_join(dir, "tokenizer.json");
    ml_sources src = {0};
    int rc = -1;
    if (!m->dir || !cfg_path || !tok_path) {
        latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir);
        goto out;
    }
    if (latent_config_load(cfg_path, &m->cfg, err) < 0) goto out;
    if (latent_weights_alloc(&m->w, &m->cfg, err) < 0) goto out;
    if (ml_open_sources(&src, dir, err) < 0) goto out;
    int in_place = ml_fill(m, &src, o && o->keep_bf16, err);
    if (in_place < 0) goto out;
    latent_weights_link(&m->w, &m->cfg);
    if (in_place > 0) {
        /* F32 tensors (and kept BF16 ones) point into the mappings: they live as long as the model. */
        m->mapped = malloc(sizeof src);
        if (!m->mapped) {
            latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir);
            goto out;
        }
        memcpy(m->mapped, &src, sizeof src);
        memset(&src, 0, sizeof src);
    } /* else every tensor was converted (BF16, F16): the files are unmapped below */
    if (ml_is_file(tok_path)) {
        m->tok = latent_tokenizer_load(tok_path, err);
        if (!m->tok) goto out;
        int tv = latent_tokenizer_vocab_size(m->tok);
        if (tv > m->cfg.vocab) {
            latent_err_set(err, LATENT_E_FORMAT, "%s: the tokenizer has %d tokens but config.json \"vocab_size\" is %d",
                           tok_path, tv, m->cfg.vocab);
            goto out;
        }
    }
    rc = 0;
out:
    ml_sources_free(&src);
    free(cfg_path);
    free(tok_path);
    if (rc < 0) latent_model_free(m);
    return rc;
}

void latent_model_free(latent_model *m) {
    if (!m) return;
    if (m->tok) latent_tokenizer_free(m->tok);
    latent_weights_free(&m->w);
    if (m->mapped) {
        ml_sources_free(m->mapped);
        free(m->mapped);
    }
    free(m->dir);
    memset(m, 0, sizeof *m);
}
