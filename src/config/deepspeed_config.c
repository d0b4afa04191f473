/* deepspeed_config.c -- see deepspeed_config.h. */
#include "config/deepspeed_config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"

#define DS_MAX_BYTES (1u << 20) /* a DeepSpeed config is a few hundred bytes */

static void note(tn_deepspeed_config *ds, const char *file, const char *fmt, ...) TN_PRINTF(3, 4);
static void note(tn_deepspeed_config *ds, const char *file, const char *fmt, ...) {
    size_t used = strlen(ds->notes);
    if (used + 1 >= sizeof ds->notes) return;
    int n = snprintf(ds->notes + used, sizeof ds->notes - used, "deepspeed %s: ", file);
    if (n < 0 || used + (size_t)n + 1 >= sizeof ds->notes) return;
    used += (size_t)n;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ds->notes + used, sizeof ds->notes - used, fmt, ap);
    va_end(ap);
    used = strlen(ds->notes);
    if (used + 1 < sizeof ds->notes) ds->notes[used] = '\n', ds->notes[used + 1] = 0;
}

static int is_auto(const cJSON *v) { return cJSON_IsString(v) && strcmp(v->valuestring, "auto") == 0; }

/* key must be "auto" or a number equal to want (relative 1e-9: JSON and YAML spell 1e-4 alike). */
static int match(const char *file, const char *key, const cJSON *v, double want, const char *yaml_key) {
    if (!v || cJSON_IsNull(v) || is_auto(v)) return 0;
    if (!cJSON_IsNumber(v)) return tn_err("%s: key '%s' expects a number or \"auto\"", file, key);
    if (fabs(v->valuedouble - want) > 1e-9 * fmax(1.0, fabs(want)))
        return tn_err("%s: key '%s' is %.10g but the YAML's %s gives %.10g; set it to \"auto\" or make them agree",
                      file, key, v->valuedouble, yaml_key, want);
    return 0;
}

static int enabled(const cJSON *section) { /* {"enabled": true|"auto"|false} */
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(section, "enabled");
    return cJSON_IsTrue(e) || is_auto(e);
}

static int offloads(const cJSON *zero, const char *key) {
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(zero, key), "device");
    return cJSON_IsString(dev) && strcmp(dev->valuestring, "none") != 0;
}

static int check_optimizer(const char *file, const char *name, const cJSON *opt, const tn_train_config *c,
                           tn_deepspeed_config *ds) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(opt, "type");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(opt, "params");
    if (cJSON_IsString(type) && strcasecmp(type->valuestring, "AdamW") != 0 && strcasecmp(type->valuestring, "Adam") != 0)
        return tn_err("%s: key 'optimizer.type' is '%s': tandem trains with AdamW only", file, type->valuestring);
    const cJSON *betas = cJSON_GetObjectItemCaseSensitive(params, "betas");
    if (match(file, "optimizer.params.lr", cJSON_GetObjectItemCaseSensitive(params, "lr"), c->learning_rate,
              "learning_rate") ||
        match(file, "optimizer.params.eps", cJSON_GetObjectItemCaseSensitive(params, "eps"), c->adam_epsilon,
              "adam_epsilon") ||
        match(file, "optimizer.params.weight_decay", cJSON_GetObjectItemCaseSensitive(params, "weight_decay"),
              c->weight_decay, "weight_decay"))
        return -1;
    if (cJSON_IsArray(betas) &&
        (match(file, "optimizer.params.betas[0]", cJSON_GetArrayItem(betas, 0), c->adam_beta1, "adam_beta1") ||
         match(file, "optimizer.params.betas[1]", cJSON_GetArrayItem(betas, 1), c->adam_beta2, "adam_beta2")))
        return -1;
    note(ds, name, "optimizer: AdamW with the YAML's learning_rate, adam_beta1/2, adam_epsilon, weight_decay");
    return 0;
}

/* Errors name the path; notes the file name alone. */
static int check(const char *file, const char *name, const cJSON *root, const tn_train_config *c, int world,
                 tn_deepspeed_config *ds) {
    if (!cJSON_IsObject(root)) return tn_err("%s: expected a JSON object (a DeepSpeed config)", file);
    const int micro = c->per_device_train_batch_size, accum = c->gradient_accumulation_steps;
    if (match(file, "train_micro_batch_size_per_gpu", cJSON_GetObjectItemCaseSensitive(root, "train_micro_batch_size_per_gpu"),
              micro, "per_device_train_batch_size") ||
        match(file, "gradient_accumulation_steps", cJSON_GetObjectItemCaseSensitive(root, "gradient_accumulation_steps"),
              accum, "gradient_accumulation_steps") ||
        match(file, "gradient_clipping", cJSON_GetObjectItemCaseSensitive(root, "gradient_clipping"), c->max_grad_norm,
              "max_grad_norm"))
        return -1;
    char what[96];
    snprintf(what, sizeof what, "per_device_train_batch_size x gradient_accumulation_steps x %d rank(s)", world);
    if (match(file, "train_batch_size", cJSON_GetObjectItemCaseSensitive(root, "train_batch_size"),
              (double)micro * accum * world, what))
        return -1;

    const cJSON *zero = cJSON_GetObjectItemCaseSensitive(root, "zero_optimization");
    const cJSON *stage = cJSON_GetObjectItemCaseSensitive(zero, "stage");
    if (zero && !cJSON_IsObject(zero)) return tn_err("%s: key 'zero_optimization' expects an object", file);
    if (stage && !(cJSON_IsNumber(stage) && stage->valuedouble == floor(stage->valuedouble) && stage->valuedouble >= 0 &&
                   stage->valuedouble <= 3))
        return tn_err("%s: key 'zero_optimization.stage' expects 0, 1, 2 or 3", file);
    ds->zero_stage = stage ? (int)stage->valuedouble : 0;
    ds->offload_optimizer = offloads(zero, "offload_optimizer");
    ds->offload_param = offloads(zero, "offload_param");
    static const char *const sharding[4] = {
        "plain data parallelism (every rank holds the whole model; gradients all-reduced once per step)",
        "AdamW state sharded across the ranks",
        "AdamW state and gradients sharded across the ranks",
        "AdamW state, gradients and parameters sharded across the ranks (each layer gathered just before use)"};
    note(ds, name, "ZeRO stage %d: %s", ds->zero_stage, sharding[ds->zero_stage]);
    if (ds->offload_optimizer || ds->offload_param)
        note(ds, name, "offload_optimizer/offload_param: not done: the optimizer state and parameters stay in the "
                       "backend's memory (host memory on the CPU backend)");
    if (zero)
        note(ds, name, "ZeRO tuning keys (overlap_comm, reduce_bucket_size, stage3_* ...): tandem overlaps its "
                       "bucketed exchange with backward and prefetches the next layer itself (bucket size: "
                       "ddp_bucket_cap_mb)");
    if (enabled(cJSON_GetObjectItemCaseSensitive(root, "bf16")) || enabled(cJSON_GetObjectItemCaseSensitive(root, "fp16")))
        note(ds, name, "bf16/fp16: the YAML's bf16 key decides (bf16: %s), as LLaMA-Factory fills DeepSpeed's \"auto\"",
             c->bf16 ? "true" : "false");
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(root, "optimizer");
    if (opt && check_optimizer(file, name, opt, c, ds)) return -1;
    if (cJSON_GetObjectItemCaseSensitive(root, "scheduler"))
        note(ds, name, "scheduler: the YAML's lr_scheduler_type and warm-up are used");
    return 0;
}

int tn_deepspeed_config_load(const char *path, const tn_train_config *cfg, int world, tn_deepspeed_config *ds) {
    memset(ds, 0, sizeof *ds);
    const char *slash = strrchr(path, '/');
    const char *file = slash ? slash + 1 : path;
    size_t n = 0;
    char *text = tn_read_file(path, &n, DS_MAX_BYTES);
    if (!text) return tn_err("%s: key 'deepspeed': %s", cfg->source_path[0] ? cfg->source_path : "<config>", tn_errmsg());
    cJSON *root = cJSON_ParseWithLength(text, n);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        int line = 1;
        for (const char *p = text; at && p < at && *p; p++) line += *p == '\n';
        free(text);
        return tn_err("%s:%d: not valid JSON (key 'deepspeed' expects a DeepSpeed config file)", path, line);
    }
    free(text);
    int rc = check(path, file, root, cfg, world, ds);
    cJSON_Delete(root);
    return rc;
}
