/* The `latent` command line: one file per subcommand, shared helpers here. */
#ifndef LATENT_CLI_H
#define LATENT_CLI_H

#include <stdint.h>

#include "latent/engine.h"
#include "latent/kv.h"

int cmd_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_retrofit(int argc, char **argv);
int cmd_tokenize_file(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_cpu(int argc, char **argv);

/* Prints "latent: <msg>" to stderr; returns 2 (the exit code of usage errors). */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Parses a whole string as an integer / float within [lo, hi]; -1 when it is not one. */
int cli_parse_long(const char *s, long lo, long hi, long *out);
int cli_parse_double(const char *s, double lo, double hi, double *out);
/* Parses "1,2,3" into a malloc'd array; returns the count, or -1. */
int cli_parse_ids(const char *s, int32_t **out);
/* True when argv[i] is `name` and a value follows it (advances *i). */
int cli_opt(int argc, char **argv, int *i, const char *name, const char **value);
/* --precision auto|f32|bf16 into o->precision, --weights auto|f32|bf16|q8
 * into o->weights (latent_weights_parse); exits 2 on a bad value. */
struct latent_engine_opts;
int cli_precision_opt(int argc, char **argv, int *i, struct latent_engine_opts *o);
/* A KV pool of CLI_PAGE_TOKENS-token pages for `seqs` sequences of up to
 * `tokens` tokens each; its dtype from kv_setting ("auto": bf16 when the
 * engine options resolve to bf16 for m). 0, or -1 with err set. */
#define CLI_PAGE_TOKENS 16
struct latent_kv_pool;
struct latent_model;
struct latent_err;
int cli_kv_pool(struct latent_kv_pool *pool, const struct latent_model *m, const struct latent_engine_opts *o,
                const char *kv_setting, int seqs, int tokens, struct latent_err *err);
/* latent_model_load for an engine with options o: an engine that will
 * compute in bf16 gets the checkpoint's BF16 matrices packed straight from
 * the file (latent_load_opts.keep_bf16), with no F32 copy on the way. */
int cli_load_model(struct latent_model *m, const char *dir, const struct latent_engine_opts *o, struct latent_err *err);
/* One sequence on its own (latent generate, logits): a KV pool for up to
 * `tokens` tokens (cli_kv_pool), the sequence and an engine with options o.
 * init: 0, or -1 with err set; free releases what init made, and accepts a
 * zeroed or half-made session. */
typedef struct cli_session {
    latent_kv_pool pool;
    latent_seq seq;
    latent_engine *eng;
} cli_session;
int cli_session_init(cli_session *s, const latent_model *m, const latent_engine_opts *o, const char *kv_setting,
                     int tokens, latent_err *err);
void cli_session_free(cli_session *s);

#endif
