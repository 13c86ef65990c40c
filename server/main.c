/* latentd: settings, start-up (listen first, load the model off the loop,
 * then notify systemd), the signal-driven drain, shutdown. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "latent/clock.h"
#include "fingerprint.h"
#include "generate.h"
#include "latent/config.h"
#include "latent/json_schema.h"
#include "latent/threads.h"
#include "latent/tokenizer.h"
#include "log.h"
#include "routes.h"
#include "sdnotify.h"
#include "server.h"
#include "socket_activation.h"

static void shutdown_now(srv_ctx *x);

static char *default_name(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t s = n;
    while (s > 0 && dir[s - 1] != '/') s--;
    char *name = malloc(n - s + 1);
    if (name) {
        memcpy(name, dir + s, n - s);
        name[n - s] = 0;
    }
    return name;
}

static void on_step(void *arg, double seconds, int rows) {
    srv_ctx *x = arg;
    srv_metrics_observe(&x->metrics, SRV_H_STEP, seconds);
}

static void wake_loop(void *arg) { uv_async_send(&((srv_ctx *)arg)->wake); }

/* ---- model loading on libuv's thread pool ---------------------------------------- */

/* Loads the model and builds the scheduler (KV pool committed, weights
 * packed): seconds for a large model, all of it off the loop thread, so
 * /health keeps answering 503 meanwhile. */
static void load_work(uv_work_t *w) {
    srv_ctx *x = w->data;
    latent_engine_opts eo = {0};
    latent_precision_parse(x->cfg.precision, &eo.precision); /* checked by the settings table */
    latent_weights_parse(x->cfg.weights, &eo.weights, &eo.precision); /* f32, bf16 set the precision */
    /* A BF16 checkpoint under a bf16 engine packs its panels straight from the
     * file mapping: no F32 copy (latent_load_opts.keep_bf16). F32 and q8 need
     * the widened weights. */
    latent_load_opts lo = {.keep_bf16 = eo.precision != LATENT_PRECISION_F32 && eo.weights != LATENT_WEIGHTS_Q8};
    x->load_rc = latent_model_load_opts(&x->model, x->cfg.model_dir, &lo, &x->load_err);
    if (x->load_rc == 0 && !x->model.tok) {
        x->load_rc = -1;
        latent_err_set(&x->load_err, LATENT_E_INVALID, "%s has no tokenizer.json (the server needs one)", x->cfg.model_dir);
    }
    if (x->load_rc != 0) return;
    srv_sched_opts o = {.pool_bytes = (size_t)x->cfg.kv_pool_mib << 20, .page_tokens = x->cfg.page_tokens,
                        .max_sessions = x->cfg.max_sessions, .queue_len = x->cfg.queue_len,
                        .step_tokens = x->cfg.step_tokens, .prefill_chunk = x->cfg.prefill_chunk,
                        .cache_entries = x->cfg.prefix_cache};
    o.engine.precision = eo.precision, o.engine.weights = eo.weights;
    o.kv_dtype = x->cfg.kv_dtype;
    o.engine.nondeterministic = strcmp(x->cfg.deterministic, "false") == 0;
    latent_err err;
    if (!(x->loaded_sched = srv_sched_new(&x->model, &o, &err))) {
        x->load_rc = -1;
        latent_err_set(&x->load_err, LATENT_E_IO, "cannot start the scheduler: %s", err.msg);
        return;
    }
    /* Here, not on the loop: it reads the whole executable. */
    if (!o.engine.nondeterministic) {
        srv_sched_stats st;
        srv_sched_get_stats(x->loaded_sched, &st);
        srv_fingerprint(x->fingerprint, sizeof x->fingerprint,
                        o.engine.weights == LATENT_WEIGHTS_Q8 ? "q8" : latent_precision_name(st.precision),
                        latent_kv_dtype_name(st.kv_dtype), latent_kernel_path());
    }
}

static int longest_token(const latent_tokenizer *t) {
    char buf[1024];
    int most = 1;
    for (int id = 0, v = latent_tokenizer_vocab_size(t); id < v; id++) {
        int n = latent_tokenizer_token_bytes(t, id, buf, sizeof buf);
        if (n > most) most = n;
    }
    return most;
}

static void load_done(uv_work_t *w, int status) {
    srv_ctx *x = w->data;
    if (x->load_rc != 0 || status != 0) {
        srv_log(SRV_LOG_ERROR, "cannot load the model: %s", x->load_rc ? x->load_err.msg : "cancelled");
        x->exit_code = 1;
        shutdown_now(x);
        return;
    }
    if (x->stopping) return;
    x->eot_id = x->tmpl.end_of_turn ? latent_tokenizer_token_id(x->model.tok, x->tmpl.end_of_turn) : -1;
    x->max_token_bytes = longest_token(x->model.tok);
    x->json_vocab = latent_json_vocab_new(x->model.tok); /* NULL (out of memory): response_format requests get a 500 */
    latent_err err;
    x->sched = x->loaded_sched;
    x->loaded_sched = NULL;
    if (srv_sched_start(x->sched, wake_loop, on_step, x, &err) != 0) {
        srv_log(SRV_LOG_ERROR, "cannot start the scheduler: %s", err.msg);
        x->exit_code = 1;
        shutdown_now(x);
        return;
    }
    x->ready = 1;
    const latent_config *c = &x->model.cfg;
    srv_sched_stats st;
    srv_sched_get_stats(x->sched, &st);
    srv_log(SRV_LOG_INFO, "model %s loaded as '%s': %s, d %d, %d layers, vocab %d, context %d; chat template %s; "
                          "KV pool %d pages of %d tokens (%ld MiB, %s); %d engine threads; precision %s, weights %s, kernels %s%s%s; "
                          "%.1f MiB of weights held, %.1f MiB of unpacked weights released",
            x->cfg.model_dir, x->served_name,
            c->rec == LATENT_REC_T2MLR ? "T2MLR" : c->rec == LATENT_REC_LRT ? "LRT" : "Llama", c->d, c->n_layers, c->vocab,
            c->max_pos, srv_tmpl_name(x->tmpl.kind), srv_sched_pool_pages(x->sched), x->cfg.page_tokens, x->cfg.kv_pool_mib, latent_kv_dtype_name(st.kv_dtype),
            latent_get_threads(), latent_precision_name(st.precision),
            strcmp(x->cfg.weights, "q8") ? latent_precision_name(st.precision) : "q8", latent_kernel_path(),
            x->fingerprint[0] ? ", deterministic, system_fingerprint " : ", not deterministic (--deterministic false)",
            x->fingerprint, st.weight_bytes / 1048576.0,
            st.released_weight_bytes / 1048576.0);
    srv_sdnotify("READY=1\nSTATUS=serving");
}

/* ---- lifecycle ------------------------------------------------------------------------ */

static void close_cb(uv_handle_t *h) {}

static void shutdown_now(srv_ctx *x) {
    if (x->stopping) return;
    x->stopping = 1;
    srv_log(SRV_LOG_INFO, "stopping");
    srv_sdnotify("STOPPING=1");
    srv_gen_cancel_all(x);
    srv_sched_detach(x->sched);
    srv_http_stop(x->http); /* closes every request: their sessions are let go */
    x->http = NULL;
    uv_handle_t *hs[] = {(uv_handle_t *)&x->wake, (uv_handle_t *)&x->sig_term, (uv_handle_t *)&x->sig_int,
                         (uv_handle_t *)&x->sig_hup, (uv_handle_t *)&x->keepalive_timer, (uv_handle_t *)&x->watchdog_timer,
                         (uv_handle_t *)&x->drain_timer};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        if (!uv_is_closing(hs[i])) uv_close(hs[i], close_cb);
}

static void on_drain_tick(uv_timer_t *t) {
    srv_ctx *x = t->data;
    double now = latent_now_seconds();
    if (x->n_gens == 0 && (!x->grace_expired || srv_http_active(x->http) == 0 || now > x->drain_deadline + 2)) {
        srv_log(SRV_LOG_INFO, "drained");
        shutdown_now(x);
        return;
    }
    if (!x->grace_expired && now >= x->drain_deadline) {
        srv_log(SRV_LOG_WARN, "grace period over: ending %d request(s) still running", x->n_gens);
        x->grace_expired = 1;
        srv_gen_cancel_all(x);
    } else if (x->grace_expired && now > x->drain_deadline + 2) {
        shutdown_now(x); /* clients that do not read their last bytes do not hold us up */
    }
}

static void begin_drain(srv_ctx *x, const char *why) {
    if (x->draining) {
        srv_log(SRV_LOG_WARN, "%s again: ending running requests now", why);
        x->drain_deadline = latent_now_seconds();
        return;
    }
    x->draining = 1;
    x->drain_deadline = latent_now_seconds() + x->cfg.grace_seconds;
    srv_log(SRV_LOG_INFO, "%s: draining (grace %.1f s, %d request(s) running)", why, x->cfg.grace_seconds, x->n_gens);
    srv_sdnotify("STOPPING=1\nSTATUS=draining");
    srv_http_quiesce(x->http);
    if (!x->ready && !x->sched) {
        /* still loading: nothing to finish */
        x->drain_deadline = latent_now_seconds();
    }
    uv_timer_start(&x->drain_timer, on_drain_tick, 0, 50);
}

static void on_signal(uv_signal_t *s, int sig) {
    srv_ctx *x = s->data;
    if (sig == SIGHUP) {
        if (srv_log_reopen() != 0) srv_log(SRV_LOG_ERROR, "SIGHUP: cannot reopen the log file: %s", strerror(errno));
        else srv_log(SRV_LOG_INFO, "SIGHUP: log reopened");
        return;
    }
    begin_drain(x, sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_keepalive(uv_timer_t *t) { srv_gen_keepalive(t->data); }
/* WATCHDOG=1 from the loop, as long as the step thread is alive and the
 * listener still accepts: a step stuck for a whole watchdog interval, or
 * connections left waiting in the listen queue while slots are free, stop
 * the pings and systemd restarts us. */
static void on_watchdog(uv_timer_t *t) {
    srv_ctx *x = t->data;
    double interval = (double)srv_sdnotify_watchdog_usec() / 1e6;
    if (x->sched && !srv_sched_alive(x->sched, interval))
        srv_log(SRV_LOG_WARN, "the engine step thread has not finished a step for %.0f s: no watchdog ping", interval);
    else if (!srv_http_accepting(x->http))
        srv_log(SRV_LOG_ERROR, "connections wait in the listen queue with free slots and none was accepted: no watchdog ping");
    else srv_sdnotify("WATCHDOG=1");
}

/* The listening socket (systemd's when it passed one) and the HTTP layer; 0
 * or -1 with *err set. */
static int start_http(srv_ctx *x, latent_err *err) {
    int fd, activated = srv_socket_activation_take(&fd, x->listen_desc, sizeof x->listen_desc, err);
    if (activated == 0)
        fd = srv_http_listen(x->cfg.host, x->cfg.port, x->cfg.unix_path, x->listen_desc, sizeof x->listen_desc, err);
    if (activated > 0) {
        srv_log(SRV_LOG_INFO, "socket activation: serving the socket passed as fd %d (host, port and unix not used)", fd);
        free(x->cfg.unix_path); /* systemd's socket file: not ours to remove at exit */
        x->cfg.unix_path = NULL;
    }
    srv_http_opts ho = {.listen_fd = fd, .max_body = x->cfg.max_body_bytes, .max_connections = x->cfg.max_connections,
                        .max_connections_per_client = x->cfg.max_connections_per_client, .timeout_s = x->cfg.timeout_seconds,
                        .header_timeout_s = x->cfg.header_timeout_seconds, .body_timeout_s = x->cfg.body_timeout_seconds,
                        .min_body_rate = x->cfg.min_body_rate, .max_body_buffer = (size_t)x->cfg.max_body_buffer_mib << 20,
                        .stream_stall_s = x->cfg.stream_stall_seconds, .retry_after_s = x->cfg.retry_after,
                        .cors_origins = &x->cfg.cors_origins};
    srv_http_cbs cbs = {srv_routes_on_request, NULL, srv_routes_on_close}; /* generation requests attach their own abort */
    if (fd < 0 || !(x->http = srv_http_start(x->loop, &ho, &cbs, x, err))) return -1;
    return 0;
}

/* The loop's own handles: the step thread's wake-up, the signals, the timers. */
static void start_handles(srv_ctx *x) {
    uv_async_init(x->loop, &x->wake, srv_gen_on_wake);
    x->wake.data = x;
    uv_signal_t *sigs[] = {&x->sig_term, &x->sig_int, &x->sig_hup};
    int signums[] = {SIGTERM, SIGINT, SIGHUP};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(x->loop, sigs[i]);
        sigs[i]->data = x;
        uv_signal_start(sigs[i], on_signal, signums[i]);
    }
    uv_timer_t *timers[] = {&x->keepalive_timer, &x->watchdog_timer, &x->drain_timer};
    for (int i = 0; i < 3; i++) {
        uv_timer_init(x->loop, timers[i]);
        timers[i]->data = x;
    }
    uint64_t ka = (uint64_t)(x->cfg.keepalive_seconds * 500);
    uv_timer_start(&x->keepalive_timer, on_keepalive, ka ? ka : 1, ka ? ka : 1);
    uint64_t wd = srv_sdnotify_watchdog_usec();
    if (wd) uv_timer_start(&x->watchdog_timer, on_watchdog, wd / 2000, wd / 2000 ? wd / 2000 : 1);
}

static void free_ctx(srv_ctx *x) {
    srv_sched_free(x->sched);
    srv_sched_free(x->loaded_sched); /* loaded while the server was already stopping */
    uv_loop_close(x->loop);
    latent_json_vocab_free(x->json_vocab);
    latent_model_free(&x->model);
    srv_tmpl_free(&x->tmpl);
    srv_quota_free(&x->quota);
    srv_metrics_free(&x->metrics);
    free(x->ready_list);
    free(x->served_name);
    if (x->cfg.unix_path) unlink(x->cfg.unix_path);
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    static srv_ctx ctx;
    srv_ctx *x = &ctx;
    latent_err err;
    int rc = srv_config_load(&x->cfg, argc, argv, &err);
    if (rc == 1) return 0;
    if (rc != 0) {
        fprintf(stderr, "latentd: %s\n", err.msg);
        return 2;
    }
    if (srv_log_open(x->cfg.log_file, (srv_log_level)srv_log_level_parse(x->cfg.log_level), !strcmp(x->cfg.log_format, "json")) != 0) {
        fprintf(stderr, "latentd: cannot open log file %s: %s\n", x->cfg.log_file, strerror(errno));
        return 1;
    }
    x->served_name = x->cfg.served_model_name ? strdup(x->cfg.served_model_name) : default_name(x->cfg.model_dir);
    /* Fail fast on what is cheap to check: the config and the chat template. */
    char path[4200];
    latent_config mc;
    snprintf(path, sizeof path, "%s/config.json", x->cfg.model_dir);
    if (latent_config_load(path, &mc, &err) != 0 || srv_tmpl_load(&x->tmpl, x->cfg.model_dir, x->cfg.chat_template, &err) != 0) {
        srv_log(SRV_LOG_ERROR, "%s", err.msg);
        return 1;
    }
    if (x->cfg.threads > 0) latent_set_threads(x->cfg.threads);
    srv_metrics_init(&x->metrics);
    x->loop = uv_default_loop();
    if (start_http(x, &err) != 0) {
        srv_log(SRV_LOG_ERROR, "%s", err.msg);
        return 1;
    }
    start_handles(x);
    srv_log(SRV_LOG_INFO, "latentd listening on %s (model %s loading)", x->listen_desc, x->cfg.model_dir);

    x->load_work.data = x;
    uv_queue_work(x->loop, &x->load_work, load_work, load_done);
    uv_run(x->loop, UV_RUN_DEFAULT);

    free_ctx(x);
    srv_log(SRV_LOG_INFO, "exit %d", x->exit_code);
    srv_log_close();
    srv_config_free(&x->cfg);
    return x->exit_code;
}
