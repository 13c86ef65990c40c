/* Large buffers on transparent huge pages: see hugemem.h. */
#include "hugemem.h"
#include "latent/threads.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_PAGE ((size_t)2 << 20)

/* The length is rounded to small pages only: the 2 MiB-aligned whole huge
 * pages inside get huge pages, the tail small ones, and nothing is wasted. */
static size_t huge_round(size_t bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) / page * page;
}

void *latent_huge_alloc(size_t bytes) {
    void *p = latent_huge_alloc_raw(bytes);
    if (p && bytes < HUGE_PAGE) memset(p, 0, bytes); /* mapped memory is zero already */
    return p;
}

void *latent_huge_alloc_raw(size_t bytes) {
    if (bytes == 0) bytes = 1;
    /* rounding a small buffer up to a huge page would waste most of it */
    if (bytes < HUGE_PAGE) return aligned_alloc(64, (bytes + 63) / 64 * 64);
    size_t len = huge_round(bytes);
    /* Over-allocate one huge page so the start can be aligned to one, then
     * give back the unaligned head and tail. */
    uint8_t *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    size_t tail = (size_t)(raw + len + HUGE_PAGE - (p + len));
    if (tail) munmap(p + len, tail);
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE); /* advice only: small pages still work */
#endif
    return p;
}

/* Tasks of COMMIT_CHUNK bytes: the first touches (the kernel zeroes each
 * page it backs, most of committing's time) spread over the engine threads. */
#define COMMIT_CHUNK ((size_t)16 << 20)

typedef struct {
    char *p;
    size_t bytes;
} commit_job;

static void commit_task(void *ctx, int t) {
    const commit_job *j = ctx;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), i0 = (size_t)t * COMMIT_CHUNK;
    size_t i1 = j->bytes - i0 < COMMIT_CHUNK ? j->bytes : i0 + COMMIT_CHUNK;
    /* volatile: the compiler may drop stores of zero to memory it knows is zero */
    volatile char *c = j->p;
    for (size_t i = i0; i < i1; i += page) c[i] = 0;
}

void latent_huge_commit(void *p, size_t bytes) {
    commit_job j = {p, bytes};
    int tasks = (int)((bytes + COMMIT_CHUNK - 1) / COMMIT_CHUNK);
    if (tasks > 1) latent_parallel_for(commit_task, &j, tasks); /* big buffers only: small ones never start the pool */
    else if (bytes) commit_task(&j, 0);
}

void latent_huge_free(void *p, size_t bytes) {
    if (!p) return;
    if (bytes < HUGE_PAGE) free(p);
    else munmap(p, huge_round(bytes));
}
