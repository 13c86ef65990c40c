/* A session: one generated sequence (one choice of one prompt). The loop
 * thread creates it and fills the request part; the scheduler's step thread
 * owns its engine state (sequence, RNG, pending token) while it runs; the
 * two exchange tokens through an outbox under the scheduler's mutex.
 *
 * Lifetime: reference counted under the scheduler mutex. The loop holds one
 * reference from creation until it lets go (srv_sched_release); the
 * scheduler holds one from submission until the session leaves it (finished,
 * cancelled or shut down); the ready list holds one while the session waits
 * there for the loop. The last reference frees it. */
#ifndef SRV_SESSION_H
#define SRV_SESSION_H

#include <stdatomic.h>
#include <stdint.h>

#include "latent/kv.h"
#include "latent/sampler.h"

#define SRV_MAX_STOP_IDS 8

typedef enum {
    SRV_FINISH_NONE = 0,
    SRV_FINISH_STOP,          /* end-of-sequence token (or the loop saw a stop string) */
    SRV_FINISH_LENGTH,        /* max_tokens reached */
    SRV_FINISH_CANCELLED,     /* the loop cancelled it */
    SRV_FINISH_ERROR,         /* the engine failed (message in err) */
} srv_finish;

typedef enum {
    SRV_EV_TOKEN = 0,         /* a generated token with text */
    SRV_EV_EOS,               /* the end-of-sequence token that finished it (no text) */
    SRV_EV_PROMPT,            /* logprob of a prompt token (echo with logprobs); n_top = -1 for the first */
} srv_event_kind;

typedef struct srv_event {
    int32_t token;
    uint8_t kind;
    int8_t n_top;             /* top alternatives below (logprobs requested), -1 = no logprob */
    float logprob;
    double t;                 /* monotonic seconds when the token was sampled */
    int32_t top_ids[LATENT_MAX_TOP_LOGPROBS];
    float top_lps[LATENT_MAX_TOP_LOGPROBS];
} srv_event;

typedef enum { SRV_ST_WAITING = 0, SRV_ST_WAIT_FORK, SRV_ST_PREFILL, SRV_ST_DECODE, SRV_ST_DONE } srv_sess_state;

typedef struct srv_session srv_session;
struct srv_session {
    /* Request part: set by the loop before srv_sched_submit, read-only after. */
    int32_t *prompt;          /* (n_prompt) owned */
    int n_prompt;
    int max_tokens;           /* generated tokens at most (>= 0); n_prompt + max_tokens fits context and pool */
    latent_sampler_params sp; /* sp.bias points at `bias` */
    latent_logit_bias *bias;  /* owned */
    uint64_t seed;
    int ignore_eos;
    int32_t stop_ids[SRV_MAX_STOP_IDS]; /* end-of-sequence ids */
    int n_stop_ids;
    int logprobs;             /* 0: none, else 1 + number of top alternatives */
    int prompt_logprobs;      /* echo with logprobs: logprob of every prompt token */
    int use_cache;            /* may reuse a cached prefix */
    struct latent_json_guard *json; /* response_format: masks tokens, ends the document (owned; the step thread uses it) */
    srv_session *leader;      /* n > 1: choices 2..n fork the leader's prompt state */
    srv_session **followers;  /* (n_followers) owned array, leader only */
    int n_followers;
    double t_submit;          /* monotonic seconds */
    void *owner;              /* the loop's choice; only the loop reads it */

    /* Shared: under the scheduler mutex. */
    int refs;
    int loop_released;        /* the loop let go: no more ready-list pushes */
    int on_ready;
    srv_session *ready_next;
    srv_event *ev_buf[2];     /* double-buffered outbox: the step thread appends to ev_buf[ev_w] */
    int ev_cap[2];
    int ev_n;
    int ev_w;
    srv_finish finish;        /* set once when the scheduler stops generating */
    char err[160];
    double t_admit;           /* when the session got a slot (0 = not yet) */
    int reused;               /* prompt tokens taken from the prefix cache */
    atomic_int cancel;        /* set by the loop; the step thread acts on it within a step */
    atomic_int paused;        /* set by the loop while its client does not read: no decode steps */

    /* Step thread only. */
    srv_sess_state state;
    latent_seq seq;
    latent_rng rng;
    int32_t *hist;            /* (n_prompt + max_tokens) prompt, then generated ids */
    int n_gen;
    int32_t pending;          /* sampled, not yet fed to the model */
    int reserved;             /* tokens its KV pages are set aside for (grows by a horizon) */
    uint64_t admit_order;     /* admission counter: the youngest is preempted first */
    int replay;               /* preempted: re-prefill prompt + generated tokens, then decode `pending` */
    srv_session *next;        /* the scheduler's inbox */
    latent_sample sample;     /* this step's draw */
    float *logits;            /* this step's logit row (into the scheduler's buffer) */
    int step_prefill;         /* this step's entry is a prompt chunk (else a decode token) */
    srv_finish done_reason;   /* finish to publish */
    srv_session *done_next;   /* the scheduler's finished-this-round list */
    int lost;                 /* an event could not be kept: it fails with an error */
};

/* A zeroed session with one reference (the loop's); NULL when out of memory. */
srv_session *srv_session_new(void);
/* Frees everything the session owns (not its followers). */
void srv_session_free(srv_session *s);
/* Sessions alive in the process (created, not yet freed). */
long srv_session_live(void);

#endif
