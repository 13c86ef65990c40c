/* libFuzzer target for the response_format schema compiler
 * (engine/json_schema.c, json_grammar.c) and its automaton (json_pda.c).
 *
 * Input: a schema's JSON text, optionally a NUL byte and a document. Checks,
 * beyond "no crash, no leak, no undefined behaviour":
 *   - a refusal has a message;
 *   - the document's bytes go through the automaton one at a time until one
 *     is refused; a prefix it calls complete parses as JSON (jansson), so the
 *     automaton never accepts what is not JSON.
 * build: make build/fuzz/fuzz_json_schema; run: build/fuzz/fuzz_json_schema DIR */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "latent/json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t n_schema = nul ? (size_t)(nul - data) : size;
    json_t *schema = json_loadb((const char *)data, n_schema, JSON_DECODE_ANY, NULL);
    if (!schema) return 0;
    latent_json_error err;
    latent_json_grammar *g = latent_json_grammar_compile(schema, &err);
    json_decref(schema);
    if (!g) {
        if (!err.msg[0]) abort(); /* every refusal says why */
        return 0;
    }
    latent_json_guard *jg = latent_json_guard_new(g, NULL, NULL, 0);
    const char *doc = nul ? (const char *)nul + 1 : "";
    size_t n_doc = nul ? size - n_schema - 1 : 0;
    for (size_t i = 0; jg && i < n_doc; i++) {
        if (latent_json_guard_feed(jg, doc + i, 1) == LATENT_JSON_REJECT) break;
        if (latent_json_guard_complete(jg)) {
            json_t *d = json_loadb(doc, i + 1, JSON_DECODE_ANY, NULL);
            if (!d) {
                fprintf(stderr, "the automaton accepted non-JSON: %.*s\n", (int)(i + 1), doc);
                abort();
            }
            json_decref(d);
        }
    }
    latent_json_guard_free(jg);
    latent_json_grammar_free(g);
    return 0;
}
