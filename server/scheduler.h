/* The engine step thread: continuous batching of sessions.
 *
 * Each step takes the running sessions' pending tokens (decode) and chunks of
 * the prompts still prefilling, under a per-step token budget, runs
 * latent_engine_step once over all of them, samples every sequence that
 * produced logits (in parallel over the engine's threads, each session with
 * its own seeded RNG), and publishes the tokens to the sessions' outboxes,
 * then wakes the loop. Sessions wait in a FIFO until a slot and enough KV
 * pages are free: an admitted session has pages for its prompt plus a
 * horizon set aside (counted, not yet taken) and gets another horizon when
 * it reaches the end; when the pool cannot cover that, cached prefixes give
 * their pages back (LRU), then the youngest decoding session is preempted
 * (re-queued at the front, its prompt and generated tokens re-prefilled when
 * it is admitted again). The pool is never exceeded.
 *
 * The step thread owns the engine, the KV pool, the prefix cache and every
 * session's sequence; the loop only calls the functions below. */
#ifndef SRV_SCHEDULER_H
#define SRV_SCHEDULER_H

#include <stddef.h>

#include "latent/engine.h"
#include "latent/model.h"
#include "session.h"

typedef struct srv_sched_opts {
    size_t pool_bytes;
    int page_tokens;
    int max_sessions;         /* sessions running at once */
    int queue_len;            /* sessions waiting beyond that before submit refuses */
    int step_tokens;          /* token rows per step */
    int prefill_chunk;        /* prompt tokens per session per step while others decode */
    int cache_entries;        /* prefix cache size (0 = off) */
    latent_engine_opts engine;
    const char *kv_dtype;     /* "auto" (follows the precision), "f32" or "bf16" */
} srv_sched_opts;

typedef struct srv_sched_stats {
    int waiting, running, held;
    int pages_total, pages_free, pages_cached, cache_entries;
    long long prefill_tokens, reused_tokens, generated_tokens, failed_steps, preemptions;
    long long paused_preemptions; /* of preemptions: sessions paused by backpressure, making room for others */
    size_t released_weight_bytes; /* the model's copies the engine repacked, given back at start */
    size_t weight_bytes;      /* weights the engine reads (latent_engine_weight_bytes) */
    latent_precision precision; /* what the engine computes in */
    latent_kv_dtype kv_dtype;   /* what the KV pool stores */
    latent_engine_stats engine;
} srv_sched_stats;

typedef struct srv_sched srv_sched;

/* Called from the step thread: after publishing (wake the loop), and after
 * every engine step with its wall time and row count. */
typedef void (*srv_sched_wake_fn)(void *arg);
typedef void (*srv_sched_step_fn)(void *arg, double seconds, int rows);

/* Borrows the model (must outlive the scheduler). */
srv_sched *srv_sched_new(const latent_model *m, const srv_sched_opts *o, latent_err *err);
int srv_sched_start(srv_sched *s, srv_sched_wake_fn wake, srv_sched_step_fn on_step, void *arg, latent_err *err);
/* No more wake calls after this returns (the loop is closing its handle). */
void srv_sched_detach(srv_sched *s);
/* Stops the thread and finishes every session it still holds as cancelled. */
void srv_sched_free(srv_sched *s);

int srv_sched_pool_pages(const srv_sched *s);
/* Pages a group of n sequences of prompt n_prompt and up to max_tokens each
 * needs at most (the prompt's full pages shared). */
int srv_sched_group_pages(const srv_sched *s, int n_prompt, int max_tokens, int n);

/* Hands a group to the scheduler: `leader` and its followers. Takes one
 * reference on each. Returns -1 (nothing taken) when the sessions waiting and
 * running would exceed max_sessions + queue_len. */
int srv_sched_submit(srv_sched *s, srv_session *leader);
/* Asks the step thread to stop a session (it does within one step). */
void srv_sched_cancel(srv_sched *s, srv_session *sess);
/* The loop lets go of a session: cancels it if still running, drops the loop's reference. */
/* Stops (paused 1) or resumes (0) the session's decoding: the loop pauses
 * a stream whose client has not read what was already sent. */
void srv_sched_pause(srv_sched *s, srv_session *x, int paused);
void srv_sched_release(srv_sched *s, srv_session *sess);
/* Moves the sessions with news into *list (grown as needed); each carries a
 * reference the caller drops with srv_sched_unref. Returns the count. */
int srv_sched_take_ready(srv_sched *s, srv_session ***list, int *cap);
/* The events published since the last call, valid until the next call for
 * this session; *finish gets the finish state (NONE while running). */
const srv_event *srv_sched_take_events(srv_sched *s, srv_session *sess, int *n, srv_finish *finish);
void srv_sched_unref(srv_sched *s, srv_session *sess);
/* Queue wait of a session in seconds, or -1 while it still waits. */
double srv_sched_queue_wait(srv_sched *s, srv_session *sess);
void srv_sched_get_stats(srv_sched *s, srv_sched_stats *out);
/* Tests only: the k-th array growth of the scheduler from now on fails
 * (k < 0: none), so that every allocation failure can be proven to end its
 * sessions with an error and free everything. Returns the growths made
 * since the previous call. */
int srv_sched_fail_alloc(int k);
/* 1 when the step thread is idle or finished a round within max_stall
 * seconds (the watchdog's liveness check). */
int srv_sched_alive(srv_sched *s, double max_stall);

#endif
