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

static int do_export(const tn_train_config *cfg) {
    if (!cfg->model_name_or_path[0]) return tn_err("export: set model_name_or_path (the base model folder)");
    if (!cfg->export_dir[0]) return tn_err("export: set export_dir (where the merged model goes)");
    char *cfg_path = tn_path_join(cfg->model_name_or_path, "config.json");
    tn_model_config mc;
    int rc = tn_model_config_load(cfg_path, &mc);
    free(cfg_path);
    if (rc) return -1;
    tn_lora_config lora = {0};
    if (cfg->adapter_name_or_path[0] && tn_lora_config_load(cfg->adapter_name_or_path, &lora) != 0) return -1;
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
        if (copied < 0) rc = tn_err("export: cannot copy the tokenizer files into %s", cfg->export_dir);
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
    if (rc == 0) rc = do_export(&cfg);
    if (rc != 0) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        return 1;
    }
    return 0;
}
