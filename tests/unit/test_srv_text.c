/* Token bytes -> client text (server/textstream.c): UTF-8 held back until a
 * character completes, stop strings split across tokens detected and never
 * leaked, near-misses released, the end of generation, and sanitizing. */
#include "../../server/textstream.h"

#include <string.h>

#include "testutil.h"

/* Feeds each piece; returns the released text (in out) and whether a stop matched. */
static int feed_all(const char *const *pieces, int n, char *const *stops, const size_t *lens, int n_stops, srv_buf *out,
                    int finish) {
    srv_textstream t;
    srv_text_init(&t, stops, lens, n_stops);
    int stopped = 0;
    for (int i = 0; i < n; i++) stopped |= srv_text_feed(&t, pieces[i], strlen(pieces[i]), out);
    if (finish) srv_text_finish(&t, out);
    srv_text_free(&t);
    return stopped;
}

static int text_is(const srv_buf *b, const char *want) { return b->len == strlen(want) && !memcmp(b->p ? b->p : "", want, b->len); }

static void test_utf8_hold_back(void) {
    srv_textstream t;
    srv_text_init(&t, NULL, NULL, 0);
    srv_buf out = {0};
    srv_text_feed(&t, "a\xc3", 2, &out);
    CHECK(text_is(&out, "a"), "half of \xc3\xa9 is held back (got %zu bytes)", out.len);
    srv_text_feed(&t, "\xa9", 1, &out);
    CHECK(text_is(&out, "a\xc3\xa9"), "released when it completes");
    srv_text_feed(&t, "\xe2\x82", 2, &out);
    srv_text_finish(&t, &out);
    CHECK(text_is(&out, "a\xc3\xa9\xef\xbf\xbd"), "an incomplete character at the end becomes U+FFFD");
    srv_text_free(&t);
    srv_buf_free(&out);
}

static void test_stops(void) {
    char *stops[] = {"END", "\n\n"};
    size_t lens[] = {3, 2};
    srv_buf out = {0};
    const char *split[] = {"abc E", "N", "Dxyz", "more"};
    CHECK(feed_all(split, 4, stops, lens, 2, &out, 1) == 1, "a stop split over three tokens matches");
    CHECK(text_is(&out, "abc "), "the text before it is released, the stop and the rest never are (got '%.*s')", (int)out.len,
          out.p ? out.p : "");
    srv_buf_reset(&out);
    const char *miss[] = {"E", "N", "d", "!"};
    CHECK(feed_all(miss, 4, stops, lens, 2, &out, 1) == 0, "END's near-miss ENd does not stop");
    CHECK(text_is(&out, "ENd!"), "and is released whole (got '%.*s')", (int)out.len, out.p ? out.p : "");
    srv_buf_reset(&out);
    const char *held[] = {"x\n"};
    srv_textstream t;
    srv_text_init(&t, stops, lens, 2);
    srv_text_feed(&t, held[0], 2, &out);
    CHECK(text_is(&out, "x"), "a newline that may start a stop is held (got %zu bytes)", out.len);
    srv_text_finish(&t, &out);
    CHECK(text_is(&out, "x\n"), "and released at the end");
    srv_text_free(&t);
    srv_buf_reset(&out);
    const char *inside[] = {"one\n\ntwo"};
    CHECK(feed_all(inside, 1, stops, lens, 2, &out, 1) == 1 && text_is(&out, "one"), "a stop inside one token cuts there");
    srv_buf_free(&out);
}

static void test_sanitize(void) {
    srv_buf out = {0};
    srv_text_sanitize("ok\xff\xc3(", 5, &out);
    CHECK(text_is(&out, "ok\xef\xbf\xbd\xef\xbf\xbd("), "invalid bytes become U+FFFD (got %zu bytes)", out.len);
    srv_buf_free(&out);
}

int main(void) {
    test_utf8_hold_back();
    test_stops();
    test_sanitize();
    return tu_finish("test_srv_text");
}
