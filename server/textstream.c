/* UTF-8 hold-back and stop strings over a token stream. */
#include "textstream.h"

#include <string.h>

void srv_text_init(srv_textstream *t, char *const *stops, const size_t *stop_lens, int n_stops) {
    memset(t, 0, sizeof *t);
    t->stops = stops, t->stop_lens = stop_lens, t->n_stops = n_stops;
}

void srv_text_free(srv_textstream *t) { srv_buf_free(&t->held); }

/* Earliest match of any stop string in h; -1 if none. */
static long find_stop(const srv_textstream *t, const char *h, size_t n) {
    long best = -1;
    for (int i = 0; i < t->n_stops; i++) {
        size_t k = t->stop_lens[i];
        if (k > n) continue;
        for (size_t p = 0; p + k <= n && (best < 0 || (long)p < best); p++)
            if (h[p] == t->stops[i][0] && !memcmp(h + p, t->stops[i], k)) {
                best = (long)p;
                break;
            }
    }
    return best;
}

/* Longest suffix of h that is a proper prefix of some stop string. */
static size_t partial_suffix(const srv_textstream *t, const char *h, size_t n) {
    size_t best = 0;
    for (int i = 0; i < t->n_stops; i++) {
        size_t k = t->stop_lens[i];
        for (size_t l = (k - 1 < n ? k - 1 : n); l > best; l--)
            if (!memcmp(h + n - l, t->stops[i], l)) {
                best = l;
                break;
            }
    }
    return best;
}

int srv_text_feed(srv_textstream *t, const char *bytes, size_t n, srv_buf *out) {
    if (t->stopped) return 1;
    char tmp[1024];
    for (size_t off = 0; off < n;) {
        size_t k = n - off > 300 ? 300 : n - off; /* LATENT_UTF8_STREAM_ROOM(300) < sizeof tmp */
        size_t m = latent_utf8_stream_feed(&t->utf8, bytes + off, k, tmp);
        srv_buf_append(&t->held, tmp, m);
        off += k;
    }
    if (t->n_stops == 0) {
        srv_buf_append(out, t->held.p, t->held.len);
        srv_buf_reset(&t->held);
        return 0;
    }
    long at = find_stop(t, t->held.p ? t->held.p : "", t->held.len);
    if (at >= 0) {
        srv_buf_append(out, t->held.p, (size_t)at);
        srv_buf_reset(&t->held);
        t->stopped = 1;
        return 1;
    }
    size_t keep = partial_suffix(t, t->held.p ? t->held.p : "", t->held.len);
    srv_buf_append(out, t->held.p, t->held.len - keep);
    srv_buf_consume(&t->held, t->held.len - keep);
    return 0;
}

void srv_text_finish(srv_textstream *t, srv_buf *out) {
    if (t->stopped) return;
    char tmp[8];
    size_t m = latent_utf8_stream_flush(&t->utf8, tmp);
    srv_buf_append(&t->held, tmp, m);
    long at = find_stop(t, t->held.p ? t->held.p : "", t->held.len);
    srv_buf_append(out, t->held.p, at >= 0 ? (size_t)at : t->held.len);
    if (at >= 0) t->stopped = 1;
    srv_buf_reset(&t->held);
}

void srv_text_sanitize(const char *bytes, size_t n, srv_buf *out) {
    latent_utf8_stream u = {0};
    char tmp[1024];
    for (size_t off = 0; off < n;) {
        size_t k = n - off > 300 ? 300 : n - off;
        srv_buf_append(out, tmp, latent_utf8_stream_feed(&u, bytes + off, k, tmp));
        off += k;
    }
    srv_buf_append(out, tmp, latent_utf8_stream_flush(&u, tmp));
}
