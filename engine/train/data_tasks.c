/* Synthetic task generators and their target classification (data.h).
 *
 * Vocabularies (PAD 0, BOS 1, EOS 2 in all):
 *   group:        3 "=", 4.. the group's elements ("<k>" for Z_n, "<21345>" for
 *                 S_n in one-line notation, identity first, lexicographic)
 *   s5-retrieval: 3 "|", 4 " " (retrieval slot), 5..124 the 120 permutations,
 *                 125.. the value characters (a-z A-Z 0-9, first n_values)
 *   var-assign:   3 "=", 4 ";", 5 "?", 6..15 "0".."9", 16..41 "a".."z"
 *
 * Products compose left to right: state' = state o action, state'[j] =
 * state[action[j]] (the T2MLR generator's convention); for Z_n, (s + a) mod n. */
#include "latent/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "latent/rng.h"

enum { G_EQ = 3, G_ELEM = 4 };
enum { R_PIPE = 3, R_SLOT = 4, R_PERM = 5, R_VALUE = 125 };
enum { V_EQ = 3, V_SEMI = 4, V_QUERY = 5, V_DIGIT = 6, V_LETTER = 16, V_END = 42 };

static const char value_chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

void latent_task_defaults(latent_task *t, latent_task_kind kind) {
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->group = 's';
    t->n = 5;
    t->min_len = t->max_len = kind == LATENT_TASK_S5R ? 8 : 16;
    t->dict_size = 0;
    t->value_len = 1;
    t->n_values = 62;
    t->n_base = 8;
    t->min_depth = t->max_depth = 2;
    t->n_distractors = 6;
    t->n_queries = 1;
}

const char *latent_task_kind_name(latent_task_kind k) {
    switch (k) {
    case LATENT_TASK_GROUP: return "group";
    case LATENT_TASK_S5R: return "s5-retrieval";
    case LATENT_TASK_VAR: return "var-assign";
    case LATENT_TASK_RAW: return "raw";
    }
    return "?";
}

const char *latent_task_group_name(const latent_task *t, char *buf, size_t cap) {
    if (t->kind != LATENT_TASK_GROUP) snprintf(buf, cap, "%s", "");
    else snprintf(buf, cap, "%c%d", t->group, t->n);
    return buf;
}

static int fact(int n) { return n <= 1 ? 1 : n * fact(n - 1); }

static int group_order(const latent_task *t) { return t->group == 's' ? fact(t->n) : t->n; }

/* var-assign: one letter per name while 26 letters suffice, else two */
static int var_name_len(const latent_task *t) {
    return t->n_base + t->max_depth + t->n_distractors <= 26 ? 1 : 2;
}

int latent_task_check(const latent_task *t, latent_err *err) {
    switch (t->kind) {
    case LATENT_TASK_GROUP:
        if (t->group == 'z' && (t->n < 2 || t->n > 4096)) return latent_err_set(err, LATENT_E_INVALID, "data: Z_n needs 2 <= n <= 4096 (got %d)", t->n);
        if (t->group == 's' && (t->n < 2 || t->n > 6)) return latent_err_set(err, LATENT_E_INVALID, "data: S_n needs 2 <= n <= 6 (got %d)", t->n);
        if (t->group != 'z' && t->group != 's') return latent_err_set(err, LATENT_E_INVALID, "data: unknown group kind '%c'", t->group);
        break;
    case LATENT_TASK_S5R:
        if (t->dict_size < 0 || t->dict_size > 120) return latent_err_set(err, LATENT_E_INVALID, "data: --dict-size must be 0..120 (got %d)", t->dict_size);
        if (t->value_len < 1 || t->value_len > 16) return latent_err_set(err, LATENT_E_INVALID, "data: --value-len must be 1..16 (got %d)", t->value_len);
        if (t->n_values < 2 || t->n_values > 62) return latent_err_set(err, LATENT_E_INVALID, "data: --n-values must be 2..62 (got %d)", t->n_values);
        break;
    case LATENT_TASK_VAR:
        if (t->n_base < 1 || t->n_base > 200) return latent_err_set(err, LATENT_E_INVALID, "data: --n-base must be 1..200 (got %d)", t->n_base);
        if (t->min_depth < 0 || t->max_depth < t->min_depth || t->max_depth > 200)
            return latent_err_set(err, LATENT_E_INVALID, "data: need 0 <= --min-depth <= --max-depth <= 200 (got %d, %d)", t->min_depth, t->max_depth);
        if (t->n_queries < 1 || t->n_queries > 200) return latent_err_set(err, LATENT_E_INVALID, "data: --queries must be 1..200 (got %d)", t->n_queries);
        if (t->query_any_pct < 0 || t->query_any_pct > 100)
            return latent_err_set(err, LATENT_E_INVALID, "data: --query-any must be 0..100 (got %d)", t->query_any_pct);
        /* the chain's extra queries are the head's chain, not a random query's */
        if (t->query_any_pct && t->query_from == LATENT_VAR_QUERY_CHAIN)
            return latent_err_set(err, LATENT_E_INVALID, "data: --query-any with --query-from chain: the extra queries would not be on the query's chain");
        if (t->decoy_pct < 0 || t->decoy_pct > 100)
            return latent_err_set(err, LATENT_E_INVALID, "data: --decoy must be 0..100 (got %d)", t->decoy_pct);
        if (t->query_from < LATENT_VAR_QUERY_ANY || t->query_from > LATENT_VAR_QUERY_DISTINCT)
            return latent_err_set(err, LATENT_E_INVALID, "data: query_from must be 0 (any), 1 (chain), 2 (alias) or 3 (distinct) (got %d)", t->query_from);
        if (t->n_distractors < 0 || t->n_distractors > 200) return latent_err_set(err, LATENT_E_INVALID, "data: --distractors must be 0..200 (got %d)", t->n_distractors);
        if (t->n_base + t->max_depth + t->n_distractors > 26 * 26)
            return latent_err_set(err, LATENT_E_INVALID, "data: at most 676 variables (two-letter names)");
        return 0;
    case LATENT_TASK_RAW:
        return 0;
    default:
        return latent_err_set(err, LATENT_E_INVALID, "data: unknown task %d", (int)t->kind);
    }
    if (t->min_len < 1 || t->max_len < t->min_len || t->max_len > 100000)
        return latent_err_set(err, LATENT_E_INVALID, "data: need 1 <= --min-len <= --max-len <= 100000 (got %d, %d)", t->min_len, t->max_len);
    return 0;
}

int latent_task_vocab_size(const latent_task *t) {
    switch (t->kind) {
    case LATENT_TASK_GROUP: return G_ELEM + group_order(t);
    case LATENT_TASK_S5R: return R_VALUE + t->n_values;
    case LATENT_TASK_VAR: return V_END;
    case LATENT_TASK_RAW: return 0;
    }
    return 0;
}

/* The i-th permutation of 0..n-1 in lexicographic order, into p. */
static void perm_unrank(int n, int i, int *p) {
    int avail[8];
    for (int j = 0; j < n; j++) avail[j] = j;
    for (int j = 0; j < n; j++) {
        int f = fact(n - 1 - j), k = i / f;
        i %= f;
        p[j] = avail[k];
        memmove(avail + k, avail + k + 1, (size_t)(n - 1 - j - k) * sizeof *avail);
    }
}

static int perm_rank(int n, const int *p) {
    int r = 0;
    for (int j = 0; j < n; j++) {
        int smaller = 0;
        for (int k = j + 1; k < n; k++) smaller += p[k] < p[j];
        r += smaller * fact(n - 1 - j);
    }
    return r;
}

static void perm_name(int n, int i, char *buf, size_t cap) {
    int p[8];
    perm_unrank(n, i, p);
    char s[16];
    for (int j = 0; j < n; j++) s[j] = (char)('1' + p[j]);
    s[n] = 0;
    snprintf(buf, cap, "<%s>", s);
}

const char *latent_task_token_name(const latent_task *t, int id, char *buf, size_t cap) {
    static const char *const specials[] = {"<pad>", "<bos>", "<eos>"};
    if (t->kind == LATENT_TASK_RAW) snprintf(buf, cap, "<%d>", id);
    else if (id < 0 || id >= latent_task_vocab_size(t)) snprintf(buf, cap, "<?%d>", id);
    else if (id < 3) snprintf(buf, cap, "%s", specials[id]);
    else if (t->kind == LATENT_TASK_GROUP) {
        if (id == G_EQ) snprintf(buf, cap, "=");
        else if (t->group == 'z') snprintf(buf, cap, "<%d>", id - G_ELEM);
        else perm_name(t->n, id - G_ELEM, buf, cap);
    } else if (t->kind == LATENT_TASK_S5R) {
        if (id == R_PIPE) snprintf(buf, cap, "|");
        else if (id == R_SLOT) snprintf(buf, cap, " ");
        else if (id < R_VALUE) perm_name(5, id - R_PERM, buf, cap);
        else snprintf(buf, cap, "%c", value_chars[id - R_VALUE]);
    } else {
        static const char *const sym[] = {"=", ";", "?"};
        if (id < V_DIGIT) snprintf(buf, cap, "%s", sym[id - V_EQ]);
        else if (id < V_LETTER) snprintf(buf, cap, "%c", '0' + (id - V_DIGIT));
        else snprintf(buf, cap, "%c", 'a' + (id - V_LETTER));
    }
    return buf;
}

/* ---- generation -------------------------------------------------------------- */

static int rand_below(latent_rng *r, int n) {
    return (int)(((unsigned __int128)latent_rng_next(r) * (unsigned)n) >> 64);
}

static int rand_range(latent_rng *r, int lo, int hi) { return lo + rand_below(r, hi - lo + 1); }

static void shuffle(latent_rng *r, int *a, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = rand_below(r, i + 1), t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

/* Group multiplication table (S_n) or nothing (Z_n: addition). */
typedef struct gtab {
    char kind; int n, order;
    int *mul;               /* (order, order): mul[a*order + b] = a o b */
} gtab;

static int gtab_init(gtab *g, char kind, int n) {
    g->kind = kind, g->n = n, g->order = kind == 's' ? fact(n) : n, g->mul = NULL;
    if (kind != 's') return 0;
    g->mul = malloc((size_t)g->order * g->order * sizeof *g->mul);
    if (!g->mul) return -1;
    int a[8], b[8], c[8];
    for (int i = 0; i < g->order; i++) {
        perm_unrank(n, i, a);
        for (int j = 0; j < g->order; j++) {
            perm_unrank(n, j, b);
            for (int k = 0; k < n; k++) c[k] = a[b[k]]; /* state'[k] = state[action[k]] */
            g->mul[i * g->order + j] = perm_rank(n, c);
        }
    }
    return 0;
}

static int gtab_mul(const gtab *g, int a, int b) {
    return g->kind == 's' ? g->mul[a * g->order + b] : (a + b) % g->n;
}

static int record_len_needed(const latent_task *t) {
    switch (t->kind) {
    case LATENT_TASK_GROUP: return t->max_len + (t->final_only ? 3 : 2);
    case LATENT_TASK_S5R: {
        int d = t->dict_size ? (t->dict_size > t->max_len ? t->dict_size : t->max_len) : t->max_len;
        if (d > 120) d = 120;
        return 1 + d * (1 + t->value_len) + 1 + t->max_len * (1 + t->value_len) + 1;
    }
    case LATENT_TASK_VAR: {
        int nl = var_name_len(t), lines = t->n_base + t->max_depth + t->n_distractors;
        return 1 + lines * (2 * nl + 2) + (t->n_queries - 1) * (nl + 3) + nl + 2;
    }
    case LATENT_TASK_RAW: return 2;
    }
    return 0;
}

typedef struct rec {
    uint32_t *tok, *lab;
    uint8_t *mask, *flow;
    int len;                /* tokens written so far */
} rec;

/* Appends an input token; its label is itself unless already scored. */
static void put(rec *r, uint32_t id) {
    r->tok[r->len] = id;
    if (!r->mask[r->len]) r->lab[r->len] = id;
    r->len++;
}
/* The target predicted at input position p (stored at p + 1). */
static void score(rec *r, int p, uint32_t want) { r->lab[p + 1] = want, r->mask[p + 1] = 1; }

static void gen_group(const latent_task *t, const gtab *g, latent_rng *rng, rec *r) {
    int k = rand_range(rng, t->min_len, t->max_len), prod = 0; /* 0 is the identity */
    for (int i = 0; i < k; i++) {
        int a = rand_below(rng, g->order);
        prod = gtab_mul(g, prod, a);
        put(r, G_ELEM + (uint32_t)a);
        if (!t->final_only) score(r, r->len - 1, G_ELEM + (uint32_t)prod);
    }
    if (t->final_only) {
        put(r, G_EQ);
        put(r, G_ELEM + (uint32_t)prod);
        r->mask[r->len - 1] = 1;
    }
}

static void gen_s5r(const latent_task *t, const gtab *g, latent_rng *rng, rec *r) {
    int k = rand_range(rng, t->min_len, t->max_len);
    int *acts = malloc((size_t)k * sizeof *acts);
    int in_dict[120] = {0}, keys[120], n_keys = 0;
    char values[120][16];
    if (!acts) abort();
    for (int i = 0; i < k; i++) {
        acts[i] = rand_below(rng, 120);
        if (!in_dict[acts[i]]) in_dict[acts[i]] = 1, keys[n_keys++] = acts[i];
    }
    int want = t->dict_size ? t->dict_size : k;
    if (want > 120) want = 120;
    if (t->dict_size == 120) {
        for (int i = 0; i < 120; i++)
            if (!in_dict[i]) in_dict[i] = 1, keys[n_keys++] = i;
    }
    while (n_keys < want) {
        int c = rand_below(rng, 120);
        if (!in_dict[c]) in_dict[c] = 1, keys[n_keys++] = c;
    }
    shuffle(rng, keys, n_keys);
    for (int i = 0; i < n_keys; i++)
        for (int j = 0; j < t->value_len; j++) values[keys[i]][j] = (char)rand_below(rng, t->n_values);
    for (int i = 0; i < n_keys; i++) {
        put(r, R_PERM + (uint32_t)keys[i]);
        for (int j = 0; j < t->value_len; j++) put(r, R_VALUE + (uint32_t)values[keys[i]][j]);
    }
    put(r, R_PIPE);
    for (int p = 0; p < r->len; p++) r->flow[p] = 1; /* BOS, the dictionary and '|' */
    int state = 0;
    for (int i = 0; i < k; i++) {
        state = gtab_mul(g, state, acts[i]);
        put(r, R_PERM + (uint32_t)acts[i]);
        score(r, r->len - 1, R_PERM + (uint32_t)state);
        for (int j = 0; j < t->value_len; j++) {
            put(r, R_SLOT);
            score(r, r->len - 1, R_VALUE + (uint32_t)values[acts[i]][j]);
        }
    }
    free(acts);
}

static void put_name(rec *r, int nl, int name) {
    if (nl == 2) put(r, V_LETTER + (uint32_t)(name / 26));
    put(r, V_LETTER + (uint32_t)(name % 26));
}

/* A random order of the lines in which every alias comes after the line of
 * the variable it names: at each place, one of the lines whose right-hand
 * side is already assigned, uniformly. Distractors still interleave with the
 * chain; only uses before assignment are ruled out. */
static void program_order(latent_rng *rng, const int *rhs, int *order, int n) {
    char *placed = calloc((size_t)n, 1);
    int *ready = malloc((size_t)n * sizeof *ready);
    if (!placed || !ready) abort();
    for (int k = 0; k < n; k++) {
        int n_ready = 0;
        for (int v = 0; v < n; v++)
            if (!placed[v] && (rhs[v] < 0 || placed[rhs[v]])) ready[n_ready++] = v;
        int v = ready[rand_below(rng, n_ready)]; /* never empty: the aliases form a forest */
        placed[v] = 1;
        order[k] = v;
    }
    free(placed);
    free(ready);
}

/* The digit variable v resolves to, following its aliases (rhs: >= 0 an
 * alias of that variable, < 0 the digit -1-rhs). */
static int resolve_digit(const int *rhs, int v) {
    while (rhs[v] >= 0) v = rhs[v];
    return -1 - rhs[v];
}

/* the digit variable an alias chain ends at */
static int resolve_sink(const int *rhs, int v) {
    while (rhs[v] >= 0) v = rhs[v];
    return v;
}

/* --query-from distinct: up to `cap` aliases in random order, each ending at
 * its own digit variable and none at the task query's, so that no answer
 * can be copied from another answer of the record. Returns how many. */
static int pick_distinct_sinks(latent_rng *rng, const int *rhs, int n_base, int n_vars, int query, int cap, int *out) {
    int n_alias = n_vars - n_base, n = 0;
    int *cand = malloc((size_t)(n_alias > 0 ? n_alias : 1) * sizeof *cand);
    char *used = calloc((size_t)n_base, 1);
    if (!cand || !used) abort();
    for (int i = 0; i < n_alias; i++) cand[i] = n_base + i;
    shuffle(rng, cand, n_alias);
    used[resolve_sink(rhs, query)] = 1;
    for (int i = 0; i < n_alias && n < cap; i++) {
        int sink = resolve_sink(rhs, cand[i]);
        if (!used[sink]) used[sink] = 1, out[n++] = cand[i];
    }
    free(cand);
    free(used);
    return n;
}

static void gen_var(const latent_task *t, latent_rng *rng, rec *r) {
    const int nl = var_name_len(t), space = nl == 1 ? 26 : 676;
    int depth = rand_range(rng, t->min_depth, t->max_depth);
    int n_vars = t->n_base + depth + t->n_distractors;
    /* distinct random names: a partial shuffle of 0..space-1 */
    int *names = malloc((size_t)space * sizeof *names);
    int *rhs = malloc((size_t)n_vars * sizeof *rhs); /* >= 0: alias of var index; < 0: digit -1-v */
    int *order = malloc((size_t)n_vars * sizeof *order);
    if (!names || !rhs || !order) abort();
    for (int i = 0; i < space; i++) names[i] = i;
    for (int i = 0; i < n_vars; i++) {
        int j = i + rand_below(rng, space - i), tmp = names[i];
        names[i] = names[j], names[j] = tmp;
    }
    /* vars 0..n_base-1: digits; then the chain (query first); then distractors */
    for (int i = 0; i < t->n_base; i++) rhs[i] = -1 - rand_below(rng, 10);
    int sink = rand_below(rng, t->n_base), chain = t->n_base;
    for (int i = 0; i < depth; i++) rhs[chain + i] = i + 1 < depth ? chain + i + 1 : sink;
    int query = depth ? chain : sink;
    /* drawn only when asked for, so that the default's records stay the same */
    if (t->query_any_pct && rand_below(rng, 100) < t->query_any_pct) query = rand_below(rng, n_vars);
    /* a decoy: the first `depth` distractors chained like the query's, ending
     * at another digit variable; drawn only when asked for, as above */
    int decoy = 0;
    if (t->decoy_pct && depth && t->n_base >= 2 && t->n_distractors >= depth && rand_below(rng, 100) < t->decoy_pct) {
        int other = rand_below(rng, t->n_base - 1), head = chain + depth;
        other += other >= sink;
        for (int i = 0; i < depth; i++) rhs[head + i] = i + 1 < depth ? head + i + 1 : other;
        decoy = depth;
    }
    for (int i = decoy; i < t->n_distractors; i++) {
        int v = chain + depth + i;
        rhs[v] = rand_below(rng, v); /* an earlier variable: never a cycle */
    }
    int digit = resolve_digit(rhs, query);
    if (t->program_order) program_order(rng, rhs, order, n_vars);
    else {
        for (int i = 0; i < n_vars; i++) order[i] = i;
        shuffle(rng, order, n_vars);
    }
    for (int i = 0; i < n_vars; i++) {
        int a = order[i];
        put_name(r, nl, names[a]);
        put(r, V_EQ);
        if (rhs[a] < 0) put(r, V_DIGIT + (uint32_t)(-1 - rhs[a]));
        else put_name(r, nl, names[rhs[a]]);
        put(r, V_SEMI);
    }
    /* the aliases (chain and distractors) are the variables from n_base on */
    int n_alias = n_vars - t->n_base, n_extra = t->n_queries - 1, *distinct = NULL;
    if (t->query_from == LATENT_VAR_QUERY_DISTINCT) {
        distinct = malloc((size_t)(n_extra > 0 ? n_extra : 1) * sizeof *distinct);
        if (!distinct) abort();
        n_extra = pick_distinct_sinks(rng, rhs, t->n_base, n_vars, query, n_extra, distinct);
    }
    for (int i = 0; i < n_extra; i++) { /* extra queries, answer scored */
        /* any variable; an alias on the query's chain (chain + j resolves in
         * depth - j hops); any alias; or the distinct ones picked above.
         * A record without those: any variable */
        int v;
        if (distinct) v = distinct[i];
        else if (t->query_from == LATENT_VAR_QUERY_CHAIN && depth) v = chain + rand_below(rng, depth);
        else if (t->query_from == LATENT_VAR_QUERY_ALIAS && n_alias) v = t->n_base + rand_below(rng, n_alias);
        else v = rand_below(rng, n_vars);
        put_name(r, nl, names[v]);
        put(r, V_QUERY);
        put(r, V_DIGIT + (uint32_t)resolve_digit(rhs, v));
        r->mask[r->len - 1] = 1;
        put(r, V_SEMI);
    }
    put_name(r, nl, names[query]);
    put(r, V_QUERY);
    put(r, V_DIGIT + (uint32_t)digit);
    r->mask[r->len - 1] = 1;
    free(distinct);
    free(names);
    free(rhs);
    free(order);
}

int latent_data_generate(const latent_task *t, uint64_t seed, int n_records, int record_len,
                         latent_dataset *d, latent_err *err) {
    memset(d, 0, sizeof *d);
    if (latent_task_check(t, err) != 0) return -1;
    if (t->kind == LATENT_TASK_RAW) return latent_err_set(err, LATENT_E_INVALID, "data: the raw task has no generator");
    if (n_records < 1) return latent_err_set(err, LATENT_E_INVALID, "data: need at least one record");
    int need = record_len_needed(t);
    if (record_len == 0) record_len = need;
    if (record_len < need)
        return latent_err_set(err, LATENT_E_INVALID, "data: --record-len %d is too short: records of this task need up to %d tokens",
                              record_len, need);
    int64_t n = (int64_t)n_records * record_len + record_len + 1;
    if (n > ((int64_t)1 << 32) - 1) return latent_err_set(err, LATENT_E_INVALID, "data: %lld tokens is too many for one file", (long long)n);
    d->task = *t, d->seed = seed, d->record_len = record_len, d->n_records = n_records, d->n_tokens = n;
    d->tokens = calloc((size_t)n, sizeof *d->tokens);
    d->labels = t->kind == LATENT_TASK_VAR || (t->kind == LATENT_TASK_GROUP && t->final_only)
                    ? NULL : calloc((size_t)n, sizeof *d->labels);
    uint32_t *lab = d->labels ? d->labels : calloc((size_t)record_len + 1, sizeof *lab); /* scratch when unused */
    d->mask = calloc((size_t)n, 1);
    d->flow = t->kind == LATENT_TASK_S5R ? malloc((size_t)n) : NULL;
    uint8_t *flow = d->flow ? d->flow : malloc((size_t)record_len + 1);
    gtab g = {0};
    int ok = d->tokens && lab && d->mask && flow &&
             (t->kind == LATENT_TASK_VAR || gtab_init(&g, t->kind == LATENT_TASK_S5R ? 's' : t->group,
                                                     t->kind == LATENT_TASK_S5R ? 5 : t->n) == 0);
    if (!ok) {
        if (!d->labels) free(lab);
        if (!d->flow) free(flow);
        free(g.mul);
        latent_dataset_free(d);
        return latent_err_set(err, LATENT_E_NOMEM, "data: out of memory for %lld tokens", (long long)n);
    }
    if (d->flow) memset(d->flow, 2, (size_t)n);
    latent_rng rng;
    latent_rng_seed(&rng, seed);
    for (int i = 0; i < n_records; i++) {
        size_t off = (size_t)i * record_len;
        rec r = {d->tokens + off, d->labels ? d->labels + off : lab, d->mask + off, d->flow ? d->flow + off : flow, 0};
        if (!d->labels) memset(lab, 0, ((size_t)record_len + 1) * sizeof *lab);
        if (!d->flow) memset(flow, 2, (size_t)record_len + 1);
        put(&r, LATENT_DATA_BOS);
        if (t->kind == LATENT_TASK_GROUP) gen_group(t, &g, &rng, &r);
        else if (t->kind == LATENT_TASK_S5R) gen_s5r(t, &g, &rng, &r);
        else gen_var(t, &rng, &r);
        /* the rest of the record stays PAD (calloc), labels PAD unless scored */
    }
    if (!d->labels) free(lab);
    if (!d->flow) free(flow);
    free(g.mul);
    return 0;
}

void latent_dataset_free(latent_dataset *d) {
    if (!d) return;
    free(d->tokens);
    free(d->labels);
    free(d->mask);
    free(d->flow);
    memset(d, 0, sizeof *d);
}

/* ---- targets for evaluation ------------------------------------------------------ */

const char *const *latent_task_target_kinds(const latent_task *t) {
    static const char *const group[] = {"product", NULL}, *const final[] = {"final", NULL};
    static const char *const s5r[] = {"state", "retrieval", NULL}, *const var[] = {"answer", NULL};
    static const char *const raw[] = {"token", NULL};
    switch (t->kind) {
    case LATENT_TASK_GROUP: return t->final_only ? final : group;
    case LATENT_TASK_S5R: return s5r;
    case LATENT_TASK_VAR: return var;
    case LATENT_TASK_RAW: return raw;
    }
    return group;
}

const char *latent_task_bucket_name(const latent_task *t) {
    if (t->kind == LATENT_TASK_VAR) return "depth";
    if (t->kind == LATENT_TASK_GROUP && t->final_only) return "length";
    return "position";
}

/* var-assign: a record's program, parsed: rhs[name] is -2 (unassigned), -1 (a
 * digit) or the name it aliases. 0, or -1 if the record does not parse. */
enum { VAR_MAX_NAMES = 676 };
static int var_program(const uint32_t *tok, int len, int *rhs) {
    for (int i = 0; i < VAR_MAX_NAMES; i++) rhs[i] = -2;
    int p = 1;
    while (p < len) {
        int name = 0, nlen = 0;
        while (p < len && tok[p] >= V_LETTER && tok[p] < V_END) name = name * 26 + (int)(tok[p++] - V_LETTER), nlen++;
        if (nlen == 0 || nlen > 2 || p >= len) return -1;
        if (tok[p] == V_QUERY) { /* an extra query "v ? d ;", or the task's last one */
            if (p + 2 < len && tok[p + 2] == V_SEMI) {
                p += 3;
                continue;
            }
            return 0;
        }
        if (tok[p++] != V_EQ || p >= len) return -1;
        if (tok[p] >= V_DIGIT && tok[p] < V_LETTER) {
            rhs[name] = -1;
            p++;
        } else {
            int r = 0, rl = 0;
            while (p < len && tok[p] >= V_LETTER && tok[p] < V_END) r = r * 26 + (int)(tok[p++] - V_LETTER), rl++;
            if (rl == 0 || rl > 2) return -1;
            rhs[name] = r;
        }
        if (p >= len || tok[p++] != V_SEMI) return -1;
    }
    return -1; /* no final query */
}

/* The alias hops from the query whose answer is at position `at` ("v ? d")
 * to a digit; -1 if it has no query name or its chain does not end. */
static int var_query_depth(const uint32_t *tok, int at, const int *rhs) {
    int p = at - 1, name = 0, scale = 1;
    if (p < 1 || tok[p] != V_QUERY) return -1;
    while (p - 1 >= 1 && tok[p - 1] >= V_LETTER && tok[p - 1] < V_END && scale <= 26)
        name += (int)(tok[--p] - V_LETTER) * scale, scale *= 26;
    if (scale == 1) return -1;
    int depth = 0;
    for (int v = name; rhs[v] != -1; v = rhs[v])
        if (rhs[v] == -2 || ++depth > VAR_MAX_NAMES) return -1;
    return depth;
}

int latent_task_targets(const latent_dataset *d, int r, latent_target *out, int cap) {
    const latent_task *t = &d->task;
    const int L = d->record_len;
    const size_t off = (size_t)r * L;
    const uint32_t *tok = d->tokens + off, *lab = d->labels ? d->labels + off : tok;
    const uint8_t *mask = d->mask + off;
    int n = 0, pipe = -1, actions = 0, rhs[VAR_MAX_NAMES], parsed = 0;
    if (t->kind == LATENT_TASK_VAR) parsed = var_program(tok, L, rhs) == 0;
    for (int p = 1; p < L; p++) {
        if (t->kind == LATENT_TASK_S5R) {
            if (tok[p - 1] == R_PIPE && pipe < 0) pipe = p - 1;
            if (pipe >= 0 && p - 1 > pipe && tok[p - 1] >= R_PERM && tok[p - 1] < R_VALUE) actions++;
        }
        if (!mask[p]) continue;
        latent_target x = {.pos = p, .want = lab[p], .kind = 0, .bucket = 0};
        switch (t->kind) {
        case LATENT_TASK_GROUP: x.bucket = t->final_only ? p - 2 : p - 1; break;
        case LATENT_TASK_S5R:
            x.kind = tok[p - 1] == R_SLOT ? 1 : 0;
            x.bucket = actions;
            break;
        case LATENT_TASK_VAR: x.bucket = parsed ? var_query_depth(tok, p, rhs) : -1; break;
        case LATENT_TASK_RAW: x.bucket = p; break;
        }
        if (n < cap) out[n] = x;
        n++;
    }
    return n;
}
