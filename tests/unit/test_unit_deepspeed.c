/* test_unit_deepspeed -- `deepspeed: FILE` in a LLaMA-Factory YAML: LLaMA-Factory's own five DeepSpeed JSONs
 * (../shared) are read with their "auto" values resolved and the ZeRO stage they name; explicit values that
 * disagree with the YAML are refused with one line naming the file and key, as Hugging Face's DeepSpeed
 * integration refuses them; unreadable or malformed files are one line naming the file. */
#include "config/deepspeed_config.h"
#include "config/train_config.h"
#include "core/core.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tn_train_config yaml(void) {
    tn_train_config c;
    tn_train_config_defaults(&c);
    c.per_device_train_batch_size = 2;
    c.gradient_accumulation_steps = 4;
    c.max_grad_norm = 1.0;
    c.learning_rate = 1e-4;
    snprintf(c.source_path, sizeof c.source_path, "x.yaml");
    return c;
}

static const char *write_json(const char *name, const char *text) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", tl_tmpdir(), name);
    if (tn_write_file_atomic(path, text, strlen(text)) != 0) tn_die("%s", tn_errmsg());
    return path;
}

/* Loading `text` fails with an error containing `want`. */
static void expect_error(const char *text, int world, const char *want) {
    tn_train_config c = yaml();
    tn_deepspeed_config ds;
    const char *path = write_json("ds.json", text);
    int rc = tn_deepspeed_config_load(path, &c, world, &ds);
    CHECKF(rc == -1 && strstr(tn_errmsg(), want), "%s -> rc %d, '%s' (wanted '%s')", text, rc, rc ? tn_errmsg() : "",
           want);
    CHECKF(rc != -1 || !strchr(tn_errmsg(), '\n'), "error is one line: %s", tn_errmsg());
}

static void expect_ok(const char *text, int world, int stage, const char *note) {
    tn_train_config c = yaml();
    tn_deepspeed_config ds;
    const char *path = write_json("ok.json", text);
    int rc = tn_deepspeed_config_load(path, &c, world, &ds);
    CHECKF(rc == 0, "%s: %s", text, rc ? tn_errmsg() : "");
    CHECKF(rc || ds.zero_stage == stage, "%s: stage %d, wanted %d", text, ds.zero_stage, stage);
    CHECKF(rc || !note || strstr(ds.notes, note), "%s: notes lack '%s':\n%s", text, note, ds.notes);
}

static void test_values(void) {
    /* explicit values equal to the YAML's are fine; so is "auto" */
    expect_ok("{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": \"auto\", "
              "\"train_batch_size\": 24, \"gradient_clipping\": 1.0, \"zero_optimization\": {\"stage\": 1}}",
              3, 1, "ZeRO stage 1: AdamW state sharded");
    expect_ok("{}", 1, 0, NULL);
    expect_ok("{\"zero_optimization\": {\"stage\": 0}}", 2, 0, "ZeRO stage 0: plain data parallelism");
    expect_ok("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\"}}}", 1, 0,
              "optimizer: AdamW");
    /* disagreements name the key and both values */
    expect_error("{\"train_micro_batch_size_per_gpu\": 4}", 1,
                 "key 'train_micro_batch_size_per_gpu' is 4 but the YAML's per_device_train_batch_size gives 2");
    expect_error("{\"gradient_accumulation_steps\": 8}", 1, "key 'gradient_accumulation_steps' is 8");
    expect_error("{\"train_batch_size\": 8}", 2, "key 'train_batch_size' is 8 but the YAML's "
                                                 "per_device_train_batch_size x gradient_accumulation_steps x 2 "
                                                 "rank(s) gives 16");
    expect_error("{\"gradient_clipping\": 0.5}", 1, "key 'gradient_clipping' is 0.5");
    expect_error("{\"optimizer\": {\"params\": {\"lr\": 3e-4}}}", 1, "key 'optimizer.params.lr'");
    expect_error("{\"optimizer\": {\"type\": \"Lamb\"}}", 1, "AdamW only");
    expect_error("{\"zero_optimization\": {\"stage\": 4}}", 1, "'zero_optimization.stage' expects 0, 1, 2 or 3");
    expect_error("{\"zero_optimization\": {\"stage\": \"3\"}}", 1, "'zero_optimization.stage' expects");
    expect_error("{\"gradient_clipping\": true}", 1, "key 'gradient_clipping' expects a number or \"auto\"");
    expect_error("[1, 2]", 1, "expected a JSON object");
    expect_error("{\n\"zero_optimization\": {\"stage\": 2},\n}", 1, "ds.json:3: not valid JSON");

    tn_train_config c = yaml();
    tn_deepspeed_config ds;
    CHECK(tn_deepspeed_config_load("/nonexistent/ds.json", &c, 1, &ds) == -1 &&
          strstr(tn_errmsg(), "x.yaml: key 'deepspeed': /nonexistent/ds.json"));
}

/* The JSONs in LLaMA-Factory's examples/deepspeed, byte for byte, with the YAML values of its examples. */
static void test_llamafactory_files(void) {
    const char *shared = tl_shared_dir();
    if (!shared) return;
    static const struct {
        const char *file;
        int stage, offload;
    } files[] = {{"ds_z0_config.json", 0, 0}, {"ds_z2_config.json", 2, 0}, {"ds_z2_offload_config.json", 2, 1},
                 {"ds_z3_config.json", 3, 0}, {"ds_z3_offload_config.json", 3, 1}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/data/llamafactory/examples/deepspeed/%s", shared, files[i].file);
        tn_train_config c = yaml();
        tn_deepspeed_config ds;
        int rc = tn_deepspeed_config_load(path, &c, 4, &ds);
        CHECKF(rc == 0, "%s: %s", files[i].file, rc ? tn_errmsg() : "");
        CHECKF(rc || ds.zero_stage == files[i].stage, "%s: stage %d", files[i].file, ds.zero_stage);
        CHECKF(rc || ds.offload_optimizer == files[i].offload, "%s: offload %d", files[i].file, ds.offload_optimizer);
        CHECKF(rc || strstr(ds.notes, files[i].file), "%s: notes name the file:\n%s", files[i].file, ds.notes);
        CHECKF(rc || strstr(ds.notes, "bf16/fp16"), "%s: bf16 'auto' is noted:\n%s", files[i].file, ds.notes);
    }
}

int main(void) {
    test_values();
    test_llamafactory_files();
    if (!tl_shared_dir()) tl_require_shared("test_unit_deepspeed"); /* the hand-written part passed */
    return tl_done("test_unit_deepspeed");
}
