/* test_unit_memory_check -- the bytes a job needs, computed before allocating (issue 15, item 7):
 *   the estimate against what tn_model_create, tn_adamw_create and tn_acts_create really allocate, for a
 *   llama (GQA, untied, head_dim != hidden/heads), a qwen2 (q/k/v biases, tied) and LoRA with dropout, with
 *   and without gradient checkpointing: parameters + gradients + moments exactly, activations a lower
 *   bound within the 64-byte alignment of each buffer;
 *   tn_memory_check: absurd sizes (hidden_size 1e9, num_hidden_layers 1e6, vocab_size 2^31-1, a batch of
 *   1e9) refused with one line naming the file, the key and the bytes; a model config that disagrees
 *   with its weights' shapes refused naming the tensor; the demo's config passes;
 *   a GPU run (tn_memory_check_on): checked against each rank's GPU (ranks sharing it add up, bf16 frozen weights
 *   at 2 bytes), not against host RAM times the machine's ranks; host RAM only for what stays there (DiLoCo). */
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model.h"
#include "testlib.h"
#include "trainer/memory_check.h"
#include "trainer/optimizer.h"

static tn_model_config llama(void) {
    tn_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "llama");
    c.vocab_size = 97, c.hidden_size = 24, c.intermediate_size = 40, c.num_hidden_layers = 3;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 8, c.max_position_embeddings = 64;
    c.rope_theta = 10000, c.rms_norm_eps = 1e-6, c.initializer_range = 0.02;
    return c;
}

/* The estimate for (mc, cfg) against the real allocations of that model and a B x S workspace. */
static void compare(const char *what, tn_model_config mc, int lora, int ckpt, double dropout, int accum) {
    tn_train_config cfg;
    tn_train_config_defaults(&cfg);
    cfg.finetuning_type = lora ? TN_FT_LORA : TN_FT_FULL;
    cfg.lora_rank = 4, cfg.lora_dropout = dropout, cfg.gradient_checkpointing = ckpt;
    snprintf(cfg.lora_target, sizeof cfg.lora_target, lora == 2 ? "q_proj,down_proj" : "all");
    cfg.per_device_train_batch_size = 3, cfg.gradient_accumulation_steps = accum;
    const int S = 11;
    CHECK(tn_model_config_finish(&mc, what) == 0);
    tn_lora_config lc = {0};
    if (lora) {
        lc.r = cfg.lora_rank, lc.alpha = 8, lc.dropout = dropout;
        CHECK(tn_lora_parse_targets(cfg.lora_target, &lc.targets) == 0);
    }
    tn_model *m = tn_model_create(&mc, lora ? &lc : NULL, tn_backend_cpu());
    tn_acts *a = tn_acts_create(m, cfg.per_device_train_batch_size, S, ckpt);
    tn_memory_need need;
    tn_memory_estimate(&cfg, &mc, S, &need);
    double params = 4.0 * (double)(m->n_total + 3 * m->n_trainable); /* slab, gradient, AdamW m and v */
    CHECKF(need.param_bytes == params, "%s: parameter bytes %.0f, allocated %.0f", what, need.param_bytes, params);
    CHECKF(need.trainable == (double)m->n_trainable, "%s: trainable %.0f, allocated %zu", what, need.trainable,
           m->n_trainable);
    /* activations: every carved buffer is rounded up to 16 floats; ~12 buffers per layer set + ~20 others */
    double T = 3.0 * S, acts = (double)tn_acts_bytes(a) + 4 * 5 * T + 4 * 2 * T * accum;
    double slack = 64.0 * (12.0 * mc.num_hidden_layers + 24);
    CHECKF(need.act_bytes <= acts && acts - need.act_bytes <= slack, "%s: activation bytes %.0f, allocated %.0f",
           what, need.act_bytes, acts);
    CHECK(need.tokens == T);
    tn_acts_free(a);
    tn_model_free(m);
}

static const char *write_tmp(const char *name, const char *text) {
    static char paths[8][512];
    static int k;
    char *p = paths[k++ % 8];
    snprintf(p, 512, "%s/%s", tl_tmpdir(), name);
    CHECK(tn_write_file_atomic(p, text, strlen(text)) == 0);
    return p;
}

static const char *demo_json(const char *key, const char *value) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"model_type\": \"llama\", \"vocab_size\": %s, \"hidden_size\": %s, \"intermediate_size\": 344,"
             " \"num_hidden_layers\": %s, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
             " \"max_position_embeddings\": 64, \"tie_word_embeddings\": true}",
             strcmp(key, "vocab_size") ? "259" : value, strcmp(key, "hidden_size") ? "128" : value,
             strcmp(key, "num_hidden_layers") ? "3" : value);
    return write_tmp("config.json", text);
}

/* tn_memory_check on the demo's model with one key changed; want NULL: must pass. */
static void expect(const char *key, const char *value, int batch, const char *want) {
    tn_train_config cfg;
    tn_train_config_defaults(&cfg);
    snprintf(cfg.source_path, sizeof cfg.source_path, "run.yaml");
    snprintf(cfg.model_config, sizeof cfg.model_config, "%s", demo_json(key, value));
    cfg.finetuning_type = TN_FT_FULL, cfg.gradient_checkpointing = 0, cfg.per_device_train_batch_size = batch;
    int rc = tn_memory_check(&cfg, 12, 1);
    if (!want) {
        CHECKF(rc == 0, "%s=%s: %s", key, value, tn_errmsg());
        return;
    }
    const char *msg = tn_errmsg();
    CHECKF(rc == -1 && strstr(msg, want) && strstr(msg, " bytes") && !strchr(msg, '\n'), "%s=%s: got '%s', wanted '%s'",
           key, value, rc ? msg : "(accepted)", want);
}

/* A GPU run of the demo model: the limits are set from the estimate itself, so the cases hold on any machine. */
static void gpu_case(int lora, int diloco, double gpu_factor, int gpu_ranks, int local_ranks, int frozen_bytes,
                     int gpu_frozen_bytes, const char *want) {
    tn_train_config cfg;
    tn_train_config_defaults(&cfg);
    snprintf(cfg.source_path, sizeof cfg.source_path, "run.yaml");
    snprintf(cfg.model_config, sizeof cfg.model_config, "%s", demo_json("", ""));
    cfg.finetuning_type = lora ? TN_FT_LORA : TN_FT_FULL, cfg.per_device_train_batch_size = 4;
    cfg.sync_mode = diloco ? TN_SYNC_DILOCO : TN_SYNC_DDP;
    tn_model_config mc;
    if (!CHECK(tn_model_config_load(cfg.model_config, &mc) == 0)) return;
    tn_memory_need n;
    tn_memory_estimate_frozen(&cfg, &mc, 12, frozen_bytes, &n);
    tn_memory_target t = {.gpu_bytes = gpu_factor * (n.param_bytes + n.act_bytes), .gpu_ranks = gpu_ranks,
                          .frozen_bytes = gpu_frozen_bytes};
    snprintf(t.gpu_name, sizeof t.gpu_name, "cuda:1");
    int rc = tn_memory_check_on(&cfg, 12, local_ranks, &t);
    if (!want) {
        CHECKF(rc == 0, "lora %d diloco %d gpu x%.2f ranks %d/%d: %s", lora, diloco, gpu_factor, gpu_ranks, local_ranks,
               tn_errmsg());
        return;
    }
    CHECKF(rc == -1 && strstr(tn_errmsg(), want) && !strchr(tn_errmsg(), '\n'), "got '%s', wanted '%s'",
           rc ? tn_errmsg() : "(accepted)", want);
}

static void test_gpu_target(void) {
    int limited;
    double host = tn_memory_available(&limited);
    tn_train_config cfg;
    tn_train_config_defaults(&cfg);
    snprintf(cfg.model_config, sizeof cfg.model_config, "%s", demo_json("", ""));
    cfg.finetuning_type = TN_FT_FULL, cfg.per_device_train_batch_size = 4;
    tn_model_config mc;
    if (!CHECK(tn_model_config_load(cfg.model_config, &mc) == 0) || host <= 0) return;
    tn_memory_need n, l32, l16;
    tn_memory_estimate(&cfg, &mc, 12, &n);
    /* more ranks than the host could hold if the model lived there: refused on the host, fine on one GPU each */
    int many = (int)fmin(host / (n.param_bytes + n.act_bytes) + 1, INT_MAX / 2);
    CHECK(tn_memory_check(&cfg, 12, many) == -1);
    gpu_case(0, 0, 1.01, 1, many, 4, 4, NULL);
    gpu_case(0, 0, 0.99, 1, 1, 4, 4, "more than GPU cuda:1's");            /* the GPU itself is checked */
    gpu_case(0, 0, 1.5, 2, 2, 4, 4, "for each of the 2 ranks on that GPU"); /* two ranks share it */
    /* LoRA under bf16: the frozen base at 2 bytes a weight */
    cfg.finetuning_type = TN_FT_LORA;
    tn_memory_estimate_frozen(&cfg, &mc, 12, 4, &l32);
    tn_memory_estimate_frozen(&cfg, &mc, 12, 2, &l16);
    double frozen = (l32.param_bytes - 16 * l32.trainable) / 4;
    CHECK(l16.trainable == l32.trainable && frozen > 0 && l16.param_bytes == 2 * frozen + 16 * l16.trainable);
    gpu_case(1, 0, 0.99, 1, 1, 4, 2, NULL);               /* would not fit in fp32, fits in bf16 */
    gpu_case(1, 0, 0.99, 1, 1, 4, 4, "more than GPU"); /* fp32 (bf16: false) */
    /* DiLoCo keeps 4 vectors of the trainable parameters in host memory per rank */
    int over = (int)fmin(host / (16 * n.trainable) + 1, INT_MAX / 2);
    gpu_case(0, 1, 1.01, 1, over / 2 > 1 ? over / 2 - 1 : 1, 4, 4, NULL);
    gpu_case(0, 1, 1.01, 1, over, 4, 4, "key 'sync_mode': its vectors");
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(void) {
    tn_model_config q = llama();
    snprintf(q.model_type, sizeof q.model_type, "qwen2");
    q.tie_word_embeddings = 1, q.head_dim = 0;
    tn_model_config q3 = llama(); /* Qwen3: per-head q/k norms and their saved inputs, head_dim != D / H */
    snprintf(q3.model_type, sizeof q3.model_type, "qwen3");
    q3.head_dim = 24;
    tn_model_config big_vocab = llama();
    big_vocab.vocab_size = 300000; /* the lm_head chunk: 2^24 / V rounds to 0, at least 64 rows */
    test_gpu_target();
    compare("llama full", llama(), 0, 0, 0, 1);
    compare("llama full checkpointing", llama(), 0, 1, 0, 2);
    compare("qwen2 full", q, 0, 0, 0, 1);
    compare("llama lora all + dropout", llama(), 1, 0, 0.1, 1);
    compare("qwen2 lora q,down checkpointing", q, 2, 1, 0, 3);
    compare("qwen3 full", q3, 0, 0, 0, 1);
    compare("qwen3 lora all checkpointing", q3, 1, 1, 0, 2);
    compare("llama vocab 300000", big_vocab, 0, 1, 0, 1);

    expect("hidden_size", "128", 64, NULL); /* the demo as shipped */
    expect("hidden_size", "1000000000", 64, "config.json: key 'hidden_size' 1000000000: one decoder layer needs ");
    expect("num_hidden_layers", "1000000000", 64, "config.json: key 'num_hidden_layers' 1000000000 x ");
    expect("vocab_size", "2147483647", 1, "config.json: key 'vocab_size' 2147483647 (x hidden_size 128): the embeddings need ");
    expect("hidden_size", "128", 1000000000, "run.yaml: key 'per_device_train_batch_size' 1000000000 x 12 tokens");
    expect("hidden_size", "128", 100000000, "run.yaml: key 'per_device_train_batch_size' 100000000: a micro-batch of "
                                            "100000000 x 12 tokens needs ");

    /* config.json that disagrees with the weights: refused from the header, before the model is made */
    tn_model_config small = llama();
    CHECK(tn_model_config_finish(&small, "small") == 0);
    tn_model *m = tn_model_create(&small, NULL, tn_backend_cpu());
    char dir[600];
    snprintf(dir, sizeof dir, "%s/model", tl_tmpdir());
    CHECKF(tn_model_save_hf(m, dir, 0) == 0, "%s", tn_errmsg());
    tn_model_free(m);
    char cfg_path[700];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    const char *cases[][3] = {
        {"\"hidden_size\": 24", "\"hidden_size\": 1000000000", "key 'hidden_size' is 1000000000 but "},
        {"\"vocab_size\": 97", "\"vocab_size\": 2147483647", "key 'vocab_size' is 2147483647 but "},
        {"\"num_hidden_layers\": 3", "\"num_hidden_layers\": 1000000", "key 'num_hidden_layers' is 1000000 but the weights in "},
        {"\"intermediate_size\": 40", "\"intermediate_size\": 4000000", "key 'intermediate_size' is 4000000 but "}};
    size_t len;
    char *orig = tn_read_file(cfg_path, &len, 0);
    for (int i = 0; orig && i < 4; i++) {
        char *at = strstr(orig, cases[i][0]);
        if (!CHECKF(at != NULL, "config.json lacks %s", cases[i][0])) continue;
        char text[4096];
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - orig), orig, cases[i][1], at + strlen(cases[i][0]));
        CHECK(tn_write_file_atomic(cfg_path, text, strlen(text)) == 0);
        tn_train_config cfg;
        tn_train_config_defaults(&cfg);
        snprintf(cfg.model_name_or_path, sizeof cfg.model_name_or_path, "%s", dir);
        int rc = tn_memory_check(&cfg, 12, 1);
        CHECKF(rc == -1 && strstr(tn_errmsg(), cfg_path) && strstr(tn_errmsg(), cases[i][2]), "%s: got '%s'",
               cases[i][1], rc ? tn_errmsg() : "(accepted)");
    }
    if (orig) {
        CHECK(tn_write_file_atomic(cfg_path, orig, len) == 0);
        tn_train_config cfg;
        tn_train_config_defaults(&cfg);
        snprintf(cfg.model_name_or_path, sizeof cfg.model_name_or_path, "%s", dir);
        CHECKF(tn_memory_check(&cfg, 12, 1) == 0, "the saved model itself: %s", tn_errmsg());
    }
    free(orig);
    nftw(tl_tmpdir(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return tl_done("test_unit_memory_check");
}
