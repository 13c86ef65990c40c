/* Safetensors: read by mmap with every header claim checked against the file,
 * written atomically (temp file, fsync, rename, fsync of the directory).
 * Format: u64 LE header length N, N bytes of JSON header, then the data
 * section; data_offsets are relative to the start of the data section. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A header larger than this is not a header (the spec's own limit is 100 MB). */
#define ST_MAX_HEADER ((uint64_t)100 << 20)

const char *latent_st_dtype_name(st_dtype t) {
    switch (t) {
    case ST_F32: return "F32";
    case ST_F16: return "F16";
    case ST_BF16: return "BF16";
    }
    return "?";
}

static size_t st_dtype_size(st_dtype t) { return t == ST_F32 ? 4 : 2; }

static int st_parse_dtype(const char *s, st_dtype *out) {
    if (strcmp(s, "F32") == 0) { *out = ST_F32; return 0; }
    if (strcmp(s, "F16") == 0) { *out = ST_F16; return 0; }
    if (strcmp(s, "BF16") == 0) { *out = ST_BF16; return 0; }
    return -1;
}

/* ---- conversion ---------------------------------------------------------- */

static inline uint16_t st_load_u16(const unsigned char *p) {
    return (uint16_t)(p[0] | (p[1] << 8)); /* little-endian, any alignment */
}

static inline float st_bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float st_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) /* inf / nan: keep the payload */
        return st_bits_to_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return st_bits_to_float(sign); /* signed zero */
        /* subnormal: man * 2^-24, exact in float */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return st_bits_to_float(sign | ((exp + 112) << 23) | (man << 13)); /* rebias 15 -> 127 */
}

void latent_st_to_f32(float *dst, const void *src, st_dtype dtype, size_t n) {
    const unsigned char *p = src;
    switch (dtype) {
    case ST_F32:
        memcpy(dst, src, n * 4);
        break;
    case ST_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = st_bits_to_float((uint32_t)st_load_u16(p + 2 * i) << 16);
        break;
    case ST_F16:
        for (size_t i = 0; i < n; i++) dst[i] = st_half_to_float(st_load_u16(p + 2 * i));
        break;
    }
}

/* float -> bf16, round to nearest even; NaN stays a (quiet) NaN. */
static uint16_t st_float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* ---- reading ------------------------------------------------------------- */

static void st_fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* A non-negative JSON integer that fits in `max`. */
static int st_json_uint(const json_t *v, uint64_t max, uint64_t *out) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0 || (uint64_t)x > max) return -1;
    *out = (uint64_t)x;
    return 0;
}

typedef struct st_span { size_t begin, end; int idx; } st_span;

static int st_span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Parses one header entry into t (name already set). */
static int st_parse_entry(st_file *f, st_tensor *t, const json_t *v, size_t data_len,
                          size_t *begin_out, latent_err *err) {
    const char *path = f->path, *name = t->name;
    if (!json_is_object(v))
        return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": header entry is not an object", path, name);
    const json_t *dt = json_object_get(v, "dtype");
    const json_t *sh = json_object_get(v, "shape");
    const json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": \"dtype\" is missing or not a string", path,
                              name);
    if (st_parse_dtype(json_string_value(dt), &t->dtype) < 0)
        return latent_err_set(err, LATENT_E_UNSUPPORTED, "%s: tensor \"%s\": dtype \"%.32s\" is not supported (F32, F16 and "
                              "BF16 are)",
                              path, name, json_string_value(dt));
    if (!json_is_array(sh))
        return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": \"shape\" is missing or not an array", path,
                              name);
    if (json_array_size(sh) > ST_MAX_DIMS)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": shape has %zu dimensions (at most %d supported)",
                              path, name, json_array_size(sh), ST_MAX_DIMS);
    t->ndim = (int)json_array_size(sh);
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t d;
        if (st_json_uint(json_array_get(sh, (size_t)i), (uint64_t)INT64_MAX, &d) < 0)
            return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": shape entry %d is not a non-negative integer",
                                  path, name, i);
        t->shape[i] = (int64_t)d;
        if (d && numel > (uint64_t)SIZE_MAX / 4 / d)
            return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": shape is too large", path, name);
        numel *= d;
    }
    if (!json_is_array(off) || json_array_size(off) != 2)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": \"data_offsets\" is missing or not [begin, end]",
                              path, name);
    uint64_t b, e;
    if (st_json_uint(json_array_get(off, 0), UINT64_MAX, &b) < 0 ||
        st_json_uint(json_array_get(off, 1), UINT64_MAX, &e) < 0)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": data_offsets must be two non-negative integers",
                              path, name);
    if (b > e)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": data_offsets [%llu, %llu] end before they begin",
                              path, name, (unsigned long long)b, (unsigned long long)e);
    if (e > data_len)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": data_offsets [%llu, %llu] run past the end of the "
                              "file (data section is %zu bytes)",
                              path, name, (unsigned long long)b, (unsigned long long)e, data_len);
    uint64_t want = numel * st_dtype_size(t->dtype);
    if (e - b != want) {
        char shape[96];
        st_fmt_shape(shape, sizeof shape, t->ndim, t->shape);
        return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes but "
                              "shape %s of %s needs %llu",
                              path, name, (unsigned long long)b, (unsigned long long)e,
                              (unsigned long long)(e - b), shape, latent_st_dtype_name(t->dtype),
                              (unsigned long long)want);
    }
    t->nbytes = (size_t)want;
    t->data = (const char *)f->map + f->data_start + b;
    *begin_out = (size_t)b;
    return 0;
}

/* Maps the file at path into f (private and writable: tensors used in place
 * stay copy-on-write, so a trainer may update them without touching the
 * file). 0, or -1 with err set. */
static int st_map(st_file *f, const char *path, latent_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return latent_err_set(err, LATENT_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat stt;
    int rc = -1;
    if (fstat(fd, &stt) != 0) {
        latent_err_set(err, LATENT_E_IO, "%s: cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(stt.st_mode)) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: not a regular file", path);
    } else if ((size_t)stt.st_size < 8) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: file is %zu bytes, too short for a safetensors header (8-byte length "
                       "then JSON); truncated?",
                       path, (size_t)stt.st_size);
    } else {
        rc = 0;
    }
    if (rc != 0) {
        close(fd);
        return rc;
    }
    size_t size = (size_t)stt.st_size;
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return latent_err_set(err, LATENT_E_IO, "%s: mmap failed: %s", path, strerror(errno));
    f->map = map;
    f->map_len = size;
    madvise(map, size, MADV_WILLNEED); /* readers stream through it once; advice only */
    return 0;
}

/* The mapped file's header: its length (8 bytes, little-endian) sets
 * f->data_start; the JSON object after it, or NULL with err set. */
static json_t *st_header(st_file *f, const char *path, latent_err *err) {
    const unsigned char *p = f->map;
    size_t size = f->map_len;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > size - 8) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes); "
                       "truncated or not a safetensors file",
                       path, (unsigned long long)hlen, size);
        return NULL;
    }
    if (hlen > ST_MAX_HEADER || hlen < 2) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: header length %llu is not plausible (2 .. %llu bytes)", path,
                       (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
        return NULL;
    }
    f->data_start = 8 + (size_t)hlen;
    json_error_t jerr;
    json_t *root = json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: header is not valid JSON: %s (at byte %d of the header)", path,
                       jerr.text, jerr.position);
        return NULL;
    }
    if (!json_is_object(root)) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: header is not a JSON object", path);
        json_decref(root);
        return NULL;
    }
    return root;
}

/* Every tensor entry of the header into f->tensors, its bytes into spans
 * (calloc'd, one per tensor), then: no two tensors may share bytes (empty
 * tensors occupy none). 0, or -1 with err set. */
static int st_parse_tensors(st_file *f, const char *path, json_t *root, st_span *spans, latent_err *err) {
    size_t data_len = f->map_len - f->data_start;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) continue;
        st_tensor *t = &f->tensors[f->n_tensors];
        t->name = strdup(key);
        if (!t->name) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
        f->n_tensors++;
        size_t begin = 0;
        if (st_parse_entry(f, t, val, data_len, &begin, err) < 0) return -1;
        spans[f->n_tensors - 1] = (st_span){begin, begin + t->nbytes, f->n_tensors - 1};
    }
    int ns = 0;
    for (int i = 0; i < f->n_tensors; i++)
        if (spans[i].end > spans[i].begin) spans[ns++] = spans[i];
    qsort(spans, (size_t)ns, sizeof *spans, st_span_cmp);
    for (int i = 1; i < ns; i++) {
        if (spans[i].begin < spans[i - 1].end) {
            const st_span *a = &spans[i - 1], *b = &spans[i];
            return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": data_offsets [%zu, %zu] overlap tensor \"%s\" "
                                  "[%zu, %zu]",
                                  path, f->tensors[b->idx].name, b->begin, b->end,
                                  f->tensors[a->idx].name, a->begin, a->end);
        }
    }
    return 0;
}

int latent_st_file_open(st_file *f, const char *path, latent_err *err) {
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
    json_t *root = NULL;
    st_span *spans = NULL;
    if (st_map(f, path, err) != 0 || !(root = st_header(f, path, err))) goto fail;
    size_t n = json_object_size(root);
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    spans = calloc(n ? n : 1, sizeof *spans);
    if (!f->tensors || !spans) {
        latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (st_parse_tensors(f, path, root, spans, err) != 0) goto fail;
    free(spans);
    json_decref(root);
    return 0;
fail:
    free(spans);
    if (root) json_decref(root);
    latent_st_file_close(f);
    return -1;
}

void latent_st_file_close(st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const st_tensor *latent_st_file_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

/* ---- writing ------------------------------------------------------------- */

static int st_write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* fsync the directory holding `path`, so the rename itself is durable. */
static int st_fsync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* The header of latent_st_write's file: compact JSON naming each tensor's
 * dtype, shape and data_offsets, tensors back to back in the order given.
 * malloc'd, or NULL with err set. */
static char *st_header_text(const char *path, int n, const char *const *names, const int *ndims,
                            const int64_t (*shapes)[ST_MAX_DIMS], st_dtype dtype, latent_err *err) {
    size_t esz = st_dtype_size(dtype);
    json_t *hdr = json_object();
    if (!hdr) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path), NULL;
    json_object_set_new(hdr, "__metadata__", json_pack("{s:s}", "format", "pt"));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (ndims[i] < 0 || ndims[i] > ST_MAX_DIMS) {
            json_decref(hdr);
            return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": %d dimensions", path, names[i], ndims[i]),
                   NULL;
        }
        json_t *shape = json_array();
        size_t numel = 1;
        for (int k = 0; k < ndims[i]; k++) {
            json_array_append_new(shape, json_integer(shapes[i][k]));
            numel *= (size_t)shapes[i][k];
        }
        json_t *e = json_pack("{s:s, s:o, s:[I,I]}", "dtype", latent_st_dtype_name(dtype), "shape", shape,
                              "data_offsets", (json_int_t)off, (json_int_t)(off + numel * esz));
        if (!e || json_object_get(hdr, names[i])) {
            json_decref(e);
            json_decref(hdr);
            return latent_err_set(err, LATENT_E_FORMAT, "%s: tensor \"%s\": %s", path, names[i],
                                  e ? "written twice" : "out of memory"),
                   NULL;
        }
        json_object_set_new(hdr, names[i], e);
        off += numel * esz;
    }
    char *text = json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    if (!text) latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
    return text;
}

/* The tensors' data to fd in dtype (F32 or BF16, little-endian), through
 * buf (1 MiB). 0, or -1 with errno set. */
static int st_write_data(int fd, int n, const float *const *data, const int *ndims,
                         const int64_t (*shapes)[ST_MAX_DIMS], st_dtype dtype, unsigned char *buf) {
    const size_t chunk = (1 << 20) / 4; /* elements per buffer */
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int k = 0; k < ndims[i]; k++) numel *= (size_t)shapes[i][k];
        for (size_t s = 0; s < numel; s += chunk) {
            size_t m = numel - s < chunk ? numel - s : chunk;
            const float *src = data[i] + s;
            if (dtype == ST_F32) {
                for (size_t j = 0; j < m; j++) {
                    uint32_t u;
                    memcpy(&u, &src[j], 4);
                    for (int b = 0; b < 4; b++) buf[4 * j + b] = (unsigned char)(u >> (8 * b));
                }
            } else {
                for (size_t j = 0; j < m; j++) {
                    uint16_t h = st_float_to_bf16(src[j]);
                    buf[2 * j] = (unsigned char)h;
                    buf[2 * j + 1] = (unsigned char)(h >> 8);
                }
            }
            if (st_write_all(fd, buf, m * st_dtype_size(dtype)) < 0) return -1;
        }
    }
    return 0;
}

int latent_st_write(const char *path, int n, const char *const *names, const float *const *data,
             const int *ndims, const int64_t (*shapes)[ST_MAX_DIMS], st_dtype dtype,
             latent_err *err) {
    if (dtype != ST_F32 && dtype != ST_BF16)
        return latent_err_set(err, LATENT_E_UNSUPPORTED, "%s: can only write F32 or BF16 (asked for %s)", path,
                              latent_st_dtype_name(dtype));
    char *text = st_header_text(path, n, names, ndims, shapes, dtype, err);
    if (!text) return -1;
    size_t tlen = strlen(text);
    size_t hlen = (tlen + 7) & ~(size_t)7; /* data section 8-byte aligned: pad with spaces */

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    unsigned char *buf = malloc(1 << 20);
    int fd = -1, rc = -1;
    if (!tmp || !buf) {
        latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
        goto done;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        latent_err_set(err, LATENT_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    if (st_write_all(fd, len8, 8) < 0 || st_write_all(fd, text, tlen) < 0) goto io_fail;
    for (size_t i = tlen; i < hlen; i++)
        if (st_write_all(fd, " ", 1) < 0) goto io_fail;
    if (st_write_data(fd, n, data, ndims, shapes, dtype, buf) != 0) goto io_fail;
    if (fsync(fd) != 0) goto io_fail;
    if (close(fd) != 0) {
        fd = -1;
        goto io_fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        latent_err_set(err, LATENT_E_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        goto done;
    }
    st_fsync_dir(path); /* best effort: some filesystems refuse fsync on a directory */
    rc = 0;
    goto done;
io_fail:
    latent_err_set(err, LATENT_E_IO, "%s: write failed: %s", tmp, strerror(errno));
    if (fd >= 0) close(fd);
    fd = -1;
    unlink(tmp);
done:
    if (fd >= 0) close(fd);
    free(buf);
    free(tmp);
    free(text);
    return rc;
}
