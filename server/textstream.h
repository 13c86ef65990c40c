/* Generated token bytes -> text a client may see: partial UTF-8 is held
 * until the character completes, and text that could be the start of a stop
 * string is held until it is known not to be one, so a stop string that
 * spans tokens is detected and never leaked. */
#ifndef SRV_TEXTSTREAM_H
#define SRV_TEXTSTREAM_H

#include <stddef.h>

#include "buf.h"
#include "latent/tokenizer.h"

typedef struct srv_textstream {
    latent_utf8_stream utf8;
    srv_buf held;             /* complete UTF-8 not yet released */
    char *const *stops;       /* borrowed */
    const size_t *stop_lens;
    int n_stops;
    int stopped;
} srv_textstream;

void srv_text_init(srv_textstream *t, char *const *stops, const size_t *stop_lens, int n_stops);
void srv_text_free(srv_textstream *t);
/* Feeds one token's bytes; appends releasable text to out. Returns 1 when a
 * stop string matched (the text before it is released, the rest dropped,
 * and later feeds do nothing). */
int srv_text_feed(srv_textstream *t, const char *bytes, size_t n, srv_buf *out);
/* End of generation: releases what is held (an incomplete character as U+FFFD). */
void srv_text_finish(srv_textstream *t, srv_buf *out);

/* Appends bytes as valid UTF-8 (invalid sequences become U+FFFD). */
void srv_text_sanitize(const char *bytes, size_t n, srv_buf *out);

#endif
