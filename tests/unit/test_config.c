/* config.json parsing: good configs (plain, SmolLM2 as shipped, t2mlr, lrt,
 * eos lists, head_dim explicit/null), save+load round trip, and bad configs
 * refused with a message naming the file and the field. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "latent/config.h"

/* SmolLM2-135M's config.json as published (BF16 weights, tied embeddings). */
static const char *smollm2_135m =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"bos_token_id\": 0, \"eos_token_id\": 0,"
    " \"hidden_act\": \"silu\", \"hidden_size\": 576, \"initializer_range\": 0.041666666666666664,"
    " \"intermediate_size\": 1536, \"is_llama_config\": true, \"max_position_embeddings\": 8192,"
    " \"model_type\": \"llama\", \"num_attention_heads\": 9, \"num_hidden_layers\": 30,"
    " \"num_key_value_heads\": 3, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05,"
    " \"rope_interleaved\": false, \"rope_scaling\": null, \"rope_theta\": 100000,"
    " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.42.3\", \"use_cache\": true, \"vocab_size\": 49152}";

/* A small base with a %s slot for extra fields (placed first, so a repeated
 * key is never produced: base fields are only those not overridden). */
static char *mk(const char *extra) {
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "{%s%s\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 4,"
             " \"num_attention_heads\": 4, \"vocab_size\": 100}",
             extra, *extra ? ", " : "");
    return buf;
}

static void test_smollm2(void) {
    latent_config c;
    latent_err e = {0};
    CHECK(latent_config_parse(smollm2_135m, "config.json", &c, &e) == 0, "%s", e.msg);
    CHECK(c.d == 576 && c.ffn == 1536 && c.n_layers == 30, "sizes");
    CHECK(c.n_heads == 9 && c.n_kv_heads == 3 && c.head_dim == 64, "heads %d %d %d", c.n_heads,
          c.n_kv_heads, c.head_dim);
    CHECK(c.vocab == 49152 && c.max_pos == 8192, "vocab/max_pos");
    CHECK(c.rms_eps == 1e-5f && c.rope_theta == 100000.0f, "eps/theta");
    CHECK(c.tie_embeddings, "tied");
    CHECK(c.bos_id == 0 && c.eos_id == 0 && c.n_eos == 1 && c.eos_ids[0] == 0, "bos/eos");
    CHECK(c.rec == LATENT_REC_NONE, "plain");
    CHECK(latent_config_q_dim(&c) == 576 && latent_config_kv_dim(&c) == 192, "dims");
}

static void test_defaults(void) {
    latent_config c;
    latent_err e = {0};
    CHECK(latent_config_parse(mk(""), "config.json", &c, &e) == 0, "%s", e.msg);
    CHECK(c.n_kv_heads == 4, "kv heads default to heads: %d", c.n_kv_heads);
    CHECK(c.head_dim == 16, "head_dim default");
    CHECK(c.rope_theta == 10000.0f, "rope_theta default");
    CHECK(c.rms_eps == 1e-6f, "rms_eps default");
    CHECK(!c.tie_embeddings, "tie default false");
    CHECK(c.bos_id == -1 && c.eos_id == -1 && c.n_eos == 0, "ids absent");
    CHECK(c.max_pos == 2048, "max_pos default");

    CHECK(latent_config_parse(mk("\"head_dim\": null, \"bos_token_id\": null, \"eos_token_id\": null"),
                              "config.json", &c, &e) == 0, "%s", e.msg);
    CHECK(c.head_dim == 16 && c.bos_id == -1 && c.eos_id == -1, "nulls");
    CHECK(latent_config_parse(mk("\"head_dim\": 32, \"num_key_value_heads\": 2"), "config.json", &c,
                              &e) == 0, "%s", e.msg);
    CHECK(c.head_dim == 32 && latent_config_q_dim(&c) == 128 && latent_config_kv_dim(&c) == 64,
          "explicit head_dim");
    CHECK(latent_config_parse(mk("\"eos_token_id\": [7, 3, 9]"), "config.json", &c, &e) == 0, "%s",
          e.msg);
    CHECK(c.eos_id == 7 && c.n_eos == 3 && c.eos_ids[1] == 3 && c.eos_ids[2] == 9, "eos list");
    CHECK(latent_config_parse(mk("\"max_position_embeddings\": 512.0"), "config.json", &c, &e) == 0,
          "integral real: %s", e.msg);
    CHECK(c.max_pos == 512, "integral real value");
}

static void test_recurrence(void) {
    latent_config c;
    latent_err e = {0};
    CHECK(latent_config_parse(mk("\"latent_recurrence\": {\"type\": \"t2mlr\", \"l_start\": 1,"
                                 " \"l_end\": 2, \"cache_residual\": false, \"cache_norm_clamp\": 3.5,"
                                 " \"cache_norm_eps\": 1e-5, \"recur_on_prompt\": false}"),
                              "config.json", &c, &e) == 0, "%s", e.msg);
    CHECK(c.rec == LATENT_REC_T2MLR && c.t2mlr.l_start == 1 && c.t2mlr.l_end == 2, "t2mlr range");
    CHECK(!c.t2mlr.cache_residual && c.t2mlr.cache_norm_clamp == 3.5f &&
          c.t2mlr.cache_norm_eps == 1e-5f && !c.t2mlr.recur_on_prompt, "t2mlr fields");
    CHECK(latent_config_parse(mk("\"latent_recurrence\": {\"type\": \"t2mlr\", \"l_start\": 3,"
                                 " \"l_end\": 3}"), "config.json", &c, &e) == 0, "%s", e.msg);
    CHECK(c.t2mlr.cache_residual && c.t2mlr.cache_norm_clamp == 5.0f && c.t2mlr.recur_on_prompt,
          "t2mlr defaults");

    CHECK(latent_config_parse(mk("\"latent_recurrence\": {\"type\": \"lrt\", \"source_layer\": -1,"
                                 " \"inject_start\": 0, \"inject_end\": 3, \"residual_injection\": false,"
                                 " \"kv_injection\": true, \"shared_kv_projection\": true}"),
                              "config.json", &c, &e) == 0, "%s", e.msg);
    CHECK(c.rec == LATENT_REC_LRT && c.lrt.source_layer == -1 && c.lrt.inject_start == 0 &&
          c.lrt.inject_end == 3, "lrt range");
    CHECK(!c.lrt.residual_injection && c.lrt.kv_injection && c.lrt.shared_kv_projection, "lrt flags");
    CHECK(latent_config_parse(mk("\"latent_recurrence\": null"), "config.json", &c, &e) == 0, "%s",
          e.msg);
    CHECK(c.rec == LATENT_REC_NONE, "null recurrence is plain");
}

static void roundtrip(const char *json) {
    latent_config a, b;
    latent_err e = {0};
    CHECK(latent_config_parse(json, "config.json", &a, &e) == 0, "%s", e.msg);
    char dir[] = "/tmp/latent_cfg_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(latent_config_save(&a, path, &e) == 0, "%s", e.msg);
    CHECK(latent_config_load(path, &b, &e) == 0, "%s", e.msg);
    CHECK(memcmp(&a, &b, sizeof a) == 0, "round trip differs for %.60s", json);
    remove(path);
    rmdir(dir);
}

static void test_roundtrip(void) {
    roundtrip(smollm2_135m);
    roundtrip(mk("\"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"eos_token_id\": [1, 2],"
                 " \"bos_token_id\": 5, \"tie_word_embeddings\": true"));
    roundtrip(mk("\"rms_norm_eps\": 0.1234567, \"num_key_value_heads\": 2, \"head_dim\": 8,"
                 " \"latent_recurrence\": {\"type\": \"t2mlr\", \"l_start\": 0, \"l_end\": 3,"
                 " \"cache_norm_clamp\": 2.718281828, \"cache_norm_eps\": 3e-7, \"recur_on_prompt\": false}"));
    roundtrip(mk("\"latent_recurrence\": {\"type\": \"lrt\", \"source_layer\": 2, \"inject_start\": 1,"
                 " \"inject_end\": 2, \"kv_injection\": false}"));
}

/* Refused, with `want1` and `want2` in the message. */
static void bad(const char *json, const char *want1, const char *want2) {
    latent_config c;
    latent_err e = {0};
    int rc = latent_config_parse(json, "config.json", &c, &e);
    CHECK(rc == -1, "accepted: %.120s", json);
    if (rc != -1) return;
    CHECK(strstr(e.msg, "config.json") != NULL, "no file name in: %s", e.msg);
    CHECK(e.code == LATENT_E_FORMAT || e.code == LATENT_E_UNSUPPORTED, "code %s for: %s", latent_err_name(e.code), e.msg);
    CHECK(strstr(e.msg, want1) != NULL, "'%s' not in: %s", want1, e.msg);
    if (want2) CHECK(strstr(e.msg, want2) != NULL, "'%s' not in: %s", want2, e.msg);
}

static void test_bad(void) {
    bad("{\"hidden_size\": 64,", "not valid JSON", NULL);
    bad("[1, 2]", "object", NULL);
    bad("{\"intermediate_size\": 128, \"num_hidden_layers\": 4, \"num_attention_heads\": 4,"
        " \"vocab_size\": 100}", "\"hidden_size\"", "missing");
    bad("{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": \"abc\","
        " \"num_attention_heads\": 4, \"vocab_size\": 100}",
        "\"num_hidden_layers\" must be a positive integer", "(found \"abc\")");
    bad("{\"hidden_size\": -64, \"intermediate_size\": 128, \"num_hidden_layers\": 4,"
        " \"num_attention_heads\": 4, \"vocab_size\": 100}", "\"hidden_size\"", "-64");
    bad("{\"hidden_size\": 64.5, \"intermediate_size\": 128, \"num_hidden_layers\": 4,"
        " \"num_attention_heads\": 4, \"vocab_size\": 100}", "\"hidden_size\"", "64.5");
    bad("{\"hidden_size\": 64, \"intermediate_size\": true, \"num_hidden_layers\": 4,"
        " \"num_attention_heads\": 4, \"vocab_size\": 100}", "\"intermediate_size\"", "true");
    bad(mk("\"num_key_value_heads\": 3"), "\"num_attention_heads\"", "\"num_key_value_heads\"");
    bad(mk("\"num_key_value_heads\": 8"), "\"num_key_value_heads\"", NULL);
    bad("{\"hidden_size\": 66, \"intermediate_size\": 128, \"num_hidden_layers\": 4,"
        " \"num_attention_heads\": 4, \"vocab_size\": 100}", "\"hidden_size\"", "\"head_dim\"");
    bad(mk("\"head_dim\": 7"), "\"head_dim\"", "even");
    bad(mk("\"head_dim\": \"x\""), "\"head_dim\"", NULL);
    bad(mk("\"rms_norm_eps\": 0"), "\"rms_norm_eps\"", "positive");
    bad(mk("\"rope_theta\": \"big\""), "\"rope_theta\"", NULL);
    bad(mk("\"tie_word_embeddings\": 1"), "\"tie_word_embeddings\"", "true or false");
    bad(mk("\"eos_token_id\": 100"), "\"eos_token_id\"", "100");
    bad(mk("\"eos_token_id\": [1, \"x\"]"), "\"eos_token_id\"", NULL);
    bad(mk("\"eos_token_id\": [1,2,3,4,5,6,7,8,9]"), "\"eos_token_id\"", "at most 8");
    bad(mk("\"bos_token_id\": -2"), "\"bos_token_id\"", NULL);
    bad(mk("\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}"), "\"rope_scaling\"",
        "not supported");
    bad(mk("\"attention_bias\": true"), "\"attention_bias\"", NULL);
    bad(mk("\"mlp_bias\": true"), "\"mlp_bias\"", NULL);
    bad(mk("\"hidden_act\": \"gelu\""), "\"hidden_act\"", "silu");
    bad(mk("\"model_type\": \"mistral\""), "\"model_type\"", "llama");
    bad(mk("\"latent_recurrence\": 5"), "\"latent_recurrence\"", NULL);
    bad(mk("\"latent_recurrence\": {\"type\": \"rnn\"}"), "\"latent_recurrence.type\"", "rnn");
    bad(mk("\"latent_recurrence\": {\"type\": \"t2mlr\", \"l_end\": 2}"),
        "\"latent_recurrence.l_start\"", "missing");
    bad(mk("\"latent_recurrence\": {\"type\": \"t2mlr\", \"l_start\": 2, \"l_end\": 1}"),
        "\"latent_recurrence.l_end\"", NULL);
    bad(mk("\"latent_recurrence\": {\"type\": \"t2mlr\", \"l_start\": 0, \"l_end\": 4}"),
        "\"latent_recurrence.l_end\"", "3] (found 4)");
    bad(mk("\"latent_recurrence\": {\"type\": \"t2mlr\", \"l_start\": -1, \"l_end\": 1}"),
        "\"latent_recurrence.l_start\"", NULL);
    bad(mk("\"latent_recurrence\": {\"type\": \"t2mlr\", \"l_start\": 0, \"l_end\": 1,"
           " \"cache_norm_clamp\": 0.5}"), "\"latent_recurrence.cache_norm_clamp\"", NULL);
    bad(mk("\"latent_recurrence\": {\"type\": \"t2mlr\", \"l_start\": 0, \"l_end\": 1,"
           " \"cache_norm_eps\": -1}"), "\"latent_recurrence.cache_norm_eps\"", NULL);
    bad(mk("\"latent_recurrence\": {\"type\": \"t2mlr\", \"l_start\": 0, \"l_end\": 1,"
           " \"recur_on_prompt\": \"yes\"}"), "\"latent_recurrence.recur_on_prompt\"", NULL);
    bad(mk("\"latent_recurrence\": {\"type\": \"lrt\", \"source_layer\": 4, \"inject_start\": 0,"
           " \"inject_end\": 1}"), "\"latent_recurrence.source_layer\"", "[-1, 3]");
    bad(mk("\"latent_recurrence\": {\"type\": \"lrt\", \"source_layer\": -2, \"inject_start\": 0,"
           " \"inject_end\": 1}"), "\"latent_recurrence.source_layer\"", NULL);
    bad(mk("\"latent_recurrence\": {\"type\": \"lrt\", \"source_layer\": 1, \"inject_start\": 3,"
           " \"inject_end\": 1}"), "\"latent_recurrence.inject_end\"", NULL);
    bad(mk("\"latent_recurrence\": {\"type\": \"lrt\", \"source_layer\": 1, \"inject_start\": 0,"
           " \"inject_end\": 9}"), "\"latent_recurrence.inject_end\"", NULL);
    bad(mk("\"latent_recurrence\": {\"type\": \"lrt\", \"source_layer\": 1, \"inject_start\": 0}"),
        "\"latent_recurrence.inject_end\"", "missing");
    bad(mk("\"latent_recurrence\": {\"type\": \"lrt\", \"source_layer\": 1, \"inject_start\": 0,"
           " \"inject_end\": 1, \"kv_injection\": 0}"), "\"latent_recurrence.kv_injection\"", NULL);
    /* duplicate keys are ambiguous: refused */
    bad("{\"hidden_size\": 64, \"hidden_size\": 32}", "not valid JSON", NULL);
}

static void test_load_errors(void) {
    latent_config c;
    latent_err e = {0};
    CHECK(latent_config_load("/nonexistent/dir/config.json", &c, &e) == -1, "missing file");
    CHECK(strstr(e.msg, "/nonexistent/dir/config.json") && strstr(e.msg, "cannot open"), "%s", e.msg);
    char dir[] = "/tmp/latent_cfg_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"hidden_size\": 64, \"num_hidden_layers\": \"abc\"}", f);
    fclose(f);
    CHECK(latent_config_load(path, &c, &e) == -1, "bad file accepted");
    CHECK(strstr(e.msg, path) != NULL, "path not named: %s", e.msg);
    remove(path);
    rmdir(dir);
}

int main(void) {
    test_smollm2();
    test_defaults();
    test_recurrence();
    test_roundtrip();
    test_bad();
    test_load_errors();
    return tu_finish("test_config");
}
