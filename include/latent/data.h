/* Synthetic tasks of the T2MLR and LRT papers as training files, and their
 * scoring. The file formats (NAME.bin, .mask, .labels, .flow, .json) are
 * described in docs/training.md, "Data files"; the tasks in "Synthetic tasks".
 *
 * Every task has its own small vocabulary: PAD 0, BOS 1, EOS 2, then the
 * task's symbols. A dataset is n_records records of record_len tokens, each
 * starting with BOS and padded with PAD, followed by record_len + 1 PADs. */
#ifndef LATENT_DATA_H
#define LATENT_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "latent/error.h"

enum { LATENT_DATA_PAD = 0, LATENT_DATA_BOS = 1, LATENT_DATA_EOS = 2 };

typedef enum {
    LATENT_TASK_GROUP = 0, /* word problems of a group: the running product at every position */
    LATENT_TASK_S5R,       /* S5 state tracking with in-context retrieval (T2MLR paper) */
    LATENT_TASK_VAR,       /* variable assignment: follow a chain of aliases to a digit */
    LATENT_TASK_RAW,       /* any records: every masked token scored, bucketed by position */
} latent_task_kind;

typedef struct latent_task {
    latent_task_kind kind;
    /* group word problems */
    char group;           /* 'z': cyclic Z_n (parity is Z_2), 's': symmetric S_n */
    int n;                /* Z_n: 2..4096; S_n: 2..6 */
    int final_only;       /* LM format: "<g1> .. <gk> = <product>", only the product scored */
    /* group and S5 retrieval: elements / actions per record, uniform in [min_len, max_len] */
    int min_len, max_len;
    /* S5 retrieval */
    int dict_size;        /* keys in the dictionary: 0 = as many as actions (at least every
                             action used), 120 = every permutation */
    int value_len;        /* characters per value */
    int n_values;         /* value alphabet: the first n_values of a-z A-Z 0-9 */
    /* variable assignment */
    int n_base;           /* variables set to a digit */
    int min_depth, max_depth; /* alias hops from the query to a digit, uniform */
    int n_distractors;    /* extra alias lines not on the query's chain */
    int n_queries;        /* queries per record (1); all but the last are
                             "v ? d ;" of random variables, each answer scored:
                             a denser training signal, the last is the task's */
    int query_from;       /* which variables the extra queries ask for:
                             LATENT_VAR_QUERY_ANY, _CHAIN or _ALIAS */
    int query_any_pct;    /* percent of records whose task query asks for a
                             random variable of the record (any depth, the
                             distractors included) instead of the chain's
                             head (0): a model that answers it must resolve
                             every line, not only the chain the test asks */
    int decoy_pct;        /* percent of records whose first `depth` distractors
                             form a decoy chain as deep as the query's, ending at
                             another digit variable (0): the query's chain is then
                             not the one deepest chain, so a model must follow
                             the name asked, not find the chain by its shape */
    int program_order;    /* 1: each line after the line of the variable it names
                             (a program: no use before assignment); 0: any order */
} latent_task;

/* latent_task.query_from. ANY: any variable. CHAIN: only the task query's
 * chain of aliases (depths 1..the record's; every answer the same digit).
 * ALIAS: any variable that names another (the chain and the distractors):
 * no plain lookups. A record without such a variable falls back to ANY.
 * DISTINCT: aliases whose chains end at distinct digit variables, none at
 * the task query's, so no answer can be copied from another (as many as
 * the record has, up to n_queries - 1: the record may hold fewer). */
enum { LATENT_VAR_QUERY_ANY = 0, LATENT_VAR_QUERY_CHAIN = 1, LATENT_VAR_QUERY_ALIAS = 2, LATENT_VAR_QUERY_DISTINCT = 3 };

/* Defaults of each task (the papers' settings where they give them). */
void latent_task_defaults(latent_task *t, latent_task_kind kind);
/* Validates sizes; the message names the option. */
int latent_task_check(const latent_task *t, latent_err *err);
int latent_task_vocab_size(const latent_task *t);   /* 0 for raw */
/* The symbol of token id (e.g. "<bos>", "<21345>", "a", "="), in buf. */
const char *latent_task_token_name(const latent_task *t, int id, char *buf, size_t cap);
/* A short name: "group", "s5-retrieval", "var-assign", "raw". */
const char *latent_task_kind_name(latent_task_kind k);
/* "z2", "s5", ... for the group task, "" otherwise. */
const char *latent_task_group_name(const latent_task *t, char *buf, size_t cap);

typedef struct latent_dataset {
    latent_task task;
    uint64_t seed;
    int record_len, n_records;
    int64_t n_tokens;     /* n_records * record_len + record_len + 1 */
    uint32_t *tokens;     /* (n_tokens) inputs */
    uint32_t *labels;     /* (n_tokens) targets in place of tokens (tagging tasks), or NULL */
    uint8_t *mask;        /* (n_tokens) 1: token i is a scored target */
    uint8_t *flow;        /* (n_tokens) control flow of token i as an input, or NULL (all 2) */
} latent_dataset;

/* Generates n_records records from seed. record_len 0 picks the shortest
 * length that fits every record of the task's size range; a given record_len
 * that is too short is refused. */
int latent_data_generate(const latent_task *t, uint64_t seed, int n_records, int record_len,
                         latent_dataset *d, latent_err *err);
void latent_dataset_free(latent_dataset *d);   /* accepts a zeroed dataset */

/* Writes PREFIX.bin, .mask, .labels and .flow (when the dataset has them) and
 * PREFIX.json, each atomically (temp file, fsync, rename). */
int latent_dataset_save(const latent_dataset *d, const char *prefix, latent_err *err);
/* Reads a dataset written by latent_dataset_save from its .bin path (the
 * other files are found by replacing the extension). */
int latent_dataset_load(latent_dataset *d, const char *bin_path, latent_err *err);

/* Reads files without a PREFIX.json: tokens from bin_path, the mask and
 * labels from the given paths (NULL: bin_path's .mask if it exists, else every
 * token scored; no labels), records of record_len tokens (the trailing
 * partial record is ignored). The task t says how to classify targets. */
int latent_dataset_load_files(latent_dataset *d, const latent_task *t, const char *bin_path,
                              const char *mask_path, const char *labels_path, int record_len,
                              latent_err *err);

/* Writes DIR/tokenizer.json (a byte-level BPE vocabulary of the task's
 * symbols, no merges; multi-character symbols are added tokens) and
 * DIR/tokenizer_config.json, creating DIR if needed. */
int latent_task_write_tokenizer(const latent_task *t, const char *dir, latent_err *err);

/* One scored target of a record, classified for evaluation. */
typedef struct latent_target {
    int pos;              /* index in the record of the predicted token (its logits are at pos-1) */
    uint32_t want;        /* the target id */
    int kind;             /* index into latent_task_target_kinds */
    int bucket;           /* position (element/action index, 1-based) or depth */
} latent_target;

/* Target kinds of a task ("product", "final", "state", "retrieval", "answer"), NULL-terminated. */
const char *const *latent_task_target_kinds(const latent_task *t);
/* What the bucket of a task means: "position" or "depth". */
const char *latent_task_bucket_name(const latent_task *t);
/* The scored targets of record r, in order; returns how many (at most cap
 * are written). */
int latent_task_targets(const latent_dataset *d, int r, latent_target *out, int cap);

#endif
