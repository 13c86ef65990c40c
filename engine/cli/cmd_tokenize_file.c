/* latent tokenize-file: a text file to a training token file (uint32 LE ids). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "latent/clock.h"
#include "latent/config.h"
#include "latent/tokenizer.h"

static const char *help =
    "usage: latent tokenize-file --model DIR --in TEXT --out FILE.bin [--eos-between-lines]\n"
    "\n"
    "Encodes TEXT with DIR/tokenizer.json and writes the ids as little-endian uint32\n"
    "(no header: the training token file of models.md §5). The text is encoded in\n"
    "blocks of about 1 MB, cut only where the pre-tokenizer always splits (a newline\n"
    "or a single space between two visible characters), so the ids equal those of\n"
    "encoding the whole file at once. --eos-between-lines encodes each line on its own (without its\n"
    "newline), writes the model's end-of-sequence id (config.json eos_token_id)\n"
    "after each non-empty line, and skips empty lines: one document per line.\n"
    "Progress goes to stderr. FILE.bin is written atomically (temp, fsync, rename).\n"
    "--block-bytes N sets the block size (default 1048576; small values test the cuts).\n";


typedef struct tf_out {
    FILE *f;
    const char *path;
    uint64_t n_ids;
    uint32_t *buf; size_t n, cap;
} tf_out;

static int tf_flush(tf_out *o) {
    if (o->n && fwrite(o->buf, sizeof *o->buf, o->n, o->f) != o->n) return -1;
    o->n = 0;
    return 0;
}

static int tf_put(tf_out *o, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) {
        if (o->n == o->cap && tf_flush(o) != 0) return -1;
        uint32_t v = (uint32_t)ids[i];
        unsigned char *b = (unsigned char *)&o->buf[o->n++]; /* little-endian on any host */
        b[0] = (unsigned char)v, b[1] = (unsigned char)(v >> 8), b[2] = (unsigned char)(v >> 16), b[3] = (unsigned char)(v >> 24);
    }
    o->n_ids += (uint64_t)n;
    return 0;
}

/* Encodes text[0..len) and appends the ids; ids is a growable scratch. */
static int tf_encode(const latent_tokenizer *t, const char *text, size_t len, int32_t **ids, int *cap, tf_out *o) {
    if (len == 0) return 0;
    if (len > (size_t)1 << 30) return -1;
    int need = latent_tokenizer_encode(t, text, len, *ids, *cap);
    if (need < 0) return -1;
    if (need > *cap) {
        int32_t *p = realloc(*ids, (size_t)need * sizeof *p);
        if (!p) return -1;
        *ids = p, *cap = need;
        need = latent_tokenizer_encode(t, text, len, *ids, *cap);
    }
    return tf_put(o, *ids, need);
}

/* A visible ASCII character: never part of a whitespace run. A cut after
 * "x\ny" (x, y visible) is where the GPT-2 regex splits anyway ("x", "\n",
 * "y"): a longer whitespace run would be matched differently at the end of
 * a block than in the middle of the text. */
static int is_visible(char c) { return c > 0x20 && c < 0x7f; }

/* Where to end the text of this block: after the last "x\ny" (x, y
 * visible), else before the last "x y" (a token never ends in a single space
 * between two visible characters: " y" starts the next one); with one line
 * per document, after the last newline. 0: no safe point. */
static size_t find_cut(const char *b, size_t n, int eos_lines) {
    for (size_t i = n - 1; i >= 1; i--)
        if (b[i - 1] == '\n' && (eos_lines || (i >= 2 && is_visible(b[i - 2]) && is_visible(b[i])))) return i;
    for (size_t i = n - 2; i >= 1 && n >= 3; i--)
        if (b[i] == ' ' && is_visible(b[i - 1]) && is_visible(b[i + 1])) return i;
    return 0;
}

static void progress(uint64_t done, uint64_t total, uint64_t ids, double t0, int tty, int final) {
    double el = latent_now_seconds() - t0;
    double mb = (double)done / 1e6;
    if (tty) {
        fprintf(stderr, "\rtokenize-file: %6.1f / %.1f MB (%3.0f%%)  %llu tokens  %.1f MB/s%s", mb, (double)total / 1e6,
                total ? 100.0 * (double)done / (double)total : 100.0, (unsigned long long)ids, el > 0 ? mb / el : 0.0,
                final ? "\n" : "");
    } else {
        fprintf(stderr, "tokenize-file: %.1f / %.1f MB (%.0f%%), %llu tokens, %.1f MB/s\n", mb, (double)total / 1e6,
                total ? 100.0 * (double)done / (double)total : 100.0, (unsigned long long)ids, el > 0 ? mb / el : 0.0);
    }
}

typedef struct {
    const char *dir, *in_path, *out_path;
    int eos_lines;
    long block_bytes;
} tf_args;

/* 0 to run, 1 when --help printed, 2 (cli_fail's code) on bad usage. */
static int parse_args(int argc, char **argv, tf_args *a) {
    const char *v;
    *a = (tf_args){.block_bytes = 1 << 20};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--eos-between-lines")) { a->eos_lines = 1; continue; }
        if (cli_opt(argc, argv, &i, "--block-bytes", &v)) {
            if (cli_parse_long(v, 16, 1L << 30, &a->block_bytes) != 0) return cli_fail("tokenize-file: --block-bytes must be an integer from 16 to 2^30");
            continue;
        }
        if (cli_opt(argc, argv, &i, "--model", &a->dir) || cli_opt(argc, argv, &i, "--in", &a->in_path) ||
            cli_opt(argc, argv, &i, "--out", &a->out_path))
            continue;
        fputs(help, stderr);
        return cli_fail("tokenize-file: unknown option '%s'", argv[i]);
    }
    if (!a->dir) return cli_fail("tokenize-file: --model DIR is required");
    if (!a->in_path) return cli_fail("tokenize-file: --in TEXT is required");
    if (!a->out_path) return cli_fail("tokenize-file: --out FILE.bin is required");
    return 0;
}

/* DIR/tokenizer.json, and the end-of-sequence id from DIR/config.json that
 * --eos-between-lines needs. 0, or the exit code after printing why. */
static int load_tokenizer(const tf_args *a, latent_tokenizer **tok, int32_t *eos) {
    latent_err err;
    size_t pn = strlen(a->dir) + 32;
    char *p = malloc(pn);
    if (!p) return cli_fail("tokenize-file: out of memory");
    latent_config cfg;
    snprintf(p, pn, "%s/config.json", a->dir);
    int have_cfg = latent_config_load(p, &cfg, &err) == 0;
    if (!have_cfg && a->eos_lines) {
        free(p);
        cli_fail("tokenize-file: --eos-between-lines needs the eos_token_id of %s/config.json: %s", a->dir, err.msg);
        return 1;
    }
    snprintf(p, pn, "%s/tokenizer.json", a->dir);
    *tok = latent_tokenizer_load(p, &err);
    free(p);
    if (!*tok) {
        cli_fail("tokenize-file: %s", err.msg);
        return 1;
    }
    *eos = have_cfg ? cfg.eos_id : -1;
    if (a->eos_lines && *eos < 0) {
        latent_tokenizer_free(*tok);
        return cli_fail("tokenize-file: %s/config.json has no eos_token_id for --eos-between-lines", a->dir);
    }
    return 0;
}

/* One run's encoding side: where the ids go, and how far it has come. */
typedef struct {
    const latent_tokenizer *tok;
    int32_t eos;               /* written after each line under --eos-between-lines */
    int eos_lines, mid_line;   /* mid_line: the text so far ends inside a non-empty line */
    int32_t *ids; int ids_cap; /* the encoder's growable scratch */
    tf_out o;
    uint64_t total, done;      /* bytes of the input, and bytes encoded so far */
    double t0;                 /* the start, for the progress lines */
    int tty;                   /* stderr is a terminal: progress rewrites one line */
} tf_run;

/* --eos-between-lines: encodes block[0..cut) line by line, an eos after
 * each whole non-empty line; the piece after the last newline continues in
 * the next block unless line_ends. 0, or -1 when a write failed. */
static int encode_lines(tf_run *r, const char *block, size_t cut, int line_ends) {
    int werr = 0;
    size_t s = 0; /* lines [s, i) end at each newline */
    for (size_t i = 0; i <= cut; i++) {
        if (i < cut && block[i] != '\n') continue;
        int whole = i < cut || line_ends;
        size_t e = i;
        if (whole && e > s && block[e - 1] == '\r') e--; /* CRLF */
        if (e > s && tf_encode(r->tok, block + s, e - s, &r->ids, &r->ids_cap, &r->o) != 0) werr = -1;
        if (whole && (e > s || r->mid_line) && tf_put(&r->o, &r->eos, 1) != 0) werr = -1;
        r->mid_line = !whole && (e > s || r->mid_line);
        if (whole) r->mid_line = 0;
        s = i + 1;
    }
    return werr;
}

/* Reads `in` in blocks of block_size bytes and encodes each up to its last
 * safe cut, carrying the rest to the next; progress on stderr. 0, -1 when a
 * write failed, -2 after saying that reading failed. */
static int encode_file(tf_run *r, FILE *in, const char *in_path, char *block, size_t block_size) {
    double last = r->t0;
    size_t have = 0; /* bytes carried at the start of block */
    int eof = 0, werr = 0;
    while (!werr) {
        if (!eof) {
            size_t n = fread(block + have, 1, block_size - have, in);
            if (n < block_size - have) {
                if (ferror(in)) {
                    cli_fail("tokenize-file: %s: read failed: %s", in_path, strerror(errno));
                    return -2;
                }
                eof = 1;
            }
            have += n;
        }
        if (have == 0) break;
        /* cut: everything up to the last safe point (all of it at end of file) */
        size_t cut = eof ? have : find_cut(block, have, r->eos_lines);
        int line_ends = eof || (cut > 0 && block[cut - 1] == '\n'); /* eos mode: the last line is whole */
        if (cut == 0) cut = have, line_ends = 0; /* a whole block without a safe point: cut anyway */
        if (r->eos_lines) werr = encode_lines(r, block, cut, line_ends);
        else if (tf_encode(r->tok, block, cut, &r->ids, &r->ids_cap, &r->o) != 0) werr = -1;
        r->done += cut;
        memmove(block, block + cut, have - cut);
        have -= cut;
        double t = latent_now_seconds();
        if (t - last >= (r->tty ? 0.2 : 5.0)) {
            progress(r->done, r->total, r->o.n_ids, r->t0, r->tty, 0);
            last = t;
        }
        if (eof && have == 0) break;
    }
    return werr;
}

/* Writes out what o holds, syncs and closes tmp and renames it to out_path
 * (o->f is NULL after). 0, or -1 after saying why. */
static int commit_out(tf_out *o, const char *tmp, const char *out_path, int werr) {
    if (werr || tf_flush(o) != 0 || fflush(o->f) != 0 || fsync(fileno(o->f)) != 0) {
        cli_fail("tokenize-file: %s: write failed: %s", tmp, strerror(errno));
        return -1;
    }
    int closed = fclose(o->f) == 0;
    o->f = NULL;
    if (!closed) {
        cli_fail("tokenize-file: %s: close failed: %s", tmp, strerror(errno));
        return -1;
    }
    if (rename(tmp, out_path) != 0) {
        cli_fail("tokenize-file: cannot rename %s to %s: %s", tmp, out_path, strerror(errno));
        return -1;
    }
    return 0;
}

int cmd_tokenize_file(int argc, char **argv) {
    tf_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc == 1 ? 0 : prc;
    tf_run r = {.eos_lines = a.eos_lines, .eos = -1, .o = {.path = a.out_path, .cap = 1 << 16}};
    latent_tokenizer *tok = NULL;
    int lrc = load_tokenizer(&a, &tok, &r.eos);
    if (lrc) return lrc;
    r.tok = tok;

    int rc = 1;
    FILE *in = fopen(a.in_path, "rb");
    char *tmp = malloc(strlen(a.out_path) + 8);
    char *block = malloc((size_t)a.block_bytes + 1);
    r.o.buf = malloc(r.o.cap * sizeof *r.o.buf);
    if (!in) {
        cli_fail("tokenize-file: %s: cannot open: %s", a.in_path, strerror(errno));
        goto done;
    }
    if (!tmp || !block || !r.o.buf) {
        cli_fail("tokenize-file: out of memory");
        goto done;
    }
    sprintf(tmp, "%s.tmp", a.out_path);
    if (!(r.o.f = fopen(tmp, "wb"))) {
        cli_fail("tokenize-file: %s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
    struct stat st;
    r.total = fstat(fileno(in), &st) == 0 ? (uint64_t)st.st_size : 0;
    r.tty = isatty(2);
    r.t0 = latent_now_seconds();
    int werr = encode_file(&r, in, a.in_path, block, (size_t)a.block_bytes);
    if (werr == -2 || commit_out(&r.o, tmp, a.out_path, werr) != 0) goto done;
    progress(r.done, r.total, r.o.n_ids, r.t0, r.tty, 1);
    fprintf(stderr, "tokenize-file: wrote %s: %llu tokens (%.2f bytes per token)\n", a.out_path,
            (unsigned long long)r.o.n_ids, r.o.n_ids ? (double)r.done / (double)r.o.n_ids : 0.0);
    rc = 0;
done:
    if (r.o.f) {
        fclose(r.o.f);
        remove(tmp);
    }
    if (in) fclose(in);
    free(r.o.buf);
    free(r.ids);
    free(block);
    free(tmp);
    latent_tokenizer_free(tok);
    return rc;
}
