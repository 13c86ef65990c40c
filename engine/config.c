/* config.json: the Llama fields Hugging Face writes, plus the optional
 * "latent_recurrence" object (models.md §4). Unknown fields are ignored;
 * fields that would change the math we implement (rope_scaling, biases, a
 * non-silu activation) are refused. Every message names the file and field. */
#include "file_atomic.h"
#include "latent/config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Short rendering of a JSON value for messages: `found "abc"`, `found -3`. */
static void cfg_describe(const json_t *v, char *buf, size_t cap) {
    if (!v) { snprintf(buf, cap, "nothing"); return; }
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) { snprintf(buf, cap, "?"); return; }
    if (strlen(s) > 40) snprintf(buf, cap, "%.37s...", s);
    else snprintf(buf, cap, "%s", s);
    free(s);
}

/* An integer field: a JSON integer, or a real with an integral value. */
static int cfg_as_int(const json_t *v, long long *out) {
    if (json_is_integer(v)) { *out = json_integer_value(v); return 0; }
    if (json_is_real(v)) {
        double x = json_real_value(v);
        if (isfinite(x) && x == floor(x) && fabs(x) < 9e15) { *out = (long long)x; return 0; }
    }
    return -1;
}

typedef struct cfg_ctx {
    const char *origin;   /* "config.json" or a path */
    const char *prefix;   /* "" or "latent_recurrence." */
    latent_err *err;
} cfg_ctx;

static int cfg_bad(const cfg_ctx *c, const char *field, const char *what, const json_t *v) {
    char found[64];
    cfg_describe(v, found, sizeof found);
    return latent_err_set(c->err, LATENT_E_FORMAT, "%s: \"%s%s\" must be %s (found %s)", c->origin, c->prefix,
                          field, what, found);
}

/* Integer in [lo, hi]. Absent or null -> *out = dflt, or an error when required. */
static int cfg_int(const cfg_ctx *c, const json_t *obj, const char *field, int required, int dflt,
                   long long lo, long long hi, const char *what, int *out) {
    const json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v)) {
        if (required)
            return latent_err_set(c->err, LATENT_E_FORMAT, "%s: \"%s%s\" is missing (%s)", c->origin, c->prefix,
                                  field, what);
        *out = dflt;
        return 0;
    }
    long long x;
    if (cfg_as_int(v, &x) < 0 || x < lo || x > hi) return cfg_bad(c, field, what, v);
    *out = (int)x;
    return 0;
}

/* Finite number; `positive` requires > 0. */
static int cfg_float(const cfg_ctx *c, const json_t *obj, const char *field, float dflt,
                     int positive, const char *what, float *out) {
    const json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v)) { *out = dflt; return 0; }
    if (!json_is_number(v)) return cfg_bad(c, field, what, v);
    double x = json_number_value(v);
    /* the float is what is used (and saved): 1e-50 is positive but 0.0f */
    if (!isfinite(x) || !isfinite((float)x) || (positive && !((float)x > 0)))
        return cfg_bad(c, field, what, v);
    *out = (float)x;
    return 0;
}

static int cfg_bool(const cfg_ctx *c, const json_t *obj, const char *field, bool dflt, bool *out) {
    const json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v)) { *out = dflt; return 0; }
    if (!json_is_boolean(v)) return cfg_bad(c, field, "true or false", v);
    *out = json_is_true(v);
    return 0;
}

static int cfg_parse_t2mlr(const cfg_ctx *c, const json_t *r, latent_config *cfg) {
    latent_t2mlr_config *t = &cfg->t2mlr;
    int L = cfg->n_layers;
    char what[96];
    snprintf(what, sizeof what, "an integer block index in [0, %d]", L - 1);
    if (cfg_int(c, r, "l_start", 1, 0, 0, L - 1, what, &t->l_start) < 0) return -1;
    snprintf(what, sizeof what, "an integer block index in [l_start = %d, %d]", t->l_start, L - 1);
    if (cfg_int(c, r, "l_end", 1, 0, t->l_start, L - 1, what, &t->l_end) < 0) return -1;
    if (cfg_bool(c, r, "cache_residual", true, &t->cache_residual) < 0) return -1;
    if (cfg_float(c, r, "cache_norm_clamp", 5.0f, 1, "a number >= 1", &t->cache_norm_clamp) < 0)
        return -1;
    if (t->cache_norm_clamp < 1.0f)
        return cfg_bad(c, "cache_norm_clamp", "a number >= 1",
                       json_object_get(r, "cache_norm_clamp"));
    if (cfg_float(c, r, "cache_norm_eps", 1e-6f, 1, "a positive number", &t->cache_norm_eps) < 0)
        return -1;
    if (cfg_bool(c, r, "recur_on_prompt", true, &t->recur_on_prompt) < 0) return -1;
    return 0;
}

static int cfg_parse_lrt(const cfg_ctx *c, const json_t *r, latent_config *cfg) {
    latent_lrt_config *l = &cfg->lrt;
    int L = cfg->n_layers;
    char what[96];
    snprintf(what, sizeof what, "an integer in [-1, %d] (-1 = final norm output)", L - 1);
    if (cfg_int(c, r, "source_layer", 1, 0, -1, L - 1, what, &l->source_layer) < 0) return -1;
    snprintf(what, sizeof what, "an integer block index in [0, %d]", L - 1);
    if (cfg_int(c, r, "inject_start", 1, 0, 0, L - 1, what, &l->inject_start) < 0) return -1;
    snprintf(what, sizeof what, "an integer block index in [inject_start = %d, %d]",
             l->inject_start, L - 1);
    if (cfg_int(c, r, "inject_end", 1, 0, l->inject_start, L - 1, what, &l->inject_end) < 0)
        return -1;
    if (cfg_bool(c, r, "residual_injection", true, &l->residual_injection) < 0) return -1;
    if (cfg_bool(c, r, "kv_injection", true, &l->kv_injection) < 0) return -1;
    if (cfg_bool(c, r, "shared_kv_projection", false, &l->shared_kv_projection) < 0) return -1;
    return 0;
}

static int cfg_parse_recurrence(const char *origin, const json_t *r, latent_config *cfg,
                                latent_err *err) {
    cfg_ctx c = {origin, "latent_recurrence.", err};
    if (!json_is_object(r)) {
        cfg_ctx top = {origin, "", err};
        return cfg_bad(&top, "latent_recurrence", "an object or null", r);
    }
    const json_t *type = json_object_get(r, "type");
    if (!json_is_string(type))
        return cfg_bad(&c, "type", "\"t2mlr\" or \"lrt\"", type);
    const char *ts = json_string_value(type);
    if (strcmp(ts, "t2mlr") == 0) {
        cfg->rec = LATENT_REC_T2MLR;
        return cfg_parse_t2mlr(&c, r, cfg);
    }
    if (strcmp(ts, "lrt") == 0) {
        cfg->rec = LATENT_REC_LRT;
        return cfg_parse_lrt(&c, r, cfg);
    }
    return cfg_bad(&c, "type", "\"t2mlr\" or \"lrt\"", type);
}

/* Fields that would change the computation: refuse rather than silently ignore. */
static int cfg_refuse_unsupported(const cfg_ctx *c, const json_t *root) {
    const json_t *v;
    if ((v = json_object_get(root, "rope_scaling")) && !json_is_null(v))
        return latent_err_set(c->err, LATENT_E_UNSUPPORTED, "%s: \"rope_scaling\" is not supported (found %s); only plain "
                              "RoPE is implemented, set it to null",
                              c->origin, json_is_object(v) ? "an object" : "a non-null value");
    if ((v = json_object_get(root, "attention_bias")) && !json_is_null(v) && !json_is_false(v))
        return cfg_bad(c, "attention_bias", "false (attention biases are not supported)", v);
    if ((v = json_object_get(root, "mlp_bias")) && !json_is_null(v) && !json_is_false(v))
        return cfg_bad(c, "mlp_bias", "false (MLP biases are not supported)", v);
    if ((v = json_object_get(root, "hidden_act")) && !json_is_null(v) &&
        !(json_is_string(v) && strcmp(json_string_value(v), "silu") == 0))
        return cfg_bad(c, "hidden_act", "\"silu\" (the only activation implemented)", v);
    if ((v = json_object_get(root, "model_type")) && !json_is_null(v) &&
        !(json_is_string(v) && strcmp(json_string_value(v), "llama") == 0))
        return cfg_bad(c, "model_type", "\"llama\"", v);
    return 0;
}

/* The model's shape: sizes, heads and head_dim, checked against each other.
 * 0, or -1 with the error set. */
static int cfg_parse_shape(const cfg_ctx *c, const json_t *root, latent_config *cfg) {
    const char *origin = c->origin;
    const int big = 1 << 30;
    if (cfg_int(c, root, "hidden_size", 1, 0, 1, big, "a positive integer", &cfg->d) < 0 ||
        cfg_int(c, root, "intermediate_size", 1, 0, 1, big, "a positive integer", &cfg->ffn) < 0 ||
        cfg_int(c, root, "num_hidden_layers", 1, 0, 1, 100000, "a positive integer",
                &cfg->n_layers) < 0 ||
        cfg_int(c, root, "num_attention_heads", 1, 0, 1, 1 << 20, "a positive integer",
                &cfg->n_heads) < 0 ||
        cfg_int(c, root, "num_key_value_heads", 0, cfg->n_heads, 1, cfg->n_heads,
                "a positive integer no larger than num_attention_heads", &cfg->n_kv_heads) < 0 ||
        cfg_int(c, root, "vocab_size", 1, 0, 1, big, "a positive integer", &cfg->vocab) < 0 ||
        cfg_int(c, root, "max_position_embeddings", 0, 2048, 1, big, "a positive integer",
                &cfg->max_pos) < 0)
        return -1;
    if (cfg->n_heads % cfg->n_kv_heads != 0)
        return latent_err_set(c->err, LATENT_E_FORMAT, "%s: \"num_attention_heads\" (%d) must be a multiple of "
                              "\"num_key_value_heads\" (%d)",
                              origin, cfg->n_heads, cfg->n_kv_heads);
    const json_t *hd = json_object_get(root, "head_dim");
    if (!hd || json_is_null(hd)) {
        if (cfg->d % cfg->n_heads != 0)
            return latent_err_set(c->err, LATENT_E_FORMAT, "%s: \"hidden_size\" (%d) must be a multiple of "
                                  "\"num_attention_heads\" (%d) when \"head_dim\" is not given",
                                  origin, cfg->d, cfg->n_heads);
        cfg->head_dim = cfg->d / cfg->n_heads;
        if (cfg->head_dim > (1 << 16)) /* the limit an explicit head_dim has (and save writes it) */
            return latent_err_set(c->err, LATENT_E_UNSUPPORTED,
                                  "%s: \"hidden_size\" / \"num_attention_heads\" gives a head_dim of %d; at most %d "
                                  "is supported",
                                  origin, cfg->head_dim, 1 << 16);
    } else if (cfg_int(c, root, "head_dim", 1, 0, 1, 1 << 16, "a positive even integer", &cfg->head_dim) < 0) {
        return -1;
    }
    if (cfg->head_dim % 2 != 0) /* RoPE rotates pairs (j, j + head_dim/2). */
        return latent_err_set(c->err, LATENT_E_FORMAT, "%s: \"head_dim\" must be even for RoPE (it is %d%s)", origin,
                              cfg->head_dim, (!hd || json_is_null(hd)) ? ", hidden_size / num_attention_heads" : "");
    if ((long long)cfg->n_heads * cfg->head_dim > (1LL << 30))
        return latent_err_set(c->err, LATENT_E_FORMAT, "%s: \"num_attention_heads\" * \"head_dim\" is too large", origin);
    return 0;
}

/* bos_token_id, and eos_token_id: one id, a list of them, or null. 0, or
 * -1 with the error set. */
static int cfg_parse_special_ids(const cfg_ctx *c, const json_t *root, latent_config *cfg) {
    char what[96];
    snprintf(what, sizeof what, "a token id in [0, %d] or null", cfg->vocab - 1);
    if (cfg_int(c, root, "bos_token_id", 0, -1, 0, cfg->vocab - 1, what, &cfg->bos_id) < 0) return -1;
    const json_t *eos = json_object_get(root, "eos_token_id");
    cfg->eos_id = -1;
    cfg->n_eos = 0;
    if (!json_is_array(eos)) {
        snprintf(what, sizeof what, "a token id in [0, %d], a list of them, or null", cfg->vocab - 1);
        if (cfg_int(c, root, "eos_token_id", 0, -1, 0, cfg->vocab - 1, what, &cfg->eos_id) < 0) return -1;
        if (cfg->eos_id >= 0) cfg->eos_ids[cfg->n_eos++] = cfg->eos_id;
        return 0;
    }
    size_t n = json_array_size(eos);
    int max = (int)(sizeof cfg->eos_ids / sizeof cfg->eos_ids[0]);
    if ((int)n > max)
        return latent_err_set(c->err, LATENT_E_FORMAT, "%s: \"eos_token_id\" lists %zu ids; at most %d are supported",
                              c->origin, n, max);
    snprintf(what, sizeof what, "a list of token ids in [0, %d]", cfg->vocab - 1);
    for (size_t i = 0; i < n; i++) {
        long long x;
        if (cfg_as_int(json_array_get(eos, i), &x) < 0 || x < 0 || x >= cfg->vocab)
            return cfg_bad(c, "eos_token_id", what, eos);
        cfg->eos_ids[cfg->n_eos++] = (int)x;
    }
    if (n) cfg->eos_id = cfg->eos_ids[0];
    return 0;
}

int latent_config_parse(const char *json_text, const char *origin, latent_config *cfg,
                        latent_err *err) {
    if (!origin) origin = "config.json";
    memset(cfg, 0, sizeof *cfg);
    json_error_t jerr;
    json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: not valid JSON: %s (line %d, column %d)", origin,
                              jerr.text, jerr.line, jerr.column);
    int rc = -1;
    cfg_ctx c = {origin, "", err};
    if (!json_is_object(root)) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: the top level must be a JSON object", origin);
        goto out;
    }
    if (cfg_refuse_unsupported(&c, root) < 0 || cfg_parse_shape(&c, root, cfg) < 0) goto out;
    if (cfg_float(&c, root, "rms_norm_eps", 1e-6f, 1, "a positive number", &cfg->rms_eps) < 0 ||
        cfg_float(&c, root, "rope_theta", 10000.0f, 1, "a positive number", &cfg->rope_theta) < 0 ||
        cfg_bool(&c, root, "tie_word_embeddings", false, &cfg->tie_embeddings) < 0)
        goto out;
    if (cfg_parse_special_ids(&c, root, cfg) < 0) goto out;
    cfg->rec = LATENT_REC_NONE;
    const json_t *rec = json_object_get(root, "latent_recurrence");
    if (rec && !json_is_null(rec) && cfg_parse_recurrence(origin, rec, cfg, err) < 0) goto out;
    rc = 0;
out:
    json_decref(root);
    if (rc < 0) memset(cfg, 0, sizeof *cfg);
    return rc;
}

int latent_config_load(const char *path, latent_config *cfg, latent_err *err) {
    memset(cfg, 0, sizeof *cfg);
    FILE *f = fopen(path, "rb");
    if (!f) return latent_err_set(err, LATENT_E_IO, "%s: cannot open: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 4096) {
            size_t ncap = cap ? cap * 2 : 16384;
            if (ncap > (64u << 20)) {
                free(text); fclose(f);
                return latent_err_set(err, LATENT_E_FORMAT, "%s: larger than 64 MiB; not a config.json", path);
            }
            char *t = realloc(text, ncap);
            if (!t) { free(text); fclose(f); return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path); }
            text = t; cap = ncap;
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    int rd_err = ferror(f);
    fclose(f);
    if (rd_err) { free(text); return latent_err_set(err, LATENT_E_FORMAT, "%s: read error", path); }
    text[len] = '\0';
    if (strlen(text) != len) {
        free(text);
        return latent_err_set(err, LATENT_E_FORMAT, "%s: not valid JSON: contains a NUL byte", path);
    }
    int rc = latent_config_parse(text, path, cfg, err);
    free(text);
    return rc;
}

/* A float as the shortest decimal that reads back as the same float, as a
 * double, so dumping it with 9 significant digits prints that decimal. */
static json_t *cfg_real(float x) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)x);
        if ((float)strtod(buf, NULL) == x) break;
    }
    return json_real(strtod(buf, NULL));
}

int latent_config_save(const latent_config *cfg, const char *path, latent_err *err) {
    return latent_config_save_dtype(cfg, path, 0, err);
}

/* The "latent_recurrence" object of cfg, or NULL for a plain model. */
static json_t *cfg_recurrence_json(const latent_config *cfg) {
    json_t *r = NULL;
    if (cfg->rec == LATENT_REC_T2MLR) {
        const latent_t2mlr_config *t = &cfg->t2mlr;
        r = json_object();
        json_object_set_new(r, "type", json_string("t2mlr"));
        json_object_set_new(r, "l_start", json_integer(t->l_start));
        json_object_set_new(r, "l_end", json_integer(t->l_end));
        json_object_set_new(r, "cache_residual", json_boolean(t->cache_residual));
        json_object_set_new(r, "cache_norm_clamp", cfg_real(t->cache_norm_clamp));
        json_object_set_new(r, "cache_norm_eps", cfg_real(t->cache_norm_eps));
        json_object_set_new(r, "recur_on_prompt", json_boolean(t->recur_on_prompt));
    } else if (cfg->rec == LATENT_REC_LRT) {
        const latent_lrt_config *l = &cfg->lrt;
        r = json_object();
        json_object_set_new(r, "type", json_string("lrt"));
        json_object_set_new(r, "source_layer", json_integer(l->source_layer));
        json_object_set_new(r, "inject_start", json_integer(l->inject_start));
        json_object_set_new(r, "inject_end", json_integer(l->inject_end));
        json_object_set_new(r, "residual_injection", json_boolean(l->residual_injection));
        json_object_set_new(r, "kv_injection", json_boolean(l->kv_injection));
        json_object_set_new(r, "shared_kv_projection", json_boolean(l->shared_kv_projection));
    }
    return r;
}

/* config.json's object for cfg: the Llama fields, then the recurrence. */
static json_t *cfg_to_json(const latent_config *cfg, int bf16) {
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "architectures", json_pack("[s]", "LlamaForCausalLM"));
    json_object_set_new(o, "model_type", json_string("llama"));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "torch_dtype", json_string(bf16 ? "bfloat16" : "float32"));
    json_object_set_new(o, "hidden_size", json_integer(cfg->d));
    json_object_set_new(o, "intermediate_size", json_integer(cfg->ffn));
    json_object_set_new(o, "num_hidden_layers", json_integer(cfg->n_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(cfg->n_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(cfg->n_kv_heads));
    json_object_set_new(o, "head_dim", json_integer(cfg->head_dim));
    json_object_set_new(o, "vocab_size", json_integer(cfg->vocab));
    json_object_set_new(o, "max_position_embeddings", json_integer(cfg->max_pos));
    json_object_set_new(o, "rms_norm_eps", cfg_real(cfg->rms_eps));
    json_object_set_new(o, "rope_theta", cfg_real(cfg->rope_theta));
    json_object_set_new(o, "rope_scaling", json_null());
    json_object_set_new(o, "attention_bias", json_false());
    json_object_set_new(o, "mlp_bias", json_false());
    json_object_set_new(o, "tie_word_embeddings", json_boolean(cfg->tie_embeddings));
    json_object_set_new(o, "bos_token_id", cfg->bos_id >= 0 ? json_integer(cfg->bos_id) : json_null());
    if (cfg->n_eos > 1) {
        json_t *a = json_array();
        for (int i = 0; i < cfg->n_eos; i++) json_array_append_new(a, json_integer(cfg->eos_ids[i]));
        json_object_set_new(o, "eos_token_id", a);
    } else {
        json_object_set_new(o, "eos_token_id",
                            cfg->eos_id >= 0 ? json_integer(cfg->eos_id) : json_null());
    }
    json_t *r = cfg_recurrence_json(cfg);
    if (r) json_object_set_new(o, "latent_recurrence", r);
    return o;
}

int latent_config_save_dtype(const latent_config *cfg, const char *path, int bf16, latent_err *err) {
    json_t *o = cfg_to_json(cfg, bf16);
    if (!o) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!text) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
    int rc = latent_write_text_atomic(path, text, 1, err);
    free(text);
    return rc;
}
