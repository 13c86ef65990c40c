/* The compiled form of a JSON schema (json_schema.c makes it) and the
 * byte-level pushdown automaton that runs it (json_pda.c); token_mask.c
 * drives the automaton over a vocabulary. Internal to the engine.
 *
 * A grammar is a graph of nodes; $ref is resolved at compile time, so a
 * recursive schema is a cycle. anyOf/oneOf and type lists are ANYOF nodes,
 * flattened at compile time into `leaves`: the non-ANYOF nodes a value may
 * start as. The automaton is nondeterministic over those: its state is a
 * small set of alternatives, each a stack of frames. */
#ifndef LATENT_JSON_GRAMMAR_H
#define LATENT_JSON_GRAMMAR_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "latent/json_schema.h"

typedef enum { JG_ROOT, JG_ANYOF, JG_OBJECT, JG_ARRAY, JG_STRING, JG_NUMBER, JG_LITERALS } jg_kind;

typedef struct jg_prop {
    uint32_t key_off, key_len;  /* the key as JSON, quotes included, in bytes[] */
    uint32_t child;             /* node of its value */
    uint32_t next_req;          /* smallest required property index >= this one (n: none) */
    uint8_t required;
    uint8_t dead;               /* optional, and its value accepts no finite document: never offered */
} jg_prop;

typedef struct jg_node {
    uint8_t kind;               /* jg_kind */
    uint8_t integer;            /* NUMBER: integers only */
    uint8_t free;               /* OBJECT: any keys, any values (no properties given) */
    uint8_t productive;         /* accepts some finite document (compile-time fixpoint) */
    uint32_t first, n;          /* OBJECT: props[first..+n); ANYOF: alts[first..+n); LITERALS: lits[first..+n) sorted */
    uint32_t leaf_first, n_leaf;/* alts[leaf_first..+n_leaf): the non-ANYOF nodes a value of this node starts as */
    uint32_t min, max;          /* ARRAY: items; STRING: code points */
    uint32_t child;             /* ARRAY: items; ROOT: the document */
} jg_node;

typedef struct jg_lit { uint32_t off, len; } jg_lit; /* in bytes[] */

struct latent_json_grammar {
    atomic_int refs;
    jg_node *nodes; uint32_t n_nodes, cap_nodes;
    jg_prop *props; uint32_t n_props, cap_props;
    uint32_t *alts; uint32_t n_alts, cap_alts;
    jg_lit *lits; uint32_t n_lits, cap_lits;
    char *bytes; uint32_t n_bytes, cap_bytes;
    uint32_t root;              /* the ROOT node */
    uint32_t any;               /* the node "any JSON value" */
    uint32_t any_string;        /* a string of any length (free objects' keys) */
};

/* ---- the automaton (json_pda.c) ---- */

#define JP_MAX_STACK 128        /* frames; deeper documents are not produced */
#define JP_MAX_WS 16            /* whitespace bytes in a row */
#define JP_MAX_ALTS 8           /* alternatives kept (more are dropped: a smaller language, still valid) */

typedef struct jp_frame {
    uint32_t node;
    uint8_t phase;
    uint8_t ws;                 /* whitespace run at this position */
    uint16_t u;                 /* STRING: UTF-8 pending; LITERALS/OBJECT key: byte offset */
    uint32_t a, b;              /* OBJECT: next property, key candidate; ARRAY: items; STRING: length; NUMBER: digits; LITERALS: range */
} jp_frame;

typedef struct jp_link { const struct jp_link *up; jp_frame f; } jp_link;

/* One alternative: the top frame by value, the rest as an immutable list. */
typedef struct jp_alt {
    jp_frame top;
    const jp_link *up;
    uint32_t depth;             /* frames below top */
} jp_alt;

/* A bump allocator for links: a fixed block, reset to a mark. */
typedef struct jp_arena { jp_link *p; uint32_t used, cap; } jp_arena;

/* The state at the start of a document. */
jp_alt latent_jp_start(const latent_json_grammar *g);
/* Feeds byte c to alternative `in`, appending what survives to out[*n..cap).
 * Returns -1 when the arena ran out (the caller treats it as dead). */
int latent_jp_feed(const latent_json_grammar *g, jp_arena *ar, const jp_alt *in, uint8_t c, jp_alt *out, int *n, int cap);
/* 1 when the alternative may end here: every open frame can finish without
 * another byte. */
int latent_jp_accepts(const latent_json_grammar *g, const jp_alt *a);
/* 1 when the alternative is inside a string with no UTF-8 bytes pending:
 * then *count is the string's length so far and *max its cap. */
int latent_jp_in_plain_string(const latent_json_grammar *g, const jp_alt *a, uint32_t *count, uint32_t *max);
/* The same alternative with `cps` more code points in its string. */
jp_alt latent_jp_string_advance(const jp_alt *a, uint32_t cps);
/* Deep equality of two alternatives. */
int latent_jp_alt_equal(const jp_alt *x, const jp_alt *y);
/* Copies a's stack into ar (so it no longer points into another arena). */
int latent_jp_alt_copy(jp_arena *ar, const jp_alt *a, jp_alt *out);

/* ---- building a grammar (json_grammar.c), for the compiler ---- */

/* An empty grammar with its "any value" nodes; NULL when out of memory. */
latent_json_grammar *latent_jg_new(void);
/* Appends a node of `kind` (zeroed otherwise); -1 past LATENT_JSON_MAX_NODES or out of memory. */
int latent_jg_add_node(latent_json_grammar *g, jg_kind kind, uint32_t *out);
/* Appends n bytes to the pool; -1 past LATENT_JSON_MAX_BYTES or out of memory. */
int latent_jg_add_bytes(latent_json_grammar *g, const char *p, size_t n, uint32_t *off);
int latent_jg_add_alts(latent_json_grammar *g, const uint32_t *alts, uint32_t n, uint32_t *first);
int latent_jg_add_props(latent_json_grammar *g, const jg_prop *props, uint32_t n, uint32_t *first);
/* Sorts and de-duplicates literals (JSON texts) into a LITERALS node's range. */
int latent_jg_add_literals(latent_json_grammar *g, jg_lit *lits, uint32_t n, uint32_t *first, uint32_t *n_out);
/* After every node is built: marks productive nodes, drops alternatives and
 * optional properties that accept nothing, flattens anyOf into leaves.
 * Returns -1 with *err filled when the document accepts nothing, anyOf
 * recurses into itself without consuming, or opens too many alternatives. */
int latent_jg_finish(latent_json_grammar *g, latent_json_error *err);

#endif
