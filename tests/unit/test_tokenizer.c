/* Tokenizer unit tests on tiny tokenizer.json files written to a temp dir:
 * merges by rank (both merge formats), the GPT-2 pre-tokenizer regex, Digits,
 * prefix space, added tokens (longest match, lstrip/rstrip, single_word),
 * decoding, round trips of arbitrary bytes, the UTF-8 stream helper, and the
 * error messages for missing or broken files. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "latent/tokenizer.h"
#include "testutil.h"

static char dir[] = "/tmp/latent_tok_XXXXXX";
static char path_buf[512];

/* GPT-2's byte -> character map, written out independently of the engine. */
static void byte_char(int b, char *out) {
    int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = b;
    if (!keep) {
        int n = 0;
        for (int i = 0; i < b; i++)
            if (!((i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 63)); out[2] = 0; }
}

/* Tokens: ids 0..255 are the bytes (id = byte value); the merges below add
 * ids from 256 on, in order. */
static const char *merges[][2] = {
    {"b", "c"},      /* 256 bc     rank 0 */
    {"a", "b"},      /* 257 ab     rank 1 */
    {"a", "bc"},     /* 258 abc    rank 2 */
    {"x", "y"},      /* 259 xy     rank 3 */
    {"y", "z"},      /* 260 yz     rank 4 */
    {"a", "a"},      /* 261 aa     rank 5 */
    {"Ġ", "Ġ"},      /* 262 ĠĠ     rank 6 */
    {"Ġ", "b"},      /* 263 Ġb     rank 7 */
    {"'", "s"},      /* 264 's     rank 8 */
    {"'", "S"},      /* 265 'S     rank 9 */
    {"Ġ", "1"},      /* 266 Ġ1     rank 10 */
    {"h", "i"},      /* 267 hi     rank 11 */
    {"Ġ", "hi"},     /* 268 Ġhi    rank 12 */
    {"ab", "ab"},    /* 269 abab   rank 13 */
};
#define N_MERGES (int)(sizeof merges / sizeof merges[0])
enum { ID_BC = 256, ID_AB, ID_ABC, ID_XY, ID_YZ, ID_AA, ID_SPSP, ID_SPB, ID_QS, ID_QSU, ID_SP1, ID_HI, ID_SPHI,
       ID_ABAB, ID_IM_START = 300, ID_IM_END, ID_IM, ID_MASK, ID_R, ID_W, ID_EOT };

typedef struct {
    int pairs;        /* merges as ["a","b"] instead of "a b" */
    int digits;       /* Sequence[Digits(individual), ByteLevel] (SmolLM2) */
    int prefix_space; /* ByteLevel add_prefix_space */
    int reverse_xy;   /* "y z" ranked before "x y" */
    int ignore_merges;
} tok_opts;

static json_t *added(int id, const char *content, int special, int lstrip, int rstrip, int single_word) {
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "special", special,
                     "lstrip", lstrip, "rstrip", rstrip, "single_word", single_word, "normalized", 0);
}

static const char *write_tokenizer(const char *name, tok_opts o) {
    json_t *vocab = json_object();
    char s[8];
    for (int b = 0; b < 256; b++) {
        byte_char(b, s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    json_t *m = json_array();
    for (int i = 0; i < N_MERGES; i++) {
        int k = i;
        if (o.reverse_xy && (i == 3 || i == 4)) k = 7 - i; /* swap ranks of x y / y z */
        char both[64];
        snprintf(both, sizeof both, "%s%s", merges[k][0], merges[k][1]);
        json_object_set_new(vocab, both, json_integer(256 + k));
        if (o.pairs) json_array_append_new(m, json_pack("[s, s]", merges[k][0], merges[k][1]));
        else {
            snprintf(both, sizeof both, "%s %s", merges[k][0], merges[k][1]);
            json_array_append_new(m, json_string(both));
        }
    }
    json_object_set_new(vocab, "xyz", json_integer(290)); /* reachable only by ignore_merges */
    json_t *bl = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", o.prefix_space,
                           "trim_offsets", 1, "use_regex", 1);
    json_t *pre = o.digits ? json_pack("{s:s, s:[{s:s, s:b}, o]}", "type", "Sequence", "pretokenizers", "type",
                                       "Digits", "individual_digits", 1, bl)
                           : bl;
    json_t *add = json_pack("[o, o, o, o, o, o, o]",
                            added(ID_IM_START, "<|im_start|>", 1, 0, 0, 0), added(ID_IM_END, "<|im_end|>", 1, 0, 0, 0),
                            added(ID_IM, "<|im", 0, 0, 0, 0), added(ID_MASK, "<mask>", 1, 1, 0, 0),
                            added(ID_R, "<r>", 1, 0, 1, 0), added(ID_W, "word", 0, 0, 0, 1),
                            added(ID_EOT, "<|endoftext|>", 1, 0, 0, 0));
    json_t *root = json_pack("{s:s, s:o, s:n, s:o, s:{s:s, s:n, s:b, s:o, s:o}, s:{s:s}}", "version", "1.0",
                             "added_tokens", add, "normalizer", "pre_tokenizer", pre, "model", "type", "BPE",
                             "unk_token", "ignore_merges", o.ignore_merges, "vocab", vocab, "merges", m,
                             "decoder", "type", "ByteLevel");
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
    if (!root || json_dump_file(root, path_buf, 0)) { fprintf(stderr, "cannot write %s\n", path_buf); exit(1); }
    json_decref(root);
    return path_buf;
}

static latent_tokenizer *load(const char *name, tok_opts o) {
    latent_err err = {0};
    latent_tokenizer *t = latent_tokenizer_load(write_tokenizer(name, o), &err);
    CHECK(t != NULL, "load %s: %s", name, err.msg);
    if (!t) exit(1);
    return t;
}

/* Encodes text and compares with the expected ids (terminated by -1). */
static void expect(const latent_tokenizer *t, const char *what, const char *text, const int32_t *want) {
    int32_t got[256];
    int n = latent_tokenizer_encode(t, text, strlen(text), got, 256);
    int nw = 0;
    while (want[nw] >= 0) nw++;
    int same = n == nw;
    for (int i = 0; same && i < n; i++) same = got[i] == want[i];
    char g[1024] = "", w[1024] = "";
    for (int i = 0; i < n && i < 64; i++) snprintf(g + strlen(g), sizeof g - strlen(g), " %d", got[i]);
    for (int i = 0; i < nw; i++) snprintf(w + strlen(w), sizeof w - strlen(w), " %d", want[i]);
    CHECK(same, "%s: \"%s\" -> [%s ] want [%s ]", what, text, g, w);
}
#define EXPECT(t, what, text, ...) expect((t), (what), (text), (const int32_t[]){__VA_ARGS__, -1})

static void roundtrip(const latent_tokenizer *t, const char *what, const char *text, size_t len) {
    int32_t ids[4096];
    int n = latent_tokenizer_encode(t, text, len, ids, 4096);
    CHECK(n >= 0 && n <= 4096, "%s: encode returned %d", what, n);
    if (n < 0 || n > 4096) return;
    size_t back_len = 0;
    char *back = latent_tokenizer_decode(t, ids, n, &back_len);
    CHECK(back && back_len == len && !memcmp(back, text, len), "%s: %zu bytes do not survive encode/decode (%zu back)",
          what, len, back_len);
    free(back);
}

static void test_bpe(void) {
    tok_opts o = {0};
    latent_tokenizer *t = load("plain.json", o);
    CHECK(latent_tokenizer_vocab_size(t) == ID_EOT + 1, "vocab size %d", latent_tokenizer_vocab_size(t));
    /* ranks: "b c" (0) before "a b" (1), so abc = a + bc, never ab + c */
    EXPECT(t, "rank order", "abc", ID_ABC);
    EXPECT(t, "single merge", "ab", ID_AB);
    EXPECT(t, "merge of merges", "abab", ID_ABAB);
    EXPECT(t, "ties go left", "aaa", ID_AA, 'a');
    EXPECT(t, "ties go left", "aaaa", ID_AA, ID_AA);
    EXPECT(t, "x y before y z", "xyz", ID_XY, 'z');
    EXPECT(t, "no merge", "q", 'q');
    latent_tokenizer_free(t);

    o.reverse_xy = 1;
    t = load("reversed.json", o);
    EXPECT(t, "y z before x y", "xyz", 'x', ID_YZ);
    latent_tokenizer_free(t);

    o.reverse_xy = 0;
    o.pairs = 1;
    t = load("pairs.json", o);
    EXPECT(t, "pair merges: rank order", "abc", ID_ABC);
    EXPECT(t, "pair merges", "xyz", ID_XY, 'z');
    latent_tokenizer_free(t);

    o.pairs = 0;
    o.ignore_merges = 1;
    t = load("ignore.json", o);
    EXPECT(t, "ignore_merges takes a whole-word token", "xyz", 290);
    EXPECT(t, "ignore_merges falls back to BPE", "xyzz", ID_XY, 'z', 'z');
    latent_tokenizer_free(t);
}

static void test_pretokenizer(void) {
    tok_opts o = {0};
    latent_tokenizer *t = load("pre.json", o);
    /* whitespace run: "\s+(?!\S)" leaves the last space for " b" */
    EXPECT(t, "space run", "a   b", 'a', ID_SPSP, ID_SPB);
    EXPECT(t, "trailing spaces", "a  ", 'a', ID_SPSP);
    EXPECT(t, "space before word", " hi", ID_SPHI);
    EXPECT(t, "tab is not a prefix", "\thi", '\t', ID_HI);
    EXPECT(t, "newline then space", "\n hi", '\n', ID_SPHI);
    /* contractions: 's is its own piece, 'S is not a contraction */
    EXPECT(t, "'s", "hi's", ID_HI, ID_QS);
    EXPECT(t, "'S", "hi'S", ID_HI, '\'', 'S');
    EXPECT(t, "space digits", "a 12", 'a', ID_SP1, '2');
    EXPECT(t, "letters then digits", "hi1", ID_HI, '1');
    /* punctuation runs stay apart from letters */
    EXPECT(t, "punct", "hi!?", ID_HI, '!', '?');
    /* a non-ASCII letter is part of the letter run (one piece, byte tokens then "hi") */
    EXPECT(t, "letter run with accents", "\xc3\xa9hi", 0xc3, 0xa9, ID_HI);
    EXPECT(t, "NBSP is whitespace", "a\xc2\xa0hi", 'a', 0xc2, 0xa0, ID_HI);
    latent_tokenizer_free(t);

    o.digits = 1;
    t = load("digits.json", o);
    EXPECT(t, "Digits isolates each digit before the regex", "a 12", 'a', ' ', '1', '2');
    EXPECT(t, "Digits: letters unchanged", " hi", ID_SPHI);
    EXPECT(t, "Digits: arabic-indic digits too", "\xd9\xa3\xd9\xa4", 0xd9, 0xa3, 0xd9, 0xa4);
    latent_tokenizer_free(t);

    o.digits = 0;
    o.prefix_space = 1;
    t = load("prefix.json", o);
    EXPECT(t, "add_prefix_space", "hi", ID_SPHI);
    EXPECT(t, "add_prefix_space keeps an existing space", " hi", ID_SPHI);
    /* the prefix goes on every segment between added tokens, as HF does */
    EXPECT(t, "add_prefix_space after an added token", "<|im_end|>hi", ID_IM_END, ID_SPHI);
    latent_tokenizer_free(t);
}

static void test_added_tokens(void) {
    tok_opts o = {0};
    latent_tokenizer *t = load("added.json", o);
    EXPECT(t, "chat markup", "<|im_start|>hi<|im_end|>", ID_IM_START, ID_HI, ID_IM_END);
    EXPECT(t, "longest match wins over a prefix token", "<|im_start|>", ID_IM_START);
    EXPECT(t, "shorter token where the long one does not fit", "<|im_sta", ID_IM, '_', 's', 't', 'a');
    EXPECT(t, "added token mid-word", "hi<|endoftext|>hi", ID_HI, ID_EOT, ID_HI);
    EXPECT(t, "lstrip eats the spaces before", "hi  <mask>", ID_HI, ID_MASK);
    EXPECT(t, "rstrip eats the spaces after", "<r>  hi", ID_R, ID_HI);
    EXPECT(t, "no rstrip keeps them", "<|im_end|> hi", ID_IM_END, ID_SPHI);
    EXPECT(t, "single_word alone", "hi word hi", ID_HI, ' ', ID_W, ID_SPHI);
    EXPECT(t, "single_word inside a word is text", "swords", 's', 'w', 'o', 'r', 'd', 's');
    CHECK(latent_tokenizer_token_id(t, "<|im_end|>") == ID_IM_END, "token_id im_end");
    CHECK(latent_tokenizer_token_id(t, "<|nope|>") == -1, "token_id of unknown");
    CHECK(latent_tokenizer_token_id(t, "ab") == ID_AB, "token_id of a vocab token");

    char buf[64];
    int n = latent_tokenizer_token_bytes(t, ID_IM_START, buf, sizeof buf);
    CHECK(n == 12 && !memcmp(buf, "<|im_start|>", 12), "special token decodes to its content (%d)", n);
    n = latent_tokenizer_token_bytes(t, ID_SPHI, buf, sizeof buf);
    CHECK(n == 3 && !memcmp(buf, " hi", 3), "byte-level token decodes to bytes (%d)", n);
    n = latent_tokenizer_token_bytes(t, 0x0A, buf, sizeof buf); /* "Ċ" */
    CHECK(n == 1 && buf[0] == '\n', "newline token (%d)", n);
    CHECK(latent_tokenizer_token_bytes(t, -1, buf, sizeof buf) == -1, "negative id");
    CHECK(latent_tokenizer_token_bytes(t, ID_EOT + 1, buf, sizeof buf) == -1, "id past the end");
    CHECK(latent_tokenizer_token_bytes(t, 280, buf, sizeof buf) == 0, "hole in the ids has no bytes");
    n = latent_tokenizer_token_bytes(t, ID_IM_START, buf, 4);
    CHECK(n == 12 && !memcmp(buf, "<|im", 4), "a short buffer gets a cut copy and the full length");

    int32_t ids[] = {ID_IM_START, ID_HI, ID_SPB, 0x0A, ID_IM_END, 99999, -5};
    size_t len = 0;
    char *text = latent_tokenizer_decode(t, ids, 7, &len);
    CHECK(text && len == strlen("<|im_start|>hi b\n<|im_end|>") && !strcmp(text, "<|im_start|>hi b\n<|im_end|>"),
          "decode gave \"%s\" (%zu)", text ? text : "(null)", len);
    free(text);

    /* cap smaller than needed: total count returned, only cap written */
    int32_t small[2] = {-7, -7};
    n = latent_tokenizer_encode(t, "hi hi hi", 8, small, 1);
    CHECK(n == 3 && small[0] == ID_HI && small[1] == -7, "cap 1: n=%d", n);
    CHECK(latent_tokenizer_encode(t, "hi", 2, NULL, 0) == 1, "count only");
    CHECK(latent_tokenizer_encode(t, "", 0, small, 2) == 0, "empty text");
    latent_tokenizer_free(t);
}

static void test_roundtrip(void) {
    tok_opts o = {.digits = 1};
    latent_tokenizer *t = load("rt.json", o);
    const char *texts[] = {
        "Hello, world! It's 2024.\n\n  Tabs\tand spaces   ",
        "\xf0\x9f\x98\x80 emoji, \xe6\x97\xa5\xe6\x9c\xac CJK, caf\xc3\xa9",
        "\xff\xfe invalid \x80 bytes \xc3( \xf0\x9f\x98 truncated \xed\xa0\x80 surrogate",
        "<|im_start|>user\nhi<|im_end|><|im",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) roundtrip(t, "text", texts[i], strlen(texts[i]));
    roundtrip(t, "with NUL", "a\0b\0", 4);
    unsigned seed = 1;
    char buf[512];
    for (int k = 0; k < 300; k++) {
        size_t n = 1 + (seed = seed * 1103515245u + 12345u) % 500;
        for (size_t i = 0; i < n; i++) buf[i] = (char)((seed = seed * 1103515245u + 12345u) >> 16);
        roundtrip(t, "random bytes", buf, n);
    }
    latent_tokenizer_free(t);
}

/* Feeds `in` split at the given cut points; returns the total output. */
static size_t stream(const char *in, size_t len, const size_t *cuts, int n_cuts, char *out) {
    latent_utf8_stream s = {{0}, 0};
    size_t o = 0, prev = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        o += latent_utf8_stream_feed(&s, in + prev, end - prev, out + o);
        prev = end;
    }
    return o + latent_utf8_stream_flush(&s, out + o);
}

static int valid_utf8(const char *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i], k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                                 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k || i + k > n) return 0;
        uint32_t v = k == 1 ? c : c & (0x7F >> k);
        for (unsigned j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            v = v << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) || (k == 4 && (v < 0x10000 || v > 0x10FFFF)))
            return 0;
        i += k;
    }
    return 1;
}

static void test_utf8_stream(void) {
    latent_utf8_stream s = {{0}, 0};
    char out[64];
    /* an emoji split over three tokens comes out whole with the last one */
    CHECK(latent_utf8_stream_feed(&s, "\xf0\x9f", 2, out) == 0, "first half held");
    CHECK(latent_utf8_stream_feed(&s, "\x98", 1, out) == 0, "third byte held");
    size_t n = latent_utf8_stream_feed(&s, "\x80!", 2, out);
    CHECK(n == 5 && !memcmp(out, "\xf0\x9f\x98\x80!", 5), "emoji released (%zu)", n);
    CHECK(latent_utf8_stream_flush(&s, out) == 0, "nothing pending");

    n = latent_utf8_stream_feed(&s, "a\x80" "b", 3, out);
    CHECK(n == 5 && !memcmp(out, "a\xef\xbf\xbd" "b", 5), "stray continuation byte -> U+FFFD");
    n = latent_utf8_stream_feed(&s, "\xe2\x82", 2, out);
    CHECK(n == 0, "incomplete euro held");
    n = latent_utf8_stream_feed(&s, "A", 1, out);
    CHECK(n == 4 && !memcmp(out, "\xef\xbf\xbd" "A", 4), "broken sequence -> one U+FFFD, then the byte (%zu)", n);
    n = latent_utf8_stream_feed(&s, "\xe0\x80", 2, out);
    CHECK(n == 6 && !memcmp(out, "\xef\xbf\xbd\xef\xbf\xbd", 6), "overlong E0 80 -> two U+FFFD (%zu)", n);
    n = latent_utf8_stream_feed(&s, "\xed\xa0", 2, out);
    CHECK(n == 6, "surrogate ED A0 -> two U+FFFD (%zu)", n);
    n = latent_utf8_stream_feed(&s, "\xff\xc0", 2, out);
    CHECK(n == 6, "FF and C0 are never valid (%zu)", n);
    n = latent_utf8_stream_feed(&s, "\xf0\x9f\x98", 3, out);
    CHECK(n == 0, "held at end");
    n = latent_utf8_stream_flush(&s, out);
    CHECK(n == 3 && !memcmp(out, "\xef\xbf\xbd", 3) && s.n_pending == 0, "flush releases U+FFFD");

    /* valid text comes out unchanged however it is cut */
    const char *text = "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\xf0\x9f\x91\x8d!";
    size_t len = strlen(text);
    char big[256];
    for (size_t a = 0; a <= len; a++)
        for (size_t b = a; b <= len; b++) {
            size_t cuts[2] = {a, b};
            size_t m = stream(text, len, cuts, 2, big);
            CHECK(m == len && !memcmp(big, text, len), "cut at %zu,%zu changed the text", a, b);
        }
    /* random bytes: output is valid UTF-8 and fits 3*len + 8 */
    unsigned seed = 7;
    for (int k = 0; k < 500; k++) {
        char in[64], o2[3 * 64 + 8 + 8];
        size_t m = (seed = seed * 1103515245u + 12345u) % 64;
        for (size_t i = 0; i < m; i++) in[i] = (char)((seed = seed * 1103515245u + 12345u) >> 16);
        size_t cut = m ? (seed = seed * 1103515245u + 12345u) % m : 0;
        latent_utf8_stream st = {{0}, 0};
        size_t o1 = latent_utf8_stream_feed(&st, in, cut, o2);
        CHECK(o1 <= LATENT_UTF8_STREAM_ROOM(cut), "room 1");
        size_t o3 = latent_utf8_stream_feed(&st, in + cut, m - cut, o2 + o1);
        CHECK(o3 <= LATENT_UTF8_STREAM_ROOM(m - cut), "room 2");
        size_t tot = o1 + o3 + latent_utf8_stream_flush(&st, o2 + o1 + o3);
        CHECK(valid_utf8(o2, tot), "stream output is not valid UTF-8 (case %d)", k);
    }
}

static void expect_error(const char *name, const char *json, const char *needle) {
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
    FILE *f = fopen(path_buf, "w");
    if (!f) { CHECK(0, "cannot write %s", path_buf); return; }
    fputs(json, f);
    fclose(f);
    latent_err err = {0};
    latent_tokenizer *t = latent_tokenizer_load(path_buf, &err);
    CHECK(t == NULL, "%s: loaded a broken file", name);
    latent_tokenizer_free(t);
    CHECK(strstr(err.msg, path_buf) != NULL, "%s: message does not name the file: %s", name, err.msg);
    CHECK(err.code == LATENT_E_FORMAT || err.code == LATENT_E_UNSUPPORTED, "%s: code %s", name, latent_err_name(err.code));
    CHECK(strstr(err.msg, needle) != NULL, "%s: message lacks \"%s\": %s", name, needle, err.msg);
}

#define BL "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}"
static void test_errors(void) {
    latent_err err = {0};
    snprintf(path_buf, sizeof path_buf, "%s/missing/tokenizer.json", dir);
    CHECK(latent_tokenizer_load(path_buf, &err) == NULL, "missing file");
    CHECK(strstr(err.msg, path_buf) && strstr(err.msg, "cannot read"), "missing file message: %s", err.msg);
    CHECK(err.code == LATENT_E_IO, "missing file code: %s", latent_err_name(err.code));
    CHECK(latent_tokenizer_load(path_buf, NULL) == NULL, "NULL err is allowed");

    expect_error("trunc.json", "{\"model\": {\"vocab\": {\"a\": 0", "invalid JSON");
    expect_error("nomodel.json", "{\"added_tokens\": []}", "no \"model\"");
    expect_error("wordpiece.json", "{" BL ", \"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "WordPiece");
    expect_error("novocab.json", "{" BL ", \"model\": {\"type\": \"BPE\"}}", "\"vocab\"");
    expect_error("badid.json", "{" BL ", \"model\": {\"vocab\": {\"a\": \"x\"}, \"merges\": []}}", "model.vocab[\"a\"]");
    expect_error("badmerge.json", "{" BL ", \"model\": {\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
                 "model.merges[0]: token \"ab\" is not in model.vocab");
    expect_error("badmerge2.json", "{" BL ", \"model\": {\"vocab\": {\"a\": 0}, \"merges\": [\"a b c\"]}}",
                 "model.merges[0]");
    expect_error("nopre.json", "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}}", "pre_tokenizer");
    expect_error("metaspace.json",
                 "{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}}",
                 "Metaspace");
    expect_error("norm.json", "{\"normalizer\": {\"type\": \"NFKC\"}, " BL ", \"model\": {\"vocab\": {\"a\": 0}, "
                 "\"merges\": []}}", "NFKC");
    expect_error("dup.json", "{" BL ", \"model\": {\"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", "id 0");
    expect_error("addedbad.json", "{" BL ", \"added_tokens\": [{\"content\": \"<x>\"}], \"model\": {\"vocab\": "
                 "{\"a\": 0}, \"merges\": []}}", "added_tokens[0]");
}

int main(void) {
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_bpe();
    test_pretokenizer();
    test_added_tokens();
    test_roundtrip();
    test_utf8_stream();
    test_errors();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return tu_finish("test_tokenizer");
}
