/* libFuzzer target for the safetensors reader (engine/safetensors.c) and the
 * model loader's checks on top of it (engine/model_load.c, engine/weights.c).
 *
 * Four tiny model directories are made at start-up, each with a config.json
 * and no weights: plain with tied embeddings, T2MLR untied, LRT with a shared
 * KV projection, LRT with its own projections and no residual injection
 * (d 4, 2 blocks, 2 heads of 2, 1 KV head, ffn 4, vocab 8).
 *
 * Input: one selector byte (bits 0-1: the directory; bit 2: sharded), then
 *   single:  the bytes of model.safetensors;
 *   sharded: u16 LE length L, L bytes of model.safetensors.index.json, u32 LE
 *            length K, K bytes of a.safetensors, the rest is b.safetensors.
 * Each file is written into the directory (a tmpfs when there is one) and
 *   1. opened alone with st_file_open: when it opens, every tensor lies
 *      inside the data section, holds dtype size * elements bytes, overlaps no
 *      other, is found by name, and converts to float32 (reading every byte,
 *      which ASan checks);
 *   2. the directory is loaded with latent_model_load: a refusal leaves a
 *      message and a zeroed model; a model that loads has every parameter
 *      set, readable to its last float, equal bit for bit to its tensor in
 *      the file (single file), and the tied / shared aliases in place.
 * LATENT_FUZZ_SEEDS=DIR writes valid inputs for every directory and mode into
 * DIR (the seeds in tests/fuzz/corpus_safetensors) and exits.
 * build: make build/fuzz/fuzz_safetensors; run: build/fuzz/fuzz_safetensors DIR */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_NAME "fuzz_safetensors"
#include "fuzz_util.h"

#include "latent/model.h"
#include "safetensors.h"

#define N_DIRS 4

static const char *const configs[N_DIRS] = {
    "{\"model_type\": \"llama\", \"hidden_size\": 4, \"intermediate_size\": 4, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"vocab_size\": 8, \"tie_word_embeddings\": true}",
    "{\"model_type\": \"llama\", \"hidden_size\": 4, \"intermediate_size\": 4, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"vocab_size\": 8, \"tie_word_embeddings\": false,"
    " \"latent_recurrence\": {\"type\": \"t2mlr\", \"l_start\": 0, \"l_end\": 1}}",
    "{\"model_type\": \"llama\", \"hidden_size\": 4, \"intermediate_size\": 4, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"vocab_size\": 8, \"tie_word_embeddings\": true,"
    " \"latent_recurrence\": {\"type\": \"lrt\", \"source_layer\": -1, \"inject_start\": 0, \"inject_end\": 1,"
    " \"shared_kv_projection\": true}}",
    "{\"model_type\": \"llama\", \"hidden_size\": 4, \"intermediate_size\": 4, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"vocab_size\": 8, \"tie_word_embeddings\": true,"
    " \"latent_recurrence\": {\"type\": \"lrt\", \"source_layer\": 0, \"inject_start\": 1, \"inject_end\": 1,"
    " \"residual_injection\": false}}",
};

static const char *const files[] = {"model.safetensors", "model.safetensors.index.json", "a.safetensors",
                                    "b.safetensors"};

static char dirs[N_DIRS][512];
static char top[512];

static void path_of(char *out, size_t cap, int d, const char *name) { snprintf(out, cap, "%s/%s", dirs[d], name); }

static void write_file(const char *path, const void *p, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    check(fd >= 0, "create a file");
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        check(w > 0, "write a file");
        c += w;
        n -= (size_t)w;
    }
    close(fd);
}

static void clear_dir(int d) {
    char p[600];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        path_of(p, sizeof p, d, files[i]);
        unlink(p);
    }
}

static void remove_dirs(void) {
    char p[600];
    for (int d = 0; d < N_DIRS; d++) {
        clear_dir(d);
        path_of(p, sizeof p, d, "config.json");
        unlink(p);
        rmdir(dirs[d]);
    }
    rmdir(top);
}

/* ---- seeds ------------------------------------------------------------------------ */

static void *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    check(f != NULL, "open a seed part");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc((size_t)len + 1);
    check(p && fread(p, 1, (size_t)len, f) == (size_t)len, "read a seed part");
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* Valid inputs: per directory, the single file (F32 and BF16) and two shards. */
static void write_seeds(const char *out) {
    latent_err err = {0};
    char path[700], name[700];
    for (int d = 0; d < N_DIRS; d++) {
        latent_config cfg;
        check(latent_config_parse(configs[d], "seed config", &cfg, &err) == 0, err.msg);
        latent_weights w;
        check(latent_weights_alloc(&w, &cfg, &err) == 0, err.msg);
        for (int i = 0; i < w.n_params; i++)
            for (int64_t k = 0; k < w.params[i].numel; k++) (*w.params[i].slot)[k] = 0.25f * (float)(i + 1) - 0.01f * (float)k;
        for (int bf16 = 0; bf16 < 2; bf16++) {
            path_of(path, sizeof path, d, "seed.safetensors");
            check(latent_weights_save(&w, path, bf16, &err) == 0, err.msg);
            size_t n;
            unsigned char *body = read_all(path, &n);
            unsigned char *in = malloc(n + 1);
            in[0] = (unsigned char)d;
            memcpy(in + 1, body, n);
            snprintf(name, sizeof name, "%s/dir%d_%s", out, d, bf16 ? "bf16" : "f32");
            write_file(name, in, n + 1);
            free(in);
            free(body);
            unlink(path);
        }
        /* two shards: the first half of the table in a, the rest in b */
        int half = w.n_params / 2;
        const char *names[512];
        const float *data[512];
        int ndims[512];
        int64_t shapes[512][ST_MAX_DIMS];
        check(w.n_params <= 512, "table size");
        size_t idx_cap = 65536, il = 0;
        char *idx = malloc(idx_cap);
        il += (size_t)snprintf(idx + il, idx_cap - il, "{\"metadata\": {}, \"weight_map\": {");
        for (int i = 0; i < w.n_params; i++) {
            names[i] = w.params[i].name;
            data[i] = *w.params[i].slot;
            ndims[i] = w.params[i].ndim;
            memset(shapes[i], 0, sizeof shapes[i]);
            shapes[i][0] = w.params[i].shape[0];
            shapes[i][1] = w.params[i].shape[1];
            il += (size_t)snprintf(idx + il, idx_cap - il, "%s\"%s\": \"%s\"", i ? ", " : "", names[i],
                                   i < half ? "a.safetensors" : "b.safetensors");
        }
        il += (size_t)snprintf(idx + il, idx_cap - il, "}}");
        size_t na, nb;
        path_of(path, sizeof path, d, "a.safetensors");
        check(latent_st_write(path, half, names, data, ndims, (const int64_t(*)[ST_MAX_DIMS])shapes, ST_F32, &err) == 0, err.msg);
        unsigned char *a = read_all(path, &na);
        unlink(path);
        path_of(path, sizeof path, d, "b.safetensors");
        check(latent_st_write(path, w.n_params - half, names + half, data + half, ndims + half,
                       (const int64_t(*)[ST_MAX_DIMS])shapes + half, ST_BF16, &err) == 0, err.msg);
        unsigned char *b = read_all(path, &nb);
        unlink(path);
        size_t n = 1 + 2 + il + 4 + na + nb;
        unsigned char *in = malloc(n), *q = in;
        *q++ = (unsigned char)(4 | d);
        *q++ = (unsigned char)il;
        *q++ = (unsigned char)(il >> 8);
        memcpy(q, idx, il), q += il;
        for (int k = 0; k < 4; k++) *q++ = (unsigned char)(na >> (8 * k));
        memcpy(q, a, na), q += na;
        memcpy(q, b, nb);
        snprintf(name, sizeof name, "%s/dir%d_sharded", out, d);
        write_file(name, in, n);
        free(in), free(a), free(b), free(idx);
        latent_weights_free(&w);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_tmpdir(top, sizeof top, "st");
    for (int d = 0; d < N_DIRS; d++) {
        char p[600];
        snprintf(dirs[d], sizeof dirs[d], "%s/m%d", top, d);
        check(mkdir(dirs[d], 0755) == 0, "mkdir");
        path_of(p, sizeof p, d, "config.json");
        write_file(p, configs[d], strlen(configs[d]));
    }
    atexit(remove_dirs);
    const char *seeds = getenv("LATENT_FUZZ_SEEDS");
    if (seeds && *seeds) {
        write_seeds(seeds);
        exit(0);
    }
    return 0;
}

/* ---- checks ------------------------------------------------------------------------ */

static size_t dtype_size(st_dtype t) { return t == ST_F32 ? 4 : 2; }

/* One file on its own: the reader's promises when it accepts it. */
static void check_file(const char *path) {
    st_file f;
    latent_err err = {0};
    if (latent_st_file_open(&f, path, &err) < 0) {
        check(err.msg[0] != 0 && f.map == NULL && f.tensors == NULL && f.n_tensors == 0, "a refusal leaves a message and nothing open");
        return;
    }
    const char *lo = (const char *)f.map + f.data_start, *hi = (const char *)f.map + f.map_len;
    check(f.data_start >= 10 && f.data_start <= f.map_len, "data section inside the file");
    for (int i = 0; i < f.n_tensors; i++) {
        const st_tensor *t = &f.tensors[i];
        check(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS, "ndim");
        uint64_t numel = 1;
        for (int k = 0; k < t->ndim; k++) {
            check(t->shape[k] >= 0, "shape >= 0");
            numel *= (uint64_t)t->shape[k];
        }
        check(t->nbytes == numel * dtype_size(t->dtype), "bytes = elements * dtype size");
        const char *p = t->data;
        check(p >= lo && p <= hi && t->nbytes <= (size_t)(hi - p), "tensor inside the data section");
        check(latent_st_file_find(&f, t->name) != NULL && strcmp(latent_st_file_find(&f, t->name)->name, t->name) == 0, "found by name");
        for (int j = 0; j < i; j++) {
            const st_tensor *u = &f.tensors[j];
            const char *q = u->data;
            if (t->nbytes && u->nbytes) check(p + t->nbytes <= q || q + u->nbytes <= p, "no overlap");
        }
        if (numel) {
            float *x = malloc(numel * sizeof *x);
            check(x != NULL, "malloc");
            latent_st_to_f32(x, t->data, t->dtype, numel);
            free(x);
        }
    }
    latent_st_file_close(&f);
    check(f.map == NULL && f.tensors == NULL, "close zeroes the file");
}

/* A model that loaded: every parameter set and equal to the file's tensor. */
static void check_model(const latent_model *m, int d, int single) {
    const latent_weights *w = &m->w;
    st_file f;
    char path[600];
    latent_err err = {0};
    int have_file = 0;
    if (single) {
        path_of(path, sizeof path, d, "model.safetensors");
        have_file = latent_st_file_open(&f, path, &err) == 0;
        check(have_file, "the file of a loaded model opens");
    }
    for (int i = 0; i < w->n_params; i++) {
        const latent_param *p = &w->params[i];
        const float *v = *p->slot;
        check(v != NULL, "parameter set");
        volatile float sink = 0;
        for (int64_t k = 0; k < p->numel; k++) sink += v[k]; /* ASan: readable to the end */
        (void)sink;
        if (have_file) {
            const st_tensor *t = latent_st_file_find(&f, p->name);
            check(t != NULL && t->nbytes == (size_t)p->numel * dtype_size(t->dtype), "the loaded tensor");
            float *x = malloc((size_t)p->numel * sizeof *x + 1);
            latent_st_to_f32(x, t->data, t->dtype, (size_t)p->numel);
            check(!memcmp(x, v, (size_t)p->numel * sizeof *x), "loaded values = the file's");
            free(x);
        }
    }
    const latent_config *c = &m->cfg;
    if (c->tie_embeddings) check(w->lm_head == w->embed, "tied lm_head");
    if (c->rec == LATENT_REC_LRT && c->lrt.kv_injection && c->lrt.shared_kv_projection)
        for (int i = c->lrt.inject_start; i <= c->lrt.inject_end; i++)
            check(w->layers[i].lrt_k == w->lrt_shared_k && w->layers[i].lrt_v == w->lrt_shared_v, "shared KV projection");
    if (have_file) latent_st_file_close(&f);
}

static uint32_t le(const uint8_t *p, int n) {
    uint32_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int d = data[0] & 3, sharded = data[0] >> 2 & 1;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    char path[600];
    clear_dir(d);
    if (!sharded) {
        path_of(path, sizeof path, d, "model.safetensors");
        write_file(path, p, n);
        check_file(path);
    } else {
        if (n < 2) return 0;
        size_t il = le(p, 2);
        if (n < 2 + il + 4) return 0;
        size_t na = le(p + 2 + il, 4);
        const uint8_t *a = p + 2 + il + 4;
        size_t rest = n - (2 + il + 4);
        if (na > rest) return 0;
        path_of(path, sizeof path, d, "model.safetensors.index.json");
        write_file(path, p + 2, il);
        path_of(path, sizeof path, d, "a.safetensors");
        write_file(path, a, na);
        check_file(path);
        path_of(path, sizeof path, d, "b.safetensors");
        write_file(path, a + na, rest - na);
        check_file(path);
    }
    latent_model m;
    latent_err err = {0};
    if (latent_model_load(&m, dirs[d], &err) == 0) {
        check_model(&m, d, !sharded);
        latent_model_free(&m);
    } else {
        static const latent_model zero;
        check(err.msg[0] != 0, "a refusal has a message");
        check(!memcmp(&m, &zero, sizeof m), "a refused model is zeroed");
        if (getenv("LATENT_FUZZ_VERBOSE")) fprintf(stderr, "refused: %s\n", err.msg);
    }
    return 0;
}
