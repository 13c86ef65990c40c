/* Byte-level BPE tokenizer read from a Hugging Face tokenizer.json, as the
 * `tokenizers` library runs it for GPT-2 and SmolLM2: added/special tokens
 * are split out first, the rest is pre-tokenized by the GPT-2 regex, mapped
 * through the byte-to-unicode table, and merged by rank. */
#ifndef LATENT_TOKENIZER_H
#define LATENT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "latent/error.h"

typedef struct latent_tokenizer latent_tokenizer;

latent_tokenizer *latent_tokenizer_load(const char *path, latent_err *err);
void latent_tokenizer_free(latent_tokenizer *t);

int latent_tokenizer_vocab_size(const latent_tokenizer *t);

/* Encodes `len` bytes of text (any bytes; invalid UTF-8 is encoded byte-wise).
 * Writes at most `cap` ids to `out` and returns the total number of ids the
 * text needs (call again with a bigger buffer if it exceeds cap), or -1. */
int latent_tokenizer_encode(const latent_tokenizer *t, const char *text, size_t len,
                            int32_t *out, int cap);

/* Writes the bytes of token `id` to buf (at most cap of them); returns the
 * token's byte length (more than cap: the copy was cut), or -1 for an id out
 * of range. Special tokens decode to their content; an id in range that names
 * no token has 0 bytes. */
int latent_tokenizer_token_bytes(const latent_tokenizer *t, int32_t id, char *buf, size_t cap);

/* Decodes ids to a malloc'd NUL-terminated string (caller frees); *len_out
 * gets the byte length (the text may contain NUL bytes, and is the raw bytes:
 * invalid UTF-8 is kept). Ids out of range decode to nothing. NULL if out of
 * memory. */
char *latent_tokenizer_decode(const latent_tokenizer *t, const int32_t *ids, int n, size_t *len_out);

/* Id of an added/special token by its content, or -1. */
int32_t latent_tokenizer_token_id(const latent_tokenizer *t, const char *content);

/* Streaming decode: feed ids one at a time and get back only complete UTF-8;
 * bytes of a character split across tokens are held until it completes.
 * Invalid sequences are released as U+FFFD so a stream never stalls. */
typedef struct latent_utf8_stream {
    char pending[8];
    int n_pending;
} latent_utf8_stream;

/* Appends the complete UTF-8 of `bytes` (after what was pending) to out;
 * returns bytes written. out needs LATENT_UTF8_STREAM_ROOM(len) bytes of
 * room: each invalid byte can become a 3-byte U+FFFD. */
#define LATENT_UTF8_STREAM_ROOM(len) (3 * (size_t)(len) + 8)
size_t latent_utf8_stream_feed(latent_utf8_stream *s, const char *bytes, size_t len, char *out);
/* Flushes whatever is pending at end of stream (as U+FFFD if incomplete);
 * out needs 8 bytes of room. */
size_t latent_utf8_stream_flush(latent_utf8_stream *s, char *out);

#endif
