/* latentd's settings: defaults, then the config file (--config), then the
 * command-line flags, which win. Every flag `--name` is also a config key
 * `name = value` (underscores accepted for dashes). */
#ifndef SRV_CONFIG_H
#define SRV_CONFIG_H

#include "latent/error.h"

typedef struct srv_strlist {
    char **items;
    int n;
} srv_strlist;

typedef struct srv_config {
    char *config_path;        /* --config (only on the command line) */
    char *model_dir;          /* --model DIR */
    char *host;               /* --host, default 127.0.0.1 */
    int port;                 /* --port, default 8080; 0 = any free port (logged) */
    char *unix_path;          /* --unix PATH: listen on a unix socket instead of TCP */
    long kv_pool_mib;         /* --kv-pool-mib: KV page pool size */
    int page_tokens;          /* --page-tokens: tokens per KV page */
    int max_sessions;         /* --max-sessions: sequences decoding at once */
    int queue_len;            /* --queue-len: sequences waiting beyond max-sessions before 429 */
    int step_tokens;          /* --step-tokens: token budget of one engine step */
    int prefill_chunk;        /* --prefill-chunk: prompt tokens per sequence per step while others decode */
    int max_tokens;           /* --max-tokens: cap (and default) of generated tokens per request */
    int threads;              /* --threads: engine threads (0 = online cores) */
    char *precision;          /* --precision auto|f32|bf16 */
    char *weights;            /* --weights auto|f32|bf16|q8 */
    char *kv_dtype;           /* --kv-dtype auto|f32|bf16 */
    char *deterministic;      /* --deterministic true|false */
    srv_strlist api_keys;     /* --api-key (repeatable) */
    char *api_key_file;       /* --api-key-file: one key per line */
    srv_strlist cors_origins; /* --cors-origin (repeatable; "*" = any) */
    char *log_level;          /* --log-level error|warn|info|debug */
    char *log_format;         /* --log-format text|json */
    char *log_file;           /* --log-file PATH (default stderr); SIGHUP reopens it */
    char *served_model_name;  /* --served-model-name (default: the model directory's name) */
    double grace_seconds;     /* --grace-seconds: drain time on SIGTERM */
    char *chat_template;      /* --chat-template chatml|llama3|plain (default: from tokenizer_config.json) */
    long max_body_bytes;      /* --max-body-bytes: 413 past this */
    int max_connections;      /* --max-connections */
    int max_connections_per_client; /* --max-connections-per-client (0 = no limit) */
    int timeout_seconds;      /* --timeout-seconds: idle connection timeout */
    int header_timeout_seconds; /* --header-timeout-seconds */
    int body_timeout_seconds; /* --body-timeout-seconds */
    long min_body_rate;       /* --min-body-rate: bytes/s */
    int max_body_buffer_mib;  /* --max-body-buffer-mib */
    int stream_stall_seconds; /* --stream-stall-seconds (0 = never) */
    double keepalive_seconds; /* --keepalive-seconds: SSE comment interval while queued */
    int prefix_cache;         /* --prefix-cache: finished sequences kept for prefix reuse (0 = off) */
    int retry_after;          /* --retry-after: seconds in 429/503 Retry-After */
    int max_sequences_per_client; /* --max-sequences-per-client (0 = no limit) */
    int trust_forwarded_for;  /* --trust-forwarded-for: client address from X-Forwarded-For */
} srv_config;

/* Fills defaults, reads --config FILE if given, applies the flags. Returns 0,
 * 1 when --help/--version printed something (exit 0), -1 with err set. */
int srv_config_load(srv_config *c, int argc, char **argv, latent_err *err);
void srv_config_free(srv_config *c);
/* Reads one key = value (used by the loader and by tests); -1 with err set. */
int srv_config_set(srv_config *c, const char *key, const char *value, const char *origin, latent_err *err);
void srv_config_usage(void);

#endif
