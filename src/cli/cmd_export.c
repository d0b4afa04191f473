/* cmd_export.c -- `tandem export [CONFIG.yaml] [key=value ...]`: LLaMA-Factory's `llamafactory-cli export`.
 *
 * Merges a LoRA adapter (adapter_name_or_path) into its base model (model_name_or_path) and writes an HF
 * model folder to export_dir: config.json, safetensors shards of at most export_size GB (with
 * model.safetensors.index.json when sharded) and the base folder's tokenizer files. Without an adapter it
 * re-writes the base (e.g. to reshard a full fine-tuning output). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "config/train_config.h"
#include "core/core.h"
#include "model/model.h"
#include "outputs/chat_template.h"
#include "trainer/memory_check.h"

static int do_export(const tn_train_config *cfg) {
    if (!cfg->model_name_or_path[0]) return tn_err("export: set model_name_or_path (the base model folder)");
    if (!cfg->export_dir[0]) return tn_err("export: set export_dir (where the merged model goes)");
    char *cfg_path = tn_path_join(cfg->model_name_or_path, "config.json");
    tn_model_config mc;
    int rc = tn_model_config_load(cfg_path, &mc);
    tn_lora_config lora = {0};
    if (rc == 0 && cfg->adapter_name_or_path[0]) rc = tn_lora_config_load(cfg->adapter_name_or_path, &lora);
    if (rc == 0) rc = tn_memory_check_create(cfg_path, &mc, lora.r > 0);
    free(cfg_path);
    if (rc) return -1;
    tn_model *m = tn_model_create(&mc, lora.r ? &lora : NULL, tn_backend_cpu());
    rc = tn_model_load_hf(m, cfg->model_name_or_path);
    if (rc == 0 && lora.r) rc = tn_model_load_adapter(m, cfg->adapter_name_or_path);
    if (rc == 0) {
        tn_model_merge_lora(m);
        m->lora.r = 0; /* saving writes the (merged) base weights only */
        rc = tn_model_save_hf(m, cfg->export_dir, (size_t)cfg->export_size << 30);
        m->lora.r = lora.r;
    }
    if (rc == 0) {
        int copied = tn_model_copy_tokenizer_files(cfg->model_name_or_path, cfg->export_dir);
        if (copied < 0) rc = -1; /* tn_err names the file and why */
        /* the chat template as training leaves it beside the adapter: its own file when the base only has it in
         * tokenizer_config.json */
        else if (tn_write_chat_template(cfg->model_name_or_path, cfg->export_dir) < 0) rc = -1;
        else
            printf("tandem: exported %s%s%s to %s (%d tokenizer files copied)\n", cfg->model_name_or_path,
                   lora.r ? " + adapter " : "", lora.r ? cfg->adapter_name_or_path : "", cfg->export_dir, copied);
    }
    tn_model_free(m);
    return rc;
}

int tn_cmd_export(int argc, char **argv) {
    static tn_train_config cfg;
    int first = 0, rc;
    if (argc >= 1 && !strchr(argv[0], '=')) {
        rc = tn_train_config_load(argv[0], &cfg);
        first = 1;
    } else {
        rc = tn_train_config_parse("finetuning_type: lora\n", "command line", &cfg);
    }
    for (int i = first; i < argc && rc == 0; i++) {
        if (!strchr(argv[i], '=')) rc = tn_err("command line: '%s' is not key=value", argv[i]);
        else rc = tn_train_config_override(&cfg, argv[i]);
    }
    if (rc == 0) rc = tn_train_config_finish(&cfg);
    if (rc == 0) rc = tn_train_config_check_model_paths(&cfg);
    char shards[96]; /* the general note says "only tandem export reads it": this is tandem export */
    snprintf(shards, sizeof shards, "safetensors shards of at most %d GB", cfg.export_size);
    tn_train_config_reword_note(&cfg, "export_size", shards);
    if (rc == 0) tn_train_config_print_notices(&cfg, stdout);
    if (rc == 0) rc = do_export(&cfg);
    if (rc != 0) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        return 1;
    }
    return 0;
}

/* `tandem init-model CONFIG.json OUT_DIR [--tokenizer DIR] [--seed N]`: a freshly initialised HF model folder
 * (HF's initialisation, as model_config does for training) with a tokenizer's files, to pre-train from
 * scratch or to try the LLaMA-Factory examples on a small model without downloading one. */
int tn_cmd_init_model(int argc, char **argv) {
    const char *config = NULL, *out = NULL, *tokdir = NULL;
    long seed = 42;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) tokdir = argv[++i];
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = strtol(argv[++i], NULL, 10);
        else if (!config) config = argv[i];
        else if (!out) out = argv[i];
        else {
            fprintf(stderr, "tandem: error: init-model: unexpected argument '%s'\n", argv[i]);
            return 1;
        }
    }
    if (!config || !out) {
        fprintf(stderr, "tandem: error: usage: tandem init-model CONFIG.json OUT_DIR [--tokenizer DIR] [--seed N]\n");
        return 1;
    }
    tn_model_config mc;
    int rc = tn_model_config_load(config, &mc);
    if (rc == 0) rc = tn_memory_check_create(config, &mc, 0); /* named before allocating, as train does */
    tn_model *m = rc ? NULL : tn_model_create(&mc, NULL, tn_backend_cpu());
    if (m) {
        tn_model_init_random(m, (uint64_t)seed);
        rc = tn_model_save_hf(m, out, (size_t)5 << 30);
        if (rc == 0 && mc.vis.kind != TN_VL_NONE) { /* a VL model folder needs its image processor's settings */
            char *pp = tn_path_join(out, "preprocessor_config.json");
            rc = tn_vl_write_preprocessor_config(&mc, pp);
            free(pp);
        }
        int copied = rc == 0 && tokdir ? tn_model_copy_tokenizer_files(tokdir, out) : 1;
        if (copied < 0) rc = -1; /* tn_err names the file and why */
        else if (copied == 0)
            rc = tn_err("init-model: no tokenizer files copied from %s (expected tokenizer.json there)", tokdir);
        if (rc == 0)
            printf("tandem: wrote a freshly initialised %s model (%.2fM parameters) to %s\n", mc.model_type,
                   m->n_total / 1e6, out);
        tn_model_free(m);
    }
    if (rc != 0) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        return 1;
    }
    return 0;
}
