/* Structured output: a JSON Schema (a documented subset, docs/api.md) or
 * "any JSON object" compiled into a byte-level pushdown automaton, and a
 * guard that masks, at every decoding step, each token whose bytes cannot
 * continue a document the schema accepts.
 *
 * Three objects, by lifetime:
 *   latent_json_grammar: one request's compiled schema, read-only once made,
 *       shared by the request's sequences (reference counted, atomically).
 *   latent_json_vocab: one tokenizer's precomputed tables (a token trie in
 *       preorder, which tokens are plain string text), read-only, shared.
 *   latent_json_guard: one sequence's automaton state and scratch; used by
 *       one thread at a time.
 * Nothing here does I/O or exits; every cap is an error the caller answers
 * with a 400. */
#ifndef LATENT_JSON_SCHEMA_H
#define LATENT_JSON_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "latent/tokenizer.h"

struct json_t; /* jansson */

typedef struct latent_json_grammar latent_json_grammar;
typedef struct latent_json_vocab latent_json_vocab;
typedef struct latent_json_guard latent_json_guard;

/* Why a schema was refused: the keyword and the JSON pointer of the schema
 * object that holds it ("" is the root), and a sentence. */
typedef struct latent_json_error {
    char keyword[64];
    char pointer[256];
    char msg[512];
} latent_json_error;

/* Caps on what one request may compile (the defaults are LATENT_JSON_*). */
#define LATENT_JSON_MAX_NODES    4096   /* compiled schema nodes */
#define LATENT_JSON_MAX_LITERALS 4096   /* enum/const values over the schema */
#define LATENT_JSON_MAX_BYTES    (256 * 1024) /* bytes of keys and literals */
#define LATENT_JSON_MAX_DEPTH    64     /* nesting of schema objects */
#define LATENT_JSON_MAX_ALTS     64     /* alternatives one anyOf/type list opens at once */
#define LATENT_JSON_MAX_PROPS    256    /* properties of one object */

/* Compiles `schema` (a jansson value; NULL = any JSON object, as
 * response_format json_object). Returns NULL with *err filled when the
 * schema is outside the subset, past a cap, or accepts no document.
 * The result has one reference. */
latent_json_grammar *latent_json_grammar_compile(const struct json_t *schema, latent_json_error *err);
/* Drops one reference; frees at the last. NULL is fine. */
void latent_json_grammar_free(latent_json_grammar *g);
/* Number of compiled nodes (tests, logs). */
int latent_json_grammar_nodes(const latent_json_grammar *g);

/* Precomputes the tables for tokenizer `t` (control tokens, "<|...|>", and
 * tokens over 64 bytes are never allowed under a mask; a guard's
 * end-of-sequence ids only at the end). NULL when out of memory. */
latent_json_vocab *latent_json_vocab_new(const latent_tokenizer *t);
void latent_json_vocab_free(latent_json_vocab *v);

/* A guard at the start of a document. Takes a reference on g and borrows v
 * (which must outlive it). eos_ids: tokens that end the sequence, allowed
 * exactly when the document is complete. NULL when out of memory. */
latent_json_guard *latent_json_guard_new(latent_json_grammar *g, const latent_json_vocab *v,
                                         const int32_t *eos_ids, int n_eos);
void latent_json_guard_free(latent_json_guard *jg);

/* Sets logits[i] = -inf for every token i in [0, vocab) that cannot come
 * next. Returns the number of tokens left allowed (0: the automaton is stuck,
 * which a schema that compiled cannot cause short of the depth cap). */
int latent_json_guard_mask(latent_json_guard *jg, float *logits, int vocab);
/* The allowed set as a bitset of (vocab + 63) / 64 words, valid until the
 * next call on jg; the same work as _mask without touching logits. */
const uint64_t *latent_json_guard_allowed(latent_json_guard *jg);

typedef enum {
    LATENT_JSON_MORE = 0,     /* the document goes on */
    LATENT_JSON_DONE = 1,     /* complete: only the end can follow (stop now) */
    LATENT_JSON_REJECT = -1,  /* the token cannot continue the document (state unchanged) */
} latent_json_status;

/* Advances the automaton over token `id` (an eos id: DONE when the
 * document is complete, else REJECT). */
latent_json_status latent_json_guard_accept(latent_json_guard *jg, int32_t id);
/* Advances over raw bytes (tests); same results. */
latent_json_status latent_json_guard_feed(latent_json_guard *jg, const char *bytes, size_t n);
/* 1 when the document so far is complete (end-of-sequence allowed). */
int latent_json_guard_complete(const latent_json_guard *jg);

#endif
