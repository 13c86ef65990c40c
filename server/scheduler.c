/* The step thread: admission, batch building, the engine step, sampling,
 * publishing. See scheduler.h for the contract. */
#include "latent/clock.h"
#include "scheduler.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "latent/json_schema.h"
#include "latent/threads.h"
#include "log.h"
#include "prefix_cache.h"

typedef struct staged {
    srv_session *sess;
    srv_event ev;
} staged;

struct srv_sched {
    const latent_model *m;
    const latent_config *cfg;
    latent_engine *eng;
    latent_kv_pool pool;
    srv_prefix_cache cache;
    srv_sched_opts o;

    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Under mu. */
    int stop;
    int nudged;               /* the loop changed something the step thread must see: a cancel, a resumed session */
    srv_session *inbox_head, *inbox_tail;
    srv_session *ready_head;
    int held;                 /* sessions submitted and not yet let go by the step thread */
    int idle;                 /* the step thread waits for work */
    double beat;              /* when it last finished a round */
    srv_sched_stats stats;
    srv_sched_wake_fn wake;
    srv_sched_step_fn on_step;
    void *arg;

    /* Step thread only. */
    srv_session **wait;       /* FIFO of group leaders */
    int n_wait, cap_wait;
    srv_session **running;    /* admission order */
    int n_running, cap_running;
    latent_batch_entry *entries;
    int cap_entries;          /* entries: the step's batch; each entry's user is its session */
    float *logits;
    size_t cap_logits;
    srv_session **samp;
    int n_samp, cap_samp;
    void **scratch;
    int n_scratch;
    staged *stage;
    int n_stage, cap_stage;
    srv_session *done_head;   /* finished this round, to publish (linked through done_next: no allocation can lose one) */
    uint64_t admit_counter;
    long long prefill_tokens, reused_tokens, generated_tokens, failed_steps, preemptions;
    long long paused_preemptions; /* of which: paused by backpressure, to let others run */
};


/* Tests: the k-th growth from now on fails (srv_sched_fail_alloc). */
static atomic_int fail_countdown = -1, alloc_calls;

int srv_sched_fail_alloc(int k) {
    int calls = atomic_exchange(&alloc_calls, 0);
    atomic_store(&fail_countdown, k);
    return calls;
}

/* Grows an array to hold n items; -1 when out of memory. */
static int grow(void **arr, int *cap, int n, size_t item) {
    if (n <= *cap) return 0;
    int c = *cap ? *cap : 16;
    while (c < n) c *= 2;
    void *p = atomic_fetch_add(&alloc_calls, 1) == atomic_load(&fail_countdown) ? NULL : realloc(*arr, (size_t)c * item);
    if (!p) return -1;
    *arr = p, *cap = c;
    return 0;
}
#define GROW(arr, cap, n) grow((void **)&(arr), &(cap), (n), sizeof *(arr))

static int pages_for(const srv_sched *s, int n) { return latent_kv_pages_for(s->o.page_tokens, n); }
static int full_pages(const srv_sched *s, int n) { return latent_kv_full_pages(s->o.page_tokens, n); }

int srv_sched_pool_pages(const srv_sched *s) { return latent_kv_pool_pages(&s->pool); }

int srv_sched_group_pages(const srv_sched *s, int n_prompt, int max_tokens, int n) {
    int full = pages_for(s, n_prompt + max_tokens);
    return full + (n - 1) * (full - full_pages(s, n_prompt));
}

/* ---- lifecycle ------------------------------------------------------------ */

srv_sched *srv_sched_new(const latent_model *m, const srv_sched_opts *o, latent_err *err) {
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) {
        latent_err_set(err, LATENT_E_NOMEM, "scheduler: out of memory");
        return NULL;
    }
    s->m = m, s->cfg = &m->cfg, s->o = *o;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    latent_kv_dtype kvd;
    if (latent_kv_dtype_choose(o->kv_dtype ? o->kv_dtype : "auto", latent_engine_opts_precision(m, &o->engine), &kvd) != 0) {
        latent_err_set(err, LATENT_E_INVALID, "kv-dtype must be auto, f32 or bf16 (got '%s')", o->kv_dtype);
        goto fail;
    }
    if (latent_kv_pool_init(&s->pool, &m->cfg, o->page_tokens, o->pool_bytes, kvd, err) != 0) goto fail;
    if (!(s->eng = latent_engine_new_opts(m, &o->engine, err))) goto fail;
    /* The daemon uses the model only through this engine: one copy of the
     * weights (the packed one) is enough. */
    s->stats.released_weight_bytes = latent_engine_release_unpacked(s->eng);
    s->stats.weight_bytes = latent_engine_weight_bytes(s->eng);
    s->stats.precision = latent_engine_precision(s->eng);
    s->stats.kv_dtype = latent_kv_pool_dtype(&s->pool);
    if (srv_cache_init(&s->cache, o->cache_entries) != 0) {
        latent_err_set(err, LATENT_E_NOMEM, "scheduler: out of memory");
        goto fail;
    }
    s->n_scratch = latent_get_threads();
    s->scratch = calloc(s->n_scratch, sizeof *s->scratch);
    if (!s->scratch) goto oom;
    for (int i = 0; i < s->n_scratch; i++)
        if (!(s->scratch[i] = malloc(latent_sampler_scratch_size(m->cfg.vocab)))) goto oom;
    s->stats.pages_total = s->stats.pages_free = latent_kv_pool_pages(&s->pool);
    return s;
oom:
    latent_err_set(err, LATENT_E_NOMEM, "scheduler: out of memory");
fail:
    srv_sched_free(s);
    return NULL;
}

static void *step_main(void *arg);

int srv_sched_start(srv_sched *s, srv_sched_wake_fn wake, srv_sched_step_fn on_step, void *arg, latent_err *err) {
    s->wake = wake, s->on_step = on_step, s->arg = arg;
    s->beat = latent_now_seconds();
    if (pthread_create(&s->th, NULL, step_main, s) != 0) return latent_err_set(err, LATENT_E_IO, "scheduler: cannot start the step thread");
    s->started = 1;
    return 0;
}

void srv_sched_detach(srv_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->wake = NULL; /* publish calls wake under mu */
    pthread_mutex_unlock(&s->mu);
}

/* Drops one reference; the caller holds mu. Returns the session to free
 * (outside the lock) or NULL. */
static srv_session *unref_locked(srv_session *x) { return --x->refs == 0 ? x : NULL; }

void srv_sched_unref(srv_sched *s, srv_session *x) {
    pthread_mutex_lock(&s->mu);
    srv_session *f = unref_locked(x);
    pthread_mutex_unlock(&s->mu);
    srv_session_free(f);
}

/* ---- loop-side calls --------------------------------------------------------- */

int srv_sched_submit(srv_sched *s, srv_session *g) {
    int n = 1 + g->n_followers;
    pthread_mutex_lock(&s->mu);
    if (s->stop || s->held + n > s->o.max_sessions + s->o.queue_len) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    s->held += n;
    g->refs++;
    for (int i = 0; i < g->n_followers; i++) g->followers[i]->refs++;
    g->next = NULL;
    if (s->inbox_tail) s->inbox_tail->next = g;
    else s->inbox_head = g;
    s->inbox_tail = g;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void srv_sched_cancel(srv_sched *s, srv_session *x) {
    if (atomic_exchange(&x->cancel, 1)) return;
    pthread_mutex_lock(&s->mu);
    s->nudged = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_pause(srv_sched *s, srv_session *x, int paused) {
    if (atomic_exchange(&x->paused, paused) == paused || paused) return;
    pthread_mutex_lock(&s->mu); /* resumed: the step thread may be asleep with nothing to run */
    s->nudged = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_release(srv_sched *s, srv_session *x) {
    pthread_mutex_lock(&s->mu);
    int running = x->finish == SRV_FINISH_NONE && x->refs > 1;
    x->loop_released = 1;
    pthread_mutex_unlock(&s->mu);
    if (running) srv_sched_cancel(s, x);
    srv_sched_unref(s, x);
}

int srv_sched_take_ready(srv_sched *s, srv_session ***list, int *cap) {
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (srv_session *x = s->ready_head; x; x = x->ready_next) n++;
    if (GROW(*list, *cap, n) != 0) {
        pthread_mutex_unlock(&s->mu);
        return 0; /* stays queued; retried on the next wake */
    }
    n = 0;
    for (srv_session *x = s->ready_head; x; x = x->ready_next) {
        (*list)[n++] = x;
        x->on_ready = 0;
    }
    s->ready_head = NULL;
    pthread_mutex_unlock(&s->mu);
    return n;
}

const srv_event *srv_sched_take_events(srv_sched *s, srv_session *x, int *n, srv_finish *finish) {
    pthread_mutex_lock(&s->mu);
    int r = x->ev_w;
    *n = x->ev_n;
    *finish = x->finish;
    x->ev_w ^= 1;
    x->ev_n = 0;
    pthread_mutex_unlock(&s->mu);
    return x->ev_buf[r];
}

double srv_sched_queue_wait(srv_sched *s, srv_session *x) {
    pthread_mutex_lock(&s->mu);
    double t = x->t_admit > 0 ? x->t_admit - x->t_submit : -1;
    pthread_mutex_unlock(&s->mu);
    return t;
}

int srv_sched_alive(srv_sched *s, double max_stall) {
    pthread_mutex_lock(&s->mu);
    int ok = s->idle || latent_now_seconds() - s->beat < max_stall;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void srv_sched_get_stats(srv_sched *s, srv_sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    out->held = s->held;
    pthread_mutex_unlock(&s->mu);
}

/* ---- step thread: finishing and groups ---------------------------------------- */

static int cancelled(srv_session *x) { return atomic_load(&x->cancel); }

/* Under mu: a finished session lost an event: it ends with an error. */
static void lost_at_finish(srv_session *x) {
    if (x->done_reason == SRV_FINISH_CANCELLED) return;
    x->done_reason = SRV_FINISH_ERROR;
    snprintf(x->err, sizeof x->err, "out of memory delivering tokens");
}

/* Records that x stops here (published later); its sequence goes to the
 * prefix cache. */
static void finish(srv_sched *s, srv_session *x, srv_finish why) {
    if (x->state == SRV_ST_DONE) return;
    if (latent_seq_live(&x->seq)) srv_cache_insert(&s->cache, &x->seq); /* frees it when not worth keeping */
    latent_seq_free(&x->seq);
    x->state = SRV_ST_DONE;
    x->done_reason = why;
    x->done_next = s->done_head;
    s->done_head = x;
    if (x->lost) {
        pthread_mutex_lock(&s->mu);
        lost_at_finish(x);
        pthread_mutex_unlock(&s->mu);
    }
}

static void fail(srv_sched *s, srv_session *x, const char *msg) {
    pthread_mutex_lock(&s->mu);
    snprintf(x->err, sizeof x->err, "%.150s", msg);
    pthread_mutex_unlock(&s->mu);
    finish(s, x, SRV_FINISH_ERROR); /* a failed step left its sequence as it was: cacheable */
}

/* The leader x leaves before its followers forked: the first follower still
 * waiting takes over the group (and x's prompt state: same prompt). Returns
 * the new leader or NULL. */
static srv_session *promote(srv_session *x) {
    srv_session *nl = NULL;
    for (int i = 0; i < x->n_followers && !nl; i++) {
        srv_session *f = x->followers[i];
        if (f->leader == x && (f->state == SRV_ST_WAITING || f->state == SRV_ST_WAIT_FORK) && !cancelled(f)) nl = f;
    }
    if (!nl) return NULL;
    nl->leader = NULL;
    nl->followers = x->followers, nl->n_followers = x->n_followers;
    x->followers = NULL, x->n_followers = 0;
    for (int i = 0; i < nl->n_followers; i++)
        if (nl->followers[i] != nl) nl->followers[i]->leader = nl;
    if (x->state == SRV_ST_PREFILL) {
        latent_seq_free(&nl->seq);
        nl->seq = x->seq;
        memset(&x->seq, 0, sizeof x->seq);
        nl->reused = x->reused;
    }
    nl->state = x->state == SRV_ST_WAITING ? SRV_ST_WAITING : SRV_ST_PREFILL;
    return nl;
}

static int is_follower_of(srv_session *f, srv_session *l) { return f != l && f->leader == l; }

/* Acts on the loop's cancellations: waiting groups lose members (a cancelled
 * leader hands the group over), running sessions finish. */
static void handle_cancelled(srv_sched *s) {
    for (int i = 0; i < s->n_wait; i++) {
        srv_session *g = s->wait[i];
        for (int j = 0; j < g->n_followers; j++) {
            srv_session *f = g->followers[j];
            if (is_follower_of(f, g) && f->state == SRV_ST_WAITING && cancelled(f)) finish(s, f, SRV_FINISH_CANCELLED);
        }
        if (!cancelled(g)) continue;
        srv_session *nl = promote(g);
        finish(s, g, SRV_FINISH_CANCELLED);
        if (nl) {
            s->wait[i] = nl;
        } else {
            memmove(&s->wait[i], &s->wait[i + 1], (size_t)(s->n_wait - i - 1) * sizeof *s->wait);
            s->n_wait--, i--;
        }
    }
    for (int i = 0; i < s->n_running; i++) {
        srv_session *x = s->running[i];
        if (x->state == SRV_ST_DONE || !cancelled(x)) continue;
        if (x->state == SRV_ST_PREFILL) promote(x);
        finish(s, x, SRV_FINISH_CANCELLED);
    }
}

static void compact_running(srv_sched *s) {
    int k = 0;
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i]->state == SRV_ST_PREFILL || s->running[i]->state == SRV_ST_DECODE ||
            s->running[i]->state == SRV_ST_WAIT_FORK)
            s->running[k++] = s->running[i];
    s->n_running = k;
}

/* ---- step thread: admission --------------------------------------------------- */

/* Tokens of pages set aside beyond the prompt at admission, and added each
 * time a decoding sequence reaches the end of what it has. */
/* Pages a sequence reserves beyond what it holds, so that it takes pages
 * (and may meet a full pool) once per this many tokens, not every page. */
#define HORIZON_PAGES 8
/* Prompt tokens per step of a sequence that wants their logprobs (each row
 * of logits is a vocab-sized buffer). */
#define PROMPT_LOGPROB_CHUNK 16
static int horizon(const srv_sched *s) { return HORIZON_PAGES * s->o.page_tokens; }
static int final_len(const srv_session *x) { return x->n_prompt + x->max_tokens; }
static int min_i(int a, int b) { return a < b ? a : b; }

/* Pages x may still take from the pool within its reservation. */
static int future_pages(const srv_sched *s, const srv_session *x) {
    int all = pages_for(s, x->reserved);
    switch (x->state) {
    case SRV_ST_PREFILL:
    case SRV_ST_DECODE:
        return all > latent_seq_pages(&x->seq) ? all - latent_seq_pages(&x->seq) : 0;
    case SRV_ST_WAIT_FORK:
        return all - full_pages(s, x->n_prompt);
    default:
        return 0;
    }
}

static int committed_pages(const srv_sched *s) {
    int c = 0;
    for (int i = 0; i < s->n_running; i++) c += future_pages(s, s->running[i]);
    return c;
}

static int group_size(srv_session *g) {
    int n = 1;
    for (int i = 0; i < g->n_followers; i++)
        if (is_follower_of(g->followers[i], g) && g->followers[i]->state == SRV_ST_WAITING) n++;
    return n;
}

/* The length a fork from a cached sequence of `avail` tokens can keep of a
 * `match`-token common prefix: recurrent state is known only at page
 * boundaries and at the sequence's end. */
static int keepable(const srv_sched *s, int match, int avail) {
    if (s->cfg->rec == LATENT_REC_NONE || match == avail) return match;
    return full_pages(s, match) * s->o.page_tokens;
}

/* Tokens a (replayed) session must hold before it decodes: its prompt, or
 * after a preemption its prompt and all generated tokens but the pending one. */
static int prefill_target(const srv_session *x) { return x->replay ? x->n_prompt + x->n_gen - 1 : x->n_prompt; }

static int start_session(srv_sched *s, srv_session *x, srv_session *leader, double now) {
    if (!x->replay) {
        x->hist = malloc(((size_t)x->n_prompt + x->max_tokens + 1) * sizeof *x->hist);
        if (!x->hist) return -1;
        memcpy(x->hist, x->prompt, (size_t)x->n_prompt * sizeof *x->hist);
        latent_rng_seed(&x->rng, x->seed);
        pthread_mutex_lock(&s->mu);
        x->t_admit = now;
        pthread_mutex_unlock(&s->mu);
    }
    x->reserved = min_i(final_len(x), prefill_target(x) + horizon(s));
    x->admit_order = ++s->admit_counter;
    x->state = leader ? SRV_ST_WAIT_FORK : SRV_ST_PREFILL;
    if (!leader && latent_seq_init(&x->seq, &s->pool, s->cfg, NULL) != 0) return -1;
    s->running[s->n_running++] = x;
    return 0;
}

static void preempt(srv_sched *s, srv_session *x);

/* The first waiting group whose client reads (a paused group waits until
 * its client drains: it would only hold a slot), or -1. */
static int first_unpaused(const srv_sched *s) {
    for (int i = 0; i < s->n_wait; i++)
        if (!atomic_load(&s->wait[i]->paused)) return i;
    return -1;
}

/* A session paused by backpressure holds a slot and pages that others
 * need: the youngest one goes back to the queue (its sequence to the prefix
 * cache), where it waits until its client reads again. 0 when none is paused. */
static int preempt_paused(srv_sched *s) {
    srv_session *v = NULL;
    for (int i = 0; i < s->n_running; i++) {
        srv_session *y = s->running[i];
        if (y->state == SRV_ST_DECODE && atomic_load(&y->paused) && (!v || y->admit_order > v->admit_order)) v = y;
    }
    if (!v) return 0;
    preempt(s, v);
    compact_running(s);
    s->paused_preemptions++;
    return 1;
}

/* Admits waiting groups in FIFO order (skipping paused ones) while slots and
 * pages allow; paused sessions make room for them. */
static void admit(srv_sched *s) {
    uint8_t flow = (uint8_t)latent_engine_flow(s->cfg, 1);
    while (s->n_wait > 0) {
        int w = first_unpaused(s);
        if (w < 0) return;
        srv_session *g = s->wait[w];
        int n = group_size(g);
        if (s->n_running > 0 && s->n_running + n > s->o.max_sessions) {
            if (preempt_paused(s)) continue;
            return;
        }
        int entry = -1, keep = 0, need;
        /* A fresh prompt keeps its last token to prefill (its logits are needed);
         * a replay needs no logits: the token it decodes next is known. */
        const int32_t *ids = g->replay ? g->hist : g->prompt;
        int target = prefill_target(g), cap = g->replay ? target : target - 1;
        int all = pages_for(s, min_i(final_len(g), target + horizon(s)));
        for (;;) {
            entry = -1, keep = 0;
            if (g->use_cache || g->replay) {
                int match = srv_cache_match(&s->cache, ids, cap, g->n_prompt, flow, &entry);
                if (entry >= 0) keep = keepable(s, match, latent_seq_pos(&s->cache.entries[entry].seq));
                if (keep == 0) entry = -1;
            }
            need = all - full_pages(s, keep) + (n - 1) * (all - full_pages(s, g->n_prompt));
            if (need <= latent_kv_pool_free_pages(&s->pool) - committed_pages(s)) break;
            if (!srv_cache_evict_lru(&s->cache)) {
                if (preempt_paused(s)) goto again; /* the queue moved: look again */
                if (s->n_running > 0) return; /* wait for pages */
                /* Nothing runs and nothing is cached: it can never fit. The loop
                 * checks this at submission; this is the backstop. */
                memmove(&s->wait[w], &s->wait[w + 1], (size_t)(s->n_wait - w - 1) * sizeof *s->wait);
                s->n_wait--;
                fail(s, g, "the request needs more KV pages than the pool has");
                for (int i = 0; i < g->n_followers; i++)
                    if (is_follower_of(g->followers[i], g)) fail(s, g->followers[i], "the request needs more KV pages than the pool has");
                goto next;
            }
        }
        int no_room = GROW(s->running, s->cap_running, s->n_running + n) != 0;
        memmove(&s->wait[w], &s->wait[w + 1], (size_t)(s->n_wait - w - 1) * sizeof *s->wait);
        s->n_wait--;
        if (no_room) { /* nothing would wake this thread to retry: the group ends with an error */
            fail(s, g, "out of memory admitting the request");
            for (int i = 0; i < g->n_followers; i++)
                if (is_follower_of(g->followers[i], g)) fail(s, g->followers[i], "out of memory admitting the request");
            continue;
        }
        double now = latent_now_seconds();
        if (start_session(s, g, NULL, now) != 0) {
            fail(s, g, "out of memory");
        } else if (entry >= 0) {
            latent_err err;
            int got = latent_seq_fork(&g->seq, &s->cache.entries[entry].seq, keep, &err);
            if (got < 0) { /* no page for the partial copy: prefill it all instead */
                if (err.code != LATENT_E_KV_FULL) srv_log(SRV_LOG_WARN, "prefix reuse failed: %s", err.msg);
                latent_seq_free(&g->seq);
                latent_seq_init(&g->seq, &s->pool, s->cfg, NULL);
            } else {
                g->reused = got;
                s->reused_tokens += got;
                srv_cache_touch(&s->cache, entry);
            }
        }
        if (g->replay && g->state == SRV_ST_PREFILL && latent_seq_pos(&g->seq) == target) { /* all of it was cached */
            g->replay = 0;
            g->pending = g->hist[g->n_prompt + g->n_gen - 1];
            g->state = SRV_ST_DECODE;
        }
        for (int i = 0; i < g->n_followers; i++) {
            srv_session *f = g->followers[i];
            if (!is_follower_of(f, g) || f->state != SRV_ST_WAITING) continue;
            if (start_session(s, f, g, now) != 0) fail(s, f, "out of memory");
        }
    next:;
    again:;
    }
}

/* ---- step thread: reservations and preemption ---------------------------------- */

/* x goes back to the front of the queue; its sequence goes to the prefix
 * cache, so its re-admission usually re-prefills little or nothing. */
static void preempt(srv_sched *s, srv_session *x) {
    if (GROW(s->wait, s->cap_wait, s->n_wait + 1) != 0) {
        fail(s, x, "out of memory");
        return;
    }
    srv_cache_insert(&s->cache, &x->seq);
    latent_seq_free(&x->seq);
    x->state = SRV_ST_WAITING;
    x->replay = 1;
    x->leader = NULL; /* on its own from now on */
    memmove(&s->wait[1], &s->wait[0], (size_t)s->n_wait * sizeof *s->wait);
    s->wait[0] = x;
    s->n_wait++;
    s->preemptions++;
}

/* A decoding sequence at the end of its pages gets another horizon of them;
 * when the pool cannot cover it, cached prefixes are evicted, then the
 * youngest decoding sequences are preempted (oldest first keep running, so
 * the oldest always progresses). */
static void grow_reservations(srv_sched *s) {
    for (int i = 0; i < s->n_running; i++) {
        srv_session *x = s->running[i];
        if (x->state != SRV_ST_DECODE || latent_seq_pos(&x->seq) + 1 <= x->reserved) continue;
        int want = min_i(final_len(x), x->reserved + horizon(s));
        int extra = pages_for(s, want) - pages_for(s, x->reserved);
        while (x->state == SRV_ST_DECODE && extra > latent_kv_pool_free_pages(&s->pool) - committed_pages(s)) {
            if (srv_cache_evict_lru(&s->cache)) continue;
            srv_session *v = NULL;
            for (int j = 0; j < s->n_running; j++) {
                srv_session *y = s->running[j];
                if (y->state == SRV_ST_DECODE && (!v || y->admit_order > v->admit_order)) v = y;
            }
            preempt(s, v); /* v may be x itself */
        }
        if (x->state == SRV_ST_DECODE) x->reserved = want;
    }
}

/* ---- step thread: one step ------------------------------------------------------ */

/* An event that cannot be kept fails its session (fail_lost), so that the
 * client gets an error instead of a stream with a hole in it. */
static void stage_event(srv_sched *s, srv_session *x, const srv_event *ev) {
    if (GROW(s->stage, s->cap_stage, s->n_stage + 1) != 0) {
        x->lost = 1;
        return;
    }
    s->stage[s->n_stage].sess = x;
    s->stage[s->n_stage].ev = *ev;
    s->n_stage++;
}

typedef struct {
    srv_sched *s;
    int per;
} samp_job;

static void sample_one(srv_sched *s, srv_session *x, void *scratch) {
    latent_sampler_params sp = x->sp;
    sp.n_top_logprobs = x->logprobs > 0 ? x->logprobs - 1 : 0;
    /* OpenAI counts presence/frequency over generated tokens; a repetition
     * penalty (vLLM, llama.cpp) looks at the prompt as well. */
    const int32_t *h = x->hist + x->n_prompt;
    int nh = x->n_gen;
    if (sp.repetition_penalty != 1.0f) h = x->hist, nh = x->n_prompt + x->n_gen;
    if (x->json) latent_json_guard_mask(x->json, x->logits, s->cfg->vocab); /* response_format: only tokens that continue the document */
    latent_sampler_sample_scratch(&sp, &x->rng, x->logits, s->cfg->vocab, h, nh, &x->sample, scratch);
}

static void samp_task(void *ctx, int task) {
    samp_job *j = ctx;
    int lo = task * j->per, hi = lo + j->per > j->s->n_samp ? j->s->n_samp : lo + j->per;
    for (int i = lo; i < hi; i++) sample_one(j->s, j->s->samp[i], j->s->scratch[task]);
}

static int is_stop_id(const srv_session *x, int32_t t) {
    for (int i = 0; i < x->n_stop_ids; i++)
        if (x->stop_ids[i] == t) return 1;
    return 0;
}

/* After a sample: the event, then finish or queue the token for the next step. */
static void take_token(srv_sched *s, srv_session *x, double now) {
    const latent_sample *smp = &x->sample;
    int32_t t = smp->token;
    if (t < 0) {
        fail(s, x, "sampling failed");
        return;
    }
    x->hist[x->n_prompt + x->n_gen++] = t;
    s->generated_tokens++;
    int stop = !x->ignore_eos && is_stop_id(x, t);
    /* response_format: the document is complete (its last token has text; the mask rules out anything else) */
    int json_done = x->json && !stop && latent_json_guard_accept(x->json, t) != LATENT_JSON_MORE;
    srv_event ev = {.token = t, .kind = stop ? SRV_EV_EOS : SRV_EV_TOKEN, .n_top = -1, .t = now};
    if (x->logprobs) {
        ev.logprob = smp->logprob;
        ev.n_top = (int8_t)smp->n_top;
        memcpy(ev.top_ids, smp->top_ids, smp->n_top * sizeof *ev.top_ids);
        memcpy(ev.top_lps, smp->top_logprobs, smp->n_top * sizeof *ev.top_lps);
    }
    stage_event(s, x, &ev);
    if (stop || json_done) finish(s, x, SRV_FINISH_STOP);
    else if (x->n_gen >= x->max_tokens) finish(s, x, SRV_FINISH_LENGTH);
    else x->pending = t, x->state = SRV_ST_DECODE;
}

/* Echo with logprobs: row i of a prefill chunk starting at p0 predicts
 * prompt token p0 + i + 1. */
static void prompt_logprobs(srv_sched *s, srv_session *x, int p0, int n, const float *rows) {
    int V = s->cfg->vocab, k = x->logprobs > 0 ? x->logprobs - 1 : 0;
    if (p0 == 0) {
        srv_event ev = {.token = x->prompt[0], .kind = SRV_EV_PROMPT, .n_top = -1};
        stage_event(s, x, &ev);
    }
    latent_sampler_params sp;
    latent_sampler_defaults(&sp);
    sp.temperature = 0, sp.n_top_logprobs = k;
    float *row = s->logits + s->cap_logits - V; /* the buffer's spare last row */
    for (int i = 0; i < n && p0 + i + 1 < x->n_prompt; i++) {
        memcpy(row, rows + (size_t)i * V, V * sizeof(float));
        latent_sample smp;
        int32_t best = latent_sampler_sample_scratch(&sp, NULL, row, V, NULL, 0, &smp, s->scratch[0]);
        int32_t t = x->prompt[p0 + i + 1];
        srv_event ev = {.token = t, .kind = SRV_EV_PROMPT, .n_top = (int8_t)smp.n_top};
        ev.logprob = best >= 0 ? smp.logprob + row[t] - row[best] : 0;
        memcpy(ev.top_ids, smp.top_ids, smp.n_top * sizeof *ev.top_ids);
        memcpy(ev.top_lps, smp.top_logprobs, smp.n_top * sizeof *ev.top_lps);
        stage_event(s, x, &ev);
    }
}

static srv_session *entry_session(const latent_batch_entry *e) { return e->user; }

/* Fails every session of the step's n entries. */
static void fail_batch(srv_sched *s, int n, const char *msg) {
    for (int i = 0; i < n; i++) fail(s, entry_session(&s->entries[i]), msg);
}

/* The step's batch: every decoding session's next token first (running
 * sessions are never starved by prefill), then prompt chunks, oldest first,
 * under the step's token budget. Returns the entries; *rows and *logit_rows
 * get the token rows and the rows of logits they ask for. */
static int build_batch(srv_sched *s, int *rows_out, size_t *logit_rows_out) {
    int n = 0, rows = 0, n_decode = 0;
    size_t logit_rows = 1; /* one spare row for prompt logprobs */
    for (int i = 0; i < s->n_running; i++) {
        srv_session *x = s->running[i];
        if (x->state != SRV_ST_DECODE || atomic_load(&x->paused)) continue; /* paused: its client is not reading */
        x->step_prefill = 0;
        s->entries[n++] = (latent_batch_entry){.seq = &x->seq, .tokens = &x->pending, .n_tokens = 1, .prompt = 0,
                                               .logits = LATENT_LOGITS_LAST, .user = x};
        rows++, n_decode++, logit_rows++;
    }
    for (int i = 0; i < s->n_running && rows < s->o.step_tokens; i++) {
        srv_session *x = s->running[i];
        if (x->state != SRV_ST_PREFILL) continue;
        int pos = latent_seq_pos(&x->seq), left = prefill_target(x) - pos, chunk = s->o.step_tokens - rows;
        if (chunk > left) chunk = left;
        if (pos < x->n_prompt && chunk > x->n_prompt - pos) chunk = x->n_prompt - pos; /* one control flow per entry */
        if (n_decode > 0 && chunk > s->o.prefill_chunk) chunk = s->o.prefill_chunk;
        int plp = x->prompt_logprobs && !x->replay;
        if (plp && chunk > PROMPT_LOGPROB_CHUNK) chunk = PROMPT_LOGPROB_CHUNK;
        latent_logits_mode mode = x->replay ? LATENT_LOGITS_NONE : plp ? LATENT_LOGITS_ALL
                                : chunk == left ? LATENT_LOGITS_LAST : LATENT_LOGITS_NONE;
        x->step_prefill = 1;
        s->entries[n++] = (latent_batch_entry){.seq = &x->seq, .tokens = x->hist + pos, .n_tokens = chunk,
                                               .prompt = pos < x->n_prompt, .logits = mode, .user = x};
        rows += chunk;
        logit_rows += mode == LATENT_LOGITS_ALL ? (size_t)chunk : mode == LATENT_LOGITS_LAST ? 1 : 0;
        /* followers of a leader whose prompt completes get a copy of its row */
        if (chunk == left && !x->replay)
            for (int j = 0; j < x->n_followers; j++) logit_rows += is_follower_of(x->followers[j], x);
    }
    *rows_out = rows, *logit_rows_out = logit_rows;
    return n;
}

/* Points each entry that asks for logits at its rows of s->logits (grown to
 * logit_rows); returns the first row left over (for followers), or -1. */
static long place_logits(srv_sched *s, int n, size_t logit_rows) {
    const int V = s->cfg->vocab;
    if (logit_rows * V > s->cap_logits) {
        float *p = realloc(s->logits, logit_rows * V * sizeof(float));
        if (!p) return -1;
        s->logits = p, s->cap_logits = logit_rows * V;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        latent_batch_entry *e = &s->entries[i];
        if (e->logits == LATENT_LOGITS_NONE) continue;
        e->out = s->logits + off * V;
        off += e->logits == LATENT_LOGITS_ALL ? (size_t)e->n_tokens : 1;
    }
    return (long)off;
}

/* A prefill entry after the step: replay done, prompt logprobs, or the
 * prompt complete (sample; followers fork its state and get its row). */
static void after_prefill(srv_sched *s, srv_session *x, const latent_batch_entry *e, int p0, size_t *off) {
    const int V = s->cfg->vocab;
    s->prefill_tokens += e->n_tokens;
    if (x->replay) {
        if (latent_seq_pos(&x->seq) == prefill_target(x)) {
            x->replay = 0;
            x->pending = x->hist[x->n_prompt + x->n_gen - 1];
            x->state = SRV_ST_DECODE;
        }
        return;
    }
    if (x->prompt_logprobs) prompt_logprobs(s, x, p0, e->n_tokens, e->out);
    if (latent_seq_pos(&x->seq) < x->n_prompt) return;
    if (x->max_tokens == 0) {
        finish(s, x, SRV_FINISH_LENGTH);
        return;
    }
    x->logits = e->logits == LATENT_LOGITS_ALL ? e->out + (size_t)(e->n_tokens - 1) * V : e->out;
    s->samp[s->n_samp++] = x;
    latent_err err;
    for (int j = 0; j < x->n_followers; j++) {
        srv_session *f = x->followers[j];
        if (!is_follower_of(f, x) || f->state != SRV_ST_WAIT_FORK) continue;
        if (latent_seq_init(&f->seq, &s->pool, s->cfg, &err) != 0 ||
            latent_seq_fork(&f->seq, &x->seq, x->n_prompt, &err) != x->n_prompt) {
            fail(s, f, "cannot fork the prompt state");
            continue;
        }
        f->state = SRV_ST_PREFILL;
        f->logits = s->logits + (*off)++ * V;
        memcpy(f->logits, x->logits, V * sizeof(float));
        s->samp[s->n_samp++] = f;
    }
}

/* Samples every session that got logits, across the engine's threads, and
 * publishes the tokens. */
static void sample_and_publish(srv_sched *s) {
    if (s->n_samp > 0) {
        int tasks = s->n_scratch < s->n_samp ? s->n_scratch : s->n_samp;
        samp_job j = {s, (s->n_samp + tasks - 1) / tasks};
        latent_parallel_for(samp_task, &j, tasks);
    }
    double now = latent_now_seconds();
    for (int i = 0; i < s->n_samp; i++) take_token(s, s->samp[i], now);
}

/* One engine step over the batch; returns the entries it ran (0: nothing to
 * do, every running session paused or waiting). */
static int run_step(srv_sched *s) {
    if (GROW(s->entries, s->cap_entries, s->n_running) != 0 || GROW(s->samp, s->cap_samp, s->n_running) != 0) {
        for (int i = 0; i < s->n_running; i++) fail(s, s->running[i], "out of memory building the step");
        return s->n_running;
    }
    int rows;
    size_t logit_rows;
    int n = build_batch(s, &rows, &logit_rows);
    if (n == 0) return 0;
    long off = place_logits(s, n, logit_rows);
    if (off < 0) {
        fail_batch(s, n, "out of memory for logits");
        return n;
    }
    int p0[n];
    for (int i = 0; i < n; i++) p0[i] = latent_seq_pos(s->entries[i].seq);

    latent_err err;
    double t0 = latent_now_seconds();
    int rc = latent_engine_step(s->eng, s->entries, n, &err);
    if (s->on_step) s->on_step(s->arg, latent_now_seconds() - t0, rows);
    if (rc != 0) { /* the engine changed nothing: the sessions end with its error */
        s->failed_steps++;
        srv_log(SRV_LOG_ERROR, "engine step of %d rows failed (%s): %s", rows, latent_err_name(err.code), err.msg);
        fail_batch(s, n, err.msg);
        return n;
    }
    s->n_samp = 0;
    size_t next = (size_t)off;
    for (int i = 0; i < n; i++) {
        srv_session *x = entry_session(&s->entries[i]);
        if (x->step_prefill) after_prefill(s, x, &s->entries[i], p0[i], &next);
        else x->logits = s->entries[i].out, s->samp[s->n_samp++] = x;
    }
    sample_and_publish(s);
    return n;
}

/* ---- step thread: publishing ------------------------------------------------------ */

static void push_ready(srv_sched *s, srv_session *x) {
    if (x->on_ready || x->loop_released) return;
    x->on_ready = 1;
    x->refs++;
    x->ready_next = s->ready_head;
    s->ready_head = x;
}

/* Under mu: drops one reference; a session left without any goes to
 * *to_free, freed once the lock is let go. */
static void unref_deferred(srv_session *x, srv_session ***to_free, int *n_free, int *cap_free) {
    srv_session *f = unref_locked(x);
    if (f && GROW(*to_free, *cap_free, *n_free + 1) == 0) (*to_free)[(*n_free)++] = f;
    else if (f) srv_session_free(f); /* no room to defer it: freed under the lock */
}

/* Under mu: events into outboxes, finishes, stats. Returns sessions to free
 * (dropped refs) through *to_free, and whether the loop needs waking. */
static int publish(srv_sched *s, srv_session ***to_free, int *n_free, int *cap_free) {
    int woke = 0;
    for (int i = 0; i < s->n_stage; i++) {
        srv_session *x = s->stage[i].sess;
        int w = x->ev_w;
        if (x->ev_n >= x->ev_cap[w] && grow((void **)&x->ev_buf[w], &x->ev_cap[w], x->ev_n + 1, sizeof(srv_event)) != 0) {
            if (x->state != SRV_ST_DONE) x->lost = 1, s->nudged = 1; /* failed next round */
            else lost_at_finish(x);                                 /* published below as an error */
            continue;
        }
        x->ev_buf[w][x->ev_n++] = s->stage[i].ev;
        push_ready(s, x);
        woke = 1;
    }
    s->n_stage = 0;
    for (srv_session *x = s->done_head, *nx; x; x = nx) {
        nx = x->done_next;
        x->finish = x->done_reason;
        push_ready(s, x);
        woke = 1;
        s->held--;
        unref_deferred(x, to_free, n_free, cap_free);
    }
    s->done_head = NULL;
    srv_sched_stats *st = &s->stats;
    st->waiting = 0;
    for (int i = 0; i < s->n_wait; i++) st->waiting += group_size(s->wait[i]);
    st->running = s->n_running;
    st->pages_total = latent_kv_pool_pages(&s->pool);
    st->pages_free = latent_kv_pool_free_pages(&s->pool);
    st->pages_cached = srv_cache_pages(&s->cache);
    st->cache_entries = s->cache.n;
    st->prefill_tokens = s->prefill_tokens;
    st->reused_tokens = s->reused_tokens;
    st->generated_tokens = s->generated_tokens;
    st->failed_steps = s->failed_steps;
    st->preemptions = s->preemptions;
    st->paused_preemptions = s->paused_preemptions;
    st->engine = *latent_engine_get_stats(s->eng);
    return woke;
}

/* Sessions that lost an event to a failed allocation end with an error. */
static void fail_lost(srv_sched *s) {
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i]->lost && s->running[i]->state != SRV_ST_DONE) fail(s, s->running[i], "out of memory delivering tokens");
}

static void *step_main(void *arg) {
    srv_sched *s = arg;
    srv_session **to_free = NULL;
    int n_free = 0, cap_free = 0;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        /* Take new groups into the FIFO. */
        for (srv_session *g = s->inbox_head, *nx; g; g = nx) {
            nx = g->next;
            if (GROW(s->wait, s->cap_wait, s->n_wait + 1) != 0) break; /* retried next round */
            s->wait[s->n_wait++] = g;
            s->inbox_head = nx;
        }
        if (!s->inbox_head) s->inbox_tail = NULL;
        s->nudged = 0;
        pthread_mutex_unlock(&s->mu);

        handle_cancelled(s);
        admit(s);
        grow_reservations(s);
        compact_running(s);
        int worked = s->n_running > 0 && run_step(s) > 0;
        fail_lost(s);
        compact_running(s);

        pthread_mutex_lock(&s->mu);
        n_free = 0;
        int woke = publish(s, &to_free, &n_free, &cap_free);
        if (woke && s->wake) s->wake(s->arg);
        if (n_free) {
            pthread_mutex_unlock(&s->mu);
            for (int i = 0; i < n_free; i++) srv_session_free(to_free[i]);
            pthread_mutex_lock(&s->mu);
        }
        s->beat = latent_now_seconds();
        if (!worked && !s->inbox_head && !s->nudged && !s->stop) {
            s->idle = 1;
            pthread_cond_wait(&s->cv, &s->mu);
            s->idle = 0;
            s->beat = latent_now_seconds();
        }
    }
    pthread_mutex_unlock(&s->mu);
    free(to_free);
    return NULL;
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    /* Everything still held ends as cancelled (the thread is gone: this thread may touch it all). */
    for (srv_session *g = s->inbox_head, *nx; g; g = nx) {
        nx = g->next;
        if (GROW(s->wait, s->cap_wait, s->n_wait + 1) == 0) s->wait[s->n_wait++] = g;
    }
    s->inbox_head = s->inbox_tail = NULL;
    for (int i = 0; i < s->n_wait; i++) {
        srv_session *g = s->wait[i];
        for (int j = 0; j < g->n_followers; j++)
            if (is_follower_of(g->followers[j], g)) finish(s, g->followers[j], SRV_FINISH_CANCELLED);
        finish(s, g, SRV_FINISH_CANCELLED);
    }
    s->n_wait = 0;
    for (int i = 0; i < s->n_running; i++) finish(s, s->running[i], SRV_FINISH_CANCELLED);
    s->n_running = 0;
    srv_session **to_free = NULL;
    int n_free = 0, cap_free = 0;
    pthread_mutex_lock(&s->mu);
    publish(s, &to_free, &n_free, &cap_free);
    /* The ready list dies with the scheduler, so its references go too: a
     * session the loop released after its last take (its finish seen in the
     * events while the step thread pushed it again) is freed here, and one the
     * loop still holds keeps the loop's own reference. */
    for (srv_session *x = s->ready_head, *nx; x; x = nx) {
        nx = x->ready_next;
        x->on_ready = 0;
        unref_deferred(x, &to_free, &n_free, &cap_free);
    }
    s->ready_head = NULL;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n_free; i++) srv_session_free(to_free[i]);
    free(to_free);
    srv_cache_free(&s->cache);
    latent_engine_free(s->eng);
    latent_kv_pool_free(&s->pool);
    for (int i = 0; s->scratch && i < s->n_scratch; i++) free(s->scratch[i]);
    free(s->scratch);
    free(s->wait), free(s->running), free(s->entries), free(s->logits);
    free(s->samp), free(s->stage);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
