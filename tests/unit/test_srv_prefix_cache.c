/* The prefix cache (server/prefix_cache.c) over sequences the engine ran on
 * a tiny model: a hit gives the shared prefix (rounded down to a page
 * boundary for a recurrent model), a longer sequence replaces the entry it
 * extends, eviction is least recently used first, pages are counted, and a
 * prompt token never matches the same token cached as generated (another
 * control flow). */
#include "../../server/prefix_cache.h"

#include <string.h>

#include "latent/engine.h"
#include "testutil.h"
#include "tiny_model.h"

enum { PAGE = 8 };

/* A sequence holding ids[0..n) run as a prompt. */
static int run_seq(latent_engine *e, latent_kv_pool *pool, const latent_config *cfg, const int32_t *ids, int n,
                   latent_seq *seq) {
    latent_err err;
    if (latent_seq_init(seq, pool, cfg, &err) != 0) return -1;
    latent_batch_entry b = {.seq = seq, .tokens = ids, .n_tokens = n, .prompt = 1, .logits = LATENT_LOGITS_NONE};
    return latent_engine_step(e, &b, 1, &err);
}

static void fill(int32_t *ids, int n, int salt) {
    for (int i = 0; i < n; i++) ids[i] = 3 + (i * 5 + salt) % 40;
}

int main(void) {
    latent_model m;
    /* recur_on_prompt 0: prompt tokens skip the recurrence, generated ones run it */
    if (tm_model(&m, tm_t2mlr(tm_config(32, 4, 4, 2, 48, 64), 1, 2, 0), 9, 0) != 0) return 1;
    latent_err err;
    latent_engine *e = latent_engine_new(&m, &err);
    latent_kv_pool pool;
    CHECK(e && latent_kv_pool_init(&pool, &m.cfg, PAGE, 1 << 20, LATENT_KV_F32, &err) == 0, "engine and pool");
    uint8_t flow = (uint8_t)latent_engine_flow(&m.cfg, 1);
    srv_prefix_cache c;
    CHECK(srv_cache_init(&c, 2) == 0, "a cache of 2 entries");

    int32_t a[40], b[40], d[40];
    fill(a, 40, 0), fill(b, 40, 0), fill(d, 40, 17);
    b[21] = 60; /* b shares a's first 21 tokens */
    latent_seq s;
    run_seq(e, &pool, &m.cfg, a, 30, &s);
    int free_before = pool.n_free;
    srv_cache_insert(&c, &s);
    CHECK(c.n == 1 && s.pool == NULL, "inserted: the cache owns the sequence");
    CHECK(srv_cache_pages(&c) == 4 && pool.n_free == free_before, "its 4 pages counted, none freed (%d)", srv_cache_pages(&c));

    int entry;
    int match = srv_cache_match(&c, b, 40, 40, flow, &entry);
    CHECK(entry == 0 && match == 21, "b matches a's first 21 tokens (match %d, entry %d)", match, entry);
    match = srv_cache_match(&c, a, 25, 25, flow, &entry);
    CHECK(entry == 0 && match == 25, "a prefix of a matches whole (%d)", match);
    match = srv_cache_match(&c, a, 25, 10, flow, &entry); /* tokens 10.. as generated: another control flow */
    CHECK(match == 10, "cached prompt tokens do not match the same tokens generated (%d)", match);
    match = srv_cache_match(&c, d, 40, 40, flow, &entry);
    CHECK(entry == -1 || match == 0, "an unrelated prompt matches nothing (%d)", match);

    /* A longer run of a replaces the entry it extends. */
    latent_seq s2;
    run_seq(e, &pool, &m.cfg, a, 38, &s2);
    srv_cache_insert(&c, &s2);
    CHECK(c.n == 1, "the extended entry was replaced, not kept twice (%d entries)", c.n);
    CHECK(srv_cache_match(&c, a, 40, 40, flow, &entry) == 38, "and now 38 tokens match");

    /* LRU: d then b; touching a's entry makes d the oldest. */
    latent_seq sd, sb;
    run_seq(e, &pool, &m.cfg, d, 16, &sd);
    srv_cache_insert(&c, &sd);
    srv_cache_match(&c, a, 40, 40, flow, &entry);
    srv_cache_touch(&c, entry);
    run_seq(e, &pool, &m.cfg, b, 24, &sb);
    srv_cache_insert(&c, &sb); /* full: the least recently used (d) goes */
    CHECK(c.n == 2, "at most 2 entries (%d)", c.n);
    CHECK(srv_cache_match(&c, d, 16, 16, flow, &entry) == 0 || entry < 0, "d, the least recently used, was evicted");
    CHECK(srv_cache_match(&c, a, 40, 40, flow, &entry) >= 21, "a's entry stays");
    int pages = srv_cache_pages(&c);
    CHECK(srv_cache_evict_lru(&c) == 1 && srv_cache_evict_lru(&c) == 1 && srv_cache_evict_lru(&c) == 0, "evicted down to empty");
    CHECK(srv_cache_pages(&c) == 0 && pages > 0, "no pages held (%d before)", pages);
    CHECK(pool.n_free == pool.n_pages, "every page back in the pool (%d of %d)", pool.n_free, pool.n_pages);

    srv_cache_free(&c);
    latent_kv_pool_free(&pool);
    latent_engine_free(e);
    latent_model_free(&m);
    return tu_finish("test_srv_prefix_cache");
}
