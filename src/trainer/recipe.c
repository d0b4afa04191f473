/* recipe.c -- see recipe.h. */
#include "trainer/recipe.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "trainer/checkpoint.h"

typedef struct {
    char *p;
    size_t left;
} writer;

static void put(writer *w, const char *key, const char *fmt, ...) TN_PRINTF(3, 4);
static void put(writer *w, const char *key, const char *fmt, ...) {
    char v[TN_PATH_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    int k = snprintf(w->p, w->left, "%s=%s\n", key, v);
    if (k < 0 || (size_t)k >= w->left) return; /* cannot happen with TN_RECIPE_MAX; never a torn line */
    w->p += k, w->left -= (size_t)k;
}

/* The shortest text that reads back to v: 2e-3 is "0.002", not "0.0020000000000000000416". */
static const char *num(double v, char buf[static 32]) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, 32, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

/* A path as the folder it names (the same folder reached from another working directory is no change). */
static const char *path(const char *p, char buf[static PATH_MAX]) {
    if (!p[0] || !realpath(p, buf)) snprintf(buf, PATH_MAX, "%s", p);
    return buf;
}

void tn_recipe_of(const tn_train_config *c, int world, char *out, size_t n) {
    writer w = {out, n};
    char a[32], pb[PATH_MAX];
    out[0] = '\0';
    put(&w, "model_name_or_path", "%s", path(c->model_name_or_path, pb));
    put(&w, "model_config", "%s", path(c->model_config, pb));
    put(&w, "finetuning_type", "%s", c->finetuning_type == TN_FT_LORA ? "lora" : "full");
    if (c->finetuning_type == TN_FT_LORA && c->adapter_name_or_path[0]) {
        put(&w, "adapter_name_or_path", "%s", path(c->adapter_name_or_path, pb)); /* r, alpha, targets: its own */
    } else if (c->finetuning_type == TN_FT_LORA) {
        put(&w, "lora_rank", "%d", c->lora_rank);
        put(&w, "lora_alpha", "%s", num(c->lora_alpha, a));
        put(&w, "lora_target", "%s", c->lora_target);
    }
    if (c->finetuning_type == TN_FT_LORA) put(&w, "lora_dropout", "%s", num(c->lora_dropout, a));
    put(&w, "stage", "%s", c->stage == TN_STAGE_PT ? "pt" : "sft");
    put(&w, "dataset", "%s", c->dataset);
    put(&w, "template", "%s", c->template_name);
    put(&w, "cutoff_len", "%d", c->cutoff_len);
    put(&w, "max_samples", "%d", c->max_samples);
    put(&w, "packing", "%s", c->packing ? "true" : "false");
    put(&w, "train_on_prompt", "%s", c->train_on_prompt ? "true" : "false");
    put(&w, "mask_history", "%s", c->mask_history ? "true" : "false");
    put(&w, "val_size", "%s", num(c->val_size, a));
    put(&w, "learning_rate", "%s", num(c->learning_rate, a));
    put(&w, "max_steps", "%d", c->max_steps);
    put(&w, "num_train_epochs", "%s", num(c->num_train_epochs, a));
    put(&w, "lr_scheduler_type", "%s", tn_train_config_sched_name(c));
    if (c->lr_scheduler_type == TN_SCHED_STEP)
        put(&w, "lr_scheduler_kwargs", "step_size=%d,gamma=%s", c->lr_step_size, num(c->lr_step_gamma, a));
    put(&w, "warmup_ratio", "%s", num(c->warmup_ratio, a));
    put(&w, "warmup_steps", "%d", c->warmup_steps);
    put(&w, "max_grad_norm", "%s", num(c->max_grad_norm, a));
    put(&w, "weight_decay", "%s", num(c->weight_decay, a));
    put(&w, "adam_beta1", "%s", num(c->adam_beta1, a));
    put(&w, "adam_beta2", "%s", num(c->adam_beta2, a));
    put(&w, "adam_epsilon", "%s", num(c->adam_epsilon, a));
    put(&w, "seed", "%d", c->seed);
    put(&w, "per_device_train_batch_size", "%d", c->per_device_train_batch_size);
    put(&w, "gradient_accumulation_steps", "%d", c->gradient_accumulation_steps);
    static const char *const codec[] = {"none", "bf16", "int8", "int4"};
    put(&w, "sync_mode", "%s", c->sync_mode == TN_SYNC_DILOCO ? "diloco" : "ddp");
    put(&w, "comm_compression", "%s", codec[c->comm_compression]);
    if (c->sync_mode == TN_SYNC_DILOCO) {
        put(&w, "diloco_inner_steps", "%d", c->diloco_inner_steps);
        put(&w, "diloco_outer_lr", "%s", num(c->diloco_outer_lr, a));
        put(&w, "diloco_outer_momentum", "%s", num(c->diloco_outer_momentum, a));
        put(&w, "diloco_nesterov", "%s", c->diloco_nesterov ? "true" : "false");
        put(&w, "diloco_overlap", "%s", c->diloco_overlap ? "true" : "false");
        put(&w, "diloco_sync_steps", "%d", c->diloco_sync_steps);
    }
    put(&w, "ranks", "%d", world);
    put(&w, "global_batch", "%lld", (long long)world * c->per_device_train_batch_size * c->gradient_accumulation_steps);
}

/* The value of key in "k=v\n" text into out (n bytes); 0 when absent. */
static int lookup(const char *text, const char *key, char *out, size_t n) {
    size_t klen = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (strncmp(l, key, klen) == 0 && l[klen] == '=') {
            size_t len = strcspn(l + klen + 1, "\n");
            snprintf(out, n, "%.*s", (int)len, l + klen + 1);
            return 1;
        }
    return 0;
}

/* Keys whose change makes the checkpoint's tensors mean something else than this run's. */
static const char *const REFUSED[] = {"finetuning_type", "lora_rank", "lora_alpha", "lora_target"};

int tn_recipe_check_resume(const char *dir, const char *now, const char *source_path) {
    static char saved[TN_RECIPE_MAX];
    tn_checkpoint_recipe(dir, saved, sizeof saved);
    if (!saved[0]) return 0; /* none recorded (an older checkpoint), or no manifest: loading it says why */
    const char *slash = strrchr(dir, '/'), *name = slash && slash[1] ? slash + 1 : dir;
    char nb[96];
    name = tn_shown(name, nb);
    /* refusals first: nothing is printed for a resume that does not happen */
    for (size_t i = 0; i < sizeof REFUSED / sizeof REFUSED[0]; i++) {
        char was[TN_PATH_MAX + 64], is[TN_PATH_MAX + 64], wb[96], ib[96];
        if (lookup(saved, REFUSED[i], was, sizeof was) && lookup(now, REFUSED[i], is, sizeof is) && strcmp(was, is) != 0)
            return tn_err("%s: %s changed since %s: %s -> %s; the checkpoint's weights belong to the old value, so "
                          "resuming them would not continue that run: use another output_dir, or overwrite_output_dir: "
                          "true to start over", source_path, REFUSED[i], dir, tn_shown(was, wb), tn_shown(is, ib));
    }
    for (const char *l = now, *nl; *l && (nl = strchr(l, '\n')); l = nl + 1) {
        char key[64], was[TN_PATH_MAX + 64], is[TN_PATH_MAX + 64], wb[96], ib[96];
        size_t klen = strcspn(l, "=");
        snprintf(key, sizeof key, "%.*s", (int)klen, l);
        lookup(now, key, is, sizeof is);
        if (!lookup(saved, key, was, sizeof was) || strcmp(was, is) == 0) continue;
        const char *shown = strcmp(key, "global_batch") == 0
                                ? "global batch (ranks x per_device_train_batch_size x gradient_accumulation_steps)"
                                : key;
        printf("tandem: note: %s changed since %s: %s -> %s\n", shown, name, tn_shown(was, wb), tn_shown(is, ib));
    }
    fflush(stdout);
    return 0;
}
