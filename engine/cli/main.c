/* latent: the engine's command line (inference now; training joins later). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include "cli.h"
#include "latent/engine.h"
#include "latent/kv.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"logits", cmd_logits, "print the logits of every position of a token sequence as JSON"},
    {"generate", cmd_generate, "stream a completion of a prompt to stdout"},
    {"tokenize", cmd_tokenize, "print the token ids of stdin as a JSON array"},
    {"bench", cmd_bench, "measure prefill and decode speed and the recurrence's overhead"},
    {"init", cmd_init, "create a model directory with initial weights from a config"},
    {"retrofit", cmd_retrofit, "add a T2MLR or LRT path to a trained model, logits unchanged"},
    {"tokenize-file", cmd_tokenize_file, "encode a text file into a training token file (uint32 ids)"},
    {"train", cmd_train, "train a model on token files (plain, T2MLR Jacobi, LRT interleaved); --bench"},
    {"data", cmd_data, "write training files for the synthetic tasks (group, S5 retrieval, variables)"},
    {"eval", cmd_eval, "accuracy of a model on a synthetic task file, by position or depth"},
    {"cpu", cmd_cpu, "the instruction-set paths the kernels can take on this machine"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: latent <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`latent <command> --help` shows a command's options.\n");
}

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("latent: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

int cli_parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

int cli_parse_ids(const char *s, int32_t **out) {
    int n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    int32_t *ids = malloc(n * sizeof *ids);
    if (!ids) return -1;
    const char *p = s;
    for (int i = 0; i < n; i++) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || (*end != ',' && *end) || v < 0 || v > INT32_MAX) {
            free(ids);
            return -1;
        }
        ids[i] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    *out = ids;
    return n;
}

int cli_opt(int argc, char **argv, int *i, const char *name, const char **value) {
    if (strcmp(argv[*i], name) != 0) return 0;
    if (*i + 1 >= argc) {
        cli_fail("option %s needs a value", name);
        exit(2);
    }
    *value = argv[++*i];
    return 1;
}

int cli_precision_opt(int argc, char **argv, int *i, latent_engine_opts *o) {
    const char *v;
    if (cli_opt(argc, argv, i, "--weights", &v)) {
        if (latent_weights_parse(v, &o->weights, &o->precision) != 0) {
            cli_fail("--weights must be auto, f32, bf16 or q8 (got '%s')", v);
            exit(2);
        }
        return 1;
    }
    if (!cli_opt(argc, argv, i, "--precision", &v)) return 0;
    if (latent_precision_parse(v, &o->precision) != 0) {
        cli_fail("--precision must be auto, f32 or bf16 (got '%s')", v);
        exit(2);
    }
    return 1;
}

int cli_kv_pool(latent_kv_pool *pool, const latent_model *m, const latent_engine_opts *o, const char *kv_setting, int seqs,
                int tokens, latent_err *err) {
    latent_kv_dtype kvd;
    if (latent_kv_dtype_choose(kv_setting, latent_engine_opts_precision(m, o), &kvd) != 0)
        return latent_err_set(err, LATENT_E_INVALID, "--kv-dtype must be auto, f32 or bf16 (got '%s')", kv_setting);
    const int P = CLI_PAGE_TOKENS;
    size_t pages = (size_t)seqs * (latent_kv_pages_for(P, tokens) + 1);
    return latent_kv_pool_init(pool, &m->cfg, P, latent_kv_page_bytes(&m->cfg, P, kvd) * pages, kvd, err);
}

int cli_load_model(latent_model *m, const char *dir, const latent_engine_opts *o, latent_err *err) {
    latent_load_opts lo = {.keep_bf16 = o->precision != LATENT_PRECISION_F32 && o->weights != LATENT_WEIGHTS_Q8};
    return latent_model_load_opts(m, dir, &lo, err);
}

int cli_session_init(cli_session *s, const latent_model *m, const latent_engine_opts *o, const char *kv_setting,
                     int tokens, latent_err *err) {
    if (cli_kv_pool(&s->pool, m, o, kv_setting, 1, tokens, err) != 0 || latent_seq_init(&s->seq, &s->pool, &m->cfg, err) != 0 ||
        !(s->eng = latent_engine_new_opts(m, o, err)))
        return -1;
    return 0;
}

void cli_session_free(cli_session *s) {
    latent_engine_free(s->eng);
    latent_seq_free(&s->seq);
    latent_kv_pool_free(&s->pool);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    cli_fail("unknown command '%s'", argv[1]);
    usage(stderr);
    return 2;
}
