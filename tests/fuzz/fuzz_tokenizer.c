/* libFuzzer target for the byte-level BPE tokenizer (engine/tokenizer.c) and
 * the UTF-8 stream helper.
 *
 * Two small tokenizer.json files are written and loaded once, at start-up:
 *   A  every byte has a token, merges as "a b" strings (ASCII words, spaces,
 *      newlines, digits, multi-byte UTF-8, invalid bytes, two merges that make
 *      the same token), pre-tokenizer Sequence[Digits(individual), ByteLevel]
 *      without prefix space, added tokens that strip nothing (special,
 *      overlapping "<|im", single_word, non-ASCII) at ids with holes between.
 *      For such a tokenizer decode(encode(x)) == x for ANY bytes x: nothing is
 *      dropped (every byte has a token), added and vocab tokens decode to the
 *      bytes they were matched from, and no space is added or stripped.
 *   B  the other options: ByteLevel(add_prefix_space), merges as ["a", "b"],
 *      ignore_merges, added tokens with lstrip/rstrip, byte 0xFF without a
 *      token and an unk_token. It adds spaces and strips whitespace, so its
 *      round trip holds only up to ASCII whitespace, checked for ASCII input.
 *
 * Input: one selector byte, then the payload.
 *   0  encode the payload with A: ids name tokens; the count does not depend
 *      on the buffer (a smaller cap returns the same total and the same first
 *      ids); decode(encode(x)) == x; the UTF-8 stream over the ids' bytes
 *      gives x back when x is valid UTF-8.
 *   1  encode with B: ids name tokens, the cap property; for ASCII input the
 *      text comes back with ASCII whitespace removed on both sides.
 *   2, 3  decode the payload as ids (2: little-endian int16s spread over
 *      [-4, vocab + 4), so mostly valid; 3: raw int32s) with A, or with B when
 *      the selector has bit 2 set:
 *      decode = concatenation of token_bytes, token_bytes honours a short
 *      buffer, the stream helper's output is valid UTF-8, equal to the text
 *      when that is valid UTF-8, whatever the ids' boundaries.
 * build: make build/fuzz/fuzz_tokenizer; run: build/fuzz/fuzz_tokenizer DIR */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_NAME "fuzz_tokenizer"
#include "fuzz_util.h"

#include "latent/tokenizer.h"

static latent_tokenizer *tok_a, *tok_b;

/* ---- the tokenizers ---------------------------------------------------------- */

/* GPT-2's byte -> character table, written out independently of the engine. */
static int printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

/* Appends the byte-level form (UTF-8) of raw bytes s[0..n) to out. */
static void bytelevel(const char *s, size_t n, char *out) {
    size_t o = strlen(out);
    for (size_t i = 0; i < n; i++) {
        int b = (unsigned char)s[i], cp = b;
        if (!printable(b)) {
            int k = 0;
            for (int j = 0; j < b; j++) k += !printable(j);
            cp = 256 + k;
        }
        if (cp < 0x80) out[o++] = (char)cp;
        else { out[o++] = (char)(0xC0 | cp >> 6); out[o++] = (char)(0x80 | (cp & 63)); }
    }
    out[o] = 0;
}

/* Merges in raw bytes, in rank order; each part is a byte or an earlier result. */
static const char *const merges[][2] = {
    {"t", "h"}, {" ", "t"}, {" t", "h"}, {"th", "e"}, {" th", "e"}, {"i", "n"}, {"in", "g"},
    {"e", "r"}, {"a", "n"}, {"an", "d"}, {" ", "a"}, {" a", "n"}, {" an", "d"}, {"o", "n"},
    {" ", " "}, {"  ", "  "}, {"\n", "\n"}, {" ", "\n"}, {"'", "s"}, {"'", "t"}, {"1", "2"},
    {"12", "3"}, {"0", "0"}, {"\xc3", "\xa9"}, {"c", "a"}, {"ca", "f"}, {"caf", "\xc3\xa9"},
    {"\xf0", "\x9f"}, {"\xf0\x9f", "\x98"}, {"\xf0\x9f\x98", "\x80"}, {"\xe6", "\x97"},
    {"\xe6\x97", "\xa5"}, {"\xff", "\xfe"}, {"\x00", "\x00"}, {"\r", "\n"}, {"\t", "\t"},
    {"a", "b"}, {"b", "c"}, {"ab", "c"}, {"a", "bc"}, /* two merges that make "abc" */
    {"w", "o"}, {"wo", "r"}, {"r", "d"}, {"wor", "d"}, {"<", "|"}, {"\xe2", "\x80"},
    {"\xe2\x80", "\x94"}, {"\xed", "\xa0"}, {"\xc2", "\xa0"}, {" ", "\xc2\xa0"},
};
#define N_MERGES (int)(sizeof merges / sizeof merges[0])

static json_t *added(int id, const char *content, int special, int lstrip, int rstrip, int single_word) {
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "special", special,
                     "lstrip", lstrip, "rstrip", rstrip, "single_word", single_word, "normalized", 0);
}

/* kind 'A' or 'B' as described at the top. */
static json_t *tokenizer_json(int kind) {
    json_t *vocab = json_object(), *m = json_array();
    char s[64], t[64];
    for (int b = 0; b < 256; b++) {
        if (kind == 'B' && b == 0xFF) continue; /* no token: becomes <unk> */
        char c = (char)b;
        s[0] = 0;
        bytelevel(&c, 1, s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    int next = 256;
    for (int i = 0; i < N_MERGES; i++) {
        const char *a = merges[i][0], *b = merges[i][1];
        size_t la = a[0] ? strlen(a) : 1, lb = b[0] ? strlen(b) : 1; /* "\x00" is one NUL byte */
        if (kind == 'B' && (memchr(a, 0xFF, la) || memchr(b, 0xFF, lb))) continue; /* B has no 0xFF */
        s[0] = t[0] = 0;
        bytelevel(a, la, s);
        bytelevel(b, lb, t);
        char both[160];
        snprintf(both, sizeof both, "%s%s", s, t);
        if (!json_object_get(vocab, both)) json_object_set_new(vocab, both, json_integer(next++));
        if (kind == 'B') json_array_append_new(m, json_pack("[s, s]", s, t));
        else {
            snprintf(both, sizeof both, "%s %s", s, t);
            json_array_append_new(m, json_string(both));
        }
    }
    json_t *add, *pre;
    json_t *bl = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", kind == 'B',
                           "trim_offsets", 1, "use_regex", 1);
    if (kind == 'A') {
        pre = json_pack("{s:s, s:[{s:s, s:b}, o]}", "type", "Sequence", "pretokenizers", "type", "Digits",
                        "individual_digits", 1, bl);
        add = json_pack("[o, o, o, o, o, o]", added(400, "<|endoftext|>", 1, 0, 0, 0),
                        added(402, "<|im_start|>", 1, 0, 0, 0), added(403, "<|im_end|>", 1, 0, 0, 0),
                        added(405, "<|im", 0, 0, 0, 0), added(406, "word", 0, 0, 0, 1),
                        added(409, "\xe2\x86\x92x", 0, 0, 0, 0));
    } else {
        pre = bl;
        json_object_set_new(vocab, "<unk>", json_integer(399));
        add = json_pack("[o, o, o, o, o]", added(400, "<|endoftext|>", 1, 0, 0, 0),
                        added(401, "<mask>", 1, 1, 0, 0), added(402, "<r>", 1, 0, 1, 0),
                        added(403, "<both>", 1, 1, 1, 0), added(404, "word", 0, 0, 0, 1));
    }
    return json_pack("{s:s, s:o, s:n, s:o, s:{s:s, s:s, s:b, s:o, s:o}, s:{s:s}}", "version", "1.0",
                     "added_tokens", add, "normalizer", "pre_tokenizer", pre, "model", "type", "BPE",
                     "unk_token", kind == 'B' ? "<unk>" : "", "ignore_merges", kind == 'B', "vocab", vocab,
                     "merges", m, "decoder", "type", "ByteLevel");
}

static latent_tokenizer *load(int kind) {
    char dir[512], path[600];
    fuzz_tmpdir(dir, sizeof dir, "tok");
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_t *j = tokenizer_json(kind);
    check(j && json_dump_file(j, path, 0) == 0, "write tokenizer.json");
    json_decref(j);
    latent_err err = {0};
    latent_tokenizer *t = latent_tokenizer_load(path, &err);
    if (!t) fprintf(stderr, "fuzz_tokenizer: tokenizer %c: %s\n", kind, err.msg);
    check(t != NULL, "load the tokenizer");
    unlink(path);
    rmdir(dir);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    tok_a = load('A');
    tok_b = load('B');
    return 0;
}

/* ---- checks -------------------------------------------------------------------- */

/* Encodes with a buffer of exactly the needed size (and once more with a
 * short one, which must give the same total and the same first ids). */
static int32_t *encode(const latent_tokenizer *t, const char *s, size_t n, int *count) {
    int total = latent_tokenizer_encode(t, s, n, NULL, 0);
    check(total >= 0 && (size_t)total <= 2 * n + 8, "encode's count");
    int32_t *ids = malloc(((size_t)total + 1) * sizeof *ids);
    check(ids != NULL, "malloc");
    check(latent_tokenizer_encode(t, s, n, ids, total) == total, "the same count with room");
    int cap = total / 2;
    int32_t *part = malloc(((size_t)cap + 1) * sizeof *part);
    check(part != NULL, "malloc");
    check(latent_tokenizer_encode(t, s, n, part, cap) == total, "the same count with a short buffer");
    check(cap == 0 || !memcmp(part, ids, (size_t)cap * sizeof *ids), "a short buffer gets the first ids");
    free(part);
    int v = latent_tokenizer_vocab_size(t);
    for (int i = 0; i < total; i++) {
        char b;
        check(ids[i] >= 0 && ids[i] < v, "ids in range");
        check(latent_tokenizer_token_bytes(t, ids[i], &b, 0) > 0, "ids name non-empty tokens");
    }
    *count = total;
    return ids;
}

/* Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k || i + k > n) return 0;
        uint32_t v = k == 1 ? c : c & (0x7Fu >> k);
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            v = v << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 2 && v < 0x80) || (k == 3 && v < 0x800) || (k == 4 && v < 0x10000) || v > 0x10FFFF ||
            (v >= 0xD800 && v <= 0xDFFF))
            return 0;
        i += k;
    }
    return 1;
}

/* Feeds the ids' bytes, one token at a time, through the UTF-8 stream: the
 * output is valid UTF-8 and equals `text` (the ids' decoded bytes) when that
 * is valid UTF-8. */
static void stream_check(const latent_tokenizer *t, const int32_t *ids, int n, const char *text, size_t len) {
    char *out = malloc(LATENT_UTF8_STREAM_ROOM(len) + 8);
    char *piece = malloc(len + 1);
    check(out && piece, "malloc");
    latent_utf8_stream st = {{0}, 0};
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        int k = latent_tokenizer_token_bytes(t, ids[i], piece, len);
        if (k <= 0) continue;
        o += latent_utf8_stream_feed(&st, piece, (size_t)k, out + o);
    }
    o += latent_utf8_stream_flush(&st, out + o);
    check(o <= LATENT_UTF8_STREAM_ROOM(len), "stream output fits its stated room");
    check(valid_utf8((const unsigned char *)out, o), "the stream gives valid UTF-8");
    if (valid_utf8((const unsigned char *)text, len)) check(o == len && !memcmp(out, text, len), "the stream keeps valid UTF-8");
    free(piece);
    free(out);
}

static size_t strip_ascii_space(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\n\v\f\r", s[i]) || !s[i]) out[o++] = s[i];
    return o;
}

static void encode_case(const latent_tokenizer *t, int exact, const char *s, size_t n) {
    int count;
    int32_t *ids = encode(t, s, n, &count);
    size_t back_len = 0;
    char *back = latent_tokenizer_decode(t, ids, count, &back_len);
    check(back != NULL && back[back_len] == 0, "decode NUL-terminates");
    if (exact) {
        check(back_len == n && !memcmp(back, s, n), "decode(encode(x)) == x");
        stream_check(t, ids, count, s, n);
    } else {
        int ascii = 1;
        for (size_t i = 0; i < n; i++) ascii &= (unsigned char)s[i] < 0x80;
        if (ascii) {
            char *a = malloc(n + 1), *b = malloc(back_len + 1);
            check(a && b, "malloc");
            size_t la = strip_ascii_space(s, n, a), lb = strip_ascii_space(back, back_len, b);
            check(la == lb && !memcmp(a, b, la), "decode(encode(x)) == x up to ASCII whitespace");
            free(a);
            free(b);
        }
    }
    /* token_id of the text itself: a NUL-terminated lookup that must not crash */
    if (n < 64 && !memchr(s, 0, n)) {
        char z[64];
        memcpy(z, s, n);
        z[n] = 0;
        int32_t id = latent_tokenizer_token_id(t, z);
        check(id >= -1 && id < latent_tokenizer_vocab_size(t), "token_id in range");
    }
    free(back);
    free(ids);
}

static void decode_case(const latent_tokenizer *t, int raw, const uint8_t *p, size_t len) {
    int v = latent_tokenizer_vocab_size(t);
    size_t w = raw ? 4 : 2;
    int n = (int)(len / w);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    check(ids != NULL, "malloc");
    for (int i = 0; i < n; i++) {
        const uint8_t *q = p + (size_t)i * w;
        if (raw) ids[i] = (int32_t)((uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24);
        else ids[i] = (int32_t)((q[0] | q[1] << 8) % (v + 8)) - 4;
    }
    size_t len_out = 0;
    char *text = latent_tokenizer_decode(t, ids, n, &len_out);
    check(text != NULL && text[len_out] == 0, "decode NUL-terminates");
    /* the concatenation of token_bytes, each also copied into a short buffer */
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        char full[256];
        int k = latent_tokenizer_token_bytes(t, ids[i], full, sizeof full);
        check((k < 0) == (ids[i] < 0 || ids[i] >= v), "token_bytes refuses exactly the ids out of range");
        if (k <= 0) continue;
        check(k <= (int)sizeof full, "tokens fit 256 bytes here");
        check(o + (size_t)k <= len_out && !memcmp(text + o, full, (size_t)k), "decode = concatenated token bytes");
        o += (size_t)k;
        size_t cut = (size_t)k / 2;
        char *shortbuf = malloc(cut ? cut : 1);
        check(shortbuf != NULL, "malloc");
        check(latent_tokenizer_token_bytes(t, ids[i], shortbuf, cut) == k, "a short buffer gets the full length");
        check(cut == 0 || !memcmp(shortbuf, full, cut), "a short buffer gets the first bytes");
        free(shortbuf);
    }
    check(o == len_out, "decode has nothing more");
    stream_check(t, ids, n, text, len_out);
    free(text);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    const latent_tokenizer *t = data[0] & 4 ? tok_b : tok_a;
    switch (data[0] % 4) {
    case 0: encode_case(tok_a, 1, s, n); break;
    case 1: encode_case(tok_b, 0, s, n); break;
    case 2: decode_case(t, 0, data + 1, n); break;
    case 3: decode_case(t, 1, data + 1, n); break;
    }
    return 0;
}
