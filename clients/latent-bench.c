/* latent-bench: N concurrent streaming clients against an OpenAI-compatible
 * server (latentd, or anything else that speaks the API): aggregate
 * tokens/s, time to first token and inter-token latency (p50/p90/p99 and the
 * sample count), errors. With --compare URL2 it measures two servers in
 * alternating rounds and prints the per-token overhead of the first over the
 * second with a bootstrap confidence interval.
 * One thread, libcurl's multi interface; each client sends its next request
 * as soon as the previous one ends (within a round, with --compare). */
#include <curl/curl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_stats.h"
#include "latent/clock.h"

static const char *help =
    "usage: latent-bench --url URL [--compare URL2] [--clients N] [--requests R | --duration S]\n"
    "                    [--max-tokens T] [--prompt TEXT] [--chat] [--model NAME] [--api-key KEY]\n"
    "                    [--temperature X] [--cancel-fraction F] [--nonstream-fraction F] [--seed S]\n"
    "                    [--no-ignore-eos]\n"
    "\n"
    "Runs N clients (default 8), each sending streamed completions one after another\n"
    "(max_tokens T, default 128, ignore_eos so every request generates T tokens) until R\n"
    "requests in all (default 4 per client) or S seconds. Prints aggregate generated\n"
    "tokens/s (usage.completion_tokens over wall time), time to first token and\n"
    "inter-token latency (gaps between streamed chunks) as p50/p90/p99 (linear\n"
    "interpolation between order statistics) with the number of samples, and errors.\n"
    "--cancel-fraction aborts that share of requests after a random number of chunks,\n"
    "--nonstream-fraction sends that share without streaming (a soak mix); --chat\n"
    "uses /v1/chat/completions. After the run it reads latentd_sessions from /metrics\n"
    "(when the server has it) to report sessions left behind.\n"
    "\n"
    "--compare URL2: A = URL and B = URL2 (e.g. one model with and without its\n"
    "recurrence) are measured in rounds: a round sends one streamed request per client\n"
    "(N at once, the same prompts and seeds on A and B) to one server and waits for all\n"
    "of them; round pairs go in ABBA order (AB, BA, AB, ...) after one unmeasured\n"
    "warm-up round on each. R is then requests per server, rounded up to whole rounds\n"
    "(default 8 round pairs), or pairs run until S seconds have passed. Prints each\n"
    "server's distributions and the per-token overhead: per-token decode time (first to\n"
    "last chunk over completion_tokens - 1, the token-weighted mean inter-token latency)\n"
    "of A over B, with a 95% percentile-bootstrap interval over round pairs (2000\n"
    "resamples; a round's requests share their batches, so the round pair is the\n"
    "independent unit), and the ratio of median inter-token latencies.\n";

typedef struct { double *v; size_t n, cap; } samples;

static void push(samples *s, double x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) { fprintf(stderr, "latent-bench: out of memory\n"); exit(1); }
    }
    s->v[s->n++] = x;
}

/* "p50 1.2 ms, p90 1.5 ms, p99 2.0 ms (n 123)" for a distribution in seconds. */
static void print_dist(const char *indent, const char *what, samples *s, int decimals) {
    bench_sort(s->v, s->n);
    double q[3] = {0.5, 0.9, 0.99};
    printf("%s%s:", indent, what);
    for (int k = 0; k < 3; k++)
        printf("%s p%.0f %.*f ms", k ? "," : "", q[k] * 100, decimals, bench_percentile(s->v, s->n, q[k]) * 1e3);
    printf(" (n %zu)\n", s->n);
}

static double median(samples *s) {
    bench_sort(s->v, s->n);
    return bench_percentile(s->v, s->n, 0.5);
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static double uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (rng >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct {
    const char *url, *compare, *prompt, *model, *api_key;
    int clients, requests, max_tokens, chat, ignore_eos;
    double duration, temperature, cancel_frac, nonstream_frac;
} opts;

/* One server and what was measured on it. */
typedef struct target {
    const char *name, *url;
    samples ttft, itl, e2e;
    long long tokens, ok, err, cancelled;
    double busy;  /* seconds spent running requests on it */
    double decode_s; long long decode_tokens; /* first to last chunk, and the tokens after the first */
} target;

typedef struct client {
    CURL *h;
    struct curl_slist *hdrs;
    char *body;
    char *buf; size_t n, cap;  /* unparsed response bytes */
    double t_start, t_last;
    int got_first, done_seen, tokens, stream, cancel_after, chunks;
    long status;
    target *t;
    samples itl;               /* this request's gaps, kept once it succeeds */
    double ttft;
} client;

static opts o;
static int verbose_errors = 5;
static int counting = 1;       /* 0 during warm-up rounds */
static bench_pair *cur_pair;   /* --compare: the round pair being measured */

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
            double now = latent_now_seconds();
            if (!c->got_first) c->ttft = now - c->t_start, c->got_first = 1;
            else push(&c->itl, now - c->t_last);
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

static void start_request(CURLM *m, client *c, target *t, long seed) {
    static char esc[65536];
    json_escape(esc, sizeof esc, o.prompt);
    c->t = t;
    c->stream = uniform() >= o.nonstream_frac;
    c->cancel_after = uniform() < o.cancel_frac ? (int)(uniform() * o.max_tokens / 2) : -1;
    free(c->body);
    size_t cap = strlen(esc) + 512;
    c->body = malloc(cap);
    char model[300] = "";
    if (o.model) snprintf(model, sizeof model, "\"model\":\"%s\",", o.model);
    if (o.chat)
        snprintf(c->body, cap, "{%s\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%d,\"temperature\":%g,"
                 "\"seed\":%ld,\"ignore_eos\":%s,\"stream\":%s,\"stream_options\":{\"include_usage\":true}}",
                 model, esc, o.max_tokens, o.temperature, seed, o.ignore_eos ? "true" : "false", c->stream ? "true" : "false");
    else
        snprintf(c->body, cap, "{%s\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":%g,\"seed\":%ld,\"ignore_eos\":%s,"
                 "\"stream\":%s,\"stream_options\":{\"include_usage\":true}}",
                 model, esc, o.max_tokens, o.temperature, seed, o.ignore_eos ? "true" : "false", c->stream ? "true" : "false");
    char url[1024];
    snprintf(url, sizeof url, "%s%s", t->url, o.chat ? "/v1/chat/completions" : "/v1/completions");
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
    c->itl.n = 0;
    c->t_start = latent_now_seconds();
    curl_multi_add_handle(m, c->h);
}

/* The request's timings go to its target (and the current round pair). The
 * per-token time is decode time over tokens: the gaps add up to the time from
 * the first chunk to the last, which carried usage.completion_tokens - 1
 * tokens (more than the gaps when a chunk holds several tokens, e.g. bytes of
 * one character; the number of gaps when the server sends no usage). */
static void keep_samples(client *c) {
    if (!counting) return;
    target *t = c->t;
    if (c->got_first) push(&t->ttft, c->ttft);
    double sum = 0;
    for (size_t i = 0; i < c->itl.n; i++) push(&t->itl, c->itl.v[i]), sum += c->itl.v[i];
    long n = c->itl.n == 0 ? 0 : c->tokens > 1 ? c->tokens - 1 : (long)c->itl.n;
    t->decode_s += sum;
    t->decode_tokens += n;
    if (cur_pair) {
        int is_a = t->name[0] == 'A';
        *(is_a ? &cur_pair->a_sum : &cur_pair->b_sum) += sum;
        *(is_a ? &cur_pair->a_n : &cur_pair->b_n) += n;
    }
}

/* A request ended: account for it. */
static void finish_request(client *c, CURLcode rc) {
    target *t = c->t;
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &c->status);
    double dt = latent_now_seconds() - c->t_start;
    if (c->cancel_after >= 0 && rc == CURLE_WRITE_ERROR) {
        if (counting) t->cancelled++;
        keep_samples(c);
        return;
    }
    if (!c->stream && rc == CURLE_OK && c->status == 200) {
        const char *u = c->buf ? strstr(c->buf, "\"completion_tokens\":") : NULL;
        c->tokens = u ? atoi(u + 20) : 0;
        c->done_seen = 1;
    }
    if (rc != CURLE_OK || c->status != 200 || !c->done_seen) {
        t->err++; /* warm-up errors count too: the exit status must show them */
        if (verbose_errors-- > 0)
            fprintf(stderr, "latent-bench: %s: request failed: %s, HTTP %ld: %.*s\n", t->url, curl_easy_strerror(rc),
                    c->status, (int)(c->n < 200 ? c->n : 200), c->buf ? c->buf : ""); /* this response's bytes only */
        return;
    }
    if (!counting) return;
    t->ok++;
    t->tokens += c->tokens;
    push(&t->e2e, dt);
    keep_samples(c);
}

/* Runs requests on t with o.clients clients until `requests` have been sent
 * (requests < 0: until `duration` seconds) and every one has ended. Request k
 * of the run gets seed seed_base + k. */
static void run(CURLM *m, client *cs, target *t, long requests, double duration, long seed_base) {
    double t0 = latent_now_seconds();
    long sent = 0;
    int running = 0, active = 0;
    for (int i = 0; i < o.clients && (requests < 0 || sent < requests); i++)
        start_request(m, &cs[i], t, seed_base + sent++), active++;
    while (active > 0) {
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            client *c;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            finish_request(c, msg->data.result);
            int more = requests >= 0 ? sent < requests : latent_now_seconds() - t0 < duration;
            if (more) start_request(m, c, t, seed_base + sent++);
            else curl_multi_remove_handle(m, c->h), active--;
        }
        curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    if (counting) t->busy += latent_now_seconds() - t0;
}

static long sessions_left(const char *base) {
    CURL *h = curl_easy_init();
    client c = {0};
    char url[1024];
    snprintf(url, sizeof url, "%s/metrics", base);
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

static void print_target(const char *indent, target *t) {
    print_dist(indent, "time to first token", &t->ttft, 1);
    print_dist(indent, "inter-token latency", &t->itl, 1);
    print_dist(indent, "request latency", &t->e2e, 0);
    long left = sessions_left(t->url);
    if (left >= 0) printf("%sserver sessions left after the run: %ld\n", indent, left);
}

/* --compare: warm-up, then round pairs in ABBA order; prints both and the ratio. */
static void compare(CURLM *m, client *cs, target *a, target *b) {
    long per_round = o.clients;
    long pairs_max = o.requests > 0 ? (o.requests + per_round - 1) / per_round : o.duration > 0 ? -1 : 8;
    counting = 0;
    run(m, cs, a, per_round, 0, 0);
    run(m, cs, b, per_round, 0, 0);
    counting = 1;
    bench_pair *pairs = NULL;
    long n_pairs = 0, cap = 0;
    double t0 = latent_now_seconds();
    while (pairs_max < 0 ? latent_now_seconds() - t0 < o.duration || n_pairs < 2 : n_pairs < pairs_max) {
        if (n_pairs == cap) {
            cap = cap ? 2 * cap : 16;
            pairs = realloc(pairs, (size_t)cap * sizeof *pairs);
            if (!pairs) { fprintf(stderr, "latent-bench: out of memory\n"); exit(1); }
        }
        cur_pair = &pairs[n_pairs];
        memset(cur_pair, 0, sizeof *cur_pair);
        target *first = n_pairs % 2 ? b : a, *second = n_pairs % 2 ? a : b;
        long seed = n_pairs * per_round; /* the same seeds in both rounds of a pair */
        run(m, cs, first, per_round, 0, seed);
        run(m, cs, second, per_round, 0, seed);
        n_pairs++;
    }
    cur_pair = NULL;
    double wall = latent_now_seconds() - t0;
    printf("compare: %d clients, %ld round pairs in ABBA order after 1 warm-up round each, %.1f s; "
           "a round is %ld streamed requests to one server at once (same prompts and seeds on both)\n",
           o.clients, n_pairs, wall, per_round);
    target *ts[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        target *t = ts[k];
        printf("%s: %s\n", t->name, t->url);
        printf("  requests %lld ok, %lld errors, %.1f s in its rounds, %.1f generated tokens/s (%lld tokens)\n", t->ok,
               t->err, t->busy, t->busy > 0 ? t->tokens / t->busy : 0, t->tokens);
        printf("  per-token decode time: %.4g ms (%.2f s from first to last chunk over %lld tokens)\n",
               t->decode_tokens ? t->decode_s / (double)t->decode_tokens * 1e3 : 0, t->decode_s, t->decode_tokens);
        print_target("  ", t);
    }
    double lo, hi;
    double r = bench_ratio_ci(pairs, (int)n_pairs, 2000, 0.95, 12345, &lo, &hi);
    double med_b = median(&b->itl), med_r = med_b > 0 ? median(&a->itl) / med_b : 0;
    printf("per-token overhead A/B: per-token decode time ratio %.3f, 95%% CI %.3f-%.3f "
           "(percentile bootstrap over %ld round pairs, 2000 resamples); median inter-token latency ratio %.3f\n",
           r, lo, hi, n_pairs, med_r);
    if (n_pairs < 10) printf("  (fewer than 10 round pairs: the interval is rough)\n");
    free(pairs);
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

static int is_url(const char *u) { return u && (!strncmp(u, "http://", 7) || !strncmp(u, "https://", 8)); }

int main(int argc, char **argv) {
    o = (opts){.url = NULL, .prompt = "Write a long story about a robot who learns to paint.", .clients = 8,
               .requests = -1, .max_tokens = 128, .ignore_eos = 1, .temperature = 0};
    const char *v;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(help, stdout); return 0; }
        else if (!strcmp(argv[i], "--chat")) o.chat = 1;
        else if (!strcmp(argv[i], "--no-ignore-eos")) o.ignore_eos = 0;
        else if (arg(argc, argv, &i, "--url", &v)) o.url = v;
        else if (arg(argc, argv, &i, "--compare", &v)) o.compare = v;
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
    if (!is_url(o.url) || (o.compare && !is_url(o.compare)) || o.clients < 1 || o.max_tokens < 1) {
        fputs(help, stderr);
        return 2;
    }
    if (o.compare && (o.cancel_frac > 0 || o.nonstream_frac > 0)) {
        fprintf(stderr, "latent-bench: --compare measures whole streamed requests; "
                        "--cancel-fraction and --nonstream-fraction do not apply\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURLM *m = curl_multi_init();
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)o.clients);
    client *cs = calloc(o.clients, sizeof *cs);
    target a = {.name = "A", .url = o.url}, b = {.name = "B", .url = o.compare};
    if (o.compare) {
        compare(m, cs, &a, &b);
    } else {
        if (o.requests < 0 && o.duration <= 0) o.requests = 4 * o.clients;
        double t0 = latent_now_seconds();
        run(m, cs, &a, o.requests, o.duration, 0);
        double wall = latent_now_seconds() - t0;
        printf("clients %d, requests %lld ok, %lld errors, %lld cancelled on purpose, %.1f s\n", o.clients, a.ok, a.err,
               a.cancelled, wall);
        printf("throughput: %.1f generated tokens/s (%lld tokens)\n", a.tokens / wall, a.tokens);
        print_target("", &a);
    }
    for (int i = 0; i < o.clients; i++) {
        if (cs[i].h) curl_easy_cleanup(cs[i].h);
        curl_slist_free_all(cs[i].hdrs);
        free(cs[i].body), free(cs[i].buf), free(cs[i].itl.v);
    }
    free(cs);
    target *ts[2] = {&a, &b};
    for (int k = 0; k < 2; k++) free(ts[k]->ttft.v), free(ts[k]->itl.v), free(ts[k]->e2e.v);
    curl_multi_cleanup(m);
    curl_global_cleanup();
    return a.err || b.err ? 1 : 0;
}
