/* Counters and histograms, rendered in the Prometheus text format. */
#include "metrics.h"

#include <string.h>

static const double lat_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
static const double tok_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5};
#define NB(a) (int)(sizeof a / sizeof a[0])

static const char *ep_names[SRV_EP__COUNT] = {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health",
                                              "/metrics", "/tokenize", "/detokenize", "other"};

static const struct {
    const char *name, *help;
} hist_info[SRV_H__COUNT] = {
    {"latentd_time_to_first_token_seconds", "Time from request arrival to its first generated token."},
    {"latentd_inter_token_latency_seconds", "Time between consecutive generated tokens of a sequence."},
    {"latentd_queue_wait_seconds", "Time a sequence waited for a slot and KV pages."},
    {"latentd_request_duration_seconds", "End-to-end time of generation requests."},
    {"latentd_engine_step_seconds", "Wall time of one batched engine step."},
};

static const struct {
    const char *name, *help;
} counter_info[SRV_C__COUNT] = {
    {"latentd_prompt_tokens_total", "Prompt tokens of accepted generation requests."},
    {"latentd_generation_tokens_total", "Tokens generated for clients."},
    {"latentd_rejected_total", "Requests refused with 429 because the queue was full."},
    {"latentd_cancelled_sequences_total", "Sequences stopped because their client went away."},
    {"latentd_stream_pauses_total", "Times a stream's decoding paused because its client had not read 256 KiB already sent."},
};

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    for (int h = 0; h < SRV_H__COUNT; h++) {
        int tok = h == SRV_H_ITL || h == SRV_H_STEP;
        m->hist[h].bounds = tok ? tok_bounds : lat_bounds;
        m->hist[h].n = tok ? NB(tok_bounds) : NB(lat_bounds);
    }
}

void srv_metrics_free(srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

srv_endpoint srv_metrics_endpoint(const char *path) {
    for (int i = 0; i < SRV_EP_OTHER; i++)
        if (!strcmp(path, ep_names[i])) return (srv_endpoint)i;
    return SRV_EP_OTHER;
}

void srv_metrics_request(srv_metrics *m, srv_endpoint ep, int status) {
    if (status < 0 || status >= 600) status = 0;
    pthread_mutex_lock(&m->mu);
    m->requests[ep][status]++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_observe(srv_metrics *m, srv_hist_id id, double v) {
    pthread_mutex_lock(&m->mu);
    srv_hist *h = &m->hist[id];
    int b = 0;
    while (b < h->n && v > h->bounds[b]) b++;
    h->counts[b]++;
    h->sum += v;
    h->count++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_add(srv_metrics *m, srv_counter_id c, uint64_t n) {
    pthread_mutex_lock(&m->mu);
    m->counters[c] += n;
    pthread_mutex_unlock(&m->mu);
}

static void gauge(srv_buf *o, const char *name, const char *help, double v) {
    srv_buf_printf(o, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

static void counter(srv_buf *o, const char *name, const char *help, double v) {
    srv_buf_printf(o, "# HELP %s %s\n# TYPE %s counter\n%s %.17g\n", name, help, name, name, v);
}

void srv_metrics_render(srv_metrics *m, srv_buf *o, const srv_sched_stats *st, const srv_gauges *g) {
    pthread_mutex_lock(&m->mu);
    srv_buf_puts(o, "# HELP latentd_requests_total HTTP requests by endpoint and status.\n"
                    "# TYPE latentd_requests_total counter\n");
    for (int e = 0; e < SRV_EP__COUNT; e++)
        for (int s = 0; s < 600; s++)
            if (m->requests[e][s])
                srv_buf_printf(o, "latentd_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", ep_names[e], s,
                               (unsigned long long)m->requests[e][s]);
    for (int c = 0; c < SRV_C__COUNT; c++) counter(o, counter_info[c].name, counter_info[c].help, (double)m->counters[c]);
    for (int h = 0; h < SRV_H__COUNT; h++) {
        const srv_hist *x = &m->hist[h];
        const char *n = hist_info[h].name;
        srv_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", n, hist_info[h].help, n);
        uint64_t cum = 0;
        for (int b = 0; b < x->n; b++) {
            cum += x->counts[b];
            srv_buf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", n, x->bounds[b], (unsigned long long)cum);
        }
        srv_buf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", n, (unsigned long long)x->count, n,
                       x->sum, n, (unsigned long long)x->count);
    }
    pthread_mutex_unlock(&m->mu);

    gauge(o, "latentd_ready", "1 once the model is loaded and the server accepts work.", g->ready && !g->draining);
    gauge(o, "latentd_draining", "1 while shutting down.", g->draining);
    gauge(o, "latentd_http_requests_in_flight", "HTTP requests being received or answered.", g->connections);
    gauge(o, "latentd_generation_requests_active", "Completion requests not yet answered in full.", g->requests_active);
    gauge(o, "latentd_sessions", "Sequence sessions alive (queued, running, or being delivered).", (double)g->sessions_live);
    gauge(o, "latentd_http_body_buffer_bytes", "Request-body bytes held, all requests together (max-body-buffer-mib).",
          (double)g->guard.body_bytes);
    counter(o, "latentd_http_header_timeouts_total", "Connections closed: request header not complete within header-timeout-seconds.",
            (double)g->guard.header_timeouts);
    counter(o, "latentd_http_body_timeouts_total", "Connections closed: request body stalled or below min-body-rate.",
            (double)g->guard.body_timeouts);
    counter(o, "latentd_http_evictions_total", "Connections closed at max-connections to let a new one in (incomplete requests, oldest first).",
            (double)g->guard.evictions);
    counter(o, "latentd_http_body_buffer_refusals_total", "Requests answered 503: the request-body budget was spent.",
            (double)g->guard.body_refusals);
    counter(o, "latentd_stream_stalls_total", "Streams cancelled because their client took no bytes for stream-stall-seconds.",
            (double)g->guard.stream_stalls);
    srv_sched_stats z = {0};
    if (!st) st = &z;
    gauge(o, "latentd_queue_length", "Sequences waiting for a slot or KV pages.", st->waiting);
    gauge(o, "latentd_running_sessions", "Sequences prefilling or decoding.", st->running);
    gauge(o, "latentd_sessions_admitted", "Sequences admitted and not yet finished (queued or running; at most max-sessions + queue-len).",
          st->held);
    gauge(o, "latentd_kv_pages_total", "Pages in the KV pool.", st->pages_total);
    gauge(o, "latentd_kv_pages_used", "KV pages in use (sessions and prefix cache).", st->pages_total - st->pages_free);
    gauge(o, "latentd_kv_pages_free", "KV pages free.", st->pages_free);
    gauge(o, "latentd_kv_pages_cached", "KV pages referenced by the prefix cache.", st->pages_cached);
    gauge(o, "latentd_prefix_cache_entries", "Finished sequences kept for prefix reuse.", st->cache_entries);
    counter(o, "latentd_prefill_tokens_total", "Prompt tokens run through the model.", (double)st->prefill_tokens);
    counter(o, "latentd_prefix_reused_tokens_total", "Prompt tokens taken from the prefix cache instead.", (double)st->reused_tokens);
    counter(o, "latentd_sampled_tokens_total", "Tokens sampled by the engine (including ones a client no longer wanted).",
            (double)st->generated_tokens);
    counter(o, "latentd_preemptions_total", "Decoding sequences sent back to the queue to free KV pages (recomputed later).",
            (double)st->preemptions);
    counter(o, "latentd_paused_preemptions_total",
            "Of which: streams paused by backpressure (client not reading) that gave their slot to others.",
            (double)st->paused_preemptions);
    counter(o, "latentd_engine_steps_total", "Engine steps.", (double)st->engine.steps);
    counter(o, "latentd_engine_rows_total", "Token rows processed by engine steps.", (double)st->engine.rows);
    counter(o, "latentd_engine_failed_steps_total", "Engine steps that failed.", (double)st->failed_steps);
    counter(o, "latentd_engine_step_seconds_total", "Wall time in engine steps.", st->engine.step_seconds);
    counter(o, "latentd_engine_recurrence_seconds_total", "Of which the recurrence's own work.", st->engine.recur_seconds);
    gauge(o, "latentd_engine_recurrence_share", "Share of engine step time spent in the recurrence.",
          st->engine.step_seconds > 0 ? st->engine.recur_seconds / st->engine.step_seconds : 0);
}
