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
    int complete;             /* every choice done and the end written (streaming) or ready (non-streaming) */
    srv_error err;            /* err.kind != NONE: the request ended in this error */
    int aborted;
    int dirty;
    int failed;               /* answered with an error before generating */
    int paused;               /* its client is not reading: sessions paused (backpressure) */
    int started;              /* sessions submitted */
    enum { TOK_NONE = 0, TOK_QUEUED, TOK_RUNNING, TOK_DONE } tok_state; /* prompts tokenizing on the thread pool */
    int big;                  /* a body for the big-body lane (generate.c) */
    srv_gen *big_next;        /* in x->big_head's queue while TOK_QUEUED */
    uv_work_t tok_work;
    int tok_rc;
    srv_error tok_err;
    int close_pending;        /* the connection closed while tokenizing: free when done */
    char client[SRV_CLIENT_KEY_LEN]; /* who it counts against (client_quota.h) */
    int quota_held;           /* sequences it holds of that client's quota */
    srv_buf events;           /* streaming: SSE events built token by token, not yet written */
    double t_start;
    srv_gen *prev, *next;
};

/* openai_response.c */
const char *srv_resp_finish_reason(srv_finish f);
/* The whole non-streaming body (malloc'd JSON). */
char *srv_resp_final(const srv_gen *g);
/* One SSE event for a choice: its pending text and logprobs, role (chat,
 * first chunk), finish_reason when done. Appended to out as "data: ...\n\n". */
void srv_resp_chunk(const srv_gen *g, srv_choice *ch, const char *text, size_t len, int with_role, int finish,
                    srv_buf *out);
void srv_resp_usage_chunk(const srv_gen *g, srv_buf *out);
/* Completions echo: the prompt as given, or its ids decoded. */
void srv_resp_echo_text(const srv_gen *g, const srv_choice *ch, srv_buf *out);
/* Logprob entries. */
json_t *srv_resp_logprobs_new(int chat);
void srv_resp_logprobs_add(const srv_gen *g, srv_choice *ch, const srv_event *ev);

#endif
