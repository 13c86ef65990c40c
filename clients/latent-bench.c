/* latent-bench: N concurrent streaming clients against an OpenAI-compatible
 * server (latentd, or anything else that speaks the API): aggregate
 * tokens/s, time to first token and inter-token latency (p50/p99), errors.
 * One thread, libcurl's multi interface; each client sends its next request
 * as soon as the previous one ends. */
#include <curl/curl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *help =
    "usage: latent-bench --url URL [--clients N] [--requests R | --duration S] [--max-tokens T]\n"
    "                    [--prompt TEXT] [--chat] [--model NAME] [--api-key KEY] [--temperature X]\n"
    "                    [--cancel-fraction F] [--nonstream-fraction F] [--seed S] [--no-ignore-eos]\n"
    "\n"
    "Runs N clients (default 8), each sending streamed completions one after another\n"
    "(max_tokens T, default 128, ignore_eos so every request generates T tokens) until R\n"
    "requests in all (default 4 per client) or S seconds. Prints aggregate generated\n"
    "tokens/s (usage.completion_tokens over wall time), time to first token and\n"
    "inter-token latency (gaps between streamed chunks) as p50/p99, and errors.\n"
    "--cancel-fraction aborts that share of requests after a random number of chunks,\n"
    "--nonstream-fraction sends that share without streaming (a soak mix); --chat\n"
    "uses /v1/chat/completions. After the run it reads latentd_sessions from /metrics\n"
    "(when the server has it) to report sessions left behind.\n";

typedef struct { double *v; size_t n, cap; } samples;

static void push(samples *s, double x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) { fprintf(stderr, "latent-bench: out of memory\n"); exit(1); }
    }
    s->v[s->n++] = x;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(samples *s, double p) {
    if (!s->n) return 0;
    qsort(s->v, s->n, sizeof *s->v, cmp);
    size_t i = (size_t)(p * (s->n - 1) + 0.5);
    return s->v[i];
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static double uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (rng >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct {
    const char *url, *prompt, *model, *api_key;
    int clients, requests, max_tokens, chat, ignore_eos;
    double duration, temperature, cancel_frac, nonstream_frac;
} opts;

typedef struct client {
    CURL *h;
    struct curl_slist *hdrs;
    char *body;
    char *buf; size_t n, cap;  /* unparsed response bytes */
    double t_start, t_last;
    int got_first, done_seen, tokens, stream, cancel_after, chunks;
    long status;
} client;

static opts o;
static samples ttft, itl, e2e;
static long long tokens_total, n_ok, n_err, n_cancelled, n_sent;
static int verbose_errors = 5;

/* One SSE event (the text after "data: "). */
static void on_event(client *c, const char *ev, size_t n) {
    if (n >= 6 && !strncmp(ev, "[DONE]", 6)) {
        c->done_seen = 1;
        return;
    }
    const char *u = strstr(ev, "\"completion_tokens\":");
    if (u && u < ev + n) c->tokens = atoi(u + 20);
    /* a chunk with generated text: "text":"x or "content":"x (not empty) */
    const char *t = strstr(ev, o.chat ? "\"content\":\"" : "\"text\":\"");
    if (t && t < ev + n) {
        t += o.chat ? 11 : 8;
        if (*t != '"') {
            double now = now_s();
            if (!c->got_first) push(&ttft, now - c->t_start), c->got_first = 1;
            else push(&itl, now - c->t_last);
            c->t_last = now;
            c->chunks++;
        }
    }
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *arg) {
    client *c = arg;
    size_t len = size * nmemb;
    if (c->n + len + 1 > c->cap) {
        c->cap = (c->n + len + 1) * 2;
        c->buf = realloc(c->buf, c->cap);
        if (!c->buf) return 0;
    }
    memcpy(c->buf + c->n, p, len);
    c->n += len;
    c->buf[c->n] = 0;
    if (!c->stream) return len;
    char *start = c->buf, *end;
    while ((end = strstr(start, "\n\n"))) {
        if (!strncmp(start, "data: ", 6)) on_event(c, start + 6, (size_t)(end - start - 6));
        start = end + 2;
    }
    size_t rest = c->n - (size_t)(start - c->buf);
    memmove(c->buf, start, rest);
    c->n = rest;
    if (c->cancel_after >= 0 && c->chunks >= c->cancel_after) return 0; /* abort: the client leaves */
    return len;
}

static void json_escape(char *out, size_t cap, const char *s) {
    size_t k = 0;
    for (; *s && k + 8 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') out[k++] = '\\', out[k++] = (char)ch;
        else if (ch < 0x20) k += (size_t)snprintf(out + k, cap - k, "\\u%04x", ch);
        else out[k++] = (char)ch;
    }
    out[k] = 0;
}

static void start_request(CURLM *m, client *c, int i) {
    static char esc[65536];
    json_escape(esc, sizeof esc, o.prompt);
    c->stream = uniform() >= o.nonstream_frac;
    c->cancel_after = uniform() < o.cancel_frac ? (int)(uniform() * o.max_tokens / 2) : -1;
    free(c->body);
    size_t cap = strlen(esc) + 512;
    c->body = malloc(cap);
    char model[300] = "";
    if (o.model) snprintf(model, sizeof model, "\"model\":\"%s\",", o.model);
    if (o.chat)
        snprintf(c->body, cap, "{%s\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%d,\"temperature\":%g,"
                 "\"seed\":%d,\"ignore_eos\":%s,\"stream\":%s,\"stream_options\":{\"include_usage\":true}}",
                 model, esc, o.max_tokens, o.temperature, i, o.ignore_eos ? "true" : "false", c->stream ? "true" : "false");
    else
        snprintf(c->body, cap, "{%s\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":%g,\"seed\":%d,\"ignore_eos\":%s,"
                 "\"stream\":%s,\"stream_options\":{\"include_usage\":true}}",
                 model, esc, o.max_tokens, o.temperature, i, o.ignore_eos ? "true" : "false", c->stream ? "true" : "false");
    char url[1024];
    snprintf(url, sizeof url, "%s%s", o.url, o.chat ? "/v1/chat/completions" : "/v1/completions");
    if (!c->h) {
        c->h = curl_easy_init();
        c->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
        if (o.api_key) {
            char a[600];
            snprintf(a, sizeof a, "Authorization: Bearer %s", o.api_key);
            c->hdrs = curl_slist_append(c->hdrs, a);
        }
    } else {
        curl_multi_remove_handle(m, c->h);
    }
    curl_easy_setopt(c->h, CURLOPT_URL, url);
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->hdrs);
    curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, c->body);
    curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c->h, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->h, CURLOPT_PRIVATE, c);
    curl_easy_setopt(c->h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c->h, CURLOPT_TIMEOUT, 600L);
    c->n = 0, c->got_first = c->done_seen = c->tokens = c->chunks = 0;
    c->t_start = now_s();
    curl_multi_add_handle(m, c->h);
    n_sent++;
}

/* A request ended: account for it. */
static void finish_request(client *c, CURLcode rc) {
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &c->status);
    double t = now_s() - c->t_start;
    if (c->cancel_after >= 0 && rc == CURLE_WRITE_ERROR) {
        n_cancelled++;
        return;
    }
    if (!c->stream && rc == CURLE_OK && c->status == 200) {
        const char *u = c->buf ? strstr(c->buf, "\"completion_tokens\":") : NULL;
        c->tokens = u ? atoi(u + 20) : 0;
        c->done_seen = 1;
    }
    if (rc != CURLE_OK || c->status != 200 || !c->done_seen) {
        n_err++;
        if (verbose_errors-- > 0)
            fprintf(stderr, "latent-bench: request failed: %s, HTTP %ld: %.200s\n", curl_easy_strerror(rc), c->status,
                    c->buf ? c->buf : "");
        return;
    }
    n_ok++;
    tokens_total += c->tokens;
    push(&e2e, t);
}

static long sessions_left(void) {
    CURL *h = curl_easy_init();
    client c = {0};
    char url[1024];
    snprintf(url, sizeof url, "%s/metrics", o.url);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &c);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    long left = -1;
    if (curl_easy_perform(h) == CURLE_OK && c.buf) {
        const char *p = strstr(c.buf, "\nlatentd_sessions ");
        if (p) left = atol(p + 18);
    }
    free(c.buf);
    curl_easy_cleanup(h);
    return left;
}

static int arg(int argc, char **argv, int *i, const char *name, const char **v) {
    if (strcmp(argv[*i], name) != 0) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "latent-bench: %s needs a value\n", name);
        exit(2);
    }
    *v = argv[++*i];
    return 1;
}

int main(int argc, char **argv) {
    o = (opts){.url = NULL, .prompt = "Write a long story about a robot who learns to paint.", .clients = 8,
               .requests = -1, .max_tokens = 128, .ignore_eos = 1, .temperature = 0};
    const char *v;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(help, stdout); return 0; }
        else if (!strcmp(argv[i], "--chat")) o.chat = 1;
        else if (!strcmp(argv[i], "--no-ignore-eos")) o.ignore_eos = 0;
        else if (arg(argc, argv, &i, "--url", &v)) o.url = v;
        else if (arg(argc, argv, &i, "--clients", &v)) o.clients = atoi(v);
        else if (arg(argc, argv, &i, "--requests", &v)) o.requests = atoi(v);
        else if (arg(argc, argv, &i, "--duration", &v)) o.duration = atof(v);
        else if (arg(argc, argv, &i, "--max-tokens", &v)) o.max_tokens = atoi(v);
        else if (arg(argc, argv, &i, "--prompt", &v)) o.prompt = v;
        else if (arg(argc, argv, &i, "--model", &v)) o.model = v;
        else if (arg(argc, argv, &i, "--api-key", &v)) o.api_key = v;
        else if (arg(argc, argv, &i, "--temperature", &v)) o.temperature = atof(v);
        else if (arg(argc, argv, &i, "--cancel-fraction", &v)) o.cancel_frac = atof(v);
        else if (arg(argc, argv, &i, "--nonstream-fraction", &v)) o.nonstream_frac = atof(v);
        else if (arg(argc, argv, &i, "--seed", &v)) rng = strtoull(v, NULL, 10) * 2654435761ULL + 1;
        else { fprintf(stderr, "latent-bench: unknown option '%s'\n%s", argv[i], help); return 2; }
    }
    if (!o.url || (strncmp(o.url, "http://", 7) && strncmp(o.url, "https://", 8)) || o.clients < 1 || o.max_tokens < 1) {
        fputs(help, stderr);
        return 2;
    }
    if (o.requests < 0 && o.duration <= 0) o.requests = 4 * o.clients;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURLM *m = curl_multi_init();
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)o.clients);
    client *cs = calloc(o.clients, sizeof *cs);
    double t0 = now_s();
    int running = 0, active = 0;
    for (int i = 0; i < o.clients && (o.requests < 0 || n_sent < o.requests); i++) start_request(m, &cs[i], (int)n_sent), active++;
    while (active > 0) {
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            client *c;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            finish_request(c, msg->data.result);
            int more = o.requests >= 0 ? n_sent < o.requests : now_s() - t0 < o.duration;
            if (more) start_request(m, c, (int)n_sent);
            else curl_multi_remove_handle(m, c->h), active--;
        }
        curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    double wall = now_s() - t0;
    printf("clients %d, requests %lld ok, %lld errors, %lld cancelled on purpose, %.1f s\n", o.clients, n_ok, n_err,
           n_cancelled, wall);
    printf("throughput: %.1f generated tokens/s (%lld tokens)\n", tokens_total / wall, tokens_total);
    printf("time to first token: p50 %.1f ms, p99 %.1f ms\n", pct(&ttft, 0.5) * 1e3, pct(&ttft, 0.99) * 1e3);
    printf("inter-token latency: p50 %.1f ms, p99 %.1f ms\n", pct(&itl, 0.5) * 1e3, pct(&itl, 0.99) * 1e3);
    printf("request latency: p50 %.0f ms, p99 %.0f ms\n", pct(&e2e, 0.5) * 1e3, pct(&e2e, 0.99) * 1e3);
    long left = sessions_left();
    if (left >= 0) printf("server sessions left after the run: %ld\n", left);
    for (int i = 0; i < o.clients; i++) {
        if (cs[i].h) curl_easy_cleanup(cs[i].h);
        curl_slist_free_all(cs[i].hdrs);
        free(cs[i].body), free(cs[i].buf);
    }
    free(cs);
    curl_multi_cleanup(m);
    curl_global_cleanup();
    return n_err ? 1 : 0;
}
