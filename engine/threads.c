/* A small spin-then-sleep thread pool for latent_parallel_for.
 *
 * Tasks are claimed from one 64-bit word holding (section << 32 | next task)
 * with a compare-and-swap, so a worker that wakes late can never claim a task
 * of a section it did not see published, and the caller never waits for a
 * worker that is descheduled: it runs whatever tasks nobody claimed itself,
 * then waits only for tasks already running. On a busy machine that keeps a
 * parallel section from costing a scheduler time slice. */
#include "latent/threads.h"

#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_THREADS 64
/* Pause iterations before an idle worker sleeps: bridges the gap between two
 * parallel sections of a step, then leaves the core to other threads. */
#define SPIN_ITERS 100000

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_spawned;                /* threads started, including the caller */
    atomic_int active;            /* threads taking part, the caller included (latent_set_threads) */
    pthread_t tids[MAX_THREADS];
    _Atomic uint64_t work;        /* section << 32 | next unclaimed task */
    atomic_int completed;         /* tasks of the current section finished */
    atomic_int sleepers;
    latent_task_fn fn;            /* written before a section is published */
    void *ctx;
    atomic_int n_tasks;           /* atomic: a worker late from the last section may read it */
    int started;
} pool_t;

static pool_t g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* 1 while this thread runs a task: a parallel-for inside a task (a packer
 * split over the threads, called from a task that packs a whole layer)
 * runs inline instead of publishing a section inside a section. */
static _Thread_local int g_in_task;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claims and runs tasks of `section` until none is left. */
static void run_tasks(pool_t *p, uint32_t section) {
    for (;;) {
        uint64_t w = atomic_load_explicit(&p->work, memory_order_acquire);
        if ((uint32_t)(w >> 32) != section) return;
        uint32_t t = (uint32_t)w;
        if (t >= (uint32_t)atomic_load_explicit(&p->n_tasks, memory_order_relaxed)) return;
        if (!atomic_compare_exchange_weak_explicit(&p->work, &w, w + 1, memory_order_acq_rel, memory_order_relaxed))
            continue;
        g_in_task = 1;
        p->fn(p->ctx, (int)t);
        g_in_task = 0;
        atomic_fetch_add_explicit(&p->completed, 1, memory_order_release);
    }
}

static void *worker_main(void *arg) {
    pool_t *p = &g_pool;
    int index = (int)(intptr_t)arg; /* 1.. (the caller is 0) */
    uint32_t seen = 0; /* workers start before any section is published */
    for (;;) {
        uint32_t s;
        int spins = 0;
        while ((s = (uint32_t)(atomic_load_explicit(&p->work, memory_order_acquire) >> 32)) == seen) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((s = (uint32_t)(atomic_load(&p->work) >> 32)) == seen) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            break;
        }
        seen = s;
        /* a worker past the active count sits out (latent_set_threads shrank the pool) */
        if (index < atomic_load_explicit(&p->active, memory_order_relaxed)) run_tasks(p, s);
    }
    return NULL;
}

/* Starts workers up to n threads in all (the caller counts as one) and makes
 * n of them take part. */
static void start_workers(pool_t *p, int n) {
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    /* Our threads split the work; OpenBLAS must not spawn its own on top. */
    openblas_set_num_threads(1);
    if (!p->n_spawned) p->n_spawned = 1;
    while (p->n_spawned < n) {
        if (pthread_create(&p->tids[p->n_spawned], NULL, worker_main, (void *)(intptr_t)p->n_spawned) != 0) break;
        p->n_spawned++;
    }
    atomic_store(&p->active, n < p->n_spawned ? n : p->n_spawned);
    p->started = 1;
}

static void default_init(void) {
    if (g_pool.started) return;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    start_workers(&g_pool, n > 0 ? (int)n : 1);
}

void latent_set_threads(int n) {
    /* Before the pool starts, or between sections (one thread calls
     * latent_parallel_for at a time): more workers are started when n passes
     * those running, and workers past n sit out the sections that follow. */
    pthread_mutex_lock(&g_pool.mu);
    start_workers(&g_pool, n);
    pthread_mutex_unlock(&g_pool.mu);
}

int latent_get_threads(void) {
    pthread_once(&g_once, default_init);
    return atomic_load(&g_pool.active);
}

void latent_parallel_for(latent_task_fn fn, void *ctx, int n_tasks) {
    pthread_once(&g_once, default_init);
    pool_t *p = &g_pool;
    if (atomic_load_explicit(&p->active, memory_order_relaxed) == 1 || n_tasks <= 1 || g_in_task) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t);
        return;
    }
    /* Close the last section first: a worker still inside it (it read the
     * word before the section ended) must fail its claim, not take task t of
     * the section being set up with that section's n_tasks and run it a
     * second time. The exchange also keeps the writes below after it. */
    uint64_t last = atomic_exchange_explicit(&p->work, (atomic_load(&p->work) | 0xFFFFFFFFull), memory_order_acq_rel);
    p->fn = fn, p->ctx = ctx;
    atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_relaxed);
    atomic_store_explicit(&p->completed, 0, memory_order_relaxed);
    uint32_t section = (uint32_t)(last >> 32) + 1;
    atomic_store_explicit(&p->work, (uint64_t)section << 32, memory_order_release);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_tasks(p, section);
    int spins = 0;
    while (atomic_load_explicit(&p->completed, memory_order_acquire) < n_tasks)
        if (++spins % 1024 == 0) sched_yield(); else cpu_relax();
}

typedef struct {
    latent_rows_fn fn;
    void *ctx;
    int n, per;
} rows_job;

static void rows_task(void *ctx, int task) {
    const rows_job *j = ctx;
    int r0 = task * j->per, r1 = r0 + j->per < j->n ? r0 + j->per : j->n;
    if (r0 < r1) j->fn(j->ctx, r0, r1);
}

void latent_parallel_chunks(latent_rows_fn fn, void *ctx, int n, int chunks) {
    if (n <= 0) return;
    if (chunks < 1) chunks = 1;
    rows_job j = {fn, ctx, n, (n + chunks - 1) / chunks};
    latent_parallel_for(rows_task, &j, chunks);
}

void latent_parallel_rows(latent_rows_fn fn, void *ctx, int n, int min_rows) {
    int threads = latent_get_threads();
    /* two ranges a thread: a late worker leaves the caller less to finish alone */
    int chunks = threads == 1 || n < min_rows || g_in_task ? 1 : threads * 2 < n ? threads * 2 : n;
    latent_parallel_chunks(fn, ctx, n, chunks);
}
