/* Settings from defaults, a config file and flags, through one table. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

typedef enum { OPT_STR, OPT_INT, OPT_LONG, OPT_DOUBLE, OPT_LIST } opt_type;

/* One row per setting: its flag and config key, type, default (as the text
 * a config file would hold; NULL: unset), range or choices, and help. The
 * defaults, --help, --settings and the docs' check all come from here. */
typedef struct {
    const char *name;
    opt_type type;
    size_t offset;
    const char *dflt;
    double lo, hi;            /* numeric range */
    const char *choices;      /* "a|b|c" for enumerated strings */
    const char *arg, *help;
} opt;

#define O(f) offsetof(srv_config, f)
static const opt opts[] = {
    {"model", OPT_STR, O(model_dir), NULL, 0, 0, NULL, "DIR", "model directory (config.json, model.safetensors, tokenizer.json)"},
    {"host", OPT_STR, O(host), "127.0.0.1", 0, 0, NULL, "ADDR", "address to listen on"},
    {"port", OPT_INT, O(port), "8080", 0, 65535, NULL, "N", "TCP port (0 picks a free one and logs it)"},
    {"unix", OPT_STR, O(unix_path), NULL, 0, 0, NULL, "PATH", "listen on this unix socket instead of TCP"},
    {"kv-pool-mib", OPT_LONG, O(kv_pool_mib), "512", 1, 1 << 24, NULL, "MIB", "KV cache pool size"},
    {"page-tokens", OPT_INT, O(page_tokens), "16", 1, 4096, NULL, "N", "tokens per KV page"},
    {"max-sessions", OPT_INT, O(max_sessions), "64", 1, 4096, NULL, "N", "sequences generating at once"},
    {"queue-len", OPT_INT, O(queue_len), "256", 0, 1 << 20, NULL, "N", "sequences that may wait for a slot before 429"},
    {"step-tokens", OPT_INT, O(step_tokens), "512", 1, 1 << 20, NULL, "N", "token budget of one engine step"},
    {"prefill-chunk", OPT_INT, O(prefill_chunk), "32", 1, 1 << 20, NULL, "N",
     "prompt tokens a sequence prefills per step while others decode"},
    {"max-tokens", OPT_INT, O(max_tokens), "4096", 1, 1 << 24, NULL, "N", "most tokens one request may generate"},
    {"threads", OPT_INT, O(threads), "0", 0, 1024, NULL, "N", "engine threads (0 = online cores)"},
    {"precision", OPT_STR, O(precision), "auto", 0, 0, "auto|f32|bf16", "P",
     "what the matrix products compute in (auto: bf16 for BF16 checkpoints, else f32)"},
    {"weights", OPT_STR, O(weights), "auto", 0, 0, "auto|f32|bf16|q8", "W",
     "how the matrices are held: as the precision says (auto, f32, bf16) or int8 with a scale per 32 (q8)"},
    {"kv-dtype", OPT_STR, O(kv_dtype), "auto", 0, 0, "auto|f32|bf16", "T",
     "what the KV cache stores (auto: bf16 under bf16, else f32)"},
    {"deterministic", OPT_STR, O(deterministic), "true", 0, 0, "true|false", "B",
     "true: a request's tokens and logprobs are the same bits alone or under any load (docs/api.md); "
     "false: faster prefill, rounding that depends on the batch"},
    {"api-key", OPT_LIST, O(api_keys), NULL, 0, 0, NULL, "KEY", "accept this bearer key (repeatable; none = no auth)"},
    {"api-key-file", OPT_STR, O(api_key_file), NULL, 0, 0, NULL, "PATH", "file of API keys, one per line"},
    {"cors-origin", OPT_LIST, O(cors_origins), NULL, 0, 0, NULL, "ORIGIN", "allow this browser origin (repeatable; * = any)"},
    {"log-level", OPT_STR, O(log_level), "info", 0, 0, "error|warn|info|debug", "LEVEL", "log level"},
    {"log-format", OPT_STR, O(log_format), "text", 0, 0, "text|json", "FMT", "log lines as text or JSON"},
    {"log-file", OPT_STR, O(log_file), NULL, 0, 0, NULL, "PATH", "log to this file (unset: stderr); SIGHUP reopens it"},
    {"served-model-name", OPT_STR, O(served_model_name), NULL, 0, 0, NULL, "NAME", "model id in the API (unset: the directory's name)"},
    {"grace-seconds", OPT_DOUBLE, O(grace_seconds), "30", 0, 86400, NULL, "S", "on SIGTERM, let running requests finish this long"},
    {"chat-template", OPT_STR, O(chat_template), NULL, 0, 0, "chatml|llama3|plain", "NAME",
     "chat template (unset: recognised from tokenizer_config.json)"},
    {"max-body-bytes", OPT_LONG, O(max_body_bytes), "4194304", 64, 1L << 32, NULL, "N", "largest request body (413 past it)"},
    {"max-connections", OPT_INT, O(max_connections), "1024", 1, 1 << 20, NULL, "N", "open connections at most"},
    {"max-connections-per-client", OPT_INT, O(max_connections_per_client), "256", 0, 1 << 20, NULL, "N",
     "open connections from one client address at most (0 = no limit; behind a proxy, 0)"},
    {"timeout-seconds", OPT_INT, O(timeout_seconds), "60", 0, 86400, NULL, "S", "close idle connections after this (0 = never)"},
    {"header-timeout-seconds", OPT_INT, O(header_timeout_seconds), "10", 1, 86400, NULL, "S",
     "a request's header must be complete this long after its connection opened (after a kept-alive one's idle time)"},
    {"body-timeout-seconds", OPT_INT, O(body_timeout_seconds), "10", 1, 86400, NULL, "S",
     "drop a request whose body sends nothing this long"},
    {"min-body-rate", OPT_LONG, O(min_body_rate), "65536", 0, 1L << 32, NULL, "BYTES",
     "bytes per second a request body must average once body-timeout-seconds have passed (0 = no minimum)"},
    {"max-body-buffer-mib", OPT_INT, O(max_body_buffer_mib), "256", 1, 1 << 20, NULL, "MIB",
     "request-body memory of all requests together; 503 with Retry-After past it"},
    {"stream-stall-seconds", OPT_INT, O(stream_stall_seconds), "30", 0, 86400, NULL, "S",
     "cancel a stream whose client has taken no bytes this long (0 = never)"},
    {"keepalive-seconds", OPT_DOUBLE, O(keepalive_seconds), "10", 0.05, 3600, NULL, "S",
     "SSE keep-alive comment interval while a stream waits in the queue"},
    {"prefix-cache", OPT_INT, O(prefix_cache), "64", 0, 1 << 16, NULL, "N", "finished sequences kept for prefix reuse (0 = off)"},
    {"retry-after", OPT_INT, O(retry_after), "1", 0, 3600, NULL, "S", "Retry-After seconds on 429 and 503"},
    {"max-sequences-per-client", OPT_INT, O(max_sequences_per_client), "64", 0, 1 << 20, NULL, "N",
     "sequences one client (API key, else address) may have running or queued; 429 past it (0 = no limit)"},
    {"trust-forwarded-for", OPT_INT, O(trust_forwarded_for), "0", 0, 1, NULL, "0|1",
     "1 behind a proxy that sets X-Forwarded-For: its last entry is the client's address"},
};
#undef O
#define N_OPTS (int)(sizeof opts / sizeof opts[0])

void srv_config_usage(void) {
    printf("usage: latentd --model DIR [options]\n"
           "       latentd --config FILE [options]\n\n"
           "Serves a model over an OpenAI-compatible HTTP API with continuous batching.\n"
           "Every option is also a config file key (`name = value`); options given\n"
           "here win over the file.\n\n"
           "  --config FILE                  read settings from FILE first\n");
    for (int i = 0; i < N_OPTS; i++) {
        char left[48];
        snprintf(left, sizeof left, "--%s %s", opts[i].name, opts[i].arg);
        if (opts[i].dflt) printf("  %-30s %s (default %s)\n", left, opts[i].help, opts[i].dflt);
        else printf("  %-30s %s\n", left, opts[i].help);
    }
    printf("  --settings                     print every setting: name, default, range, help (tab-separated)\n"
           "  --help, --version\n");
}

/* name \t default (or "-") \t range or choices (or "-") \t help */
static void print_settings(void) {
    for (int i = 0; i < N_OPTS; i++) {
        const opt *o = &opts[i];
        char range[64] = "-";
        if (o->choices) snprintf(range, sizeof range, "%s", o->choices);
        else if (o->type == OPT_INT || o->type == OPT_LONG) snprintf(range, sizeof range, "%.0f..%.0f", o->lo, o->hi);
        else if (o->type == OPT_DOUBLE) snprintf(range, sizeof range, "%g..%g", o->lo, o->hi);
        printf("%s\t%s\t%s\t%s\n", o->name, o->dflt ? o->dflt : "-", range, o->help);
    }
}

static int config_set_opt(srv_config *c, const opt *o, const char *value, const char *origin, latent_err *err);

static void defaults(srv_config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < N_OPTS; i++)
        if (opts[i].dflt && config_set_opt(c, &opts[i], opts[i].dflt, "default", NULL) != 0) abort(); /* a bad row */
}

static void list_clear(srv_strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
    l->items = NULL, l->n = 0;
}

static int list_add(srv_strlist *l, const char *s) {
    char **items = realloc(l->items, (l->n + 1) * sizeof *items);
    if (!items) return -1;
    l->items = items;
    if (!(l->items[l->n] = strdup(s))) return -1;
    l->n++;
    return 0;
}

void srv_config_free(srv_config *c) {
    if (!c) return;
    for (int i = 0; i < N_OPTS; i++) {
        void *f = (char *)c + opts[i].offset;
        if (opts[i].type == OPT_STR) free(*(char **)f);
        if (opts[i].type == OPT_LIST) list_clear(f);
    }
    free(c->config_path);
    memset(c, 0, sizeof *c);
}

static const opt *find_opt(const char *key) {
    char norm[64];
    size_t n = strlen(key);
    if (n >= sizeof norm) return NULL;
    for (size_t i = 0; i <= n; i++) norm[i] = key[i] == '_' ? '-' : key[i];
    for (int i = 0; i < N_OPTS; i++)
        if (!strcmp(opts[i].name, norm)) return &opts[i];
    return NULL;
}

static int in_choices(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

int srv_config_set(srv_config *c, const char *key, const char *value, const char *origin, latent_err *err) {
    const opt *o = find_opt(key);
    if (!o) return latent_err_set(err, LATENT_E_INVALID, "%s: unknown setting '%s' (see latentd --help)", origin, key);
    return config_set_opt(c, o, value, origin, err);
}

static int config_set_opt(srv_config *c, const opt *o, const char *value, const char *origin, latent_err *err) {
    void *f = (char *)c + o->offset;
    char *end;
    switch (o->type) {
    case OPT_STR:
        if (o->choices && !in_choices(o->choices, value))
            return latent_err_set(err, LATENT_E_INVALID, "%s: %s must be one of %s (got '%s')", origin, o->name, o->choices, value);
        free(*(char **)f);
        *(char **)f = strdup(value);
        return 0;
    case OPT_LIST:
        return list_add(f, value) == 0 ? 0 : latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", origin);
    case OPT_INT:
    case OPT_LONG: {
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (!*value || *end || errno || v < o->lo || v > o->hi)
            return latent_err_set(err, LATENT_E_INVALID, "%s: %s must be an integer from %.0f to %.0f (got '%s')", origin, o->name, o->lo,
                                  o->hi, value);
        if (o->type == OPT_INT) *(int *)f = (int)v;
        else *(long *)f = (long)v;
        return 0;
    }
    case OPT_DOUBLE: {
        errno = 0;
        double v = strtod(value, &end);
        if (!*value || *end || errno || !(v >= o->lo && v <= o->hi))
            return latent_err_set(err, LATENT_E_INVALID, "%s: %s must be a number from %g to %g (got '%s')", origin, o->name, o->lo, o->hi,
                                  value);
        *(double *)f = v;
        return 0;
    }
    }
    return -1;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

/* `key = value` or `key value` lines; # comments; "double quotes" keep spaces. */
static int load_file(srv_config *c, const char *path, latent_err *err) {
    FILE *f = fopen(path, "r");
    if (!f) return latent_err_set(err, LATENT_E_IO, "config %s: cannot open: %s", path, strerror(errno));
    char line[4096];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char origin[600];
        snprintf(origin, sizeof origin, "%s:%d", path, lineno);
        if (!strchr(line, '\n') && !feof(f)) {
            rc = latent_err_set(err, LATENT_E_INVALID, "%s: line too long", origin);
            break;
        }
        char *s = trim(line);
        if (!*s || *s == '#') continue;
        char *key = s;
        while (*s && !isspace((unsigned char)*s) && *s != '=') s++;
        char *key_end = s;
        s = trim(s);
        if (*s == '=') s = trim(s + 1);
        *key_end = 0;
        char *value = s;
        size_t vn = strlen(value);
        if (vn >= 2 && value[0] == '"' && value[vn - 1] == '"') {
            value[vn - 1] = 0;
            value++;
        } else {
            char *hash = strstr(value, " #");
            if (hash) *hash = 0, value = trim(value);
        }
        if (!*key) rc = latent_err_set(err, LATENT_E_INVALID, "%s: expected `key = value`", origin);
        else if (!strcmp(key, "config")) rc = latent_err_set(err, LATENT_E_INVALID, "%s: `config` cannot be set in a config file", origin);
        else rc = srv_config_set(c, key, value, origin, err);
    }
    fclose(f);
    return rc;
}

/* Splits "--name=value" or "--name value"; returns the value or NULL. */
static const char *flag_value(int argc, char **argv, int *i, char *name, size_t cap) {
    const char *a = argv[*i] + 2, *eq = strchr(a, '=');
    if (eq) {
        snprintf(name, cap, "%.*s", (int)(eq - a), a);
        return eq + 1;
    }
    snprintf(name, cap, "%s", a);
    if (*i + 1 >= argc) return NULL;
    return argv[++*i];
}

int srv_config_load(srv_config *c, int argc, char **argv, latent_err *err) {
    defaults(c);
    char name[128];
    /* Pass 1: --help, --version, --config. */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            srv_config_usage();
            return 1;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("latentd 0.1\n");
            return 1;
        }
        if (!strcmp(argv[i], "--settings")) {
            print_settings();
            return 1;
        }
        if (strncmp(argv[i], "--", 2) != 0)
            return latent_err_set(err, LATENT_E_INVALID, "unexpected argument '%s' (options start with --; see --help)", argv[i]);
        const char *v = flag_value(argc, argv, &i, name, sizeof name);
        if (!v) return latent_err_set(err, LATENT_E_INVALID, "--%s needs a value", name);
        if (!strcmp(name, "config")) {
            free(c->config_path);
            c->config_path = strdup(v);
        }
    }
    if (c->config_path && load_file(c, c->config_path, err) != 0) return -1;
    /* Pass 2: flags win; a repeatable flag replaces the file's list. */
    int lists_reset[N_OPTS];
    memset(lists_reset, 0, sizeof lists_reset);
    for (int i = 1; i < argc; i++) {
        const char *v = flag_value(argc, argv, &i, name, sizeof name);
        if (!strcmp(name, "config")) continue;
        const opt *o = find_opt(name);
        char origin[160];
        snprintf(origin, sizeof origin, "--%s", name);
        if (!o) return latent_err_set(err, LATENT_E_INVALID, "unknown option --%s (see latentd --help)", name);
        if (o->type == OPT_LIST && !lists_reset[o - opts]) {
            list_clear((srv_strlist *)((char *)c + o->offset));
            lists_reset[o - opts] = 1;
        }
        if (srv_config_set(c, name, v, origin, err) != 0) return -1;
    }
    if (c->api_key_file) {
        FILE *f = fopen(c->api_key_file, "r");
        if (!f) return latent_err_set(err, LATENT_E_IO, "api-key-file %s: cannot open: %s", c->api_key_file, strerror(errno));
        char line[1024];
        while (fgets(line, sizeof line, f)) {
            char *k = trim(line);
            if (*k && *k != '#' && list_add(&c->api_keys, k) != 0) {
                fclose(f);
                return latent_err_set(err, LATENT_E_NOMEM, "out of memory");
            }
        }
        fclose(f);
    }
    if (!c->model_dir) return latent_err_set(err, LATENT_E_INVALID, "no model: pass --model DIR or set `model` in the config file");
    return 0;
}
