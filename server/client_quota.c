/* See client_quota.h. A linear scan: clients with sequences in flight are at
 * most max-sessions + queue-len, and the scan runs once per request. */
#include "client_quota.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static srv_quota_entry *find(srv_quota *q, const char *key) {
    for (int i = 0; i < q->n; i++)
        if (!strcmp(q->items[i].key, key)) return &q->items[i];
    return NULL;
}

int srv_quota_acquire(srv_quota *q, const char *key, int n, int limit, int *held) {
    srv_quota_entry *e = find(q, key);
    *held = e ? e->sequences : 0;
    if (limit > 0 && *held + n > limit) return -1;
    if (!e) {
        if (q->n == q->cap) {
            int cap = q->cap ? 2 * q->cap : 16;
            srv_quota_entry *items = realloc(q->items, (size_t)cap * sizeof *items);
            if (!items) return -1;
            q->items = items, q->cap = cap;
        }
        e = &q->items[q->n++];
        snprintf(e->key, sizeof e->key, "%s", key);
        e->sequences = 0;
    }
    e->sequences += n;
    return 0;
}

void srv_quota_release(srv_quota *q, const char *key, int n) {
    srv_quota_entry *e = find(q, key);
    if (!e) return;
    if ((e->sequences -= n) <= 0) *e = q->items[--q->n];
}

void srv_quota_free(srv_quota *q) {
    free(q->items);
    memset(q, 0, sizeof *q);
}
