/* Test driver for the tokenizer, built by tests/integration/tokenizer_gpt2.sh:
 * encodes many separate texts in one process (the `latent tokenize` CLI takes
 * one text per run).
 *
 * usage: tok_driver TOKENIZER_JSON lines|roundtrip < RECORDS
 * RECORDS is a sequence of "<byte count>\n<bytes>" (the bytes may hold
 * anything, newlines and invalid UTF-8 included).
 *   lines:     prints the ids of each record as a JSON array, one per line
 *   roundtrip: checks decode(encode(bytes)) == bytes for each record; prints
 *              "roundtrip: N records ok" or the first failures, exit 1 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "latent/tokenizer.h"

static int32_t *encode(const latent_tokenizer *t, const char *s, size_t n, int *count) {
    int cap = (int)n + 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int got = ids ? latent_tokenizer_encode(t, s, n, ids, cap) : -1;
    if (got > cap) {
        int32_t *more = realloc(ids, (size_t)got * sizeof *ids);
        if (!more) { free(ids); return NULL; }
        ids = more;
        got = latent_tokenizer_encode(t, s, n, ids, got);
    }
    if (got < 0) { free(ids); return NULL; }
    *count = got;
    return ids;
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[2], "lines") && strcmp(argv[2], "roundtrip"))) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON lines|roundtrip < RECORDS\n", argv[0]);
        return 2;
    }
    int roundtrip = !strcmp(argv[2], "roundtrip");
    latent_err err;
    latent_tokenizer *t = latent_tokenizer_load(argv[1], &err);
    if (!t) { fprintf(stderr, "%s\n", err.msg); return 1; }
    size_t n;
    long records = 0, bad = 0;
    while (scanf("%zu", &n) == 1) {
        if (getchar() != '\n') { fprintf(stderr, "record %ld: bad header\n", records); return 1; }
        char *s = malloc(n + 1);
        if (!s || fread(s, 1, n, stdin) != n) { fprintf(stderr, "record %ld: short read\n", records); return 1; }
        int count = 0;
        int32_t *ids = encode(t, s, n, &count);
        if (!ids) { fprintf(stderr, "record %ld: encode failed\n", records); return 1; }
        if (roundtrip) {
            size_t len = 0;
            char *back = latent_tokenizer_decode(t, ids, count, &len);
            if (!back || len != n || memcmp(back, s, n)) {
                if (bad++ < 5) {
                    fprintf(stderr, "record %ld: %zu bytes -> %d ids -> %zu bytes differ; ids:", records, n,
                            count, len);
                    for (int i = 0; i < count; i++) fprintf(stderr, " %d", ids[i]);
                    fputc('\n', stderr);
                }
            }
            free(back);
        } else {
            putchar('[');
            for (int i = 0; i < count; i++) printf(i ? ",%d" : "%d", ids[i]);
            puts("]");
        }
        free(ids);
        free(s);
        records++;
    }
    if (roundtrip) printf("roundtrip: %ld records, %ld failed\n", records, bad);
    latent_tokenizer_free(t);
    return bad ? 1 : 0;
}
