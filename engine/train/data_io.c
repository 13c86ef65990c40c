/* Dataset files (NAME.bin, .mask, .labels, .flow, .json; docs/training.md,
 * "Data files") and the task vocabularies' tokenizer.json. */
#include "latent/data.h"
#include "train/token_files.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* path with its extension (after the last '.' of the last component) replaced by ext */
/* Writes bytes to path atomically: path.tmp, fsync, rename. */
static int write_atomic(const char *path, const void *data, size_t bytes, latent_err *err) {
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    if (!tmp) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        latent_err_set(err, LATENT_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    int ok = fwrite(data, 1, bytes, f) == bytes && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) e = errno;
        remove(tmp);
        latent_err_set(err, LATENT_E_IO, "%s: write failed: %s", path, strerror(e));
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

static int write_u32(const char *path, const uint32_t *v, int64_t n, latent_err *err) {
    unsigned char *b = malloc((size_t)n * 4 + 1);
    if (!b) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
    for (int64_t i = 0; i < n; i++) { /* little-endian on any host */
        b[4 * i] = (unsigned char)v[i], b[4 * i + 1] = (unsigned char)(v[i] >> 8);
        b[4 * i + 2] = (unsigned char)(v[i] >> 16), b[4 * i + 3] = (unsigned char)(v[i] >> 24);
    }
    int rc = write_atomic(path, b, (size_t)n * 4, err);
    free(b);
    return rc;
}

static json_t *task_json(const latent_task *t) {
    json_t *o = json_object();
    char g[16];
    json_object_set_new(o, "task", json_string(latent_task_kind_name(t->kind)));
    if (t->kind == LATENT_TASK_GROUP) {
        json_object_set_new(o, "group", json_string(latent_task_group_name(t, g, sizeof g)));
        json_object_set_new(o, "final_only", json_boolean(t->final_only));
    }
    if (t->kind != LATENT_TASK_VAR) {
        json_object_set_new(o, "min_len", json_integer(t->min_len));
        json_object_set_new(o, "max_len", json_integer(t->max_len));
    }
    if (t->kind == LATENT_TASK_S5R) {
        json_object_set_new(o, "dict_size", json_integer(t->dict_size));
        json_object_set_new(o, "value_len", json_integer(t->value_len));
        json_object_set_new(o, "n_values", json_integer(t->n_values));
    }
    if (t->kind == LATENT_TASK_VAR) {
        json_object_set_new(o, "n_base", json_integer(t->n_base));
        json_object_set_new(o, "min_depth", json_integer(t->min_depth));
        json_object_set_new(o, "max_depth", json_integer(t->max_depth));
        json_object_set_new(o, "n_distractors", json_integer(t->n_distractors));
        json_object_set_new(o, "program_order", json_integer(t->program_order));
        json_object_set_new(o, "n_queries", json_integer(t->n_queries));
        json_object_set_new(o, "query_from", json_integer(t->query_from));
        json_object_set_new(o, "query_any_pct", json_integer(t->query_any_pct));
        json_object_set_new(o, "decoy_pct", json_integer(t->decoy_pct));
    }
    return o;
}

int latent_dataset_save(const latent_dataset *d, const char *prefix, latent_err *err) {
    char *p = NULL;
    int rc = -1;
    json_t *o = task_json(&d->task);
    json_object_set_new(o, "records", json_true());
    json_object_set_new(o, "record_len", json_integer(d->record_len));
    json_object_set_new(o, "n_records", json_integer(d->n_records));
    json_object_set_new(o, "n_tokens", json_integer(d->n_tokens));
    json_object_set_new(o, "vocab_size", json_integer(latent_task_vocab_size(&d->task)));
    json_object_set_new(o, "pad_id", json_integer(LATENT_DATA_PAD));
    json_object_set_new(o, "bos_id", json_integer(LATENT_DATA_BOS));
    json_object_set_new(o, "eos_id", json_integer(LATENT_DATA_EOS));
    json_object_set_new(o, "mask", json_true());
    json_object_set_new(o, "labels", json_boolean(d->labels != NULL));
    json_object_set_new(o, "flow", json_boolean(d->flow != NULL));
    json_object_set_new(o, "seed", json_integer((json_int_t)d->seed));
    char *text = json_dumps(o, JSON_INDENT(2));
    json_decref(o);
    if (!text) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", prefix);
    size_t n = strlen(prefix) + 16;
    if (!(p = malloc(n))) goto oom;
    snprintf(p, n, "%s.bin", prefix);
    if (write_u32(p, d->tokens, d->n_tokens, err) != 0) goto done;
    snprintf(p, n, "%s.mask", prefix);
    if (write_atomic(p, d->mask, (size_t)d->n_tokens, err) != 0) goto done;
    snprintf(p, n, "%s.labels", prefix);
    if (d->labels ? write_u32(p, d->labels, d->n_tokens, err) != 0 : (remove(p), 0)) goto done;
    snprintf(p, n, "%s.flow", prefix);
    if (d->flow ? write_atomic(p, d->flow, (size_t)d->n_tokens, err) != 0 : (remove(p), 0)) goto done;
    snprintf(p, n, "%s.json", prefix);
    size_t tl = strlen(text);
    text[tl] = '\n'; /* json_dumps leaves room for the NUL we overwrite */
    rc = write_atomic(p, text, tl + 1, err);
    goto done;
oom:
    latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", prefix);
done:
    free(text);
    free(p);
    return rc;
}

/* Reads a whole file; *n gets its size. */
static void *read_all(const char *path, size_t *n, int missing_ok, latent_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (!(missing_ok && errno == ENOENT)) latent_err_set(err, LATENT_E_IO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        latent_err_set(err, LATENT_E_IO, "%s: cannot stat", path);
        return NULL;
    }
    *n = (size_t)st.st_size;
    unsigned char *b = malloc(*n + 1);
    if (!b || fread(b, 1, *n, f) != *n) {
        free(b);
        fclose(f);
        latent_err_set(err, LATENT_E_IO, "%s: read failed", path);
        return NULL;
    }
    b[*n] = 0;
    fclose(f);
    return b;
}

static uint32_t *read_u32(const char *path, int64_t want, int missing_ok, latent_err *err) {
    size_t n = 0;
    unsigned char *b = read_all(path, &n, missing_ok, err);
    if (!b) return NULL;
    if (n != (size_t)want * 4) {
        free(b);
        latent_err_set(err, LATENT_E_FORMAT, "%s: %zu bytes, expected %lld (4 per token)", path, n, (long long)want * 4);
        return NULL;
    }
    uint32_t *v = malloc((size_t)want * sizeof *v + 1);
    if (v)
        for (int64_t i = 0; i < want; i++)
            v[i] = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
    free(b);
    if (!v) latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
    return v;
}

static int json_int_field(json_t *o, const char *k, int dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

/* Reads the dataset's token files through the one token-file reader and
 * keeps copies: the mask is required, labels and flow as the .json says. */
static int copy_token_files(latent_dataset *d, const char *bin_path, int want_labels, int want_flow, latent_err *err) {
    latent_tokens tf;
    if (latent_tokens_open(&tf, bin_path, latent_task_vocab_size(&d->task), 0, err) != 0) return -1;
    int rc = -1;
    const char *missing = !tf.mask ? ".mask" : want_labels && !tf.labels ? ".labels" : want_flow && !tf.flow ? ".flow" : NULL;
    if (tf.n != d->n_tokens) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: %lld tokens, expected %lld (record_len and n_records in the .json)", bin_path,
                       (long long)tf.n, (long long)d->n_tokens);
    } else if (missing) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: the dataset needs its %s file beside it", bin_path, missing);
    } else {
        size_t n = (size_t)tf.n;
        d->tokens = malloc(n * sizeof *d->tokens);
        d->mask = malloc(n);
        d->labels = want_labels ? malloc(n * sizeof *d->labels) : NULL;
        d->flow = want_flow ? malloc(n) : NULL;
        if (!d->tokens || !d->mask || (want_labels && !d->labels) || (want_flow && !d->flow)) {
            latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", bin_path);
        } else {
            memcpy(d->tokens, tf.ids, n * sizeof *d->tokens);
            memcpy(d->mask, tf.mask, n);
            if (d->labels) memcpy(d->labels, tf.labels, n * sizeof *d->labels);
            if (d->flow) memcpy(d->flow, tf.flow, n);
            rc = 0;
        }
    }
    latent_tokens_close(&tf);
    return rc;
}

int latent_dataset_load(latent_dataset *d, const char *bin_path, latent_err *err) {
    memset(d, 0, sizeof *d);
    char *p = latent_token_companion(bin_path, ".json");
    if (!p) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", bin_path);
    json_error_t je;
    json_t *o = json_load_file(p, 0, &je);
    if (!o) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: %s (the task description written by `latent data` beside %s)", p, je.text, bin_path);
        free(p);
        return -1;
    }
    int rc = -1;
    latent_task *t = &d->task;
    const char *task = json_string_value(json_object_get(o, "task"));
    const char *group = json_string_value(json_object_get(o, "group"));
    if (!task) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: no \"task\"", p);
        goto done;
    }
    if (!strcmp(task, "group")) latent_task_defaults(t, LATENT_TASK_GROUP);
    else if (!strcmp(task, "s5-retrieval")) latent_task_defaults(t, LATENT_TASK_S5R);
    else if (!strcmp(task, "var-assign")) latent_task_defaults(t, LATENT_TASK_VAR);
    else {
        latent_err_set(err, LATENT_E_FORMAT, "%s: unknown task \"%s\"", p, task);
        goto done;
    }
    if (t->kind == LATENT_TASK_GROUP) {
        if (!group || (group[0] != 'z' && group[0] != 's')) {
            latent_err_set(err, LATENT_E_FORMAT, "%s: bad \"group\"", p);
            goto done;
        }
        t->group = group[0];
        t->n = atoi(group + 1);
        t->final_only = json_is_true(json_object_get(o, "final_only"));
    }
    t->min_len = json_int_field(o, "min_len", t->min_len);
    t->max_len = json_int_field(o, "max_len", t->max_len);
    t->dict_size = json_int_field(o, "dict_size", t->dict_size);
    t->value_len = json_int_field(o, "value_len", t->value_len);
    t->n_values = json_int_field(o, "n_values", t->n_values);
    t->n_base = json_int_field(o, "n_base", t->n_base);
    t->min_depth = json_int_field(o, "min_depth", t->min_depth);
    t->max_depth = json_int_field(o, "max_depth", t->max_depth);
    t->n_distractors = json_int_field(o, "n_distractors", t->n_distractors);
    t->program_order = json_int_field(o, "program_order", 0);
    t->n_queries = json_int_field(o, "n_queries", 1);
    /* files of the sixth session say "query_from_chain" (0 or 1) */
    t->query_from = json_int_field(o, "query_from", json_int_field(o, "query_from_chain", 0));
    t->query_any_pct = json_int_field(o, "query_any_pct", 0);
    t->decoy_pct = json_int_field(o, "decoy_pct", 0);
    d->record_len = json_int_field(o, "record_len", 0);
    d->n_records = json_int_field(o, "n_records", 0);
    d->seed = (uint64_t)json_int_field(o, "seed", 0);
    if (latent_task_check(t, err) != 0) goto done;
    if (d->record_len < 2 || d->n_records < 1) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: bad record_len or n_records", p);
        goto done;
    }
    d->n_tokens = (int64_t)d->n_records * d->record_len + d->record_len + 1;
    if (copy_token_files(d, bin_path, json_is_true(json_object_get(o, "labels")), json_is_true(json_object_get(o, "flow")),
                         err) != 0)
        goto done;
    rc = 0;
done:
    if (rc != 0) latent_dataset_free(d);
    json_decref(o);
    free(p);
    return rc;
}

int latent_dataset_load_files(latent_dataset *d, const latent_task *t, const char *bin_path,
                              const char *mask_path, const char *labels_path, int record_len,
                              latent_err *err) {
    memset(d, 0, sizeof *d);
    d->task = *t;
    if (latent_task_check(t, err) != 0) return -1;
    if (record_len < 2) return latent_err_set(err, LATENT_E_FORMAT, "%s: records need at least 2 tokens", bin_path);
    struct stat st;
    if (stat(bin_path, &st) != 0) return latent_err_set(err, LATENT_E_IO, "%s: cannot open: %s", bin_path, strerror(errno));
    if (st.st_size % 4) return latent_err_set(err, LATENT_E_FORMAT, "%s: %lld bytes is not a whole number of uint32 ids", bin_path, (long long)st.st_size);
    d->n_tokens = st.st_size / 4;
    d->record_len = record_len;
    d->n_records = (int)(d->n_tokens / record_len);
    if (d->n_records < 1) return latent_err_set(err, LATENT_E_FORMAT, "%s: shorter than one record of %d tokens", bin_path, record_len);
    char *def = NULL;
    int rc = -1;
    if (!(d->tokens = read_u32(bin_path, d->n_tokens, 0, err))) goto done;
    if (!mask_path) {
        def = latent_token_companion(bin_path, ".mask");
        if (def && access(def, F_OK) == 0) mask_path = def;
    }
    if (mask_path) {
        size_t n = 0;
        if (!(d->mask = read_all(mask_path, &n, 0, err))) goto done;
        if (n != (size_t)d->n_tokens) {
            latent_err_set(err, LATENT_E_FORMAT, "%s: %zu bytes, expected %lld (one per token)", mask_path, n, (long long)d->n_tokens);
            goto done;
        }
    } else {
        if (!(d->mask = malloc((size_t)d->n_tokens))) {
            latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", bin_path);
            goto done;
        }
        memset(d->mask, 1, (size_t)d->n_tokens);
    }
    if (labels_path && !(d->labels = read_u32(labels_path, d->n_tokens, 0, err))) goto done;
    rc = 0;
done:
    free(def);
    if (rc != 0) latent_dataset_free(d);
    return rc;
}

/* ---- tokenizer.json -------------------------------------------------------------- */

/* GPT-2's byte-to-unicode map: printable bytes stay, the others go to U+0100.. */
static void byte_level(unsigned char c, char *out) {
    int keep = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
    unsigned cp = c;
    if (!keep) {
        int k = 0;
        for (int b = 0; b < c; b++)
            k += !((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE));
        cp = 256 + (unsigned)k;
    }
    if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
    else out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 63)), out[2] = 0;
}

int latent_task_write_tokenizer(const latent_task *t, const char *dir, latent_err *err) {
    if (latent_task_check(t, err) != 0) return -1;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return latent_err_set(err, LATENT_E_IO, "%s: cannot create: %s", dir, strerror(errno));
    json_t *vocab = json_object(), *added = json_array();
    int V = latent_task_vocab_size(t);
    char name[32], bl[8];
    for (int id = 0; id < V; id++) {
        latent_task_token_name(t, id, name, sizeof name);
        if (strlen(name) == 1) { /* a single byte: its byte-level character, reached by BPE */
            byte_level((unsigned char)name[0], bl);
            json_object_set_new(vocab, bl, json_integer(id));
        } else { /* a symbol: an added token, cut out of the text before BPE */
            json_object_set_new(vocab, name, json_integer(id));
            json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", name,
                                                   "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                                                   "special", id < 3));
        }
    }
    json_t *bytelevel = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                                  "trim_offsets", 1, "use_regex", 1);
    json_t *tok = json_pack("{s:s, s:n, s:n, s:o, s:n, s:O, s:n, s:O, s:{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:o, s:[]}}",
                            "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer",
                            "pre_tokenizer", bytelevel, "post_processor", "decoder", bytelevel, "model", "type",
                            "BPE", "dropout", "unk_token", "continuing_subword_prefix", "", "end_of_word_suffix", "",
                            "fuse_unk", 0, "byte_fallback", 0, "vocab", vocab, "merges");
    json_decref(bytelevel);
    json_t *cfg = json_pack("{s:s, s:s, s:s, s:b, s:s}", "bos_token", "<bos>", "eos_token", "<eos>", "pad_token", "<pad>",
                            "add_prefix_space", 0, "tokenizer_class", "PreTrainedTokenizerFast");
    int rc = -1;
    char *a = tok ? json_dumps(tok, JSON_INDENT(1)) : NULL, *b = cfg ? json_dumps(cfg, JSON_INDENT(2)) : NULL;
    size_t n = strlen(dir) + 32;
    char *p = malloc(n);
    if (!a || !b || !p) {
        latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir);
    } else {
        snprintf(p, n, "%s/tokenizer.json", dir);
        if (write_atomic(p, a, strlen(a), err) == 0) {
            snprintf(p, n, "%s/tokenizer_config.json", dir);
            rc = write_atomic(p, b, strlen(b), err);
        }
    }
    free(a);
    free(b);
    free(p);
    json_decref(tok);
    json_decref(cfg);
    return rc;
}
