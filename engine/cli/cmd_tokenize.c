/* latent tokenize: the token ids of stdin as a JSON array. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "latent/tokenizer.h"

static const char *help =
    "usage: latent tokenize --model DIR [--decode]\n"
    "\n"
    "Reads text on stdin and prints its token ids as a JSON array, using\n"
    "DIR/tokenizer.json (no weights are loaded). With --decode, reads a JSON\n"
    "array of ids (or comma-separated ids) on stdin and prints the text.\n";

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); return NULL; }
            buf = nb;
        }
    }
    *len = n;
    return buf;
}

static int decode_stdin(latent_tokenizer *tok, const char *text, size_t len) {
    int cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    const char *p = text, *end = text + len;
    while (p < end && ids) {
        if (*p < '0' || *p > '9') { p++; continue; }
        long v = 0;
        while (p < end && *p >= '0' && *p <= '9' && v < 1L << 31) v = v * 10 + (*p++ - '0');
        if (v >= latent_tokenizer_vocab_size(tok)) {
            free(ids);
            return cli_fail("tokenize: id %ld is outside the vocabulary", v);
        }
        if (n == cap) {
            int32_t *ni = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!ni) { free(ids); return cli_fail("tokenize: out of memory"); }
            ids = ni;
        }
        ids[n++] = (int32_t)v;
    }
    size_t out_len = 0;
    char *out = ids ? latent_tokenizer_decode(tok, ids, n, &out_len) : NULL;
    free(ids);
    if (!out) return cli_fail("tokenize: cannot decode");
    fwrite(out, 1, out_len, stdout);
    free(out);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *dir = NULL;
    int decode = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--decode")) { decode = 1; continue; }
        if (cli_opt(argc, argv, &i, "--model", &dir)) continue;
        fputs(help, stderr);
        return cli_fail("tokenize: unknown option '%s'", argv[i]);
    }
    if (!dir) return cli_fail("tokenize: --model DIR is required");
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    latent_err err;
    latent_tokenizer *tok = latent_tokenizer_load(path, &err);
    if (!tok) {
        cli_fail("%s", err.msg);
        return 1;
    }
    size_t len;
    char *text = read_all(stdin, &len);
    if (!text) {
        latent_tokenizer_free(tok);
        return cli_fail("tokenize: cannot read stdin");
    }
    int rc = 0;
    if (decode) {
        rc = decode_stdin(tok, text, len);
    } else {
        int cap = (int)(len < 1024 ? 1024 : len + 16);
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        int n = ids ? latent_tokenizer_encode(tok, text, len, ids, cap) : -1;
        if (n > cap) {
            /* More ids than bytes can only come from a pathological tokenizer; retry. */
            size_t need = (size_t)(unsigned)n;
            int32_t *ni = realloc(ids, need * sizeof *ids);
            if (ni) ids = ni, n = latent_tokenizer_encode(tok, text, len, ids, n);
        }
        if (n < 0) {
            rc = cli_fail("tokenize: cannot encode the input");
        } else {
            putchar('[');
            for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
            puts("]");
        }
        free(ids);
    }
    free(text);
    latent_tokenizer_free(tok);
    return rc;
}
