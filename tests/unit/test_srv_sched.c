/* The daemon's scheduler (server/scheduler.c) on a tiny in-memory model,
 * driven as the loop drives it: admission in FIFO order under max-sessions
 * and queue-len, a paused (non-reading) session giving its slot to a waiting
 * one, preemption under KV-pool pressure, cancellation, and the tokens a
 * session gets being the same alone, after a preemption and after a pause. */
#include "../../server/scheduler.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "tiny_model.h"

enum { MAX_GEN = 256 };

typedef struct {
    srv_session *sess;
    int32_t tokens[MAX_GEN];
    int n;
    srv_finish finish;
} run;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int wakes;

static void on_wake(void *arg) {
    pthread_mutex_lock(&mu);
    wakes++;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
}

static srv_session *make(int n_prompt, int max_tokens, int first_token) {
    srv_session *s = srv_session_new();
    s->prompt = malloc((size_t)n_prompt * sizeof *s->prompt);
    for (int i = 0; i < n_prompt; i++) s->prompt[i] = 3 + (first_token + 7 * i) % 50;
    s->n_prompt = n_prompt, s->max_tokens = max_tokens;
    latent_sampler_defaults(&s->sp);
    s->sp.temperature = 0;
    s->ignore_eos = 1, s->use_cache = 1;
    return s;
}

/* The loop's part: takes what the step thread published into the runs. */
static void take(srv_sched *s, run *runs, int n_runs) {
    static srv_session **list;
    static int cap;
    int n = srv_sched_take_ready(s, &list, &cap);
    for (int i = 0; i < n; i++) {
        for (int r = 0; r < n_runs; r++) {
            if (runs[r].sess != list[i]) continue;
            int ne;
            srv_finish f;
            const srv_event *ev = srv_sched_take_events(s, list[i], &ne, &f);
            for (int k = 0; k < ne && runs[r].n < MAX_GEN; k++) runs[r].tokens[runs[r].n++] = ev[k].token;
            if (f != SRV_FINISH_NONE) runs[r].finish = f;
        }
        srv_sched_unref(s, list[i]);
    }
}

/* Waits until runs[r] has at least `tokens` tokens or finished (tokens < 0:
 * finished), at most 20 s. */
static int wait_for(srv_sched *s, run *runs, int n_runs, int r, int tokens) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        take(s, runs, n_runs);
        if (runs[r].finish != SRV_FINISH_NONE || (tokens >= 0 && runs[r].n >= tokens)) return 1;
        struct timespec now, until;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 20) return 0;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 5 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        pthread_mutex_lock(&mu);
        if (!wakes) pthread_cond_timedwait(&cv, &mu, &until);
        wakes = 0;
        pthread_mutex_unlock(&mu);
    }
}

/* Pauses a session from the step thread once it has decoded a few tokens:
 * its client stops reading while it runs, at a point the test controls. */
static srv_sched *pause_sched;
static srv_session *pause_target;
static void on_step(void *arg, double seconds, int rows) {
    if (pause_target && pause_target->n_gen >= 3) srv_sched_pause(pause_sched, pause_target, 1), pause_target = NULL;
}

/* A scheduler whose thread has not started: submissions wait in its inbox. */
static srv_sched *created(const latent_model *m, int max_sessions, int queue_len, size_t pool_bytes) {
    srv_sched_opts o = {.pool_bytes = pool_bytes, .page_tokens = 16, .max_sessions = max_sessions, .queue_len = queue_len,
                        .step_tokens = 64, .prefill_chunk = 16, .cache_entries = 8, .kv_dtype = "auto"};
    latent_err err;
    srv_sched *s = srv_sched_new(m, &o, &err);
    if (!s) {
        fprintf(stderr, "scheduler: %s\n", err.msg);
        exit(1);
    }
    return s;
}

static void go(srv_sched *s) {
    latent_err err;
    if (srv_sched_start(s, on_wake, on_step, NULL, &err) != 0) {
        fprintf(stderr, "scheduler: %s\n", err.msg);
        exit(1);
    }
}

static srv_sched *start(const latent_model *m, int max_sessions, int queue_len, size_t pool_bytes) {
    srv_sched *s = created(m, max_sessions, queue_len, pool_bytes);
    go(s);
    return s;
}

static void release_all(srv_sched *s, run *runs, int n) {
    for (int i = 0; i < n; i++) srv_sched_release(s, runs[i].sess);
}

/* Tokens of one session run alone: the reference the others are held to. */
static void alone(const latent_model *m, int n_prompt, int max_tokens, int first, run *out) {
    srv_sched *s = start(m, 4, 4, 4 << 20);
    memset(out, 0, sizeof *out);
    out->sess = make(n_prompt, max_tokens, first);
    srv_sched_submit(s, out->sess);
    wait_for(s, out, 1, 0, -1);
    release_all(s, out, 1);
    srv_sched_free(s);
}

static int same_tokens(const run *a, const run *b) { return a->n == b->n && !memcmp(a->tokens, b->tokens, a->n * sizeof a->tokens[0]); }

static void test_fifo_and_queue(const latent_model *m) {
    /* started after the submissions: a session that finished at once would
     * make room for the fifth (seen under UBSan on a loaded machine) */
    srv_sched *s = created(m, 2, 2, 4 << 20);
    run r[5] = {{0}};
    for (int i = 0; i < 4; i++) {
        r[i].sess = make(8, 20, i);
        CHECK(srv_sched_submit(s, r[i].sess) == 0, "session %d fits max-sessions + queue-len", i);
    }
    r[4].sess = make(8, 20, 4);
    CHECK(srv_sched_submit(s, r[4].sess) != 0, "a fifth does not: the loop answers 429");
    go(s);
    for (int i = 0; i < 4; i++) {
        CHECK(wait_for(s, r, 4, i, -1), "session %d finishes", i);
        CHECK(r[i].finish == SRV_FINISH_LENGTH && r[i].n == 20, "session %d: finish %d, %d tokens", i, r[i].finish, r[i].n);
    }
    CHECK(r[2].sess->t_admit <= r[3].sess->t_admit, "queued sessions are admitted in order");
    CHECK(srv_sched_queue_wait(s, r[3].sess) >= 0, "a queue wait once admitted");
    srv_session_free(r[4].sess);
    release_all(s, r, 4);
    srv_sched_free(s);
}

static void test_pause_gives_slot(const latent_model *m) {
    run ref;
    alone(m, 8, 120, 1, &ref);
    srv_sched *s = start(m, 1, 4, 4 << 20);
    run r[2] = {{0}};
    r[0].sess = make(8, 120, 1);
    pause_sched = s, pause_target = r[0].sess; /* paused after 3 tokens, by the step thread */
    srv_sched_submit(s, r[0].sess);
    CHECK(wait_for(s, r, 2, 0, 3), "the first session decodes");
    r[1].sess = make(8, 10, 2);
    srv_sched_submit(s, r[1].sess);
    CHECK(wait_for(s, r, 2, 1, -1) && r[1].n == 10, "with the only slot paused, a waiting session still runs (%d tokens)", r[1].n);
    CHECK(r[0].finish == SRV_FINISH_NONE && r[0].n <= 4, "the paused one did not decode meanwhile (%d tokens)", r[0].n);
    srv_sched_stats st;
    srv_sched_get_stats(s, &st);
    CHECK(st.paused_preemptions >= 1, "counted as a paused preemption: %lld", st.paused_preemptions);
    srv_sched_pause(s, r[0].sess, 0); /* its client reads again */
    CHECK(wait_for(s, r, 2, 0, -1) && r[0].finish == SRV_FINISH_LENGTH, "the paused one resumes and finishes");
    CHECK(same_tokens(&r[0], &ref), "its tokens are those it gets alone (%d vs %d)", r[0].n, ref.n);
    release_all(s, r, 2);
    srv_sched_free(s);
}

static void test_pool_pressure(const latent_model *m) {
    run ref[2];
    alone(m, 20, 200, 3, &ref[0]);
    alone(m, 20, 200, 4, &ref[1]);
    /* Both are admitted (10 pages each: the prompt and a horizon of 8 pages),
     * but the pool cannot hold both to the end (14 pages each): the youngest
     * is preempted and recomputed later. */
    latent_kv_pool probe;
    latent_err err;
    latent_kv_pool_init(&probe, &m->cfg, 16, 1 << 20, LATENT_KV_F32, &err);
    size_t page = ((size_t)1 << 20) / (size_t)probe.n_pages;
    latent_kv_pool_free(&probe);
    srv_sched *s = start(m, 2, 2, page * 22);
    run r[2] = {{0}};
    for (int i = 0; i < 2; i++) r[i].sess = make(20, 200, 3 + i), srv_sched_submit(s, r[i].sess);
    for (int i = 0; i < 2; i++) CHECK(wait_for(s, r, 2, i, -1) && r[i].finish == SRV_FINISH_LENGTH, "session %d finishes", i);
    srv_sched_stats st;
    srv_sched_get_stats(s, &st);
    CHECK(st.pages_total == 22, "a 22-page pool (%d)", st.pages_total);
    CHECK(st.preemptions >= 1, "the pool was short: the youngest was preempted (%lld)", st.preemptions);
    for (int i = 0; i < 2; i++) CHECK(same_tokens(&r[i], &ref[i]), "session %d: the tokens it gets alone", i);
    release_all(s, r, 2);
    srv_sched_free(s);
}

static void test_cancel(const latent_model *m) {
    srv_sched *s = start(m, 1, 2, 4 << 20);
    run r[2] = {{0}};
    r[0].sess = make(8, 200, 5), r[1].sess = make(8, 200, 6);
    srv_sched_submit(s, r[0].sess), srv_sched_submit(s, r[1].sess);
    CHECK(wait_for(s, r, 2, 0, 2), "running");
    srv_sched_cancel(s, r[1].sess); /* still waiting */
    srv_sched_cancel(s, r[0].sess); /* running */
    CHECK(wait_for(s, r, 2, 0, -1) && r[0].finish == SRV_FINISH_CANCELLED, "a running session ends cancelled");
    CHECK(wait_for(s, r, 2, 1, -1) && r[1].finish == SRV_FINISH_CANCELLED, "a waiting one too");
    release_all(s, r, 2);
    srv_sched_free(s);
    CHECK(srv_session_live() == 0, "every session freed: %ld alive", srv_session_live());
}

/* The loop releases a session it has seen finish while the step thread has
 * pushed it onto the ready list again (the finish read from its events before
 * the push): freeing the scheduler must free it. Reproduced here without a
 * race: the session finishes untaken, so it sits on the ready list. */
static void test_free_with_ready(const latent_model *m) {
    long before = srv_session_live();
    srv_sched *s = start(m, 1, 1, 4 << 20);
    srv_session *x = make(8, 5, 7);
    srv_sched_submit(s, x);
    srv_sched_stats st;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        struct timespec nap = {0, 2 * 1000 * 1000};
        nanosleep(&nap, NULL);
        srv_sched_get_stats(s, &st);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (st.held > 0 && now.tv_sec - t0.tv_sec <= 20);
    CHECK(st.held == 0, "the session finishes without the loop taking it");
    srv_sched_release(s, x);
    srv_sched_free(s);
    CHECK(srv_session_live() == before, "a released session left on the ready list is freed with the scheduler: %ld alive",
          srv_session_live() - before);
}

/* Three sessions with logprobs, two slots, k-th allocation failing (k < 0:
 * none); returns the sessions that ended with an error. */
static int faulty_run(const latent_model *m, int k, int *calls) {
        srv_sched *s = start(m, 2, 2, 4 << 20);
        run r[3] = {{0}};
        int errors = 0;
        srv_sched_fail_alloc(k);
        for (int i = 0; i < 3; i++) {
            r[i].sess = make(8 + i, 20, 10 + i);
            r[i].sess->logprobs = 3;
            srv_sched_submit(s, r[i].sess);
        }
        for (int i = 0; i < 3; i++) {
            CHECK(wait_for(s, r, 3, i, -1), "allocation %d failing: session %d still ends", k, i);
            int whole = r[i].finish == SRV_FINISH_LENGTH && r[i].n == 20;
            CHECK(whole || r[i].finish == SRV_FINISH_ERROR, "allocation %d failing: session %d ends whole or with an error "
                  "(finish %d, %d tokens)", k, i, r[i].finish, r[i].n);
            if (r[i].finish == SRV_FINISH_ERROR) errors++;
        }
        release_all(s, r, 3);
        srv_sched_free(s);
        *calls = srv_sched_fail_alloc(-1);
        CHECK(srv_session_live() == 0, "allocation %d failing: %ld sessions leaked", k, srv_session_live());
        return errors;
}

/* Every allocation failure of the scheduler, one at a time: each session
 * still ends (its tokens whole, or an error the loop can send), and nothing
 * is leaked. */
static void test_alloc_failures(const latent_model *m) {
    int n, calls, errors = 0;
    CHECK(faulty_run(m, -1, &n) == 0, "no failure injected: no error");
    CHECK(n > 5, "a run grows the scheduler's arrays (%d times)", n);
    for (int k = 0; k < n; k++) errors += faulty_run(m, k, &calls);
    CHECK(errors > 0, "some failures ended sessions with an error (%d over %d runs)", errors, n);
}

int main(void) {
    latent_model m;
    if (tm_model(&m, tm_t2mlr(tm_config(32, 4, 4, 2, 48, 64), 1, 2, 1), 5, 0) != 0) return 1;
    m.cfg.max_pos = 512;
    test_fifo_and_queue(&m);
    test_pause_gives_slot(&m);
    test_pool_pressure(&m);
    test_cancel(&m);
    test_free_with_ready(&m);
    test_alloc_failures(&m);
    latent_model_free(&m);
    return tu_finish("test_srv_sched");
}
