/* The daemon's state, owned by the loop thread: settings, the model, the
 * chat template, the scheduler, the HTTP layer, metrics, and the generation
 * requests in flight. */
#ifndef SRV_SERVER_H
#define SRV_SERVER_H

#include <uv.h>

#include "chat_template.h"
#include "client_quota.h"
#include "config.h"
#include "http.h"
#include "latent/model.h"
#include "metrics.h"
#include "scheduler.h"

typedef struct srv_gen srv_gen;

typedef struct srv_ctx {
    srv_config cfg;
    uv_loop_t *loop;
    char *served_name;
    char fingerprint[24];     /* system_fingerprint; "" (null) with --deterministic false */
    char listen_desc[256];
    srv_chat_template tmpl;
    latent_model model;
    int ready;                /* model loaded, scheduler running */
    int eot_id;               /* the chat template's end-of-turn token, or -1 */
    struct latent_json_vocab *json_vocab; /* response_format's token tables (built at load) */
    int max_token_bytes;      /* the vocabulary's longest token, in bytes: a prompt's bytes bound its tokens from below */
    srv_gen *big_head, *big_tail; /* bodies over 1 MiB waiting for the thread pool (generate.c's big-body lane) */
    int big_running;          /* of those, on the pool now */
    srv_sched *sched;
    srv_sched *loaded_sched;      /* made by the loading thread, taken over by the loop in load_done */
    srv_http *http;
    srv_metrics metrics;
    uv_async_t wake;          /* the step thread's "tokens are ready" */
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t keepalive_timer, watchdog_timer, drain_timer;
    uv_work_t load_work;
    latent_err load_err;
    int load_rc;
    int draining;
    double drain_deadline;
    int grace_expired;
    int stopping;
    srv_quota quota;          /* sequences in flight per client */
    srv_gen *gens;            /* generation requests in flight (linked) */
    int n_gens;
    srv_session **ready_list;
    int ready_cap;
    int exit_code;
} srv_ctx;

#endif
