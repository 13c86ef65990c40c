/* Session allocation; everything else about sessions lives in scheduler.c. */
#include "session.h"
#include "latent/json_schema.h"

#include <stdlib.h>

static atomic_long live;

srv_session *srv_session_new(void) {
    srv_session *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->refs = 1;
    s->pending = -1;
    atomic_init(&s->cancel, 0);
    atomic_fetch_add(&live, 1);
    return s;
}

void srv_session_free(srv_session *s) {
    if (!s) return;
    latent_seq_free(&s->seq);
    free(s->prompt);
    free(s->bias);
    latent_json_guard_free(s->json);
    free(s->followers);
    free(s->hist);
    free(s->ev_buf[0]);
    free(s->ev_buf[1]);
    free(s);
    atomic_fetch_sub(&live, 1);
}

long srv_session_live(void) { return atomic_load(&live); }
