/* Finished sequences kept for prefix reuse, least recently used first out.
 * A new prompt that shares a prefix with a cached sequence forks it
 * (latent_seq_fork: full pages shared, the partial page copied; recurrent
 * models round down to the last page boundary, where their state was
 * snapshotted) and prefills only the rest. Step thread only. */
#ifndef SRV_PREFIX_CACHE_H
#define SRV_PREFIX_CACHE_H

#include <stdint.h>

#include "latent/kv.h"

typedef struct srv_cache_entry {
    latent_seq seq;
    uint64_t last_used;
} srv_cache_entry;

typedef struct srv_prefix_cache {
    srv_cache_entry *entries; /* (cap) */
    int n, cap;
    uint64_t clock;
} srv_prefix_cache;

int srv_cache_init(srv_prefix_cache *c, int cap);
void srv_cache_free(srv_prefix_cache *c);

/* Tokens of ids[0..n) that the best entry holds as its prefix; *entry gets
 * its index (-1 when none matches). ids[0..n_prompt) are prompt tokens with
 * control flow `flow`, the rest generated ones (flow 2). */
int srv_cache_match(const srv_prefix_cache *c, const int32_t *ids, int n, int n_prompt, uint8_t flow, int *entry);
/* Marks an entry used now. */
void srv_cache_touch(srv_prefix_cache *c, int entry);
/* Takes ownership of *seq (left zeroed). An entry that the new sequence
 * extends is dropped; a sequence that an entry already extends is freed. */
void srv_cache_insert(srv_prefix_cache *c, latent_seq *seq);
/* Frees the least recently used entry; 0 when the cache was empty. */
int srv_cache_evict_lru(srv_prefix_cache *c);
int srv_cache_pages(const srv_prefix_cache *c);

#endif
