/* An LRU of finished sequences (a small array: a linear scan per admission). */
#include "prefix_cache.h"

#include <stdlib.h>
#include <string.h>

int srv_cache_init(srv_prefix_cache *c, int cap) {
    memset(c, 0, sizeof *c);
    c->cap = cap;
    if (cap > 0 && !(c->entries = calloc(cap, sizeof *c->entries))) return -1;
    return 0;
}

void srv_cache_free(srv_prefix_cache *c) {
    for (int i = 0; i < c->n; i++) latent_seq_free(&c->entries[i].seq);
    free(c->entries);
    memset(c, 0, sizeof *c);
}

/* The request's control flow: its prompt tokens run with `flow`, the
 * tokens it generated (and feeds back) recurrent. */
int srv_cache_match(const srv_prefix_cache *c, const int32_t *ids, int n, int n_prompt, uint8_t flow, int *entry) {
    int best = 0;
    *entry = -1;
    if (c->n == 0 || n <= 0) return 0;
    uint8_t *flows = malloc((size_t)n);
    if (!flows) return 0; /* no reuse: the request is prefilled in full */
    for (int i = 0; i < n; i++) flows[i] = i < n_prompt ? flow : 2;
    for (int i = 0; i < c->n; i++) {
        int k = latent_seq_common_prefix(&c->entries[i].seq, ids, flows, n);
        if (k > best || (k == best && k > 0 && c->entries[i].last_used > c->entries[*entry].last_used)) best = k, *entry = i;
    }
    free(flows);
    return best;
}

void srv_cache_touch(srv_prefix_cache *c, int entry) { c->entries[entry].last_used = ++c->clock; }

static void drop(srv_prefix_cache *c, int i) {
    latent_seq_free(&c->entries[i].seq);
    c->entries[i] = c->entries[--c->n];
}

void srv_cache_insert(srv_prefix_cache *c, latent_seq *seq) {
    if (c->cap == 0 || latent_seq_pos(seq) == 0) {
        latent_seq_free(seq);
        return;
    }
    for (int i = 0; i < c->n; i++) {
        latent_seq *e = &c->entries[i].seq;
        int k = latent_seq_common_prefix(e, latent_seq_tokens(seq), latent_seq_flows(seq), latent_seq_pos(seq));
        if (k == latent_seq_pos(seq)) { /* already covered */
            latent_seq_free(seq);
            srv_cache_touch(c, i);
            return;
        }
        if (k == latent_seq_pos(e)) drop(c, i--); /* the new one extends it */
    }
    if (c->n == c->cap) srv_cache_evict_lru(c);
    c->entries[c->n].seq = *seq;
    c->entries[c->n].last_used = ++c->clock;
    c->n++;
    memset(seq, 0, sizeof *seq);
}

int srv_cache_evict_lru(srv_prefix_cache *c) {
    if (c->n == 0) return 0;
    int lru = 0;
    for (int i = 1; i < c->n; i++)
        if (c->entries[i].last_used < c->entries[lru].last_used) lru = i;
    drop(c, lru);
    return 1;
}

int srv_cache_pages(const srv_prefix_cache *c) {
    if (c->n == 0) return 0;
    /* distinct pages: entries forked from one another share theirs */
    const latent_kv_pool *pool = latent_seq_pool(&c->entries[0].seq);
    uint8_t *seen = pool ? calloc((size_t)latent_kv_pool_pages(pool), 1) : NULL;
    int n = 0;
    for (int i = 0; i < c->n; i++) {
        const latent_seq *s = &c->entries[i].seq;
        for (int k = 0; k < latent_seq_pages(s); k++) {
            int pg = latent_seq_page(s, k);
            if (!seen) n++; /* out of memory: an upper bound */
            else if (!seen[pg]) seen[pg] = 1, n++;
        }
    }
    free(seen);
    return n;
}
