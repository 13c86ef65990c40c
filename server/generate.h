/* A completion or chat completion request in flight on the loop thread: its
 * parsed body, tokenized prompts, and one choice per generated sequence,
 * each turning its session's tokens into text (UTF-8 held back, stop strings
 * cut) and logprobs. */
#ifndef SRV_GENERATE_H
#define SRV_GENERATE_H

#include <jansson.h>
#include <uv.h>

#include "buf.h"
#include "errors.h"
#include "openai_request.h"
#include "server.h"
#include "session.h"
#include "textstream.h"

typedef struct srv_choice {
    srv_gen *g;
    int index;                /* OpenAI choice index: prompt_index * n + k */
    int prompt_index;
    srv_session *sess;        /* NULL once let go */
    srv_textstream text;
    srv_buf out;              /* streaming: text not yet sent; otherwise all the text */
    json_t *lp;               /* logprobs not yet sent (streaming) or all of them; NULL when not asked */
    size_t text_offset;       /* completions logprobs: offset of the next token's text */
    int n_tokens;             /* generated tokens (the end-of-sequence token included) */
    srv_finish finish;
    int done;                 /* no more text will come */
    int reported;             /* streaming: the chunk with finish_reason went out */
    int echo_pending;         /* completions echo: the prompt text still to prepend */
    int seen_first;
    double t_last;            /* when its last token was sampled */
} srv_choice;

/* A generation request's life (docs/architecture.md, "A request's states"):
 *
 *   NEW -----------------------------------> RUNNING --> COMPLETE
 *    |  \--> QUEUED --> PARSING --> PARSED --^     \
 *    |           \          \         \            \--> ABORTED (the client left)
 *    \------------\----------\---------\-> FAILED (an error answered before generating)
 *                             \--> ORPHANED (the connection closed while the pool held it)
 *
 * Small bodies go from NEW straight to RUNNING (or FAILED) on the loop;
 * bodies over 16 KiB are parsed and tokenized on the thread pool (PARSING),
 * big ones first wait for their lane (QUEUED). Whatever the state, the
 * connection's close frees the request, except in PARSING, where the pool
 * still writes it: then it is ORPHANED and freed when the pool is done. */
typedef enum {
    GEN_NEW = 0,   /* attached to its connection; the body not yet parsed */
    GEN_QUEUED,    /* a big body waiting for the pool's big-body lane */
    GEN_PARSING,   /* its body parsed and tokenized on the thread pool, which holds it */
    GEN_PARSED,    /* back from the pool: the next resume starts or fails it */
    GEN_RUNNING,   /* sessions submitted: streaming, or waiting for every choice */
    GEN_COMPLETE,  /* every choice done: the stream ended, or the whole response ready */
    GEN_FAILED,    /* answered with an error before generating */
    GEN_ABORTED,   /* its client left: its sessions were cancelled */
    GEN_ORPHANED,  /* its connection closed while the pool held it */
    GEN__STATES
} srv_gen_state;

struct srv_gen {
    srv_ctx *x;
    srv_conn *conn;
    int chat;
    char id[48];
    long long created;
    srv_gen_request req;
    int n_prompts;
    int32_t **ids;            /* (n_prompts) tokenized prompts */
    int *n_ids;
    int prompt_tokens;
    srv_choice *choices;
    int n_choices, n_done;
    srv_gen_state state;      /* where the request is (gen_enter checks each transition) */
    srv_error err;            /* err.kind != NONE: the request ends in this error */
    int dirty;                /* RUNNING: has news for its client (emit) */
    int paused;               /* RUNNING: its client is not reading: sessions paused (backpressure) */
    int big;                  /* a body for the big-body lane */
    srv_gen *big_next;        /* in x->big_head's queue while QUEUED */
    srv_buf body;              /* QUEUED, PARSING: the body, taken from the connection (srv_conn_take_body) */
    uv_work_t tok_work;
    int tok_rc;               /* PARSED: the pool's result, tok_err when -1 */
    srv_error tok_err;
    char client[SRV_CLIENT_KEY_LEN]; /* who it counts against (client_quota.h) */
    int quota_held;           /* sequences it holds of that client's quota */
    srv_buf events;           /* streaming: SSE events built token by token, not yet written */
    double t_start;
    srv_gen *prev, *next;
};

/* Completions and chat completions (generate.c). */
void srv_gen_handle(srv_ctx *x, srv_conn *c, int chat);
/* Prompt tokens and generated tokens of a generation request so far (the
 * data a generation request attaches to its connection); 0. */
int srv_gen_usage(const srv_gen *g, int *prompt, int *completion);
/* The step thread published tokens (uv_async). */
void srv_gen_on_wake(uv_async_t *a);
/* Keep-alive comments for streams that have been quiet (uv_timer). */
void srv_gen_keepalive(srv_ctx *x);
/* Grace period over: ends every request still running. */
void srv_gen_cancel_all(srv_ctx *x);

#endif
