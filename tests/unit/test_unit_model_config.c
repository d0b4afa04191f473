/* test_unit_model_config -- HF config.json for llama / qwen2 / qwen3 / mistral: defaults, derived bias flags,
 * GQA, every rejection (message names the key and the file), and save -> load round trips. */
#include "core/core.h"
#include "model/model_config.h"
#include "testlib.h"

#include <ftw.h>
#include <stdlib.h>
#include <string.h>

#define P "cfg.json" /* the path used in messages */

/* The required keys; overrides replace a key's value, NULL removes it, unknown keys are appended. */
static const char *const k_base[][2] = {
    {"vocab_size", "100"}, {"hidden_size", "64"}, {"intermediate_size", "128"},
    {"num_hidden_layers", "2"}, {"num_attention_heads", "4"},
};
#define NBASE ((int)(sizeof k_base / sizeof k_base[0]))

static const char *json_with(const char *type, const char *const *ov) {
    static char buf[4096];
    size_t k = (size_t)snprintf(buf, sizeof buf, "{");
    if (type) k += (size_t)snprintf(buf + k, sizeof buf - k, "\"model_type\": \"%s\"", type);
    const char *sep = type ? ", " : "";
    for (int i = 0; i < NBASE; i++) {
        const char *v = k_base[i][1];
        for (const char *const *o = ov; o && o[0]; o += 2)
            if (strcmp(o[0], k_base[i][0]) == 0) v = o[1];
        if (!v) continue;
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s\"%s\": %s", sep, k_base[i][0], v);
        sep = ", ";
    }
    for (const char *const *o = ov; o && o[0]; o += 2) {
        int in_base = 0;
        for (int i = 0; i < NBASE; i++) in_base |= strcmp(o[0], k_base[i][0]) == 0;
        if (!in_base && o[1]) {
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s\"%s\": %s", sep, o[0], o[1]);
            sep = ", ";
        }
    }
    snprintf(buf + k, sizeof buf - k, "}");
    return buf;
}

static int parse(const char *type, const char *const *ov, tn_model_config *c) {
    return tn_model_config_parse(json_with(type, ov), P, c);
}

static void test_llama_defaults(void) {
    tn_model_config c;
    if (!CHECKF(parse("llama", NULL, &c) == 0, "%s", tn_errmsg())) return;
    CHECK(strcmp(c.model_type, "llama") == 0);
    CHECK(c.vocab_size == 100 && c.hidden_size == 64 && c.intermediate_size == 128 && c.num_hidden_layers == 2);
    CHECK(c.num_attention_heads == 4 && c.num_key_value_heads == 4 && c.head_dim == 16);
    CHECK(c.max_position_embeddings == 2048 && c.rope_theta == 10000.0 && c.rms_norm_eps == 1e-6);
    CHECK(c.tie_word_embeddings == 0 && c.attention_bias == 0 && c.qkv_bias == 0 && c.o_bias == 0);
    CHECK(c.initializer_range == 0.02 && c.bos_token_id == -1 && c.eos_token_id == -1);
    CHECK(strcmp(c.torch_dtype, "float32") == 0);
}

static void test_llama_options(void) {
    tn_model_config c;
    const char *ov[] = {"num_key_value_heads", "2", "head_dim", "32", "attention_bias", "true", "rope_theta", "500000.0",
                        "rms_norm_eps", "1e-05", "tie_word_embeddings", "true", "eos_token_id", "[7, 8]",
                        "bos_token_id", "1", "torch_dtype", "\"bfloat16\"", "rope_scaling", "null", "hidden_act",
                        "\"silu\"", "max_position_embeddings", "128", "architectures", "[\"LlamaForCausalLM\"]",
                        "mlp_bias", "false", NULL};
    if (!CHECKF(parse("llama", ov, &c) == 0, "%s", tn_errmsg())) return;
    CHECK(c.num_key_value_heads == 2 && c.head_dim == 32); /* GQA, head_dim not hidden/heads */
    CHECK(c.attention_bias == 1 && c.qkv_bias == 1 && c.o_bias == 1);
    CHECK(c.rope_theta == 500000.0 && c.rms_norm_eps == 1e-5 && c.tie_word_embeddings == 1);
    CHECK(c.eos_token_id == 7 && c.bos_token_id == 1 && c.max_position_embeddings == 128);
    CHECK(strcmp(c.torch_dtype, "bfloat16") == 0);
    const char *nulls[] = {"num_key_value_heads", "null", "eos_token_id", "null", "bos_token_id", "[]", NULL};
    CHECK(parse("llama", nulls, &c) == 0 && c.num_key_value_heads == 4 && c.eos_token_id == -1 && c.bos_token_id == -1);
    const char *newer[] = {"dtype", "\"float16\"", NULL}; /* transformers >= 4.56 spelling */
    CHECK(parse("llama", newer, &c) == 0 && strcmp(c.torch_dtype, "float16") == 0);
}

static void test_qwen2_mistral(void) {
    tn_model_config c;
    const char *q[] = {"num_key_value_heads", "1", "use_sliding_window", "false", "sliding_window", "4096",
                       "attention_bias", "false", "tie_word_embeddings", "true", NULL};
    if (CHECKF(parse("qwen2", q, &c) == 0, "%s", tn_errmsg())) {
        CHECK(strcmp(c.model_type, "qwen2") == 0 && c.num_key_value_heads == 1);
        CHECK(c.qkv_bias == 1 && c.o_bias == 0 && c.tie_word_embeddings == 1); /* qwen2 biases whatever the key says */
    }
    const char *m[] = {"num_key_value_heads", "2", "sliding_window", "null", NULL};
    if (CHECKF(parse("mistral", m, &c) == 0, "%s", tn_errmsg()))
        CHECK(strcmp(c.model_type, "mistral") == 0 && c.qkv_bias == 0 && c.o_bias == 0 && c.num_key_value_heads == 2);
    const char *m2[] = {"sliding_window", "4096", "max_position_embeddings", "4096", "attention_bias", "true", NULL};
    CHECKF(parse("mistral", m2, &c) == 0 && c.qkv_bias == 1 && c.o_bias == 1, "%s", tn_errmsg()); /* window >= context: unused */
    /* Qwen3-4B-Instruct-2507's shape: head_dim 128 != 2560 / 32, no biases, per-head q/k norms, theta 5e6 */
    const char *q3[] = {"hidden_size", "2560", "num_attention_heads", "32", "num_key_value_heads", "8", "head_dim",
                        "128", "rope_theta", "5000000", "attention_bias", "false", "use_sliding_window", "false",
                        "sliding_window", "null", "max_window_layers", "36", NULL};
    if (CHECKF(parse("qwen3", q3, &c) == 0, "%s", tn_errmsg())) {
        CHECK(c.head_dim == 128 && c.hidden_size == 2560 && c.rope_theta == 5e6 && c.qk_norm == 1);
        CHECK(c.qkv_bias == 0 && c.o_bias == 0);
    }
    const char *q3b[] = {"attention_bias", "true", NULL}; /* Qwen3's attention_bias covers q, k, v and o */
    CHECKF(parse("qwen3", q3b, &c) == 0 && c.qkv_bias == 1 && c.o_bias == 1 && c.qk_norm == 1, "%s", tn_errmsg());
    CHECK(parse("qwen2", NULL, &c) == 0 && c.qk_norm == 0);
}

static void expect_reject(const char *type, const char *const *ov, const char *want, int line) {
    tn_model_config c;
    int rc = parse(type, ov, &c);
    const char *m = tn_errmsg();
    tl_checkf(rc == -1 && strstr(m, P) && strstr(m, want), __FILE__, line, "%s: rc %d, message '%s', wanted '%s'",
              json_with(type, ov), rc, rc ? m : "", want);
}
#define REJECT(type, want, ...) expect_reject(type, (const char *const[]){__VA_ARGS__, NULL}, want, __LINE__)

static void test_rejections(void) {
    for (int i = 0; i < NBASE; i++) { /* each required key missing */
        const char *ov[] = {k_base[i][0], NULL, NULL};
        expect_reject("llama", ov, k_base[i][0], __LINE__);
        const char *ov2[] = {k_base[i][0], "0", NULL};
        expect_reject("llama", ov2, k_base[i][0], __LINE__);
    }
    REJECT("llama", "'hidden_size'", "hidden_size", "\"64\"");
    REJECT("llama", "'hidden_size'", "hidden_size", "-64");
    REJECT("llama", "'hidden_size'", "hidden_size", "64.5");
    REJECT("llama", "'hidden_size'", "hidden_size", "true");
    REJECT("llama", "'vocab_size'", "vocab_size", "1e12");
    REJECT("llama", "'num_key_value_heads'", "num_key_value_heads", "3");
    REJECT("llama", "'num_key_value_heads'", "num_key_value_heads", "-2");
    REJECT("llama", "'head_dim'", "head_dim", "15");
    REJECT("llama", "'head_dim'", "hidden_size", "60", "num_attention_heads", "4"); /* 15 = 60/4 is odd */
    REJECT("llama", "'hidden_size'", "hidden_size", "66");                           /* 66/4 not whole */
    REJECT("llama", "'max_position_embeddings'", "max_position_embeddings", "0");
    REJECT("gpt2", "'model_type'", "x", NULL);
    REJECT("gpt2", "llama, qwen2, qwen3, mistral", "x", NULL);
    REJECT(NULL, "llama, qwen2, qwen3, mistral", "x", NULL);
    REJECT("llama", "'rope_scaling'", "rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}");
    REJECT("qwen2", "'use_sliding_window'", "use_sliding_window", "true");
    REJECT("qwen3", "'use_sliding_window'", "use_sliding_window", "true");
    REJECT("mistral", "'sliding_window'", "sliding_window", "1024", "max_position_embeddings", "4096");
    REJECT("mistral", "'sliding_window'", "sliding_window", "1024"); /* default context 2048 */
    REJECT("mistral", "'sliding_window'", "sliding_window", "\"big\"");
    REJECT("llama", "'hidden_act'", "hidden_act", "\"gelu\"");
    REJECT("llama", "'hidden_act'", "hidden_act", "5");
    REJECT("llama", "'tie_word_embeddings'", "tie_word_embeddings", "\"yes\"");
    REJECT("llama", "'attention_bias'", "attention_bias", "1");
    REJECT("llama", "'mlp_bias'", "mlp_bias", "true");
    REJECT("llama", "'eos_token_id'", "eos_token_id", "\"</s>\"");
    REJECT("llama", "'bos_token_id'", "bos_token_id", "-5");
    REJECT("llama", "'rope_theta'", "rope_theta", "\"1e4\"");
    REJECT("llama", "'rope_theta'", "rope_theta", "0");
    REJECT("llama", "'rms_norm_eps'", "rms_norm_eps", "-1e-6");
    REJECT("llama", "'torch_dtype'", "torch_dtype", "\"a-very-long-dtype-name\"");

    tn_model_config c;
    CHECK(tn_model_config_parse("{\"model_type\": ", P, &c) == -1 && strstr(tn_errmsg(), P) && strstr(tn_errmsg(), "JSON"));
    CHECK(tn_model_config_parse("[1]", P, &c) == -1 && strstr(tn_errmsg(), "object"));
    CHECK(tn_model_config_load("/nonexistent/config.json", &c) == -1 && strstr(tn_errmsg(), "/nonexistent/config.json"));
}

static void check_same(const tn_model_config *a, const tn_model_config *b) {
    CHECK(strcmp(a->model_type, b->model_type) == 0 && strcmp(a->torch_dtype, b->torch_dtype) == 0);
    CHECK(a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size && a->intermediate_size == b->intermediate_size);
    CHECK(a->num_hidden_layers == b->num_hidden_layers && a->num_attention_heads == b->num_attention_heads);
    CHECK(a->num_key_value_heads == b->num_key_value_heads && a->head_dim == b->head_dim);
    CHECK(a->max_position_embeddings == b->max_position_embeddings);
    CHECK(a->rope_theta == b->rope_theta && a->rms_norm_eps == b->rms_norm_eps && a->initializer_range == b->initializer_range);
    CHECK(a->tie_word_embeddings == b->tie_word_embeddings && a->attention_bias == b->attention_bias);
    CHECK(a->qkv_bias == b->qkv_bias && a->o_bias == b->o_bias && a->qk_norm == b->qk_norm);
    CHECK(a->bos_token_id == b->bos_token_id && a->eos_token_id == b->eos_token_id);
}

static void test_round_trip(void) {
    static const char *const types[] = {"llama", "qwen2", "mistral", "qwen3"};
    static const char *const archs[] = {"\"LlamaForCausalLM\"", "\"Qwen2ForCausalLM\"", "\"MistralForCausalLM\"",
                                        "\"Qwen3ForCausalLM\""};
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", tl_tmpdir());
    for (int t = 0; t < 4; t++) {
        const char *ov[] = {"num_key_value_heads", "2", "rope_theta", "1000000.0", "rms_norm_eps", "1e-05",
                            "initializer_range", "0.0173", "bos_token_id", "1", "eos_token_id", "2",
                            "torch_dtype", "\"bfloat16\"", "attention_bias", t == 0 ? "true" : "false",
                            "head_dim", t == 3 ? "24" : "16", NULL};
        tn_model_config a, b;
        if (!CHECKF(parse(types[t], ov, &a) == 0, "%s", tn_errmsg())) continue;
        CHECKF(tn_model_config_save(path, &a) == 0, "%s", tn_errmsg());
        if (!CHECKF(tn_model_config_load(path, &b) == 0, "%s", tn_errmsg())) continue;
        check_same(&a, &b);
        char *text = tn_read_file(path, NULL, 0);
        CHECK(text && strstr(text, archs[t]) && strstr(text, "\"hidden_act\": \"silu\""));
        CHECK(text && strstr(text, "\"rope_theta\": 1000000.0,") && strstr(text, "\"rms_norm_eps\": 1e-05,"));
        CHECK(text && strstr(text, "\"use_cache\": false") && strstr(text, "\"torch_dtype\": \"bfloat16\""));
        CHECK(text && (strstr(text, "\"attention_bias\"") != NULL) == (t != 1));
        CHECK(text && (strstr(text, "\"use_sliding_window\": false") != NULL) == (t == 1 || t == 3));
        free(text);
    }
    /* absent token ids stay absent; a config that would not load is not written */
    tn_model_config c;
    CHECK(parse("llama", NULL, &c) == 0 && tn_model_config_save(path, &c) == 0);
    char *text = tn_read_file(path, NULL, 0);
    CHECK(text && !strstr(text, "bos_token_id") && !strstr(text, "eos_token_id") && strstr(text, "\"rope_theta\": 10000.0"));
    free(text);
    c.num_key_value_heads = 3;
    CHECK(tn_model_config_save(path, &c) == -1 && strstr(tn_errmsg(), "num_key_value_heads"));
}

/* Code-built configs: 0 kv heads / head_dim take HF's defaults in finish. */
static void test_finish(void) {
    tn_model_config c;
    memset(&c, 0, sizeof c);
    strcpy(c.model_type, "qwen2");
    c.vocab_size = 10, c.hidden_size = 32, c.intermediate_size = 64, c.num_hidden_layers = 1;
    c.num_attention_heads = 2, c.max_position_embeddings = 16, c.rope_theta = 1e4, c.rms_norm_eps = 1e-6;
    CHECKF(tn_model_config_finish(&c, P) == 0, "%s", tn_errmsg());
    CHECK(c.num_key_value_heads == 2 && c.head_dim == 16 && c.qkv_bias == 1 && c.o_bias == 0);
    strcpy(c.model_type, "gemma");
    CHECK(tn_model_config_finish(&c, P) == -1 && strstr(tn_errmsg(), "model_type"));
}

static void test_shared_fixtures(void) {
    const char *shared = tl_shared_dir();
    if (!shared) return;
    static const char *const names[] = {"llama-f32", "qwen2-f32", "qwen3-f32"};
    for (int i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/ref/fixtures/%s/model/config.json", shared, names[i]);
        if (!tn_file_exists(path)) continue;
        tn_model_config c;
        if (!CHECKF(tn_model_config_load(path, &c) == 0, "%s", tn_errmsg())) continue;
        CHECK(c.vocab_size == 259 && c.hidden_size == 64 && c.num_key_value_heads == 2 && c.head_dim == (i == 2 ? 24 : 16));
        CHECK(c.bos_token_id == 1 && c.eos_token_id == 2 && c.qk_norm == (i == 2));
        if (i == 0) CHECK(c.qkv_bias == 0 && c.rms_norm_eps == 1e-5);
        if (i == 1) CHECK(c.qkv_bias == 1 && c.tie_word_embeddings == 1);
        if (i == 2) CHECK(c.qkv_bias == 0 && c.o_bias == 0 && c.tie_word_embeddings == 1);
    }
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(void) {
    test_llama_defaults();
    test_llama_options();
    test_qwen2_mistral();
    test_rejections();
    test_round_trip();
    test_finish();
    test_shared_fixtures();
    nftw(tl_tmpdir(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return tl_done("test_unit_model_config");
}
