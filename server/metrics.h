/* Prometheus metrics: request counters by endpoint and status, token
 * counters, latency histograms, and gauges read from the scheduler at scrape
 * time. Thread-safe (one mutex); the loop and the step thread both record. */
#ifndef SRV_METRICS_H
#define SRV_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "buf.h"
#include "http.h"
#include "scheduler.h"

typedef enum {
    SRV_EP_COMPLETIONS, SRV_EP_CHAT, SRV_EP_MODELS, SRV_EP_HEALTH, SRV_EP_METRICS,
    SRV_EP_TOKENIZE, SRV_EP_DETOKENIZE, SRV_EP_OTHER, SRV_EP__COUNT
} srv_endpoint;

typedef enum { SRV_H_TTFT, SRV_H_ITL, SRV_H_QUEUE, SRV_H_E2E, SRV_H_STEP, SRV_H__COUNT } srv_hist_id;

typedef enum {
    SRV_C_PROMPT_TOKENS,      /* prompt tokens of accepted requests */
    SRV_C_COMPLETION_TOKENS,  /* tokens generated and delivered */
    SRV_C_REJECTED,           /* 429s */
    SRV_C_CANCELLED,          /* sequences stopped because the client went away */
    SRV_C_STREAM_PAUSES,      /* streams paused because their client did not read (backpressure) */
    SRV_C__COUNT
} srv_counter_id;

#define SRV_HIST_MAX_BUCKETS 16

typedef struct srv_hist {
    const double *bounds;
    int n;
    uint64_t counts[SRV_HIST_MAX_BUCKETS + 1];
    double sum;
    uint64_t count;
} srv_hist;

typedef struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t requests[SRV_EP__COUNT][600];
    uint64_t counters[SRV_C__COUNT];
    srv_hist hist[SRV_H__COUNT];
} srv_metrics;

typedef struct srv_gauges {
    int connections;          /* HTTP requests in flight */
    long sessions_live;       /* session objects alive */
    int draining, ready;
    int requests_active;      /* generation requests in flight */
    srv_http_guard_stats guard; /* the HTTP guard's counters (http.h) */
} srv_gauges;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_free(srv_metrics *m);
srv_endpoint srv_metrics_endpoint(const char *path);
void srv_metrics_request(srv_metrics *m, srv_endpoint ep, int status);
void srv_metrics_observe(srv_metrics *m, srv_hist_id h, double seconds);
void srv_metrics_add(srv_metrics *m, srv_counter_id c, uint64_t n);
/* Prometheus text format 0.0.4. `st` may be NULL (model not loaded yet). */
void srv_metrics_render(srv_metrics *m, srv_buf *out, const srv_sched_stats *st, const srv_gauges *g);

#endif
