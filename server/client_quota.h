/* Per-client fairness: how many sequences each client has running or queued,
 * so that one client cannot fill every slot and queue place (past its cap it
 * gets 429 while others are still served). A client is its API key when the
 * server has keys, else its address (the last X-Forwarded-For entry when
 * the proxy in front is trusted to set it). */
#ifndef SRV_CLIENT_QUOTA_H
#define SRV_CLIENT_QUOTA_H

#define SRV_CLIENT_KEY_LEN 80

typedef struct srv_quota_entry {
    char key[SRV_CLIENT_KEY_LEN];
    int sequences;
} srv_quota_entry;

typedef struct srv_quota {
    srv_quota_entry *items;   /* clients with sequences in flight; unordered */
    int n, cap;
} srv_quota;

/* Takes n sequences for key unless that passes `limit` (0 = no limit):
 * 0, or -1 (over the limit, or out of memory) with *held set to what the
 * client already holds. */
int srv_quota_acquire(srv_quota *q, const char *key, int n, int limit, int *held);
void srv_quota_release(srv_quota *q, const char *key, int n);
void srv_quota_free(srv_quota *q);

#endif
