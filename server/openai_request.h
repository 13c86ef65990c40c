/* Parsing and validation of request bodies (OpenAI completions and chat
 * completions, /tokenize, /detokenize) into plain structs. Pure functions of
 * the bytes and the limits: no model, no I/O, so the fuzz target drives them
 * directly. Unknown fields are ignored; a field of the wrong type or out of
 * range is a 400 that names it. */
#ifndef SRV_OPENAI_REQUEST_H
#define SRV_OPENAI_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "errors.h"
#include "latent/sampler.h"

typedef enum { SRV_API_COMPLETIONS, SRV_API_CHAT, SRV_API_TOKENIZE, SRV_API_DETOKENIZE } srv_api;

#define SRV_MAX_N 128           /* choices per prompt */
#define SRV_MAX_STOP 16         /* stop strings */
#define SRV_MAX_STOP_BYTES 256  /* bytes per stop string */
#define SRV_MAX_PROMPTS 256     /* prompts in one completions request */

/* One prompt: text (len bytes, may hold NULs) or token ids. */
typedef struct srv_prompt {
    char *text;
    size_t len;
    int32_t *ids;
    int n_ids;                /* -1: the prompt is text */
} srv_prompt;

typedef enum { SRV_ROLE_SYSTEM, SRV_ROLE_USER, SRV_ROLE_ASSISTANT, SRV_ROLE_TOOL } srv_role;

typedef struct srv_chat_msg {
    srv_role role;
    char *content;            /* text parts joined with "\n"; "" for null content */
    size_t len;
} srv_chat_msg;

typedef struct srv_req_limits {
    int vocab;                /* token ids must be in [0, vocab) */
} srv_req_limits;

typedef struct srv_gen_request {
    srv_api api;
    char *model;              /* NULL when absent */
    srv_prompt *prompts;      /* completions, tokenize (one), detokenize (one, ids) */
    int n_prompts;
    srv_chat_msg *messages;   /* chat, or tokenize with "messages" */
    int n_messages;
    int echo;
    int max_tokens;           /* -1: not given */
    latent_sampler_params sp; /* sp.bias points at `bias` */
    latent_logit_bias *bias;
    int n_bias;
    int has_seed;
    uint64_t seed;
    char *stop[SRV_MAX_STOP];
    size_t stop_len[SRV_MAX_STOP];
    int n_stop;
    int n;
    int logprobs;             /* 0: none; completions: 1 + top count; chat: 1 + top_logprobs */
    int stream;
    int include_usage;
    int ignore_eos;           /* extension (as vLLM): keep generating past end-of-sequence */
    int add_generation_prompt;/* tokenize with messages (default 1) */
    struct latent_json_grammar *json; /* response_format json_object/json_schema (owned), NULL for text */
} srv_gen_request;

/* Parses `len` bytes of JSON for `api`. On failure fills *e (a 400) and
 * returns -1; *r is then already freed. */
int srv_req_parse(srv_gen_request *r, srv_api api, const char *body, size_t len, const srv_req_limits *lim,
                  srv_error *e);
void srv_req_free(srv_gen_request *r);

#endif
