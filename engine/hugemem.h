/* Large buffers on transparent huge pages (private to the engine).
 *
 * The KV pool and the packed weights are hundreds of MB written once at
 * start. On this project's VMs a 4 KiB page fault costs about 25 us, so
 * committing 1 GiB page by page takes over 3 s; on 2 MiB pages it takes
 * about 0.5 s, and TLB misses drop while the kernels stream them. */
#ifndef LATENT_HUGEMEM_H
#define LATENT_HUGEMEM_H

#include <stddef.h>

/* Zeroed memory of `bytes`, 64-byte aligned; from 2 MiB up it is 2 MiB
 * aligned with huge pages advised (the kernel may still use small ones).
 * NULL when out of memory. */
void *latent_huge_alloc(size_t bytes);
/* The same, but the contents are undefined (mapped pages read as zero, heap
 * ones need not): for a buffer the caller writes in full before reading, so
 * that its pages are touched once, by the writer, not zeroed first. */
void *latent_huge_alloc_raw(size_t bytes);
/* Makes the system back every page of p now (one write per small page):
 * mapped memory is otherwise committed page by page at first touch. Big
 * buffers are touched over the engine threads (latent/threads.h: the caller
 * must be the one thread that may run parallel sections). */
void latent_huge_commit(void *p, size_t bytes);
/* Frees what latent_huge_alloc(bytes) returned (the same bytes); NULL is fine. */
void latent_huge_free(void *p, size_t bytes);

#endif
