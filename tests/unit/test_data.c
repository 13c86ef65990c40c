/* Synthetic task data: every record re-derived from its own text (products of
 * permutations parsed from the token names, retrieval from the record's own
 * dictionary, variables resolved from the record's lines), record layout and
 * alignment with the training window, determinism, the files' round trip,
 * the task tokenizer (the record's text encodes back to its ids), and the
 * targets used by `latent eval`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "latent/data.h"
#include "latent/tokenizer.h"
#include "testutil.h"

static const char *name_of(const latent_task *t, uint32_t id) {
    static char buf[8][32];
    static int k;
    k = (k + 1) % 8;
    return latent_task_token_name(t, (int)id, buf[k], sizeof buf[k]);
}

/* "<34215>" -> 0-based permutation; "<3>" -> {3}; returns its length */
static int parse_elem(const char *s, int *p) {
    int n = 0;
    if (s[0] != '<') return -1;
    if (strlen(s) > 3 && s[1] >= '1' && s[1] <= '9' && s[strlen(s) - 1] == '>') {
        for (const char *c = s + 1; *c != '>'; c++) p[n++] = *c - '1';
        return n;
    }
    return -1;
}

/* Common layout: BOS first, PAD after the content, the trailing PADs. */
static void check_layout(const char *what, const latent_dataset *d) {
    const int L = d->record_len;
    CHECK(d->n_tokens == (int64_t)d->n_records * L + L + 1, "%s: n_tokens", what);
    for (int r = 0; r < d->n_records; r++) CHECK(d->tokens[(size_t)r * L] == LATENT_DATA_BOS, "%s: record %d has no BOS", what, r);
    for (int64_t i = (int64_t)d->n_records * L; i < d->n_tokens; i++)
        CHECK(d->tokens[i] == LATENT_DATA_PAD && !d->mask[i], "%s: trailing token %lld", what, (long long)i);
    /* the training window of models.md §5 at (k*T) mod (n-T-1) is record k mod n_records */
    for (int k = 0; k < 3 * d->n_records; k += 7) {
        int64_t o = ((int64_t)k * L) % (d->n_tokens - L - 1);
        CHECK(o == (int64_t)(k % d->n_records) * L, "%s: window %d starts at %lld", what, k, (long long)o);
    }
}

static void check_group(char g, int n, int final_only) {
    latent_task t;
    latent_task_defaults(&t, LATENT_TASK_GROUP);
    t.group = g, t.n = n, t.min_len = 1, t.max_len = 12, t.final_only = final_only;
    char what[32];
    snprintf(what, sizeof what, "%c%d%s", g, n, final_only ? " final" : "");
    latent_dataset d;
    latent_err err;
    CHECK(latent_data_generate(&t, 7, 300, 0, &d, &err) == 0, "%s: %s", what, err.msg);
    check_layout(what, &d);
    CHECK((d.labels == NULL) == (final_only != 0), "%s: labels only when tagging", what);
    const int L = d.record_len;
    int seen_len[13] = {0};
    for (int r = 0; r < d.n_records; r++) {
        const uint32_t *tok = d.tokens + (size_t)r * L, *lab = d.labels ? d.labels + (size_t)r * L : tok;
        const uint8_t *mask = d.mask + (size_t)r * L;
        int state[8], p[8], k = 0, z = 0;
        for (int j = 0; j < 8; j++) state[j] = j;
        int pos = 1, scored = 0;
        for (; pos < L; pos++) {
            const char *s = name_of(&t, tok[pos]);
            if (tok[pos] == LATENT_DATA_PAD || !strcmp(s, "=")) break;
            if (g == 's') {
                CHECK(parse_elem(s, p) == n, "%s: element name %s", what, s);
                int next[8];
                for (int j = 0; j < n; j++) next[j] = state[p[j]]; /* state'[j] = state[action[j]] */
                memcpy(state, next, sizeof next);
            } else {
                z = (z + atoi(s + 1)) % n;
            }
            k++;
            char want[32];
            if (g == 's') {
                want[0] = '<';
                for (int j = 0; j < n; j++) want[1 + j] = (char)('1' + state[j]);
                want[1 + n] = '>', want[2 + n] = 0;
            } else {
                snprintf(want, sizeof want, "<%d>", z);
            }
            if (!final_only) {
                CHECK(mask[pos + 1] && !strcmp(name_of(&t, lab[pos + 1]), want), "%s: record %d element %d: %s vs %s",
                      what, r, k, name_of(&t, lab[pos + 1]), want);
                scored++;
            } else if (tok[pos + 1] != 0 && !strcmp(name_of(&t, tok[pos + 1]), "=")) {
                CHECK(mask[pos + 2] && !strcmp(name_of(&t, tok[pos + 2]), want), "%s: record %d final %s vs %s", what, r,
                      name_of(&t, tok[pos + 2]), want);
                scored++;
            }
        }
        int n_mask = 0;
        for (int j = 0; j < L; j++) n_mask += mask[j];
        CHECK(n_mask == scored && scored == (final_only ? 1 : k), "%s: record %d scores %d of %d", what, r, n_mask, k);
        CHECK(k >= 1 && k <= 12, "%s: length %d", what, k);
        seen_len[k]++;
        latent_target tg[16];
        int nt = latent_task_targets(&d, r, tg, 16);
        CHECK(nt == scored, "%s: targets %d vs %d", what, nt, scored);
        for (int j = 0; j < nt; j++)
            CHECK(tg[j].bucket == (final_only ? k : j + 1) && tg[j].want == lab[tg[j].pos], "%s: target %d bucket %d", what,
                  j, tg[j].bucket);
    }
    CHECK(seen_len[1] && seen_len[12], "%s: lengths 1 and 12 both occur", what);
    latent_dataset_free(&d);
}

static void check_s5r(int dict_size, int value_len) {
    latent_task t;
    latent_task_defaults(&t, LATENT_TASK_S5R);
    t.min_len = 2, t.max_len = 10, t.dict_size = dict_size, t.value_len = value_len, t.n_values = 10;
    latent_dataset d;
    latent_err err;
    CHECK(latent_data_generate(&t, 3, 100, 0, &d, &err) == 0, "s5r: %s", err.msg);
    check_layout("s5r", &d);
    CHECK(d.labels && d.flow, "s5r: labels and flow");
    const int L = d.record_len;
    for (int r = 0; r < d.n_records; r++) {
        const size_t off = (size_t)r * L;
        const uint32_t *tok = d.tokens + off, *lab = d.labels + off;
        const uint8_t *mask = d.mask + off, *flow = d.flow + off;
        /* the dictionary: key token -> its value tokens */
        uint32_t dict_val[200][16];
        int have[200] = {0}, pos = 1, n_keys = 0;
        while (tok[pos] != 3 /* | */) {
            uint32_t key = tok[pos++];
            CHECK(key >= 5 && key < 125 && !have[key], "s5r: record %d key %u", r, key);
            have[key] = 1, n_keys++;
            for (int j = 0; j < value_len; j++) dict_val[key][j] = tok[pos++];
        }
        CHECK(dict_size == 120 ? n_keys == 120 : n_keys >= (dict_size ? dict_size : 2), "s5r: %d keys", n_keys);
        for (int j = 0; j <= pos; j++) CHECK(flow[j] == 1 && !mask[j], "s5r: prefix flow/mask at %d", j);
        pos++;
        int state[5] = {0, 1, 2, 3, 4}, k = 0;
        while (pos < L && tok[pos] != LATENT_DATA_PAD) {
            uint32_t act = tok[pos];
            int p[8];
            CHECK(parse_elem(name_of(&t, act), p) == 5 && have[act], "s5r: action %u not in the dictionary", act);
            int next[5];
            for (int j = 0; j < 5; j++) next[j] = state[p[j]];
            memcpy(state, next, sizeof next);
            char want[8] = {'<', 0, 0, 0, 0, 0, '>', 0};
            for (int j = 0; j < 5; j++) want[1 + j] = (char)('1' + state[j]);
            CHECK(flow[pos] == 2 && mask[pos + 1] && !strcmp(name_of(&t, lab[pos + 1]), want), "s5r: state %s vs %s",
                  name_of(&t, lab[pos + 1]), want);
            for (int j = 0; j < value_len; j++) {
                CHECK(!strcmp(name_of(&t, tok[pos + 1 + j]), " "), "s5r: slot");
                CHECK(mask[pos + 2 + j] && lab[pos + 2 + j] == dict_val[act][j], "s5r: retrieval");
            }
            pos += 1 + value_len;
            k++;
        }
        CHECK(k >= 2 && k <= 10, "s5r: %d actions", k);
        latent_target tg[64];
        int nt = latent_task_targets(&d, r, tg, 64);
        CHECK(nt == k * (1 + value_len), "s5r: %d targets", nt);
        for (int j = 0; j < nt && j < 64; j++)
            CHECK(tg[j].kind == (j % (1 + value_len) != 0) && tg[j].bucket == j / (1 + value_len) + 1,
                  "s5r: target %d kind %d bucket %d", j, tg[j].kind, tg[j].bucket);
    }
    latent_dataset_free(&d);
}

/* The alias hops from line j to a digit (-1: an undefined name or a cycle);
 * *sink: the digit variable's line */
static int var_hops(char names[][3], char rhs[][3], int n, int j, int *sink) {
    for (int depth = 0; depth < 700; depth++) {
        if (rhs[j][0] >= '0' && rhs[j][0] <= '9') return *sink = j, depth;
        int k = 0;
        while (k < n && strcmp(names[k], rhs[j])) k++;
        if (k == n) return -1;
        j = k;
    }
    return -1;
}

/* The alias hops from `name` to a digit in the parsed lines; checks the name
 * is assigned, the chain ends and its digit is `want`. *sink: the digit's line. */
static int var_resolve(char names[][3], char rhs[][3], int n, const char *name, char want, int r, int *sink) {
    int j = 0;
    while (j < n && strncmp(names[j], name, 2)) j++;
    CHECK(j < n, "var: %.2s undefined", name);
    if (j == n) return -1;
    int depth = var_hops(names, rhs, n, j, sink);
    CHECK(depth >= 0, "var: record %d: %.2s names an undefined variable or a cycle", r, name);
    if (depth < 0) return -1;
    CHECK(rhs[*sink][0] == want, "var: record %d answer %c, resolved %c", r, want, rhs[*sink][0]);
    return depth;
}

/* Records re-parsed as text ("name=rhs;" lines, n_queries - 1 "name?d;"
 * queries, then "name?d"): every answer resolves, the task's query has a
 * depth in range, and each target's bucket is its own query's depth. */
static void check_var(int n_base, int min_depth, int max_depth, int distractors, int n_queries, int query_from, int query_any,
                      int decoy) {
    const int from_chain = query_from == LATENT_VAR_QUERY_CHAIN, from_alias = query_from == LATENT_VAR_QUERY_ALIAS;
    const int distinct = query_from == LATENT_VAR_QUERY_DISTINCT;
    int fewer = 0, most = 0; /* distinct: records with fewer extra queries than asked; the most */
    int query_head = 0;      /* records whose task query is at its chain's depth */
    int rivals = 0;          /* records with another chain as deep as the query's, ending elsewhere */
    latent_task t;
    latent_task_defaults(&t, LATENT_TASK_VAR);
    t.n_base = n_base, t.min_depth = min_depth, t.max_depth = max_depth, t.n_distractors = distractors;
    t.n_queries = n_queries;
    t.query_from = query_from;
    t.query_any_pct = query_any;
    t.decoy_pct = decoy;
    latent_dataset d;
    latent_err err;
    CHECK(latent_data_generate(&t, 11, 200, 0, &d, &err) == 0, "var: %s", err.msg);
    check_layout("var", &d);
    CHECK(!d.labels && !d.flow, "var: LM format");
    const int L = d.record_len;
    int depth_seen[64] = {0}, extra_depth_seen[64] = {0};
    for (int r = 0; r < d.n_records; r++) {
        const uint32_t *tok = d.tokens + (size_t)r * L;
        char text[4096];
        size_t tl = 0;
        for (int p = 1; p < L && tok[p] != LATENT_DATA_PAD; p++) tl += (size_t)snprintf(text + tl, sizeof text - tl, "%s", name_of(&t, tok[p]));
        char names[700][3], rhs[700][3], queries[64][6];
        int n = 0, nq = 0;
        char *s = text, *q;
        while ((q = strchr(s, ';'))) {
            *q = 0;
            char *eq = strchr(s, '='), *qm = strchr(s, '?');
            if (qm) { /* an extra query: "name?d" */
                CHECK(!eq && qm - s <= 2 && qm[1] >= '0' && qm[1] <= '9' && !qm[2] && nq < 63, "var: query '%s'", s);
                snprintf(queries[nq++], 6, "%.5s", s);
                s = q + 1;
                continue;
            }
            CHECK(eq && eq - s <= 2 && nq == 0, "var: line '%s'", s);
            if (!eq) break;
            *eq = 0;
            snprintf(names[n], 3, "%.2s", s);
            snprintf(rhs[n], 3, "%.2s", eq + 1);
            for (int j = 0; j < n; j++) CHECK(strcmp(names[j], names[n]), "var: %s assigned twice", names[n]);
            n++;
            s = q + 1;
        }
        CHECK(distinct ? nq <= n_queries - 1 : nq == n_queries - 1, "var: %d extra queries", nq);
        fewer += nq < n_queries - 1;
        most = nq > most ? nq : most;
        char *qm = strchr(s, '?');
        CHECK(qm && qm[1] >= '0' && qm[1] <= '9' && !qm[2], "var: query '%s'", s);
        if (!qm || nq > 62) continue;
        snprintf(queries[nq++], 6, "%.5s", s);
        latent_target tg[64];
        CHECK(latent_task_targets(&d, r, tg, 64) == nq, "var: record %d: not %d targets", r, nq);
        int depth = -1, extra_depth[64], sink[64];
        for (int k = 0; k < nq; k++) {
            char *m = strchr(queries[k], '?');
            char want = m[1];
            *m = 0;
            depth = var_resolve(names, rhs, n, queries[k], want, r, &sink[k]);
            if (depth < 0) break;
            if (k + 1 < nq) extra_depth_seen[depth < 63 ? depth : 63]++, extra_depth[k] = depth;
            CHECK(tg[k].bucket == depth && d.mask[(size_t)r * L + tg[k].pos] && tok[tg[k].pos] == tg[k].want &&
                  name_of(&t, tok[tg[k].pos])[0] == want,
                  "var: record %d target %d (bucket %d, depth %d)", r, k, tg[k].bucket, depth);
        }
        if (depth < 0) continue;
        /* --query-any: the query may be any variable; the chain still has its depth */
        const int chain_depth = n - n_base - distractors;
        CHECK(chain_depth >= min_depth && chain_depth <= max_depth, "var: %d lines", n);
        CHECK(query_any || depth == chain_depth, "var: query at depth %d, chain of %d", depth, chain_depth);
        query_head += depth == chain_depth;
        /* --decoy: another alias as deep as the query's, off its chain, at another digit variable */
        int rival = 0;
        for (int j = 0; j < n && depth > 0; j++) {
            int sj, dj = var_hops(names, rhs, n, j, &sj);
            rival |= dj == depth && sj != sink[nq - 1];
        }
        rivals += rival;
        if (decoy == 100) CHECK(depth == 0 || distractors < depth || rival, "var: record %d: no decoy at depth %d", r, depth);
        /* --query-from chain: every extra query is an alias on the task's chain */
        for (int k = 0; from_chain && depth > 0 && k + 1 < nq; k++)
            CHECK(extra_depth[k] >= 1 && extra_depth[k] <= depth, "var: record %d: chain query at depth %d of %d", r, extra_depth[k], depth);
        /* --query-from alias: no extra query is a plain lookup */
        for (int k = 0; from_alias && depth + distractors > 0 && k + 1 < nq; k++)
            CHECK(extra_depth[k] >= 1, "var: record %d: alias query at depth 0", r);
        /* --query-from distinct: aliases, each ending at its own digit variable */
        for (int k = 0; distinct && k + 1 < nq; k++) {
            CHECK(extra_depth[k] >= 1, "var: record %d: distinct query at depth 0", r);
            for (int j = k + 1; j < nq; j++) CHECK(sink[j] != sink[k], "var: record %d: queries %d and %d share a digit variable", r, k, j);
        }
        depth_seen[depth]++;
    }
    if (!query_any) CHECK(depth_seen[min_depth] && depth_seen[max_depth], "var: depths %d and %d occur", min_depth, max_depth);
    /* --query-any 100: plain lookups, aliases and chain heads among the task queries;
     * 50: about half the records keep the chain's head (which a random pick may hit too) */
    if (query_any == 100) CHECK(depth_seen[0] && depth_seen[1] && depth_seen[max_depth], "var: query-any depths 0, 1 and %d", max_depth);
    if (query_any == 50)
        CHECK(query_head > d.n_records / 2 && query_head < d.n_records * 4 / 5 && depth_seen[0],
              "var: query-any 50: %d of %d at the chain's head", query_head, d.n_records);
    /* random distractors make rivals too (often at depth 1, seldom deeper): a floor only */
    if (decoy == 50) CHECK(rivals > d.n_records * 2 / 5, "var: decoy 50: %d of %d records with a rival chain", rivals, d.n_records);
    if (n_queries > 1 && !from_chain && !from_alias && !distinct) CHECK(extra_depth_seen[0] && extra_depth_seen[1], "var: extra queries at depths 0 and 1");
    if (distinct)
        CHECK(fewer > 0 && most >= 2 && extra_depth_seen[1] && extra_depth_seen[2], "var: distinct: %d of %d records short, at most %d extra",
              fewer, d.n_records, most);
    if (n_queries > 1 && from_alias && min_depth > 0)
        CHECK(!extra_depth_seen[0] && extra_depth_seen[1] && extra_depth_seen[max_depth + 1], "var: alias queries at depths 1..%d and past", max_depth + 1);
    if (n_queries > 1 && from_chain && min_depth > 0)
        CHECK(!extra_depth_seen[0] && extra_depth_seen[1] && extra_depth_seen[max_depth], "var: chain queries at depths 1..%d only", max_depth);
    latent_dataset_free(&d);
}

static void check_files_and_tokenizer(void) {
    char dir[] = "/tmp/latent-test-data.XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char prefix[128], path[160];
    snprintf(prefix, sizeof prefix, "%s/s5r", dir);
    latent_task t;
    latent_task_defaults(&t, LATENT_TASK_S5R);
    latent_dataset d, e, f;
    latent_err err;
    CHECK(latent_data_generate(&t, 5, 20, 64, &d, &err) == 0 && d.record_len == 64, "generate: %s", err.msg);
    CHECK(latent_data_generate(&t, 5, 20, 64, &e, &err) == 0 &&
          !memcmp(d.tokens, e.tokens, (size_t)d.n_tokens * 4) && !memcmp(d.labels, e.labels, (size_t)d.n_tokens * 4),
          "same seed, same data");
    latent_dataset_free(&e);
    CHECK(latent_data_generate(&t, 6, 20, 64, &e, &err) == 0 && memcmp(d.tokens, e.tokens, (size_t)d.n_tokens * 4),
          "another seed, other data");
    latent_dataset_free(&e);
    CHECK(latent_data_generate(&t, 5, 20, 10, &e, &err) != 0 && strstr(err.msg, "too short"), "short record_len: %s", err.msg);
    CHECK(latent_dataset_save(&d, prefix, &err) == 0, "save: %s", err.msg);
    snprintf(path, sizeof path, "%s.bin", prefix);
    CHECK(latent_dataset_load(&e, path, &err) == 0, "load: %s", err.msg);
    CHECK(e.n_tokens == d.n_tokens && e.record_len == 64 && e.task.kind == LATENT_TASK_S5R && e.task.max_len == t.max_len &&
          !memcmp(d.tokens, e.tokens, (size_t)d.n_tokens * 4) && !memcmp(d.labels, e.labels, (size_t)d.n_tokens * 4) &&
          !memcmp(d.mask, e.mask, (size_t)d.n_tokens) && !memcmp(d.flow, e.flow, (size_t)d.n_tokens),
          "round trip");
    /* raw files: every masked token is a target at its own position */
    latent_task raw;
    latent_task_defaults(&raw, LATENT_TASK_RAW);
    CHECK(latent_dataset_load_files(&f, &raw, path, NULL, NULL, 64, &err) == 0 && f.n_records == 21, "raw load: %s", err.msg);
    latent_target tg[64];
    int nt = latent_task_targets(&f, 0, tg, 64), nm = 0;
    for (int i = 1; i < 64; i++) nm += d.mask[i];
    CHECK(nt == nm && tg[0].bucket == tg[0].pos, "raw targets");
    latent_dataset_free(&f);
    snprintf(path, sizeof path, "%s.json", prefix);
    unlink(path);
    snprintf(path, sizeof path, "%s.bin", prefix);
    CHECK(latent_dataset_load(&f, path, &err) != 0 && strstr(err.msg, ".json"), "missing json: %s", err.msg);
    latent_dataset_free(&e);

    /* the task tokenizer: each record's text encodes back to its ids */
    latent_task tasks[3];
    latent_task_defaults(&tasks[0], LATENT_TASK_S5R);
    latent_task_defaults(&tasks[1], LATENT_TASK_GROUP);
    tasks[1].group = 'z', tasks[1].n = 12;
    latent_task_defaults(&tasks[2], LATENT_TASK_VAR);
    for (int k = 0; k < 3; k++) {
        CHECK(latent_task_write_tokenizer(&tasks[k], dir, &err) == 0, "tokenizer: %s", err.msg);
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        latent_tokenizer *tk = latent_tokenizer_load(path, &err);
        CHECK(tk != NULL, "tokenizer load: %s", err.msg);
        if (!tk) continue;
        CHECK(latent_tokenizer_vocab_size(tk) == latent_task_vocab_size(&tasks[k]), "vocab size %d vs %d",
              latent_tokenizer_vocab_size(tk), latent_task_vocab_size(&tasks[k]));
        latent_dataset_free(&e);
        CHECK(latent_data_generate(&tasks[k], 9, 5, 0, &e, &err) == 0, "generate");
        for (int r = 0; r < e.n_records; r++) {
            char text[8192];
            size_t tl = 0;
            int n = 0;
            const uint32_t *tok = e.tokens + (size_t)r * e.record_len;
            while (n < e.record_len && (n == 0 || tok[n] != LATENT_DATA_PAD))
                tl += (size_t)snprintf(text + tl, sizeof text - tl, "%s", name_of(&tasks[k], tok[n])), n++;
            int32_t ids[1024];
            int m = latent_tokenizer_encode(tk, text, tl, ids, 1024);
            int same = m == n;
            for (int j = 0; same && j < n; j++) same = ids[j] == (int32_t)tok[j];
            CHECK(same, "task %d record %d: '%s' encodes to %d ids, want %d", k, r, text, m, n);
            size_t dl;
            char *back = latent_tokenizer_decode(tk, ids, m, &dl);
            CHECK(back && dl == tl && !memcmp(back, text, tl), "decode round trip");
            free(back);
        }
        latent_tokenizer_free(tk);
    }
    latent_dataset_free(&e);
    latent_dataset_free(&d);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

/* var-assign's query_from survives PREFIX.json, and files of the sixth
 * session, which said "query_from_chain", still load as chain */
static void check_var_file(void) {
    char dir[] = "/tmp/latent-test-var.XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char prefix[128], path[160], cmd[400];
    snprintf(prefix, sizeof prefix, "%s/var", dir);
    latent_task t;
    latent_task_defaults(&t, LATENT_TASK_VAR);
    t.n_queries = 4, t.query_from = LATENT_VAR_QUERY_ALIAS;
    latent_dataset d, e;
    latent_err err;
    CHECK(latent_data_generate(&t, 3, 10, 0, &d, &err) == 0, "var generate: %s", err.msg);
    CHECK(latent_dataset_save(&d, prefix, &err) == 0, "var save: %s", err.msg);
    snprintf(path, sizeof path, "%s.bin", prefix);
    CHECK(latent_dataset_load(&e, path, &err) == 0 && e.task.query_from == LATENT_VAR_QUERY_ALIAS, "var round trip: %s", err.msg);
    latent_dataset_free(&e);
    snprintf(cmd, sizeof cmd, "sed -i 's/\"query_from\": 2/\"query_from_chain\": 1/' %s.json && grep -q query_from_chain %s.json", prefix, prefix);
    CHECK(system(cmd) == 0, "rewrite the json");
    CHECK(latent_dataset_load(&e, path, &err) == 0 && e.task.query_from == LATENT_VAR_QUERY_CHAIN, "old field: %s", err.msg);
    latent_dataset_free(&e);
    latent_dataset_free(&d);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

static void check_refusals(void) {
    latent_task t;
    latent_err err;
    latent_dataset d;
    latent_task_defaults(&t, LATENT_TASK_GROUP);
    t.group = 's', t.n = 7;
    CHECK(latent_data_generate(&t, 1, 1, 0, &d, &err) != 0 && strstr(err.msg, "S_n"), "S7: %s", err.msg);
    latent_task_defaults(&t, LATENT_TASK_GROUP);
    t.min_len = 5, t.max_len = 4;
    CHECK(latent_data_generate(&t, 1, 1, 0, &d, &err) != 0 && strstr(err.msg, "min-len"), "min>max: %s", err.msg);
    latent_task_defaults(&t, LATENT_TASK_VAR);
    t.n_base = 600, t.max_depth = 100;
    CHECK(latent_data_generate(&t, 1, 1, 0, &d, &err) != 0, "too many variables");
    latent_task_defaults(&t, LATENT_TASK_VAR);
    t.query_from = LATENT_VAR_QUERY_DISTINCT + 1;
    CHECK(latent_data_generate(&t, 1, 1, 0, &d, &err) != 0 && strstr(err.msg, "query_from"), "query_from out of range: %s", err.msg);
    latent_task_defaults(&t, LATENT_TASK_VAR);
    t.query_any_pct = 101;
    CHECK(latent_data_generate(&t, 1, 1, 0, &d, &err) != 0 && strstr(err.msg, "--query-any"), "query-any out of range: %s", err.msg);
    latent_task_defaults(&t, LATENT_TASK_VAR);
    t.decoy_pct = 101;
    CHECK(latent_data_generate(&t, 1, 1, 0, &d, &err) != 0 && strstr(err.msg, "--decoy"), "decoy out of range: %s", err.msg);
    latent_task_defaults(&t, LATENT_TASK_VAR);
    t.query_any_pct = 50, t.query_from = LATENT_VAR_QUERY_CHAIN;
    CHECK(latent_data_generate(&t, 1, 1, 0, &d, &err) != 0 && strstr(err.msg, "chain"), "query-any with chain queries: %s", err.msg);
    latent_task_defaults(&t, LATENT_TASK_S5R);
    CHECK(latent_data_generate(&t, 1, 0, 0, &d, &err) != 0, "zero records");
}

int main(void) {
    check_group('z', 2, 0);
    check_group('z', 7, 0);
    check_group('s', 3, 0);
    check_group('s', 4, 1);
    check_group('s', 5, 0);
    check_group('s', 5, 1);
    check_s5r(0, 1);
    check_s5r(120, 2);
    check_s5r(20, 1);
    check_var(8, 0, 5, 6, 1, 0, 0, 0);
    check_var(8, 3, 3, 0, 1, 0, 0, 0);
    check_var(20, 1, 10, 10, 1, 0, 0, 0); /* two-letter names */
    check_var(8, 1, 5, 6, 8, 0, 0, 0);    /* extra queries: each bucketed by its own depth */
    check_var(20, 1, 6, 10, 4, 0, 0, 0);
    check_var(8, 1, 5, 6, 8, 1, 0, 0);    /* --query-from chain */
    check_var(8, 0, 3, 6, 4, 1, 0, 0);    /* depth-0 records: any variable */
    check_var(8, 1, 5, 6, 8, 2, 0, 0);    /* --query-from alias: chain and distractors */
    check_var(8, 0, 3, 0, 4, 2, 0, 0);    /* depth 0 and no distractors: any variable */
    check_var(8, 1, 5, 6, 8, 3, 0, 0);    /* --query-from distinct */
    check_var(8, 0, 2, 2, 3, 3, 0, 0);
    check_var(8, 1, 5, 6, 1, 0, 100, 0); /* --query-any: the task query any variable */
    check_var(8, 1, 5, 6, 1, 0, 50, 0);
    check_var(8, 1, 5, 6, 1, 0, 0, 100); /* --decoy: a chain as deep as the query's */
    check_var(8, 1, 5, 6, 8, 0, 0, 50);
    check_var(20, 1, 6, 10, 1, 0, 0, 100);
    check_files_and_tokenizer();
    check_refusals();
    check_var_file();
    return tu_finish("test_data");
}
