/* trainer_state.c -- HF's trainer_state.json (TrainerState.save_to_json: json.dumps(asdict(state),
 * indent=2, sort_keys=True) + "\n"), and reading its log_history back on resume. */
#include "outputs/run_log_internal.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static void put_flag(tn_strbuf *b, const char *name, int v, int last) {
    tn_sb_printf(b, "        \"%s\": %s%s\n", name, v ? "true" : "false", last ? "" : ",");
}

/* Keys in sorted order, as sort_keys=True writes them; the ones tandem never sets (best model tracking,
 * hyper-parameter search) keep HF's defaults. */
static void state_json(tn_strbuf *b, const tn_run_log *l, const tn_trainer_state_info *in) {
    tn_sb_puts(b, "{\n  \"best_global_step\": null,\n  \"best_metric\": null,\n  \"best_model_checkpoint\": null,\n");
    tn_sb_puts(b, "  \"epoch\": ");
    tn_sb_py_float(b, in->epoch);
    tn_sb_printf(b, ",\n  \"eval_steps\": %d,\n  \"global_step\": %d,\n", in->eval_steps, in->global_step);
    tn_sb_puts(b, "  \"is_hyper_param_search\": false,\n  \"is_local_process_zero\": true,\n"
                  "  \"is_world_process_zero\": true,\n");
    if (l->n_hist == 0) {
        tn_sb_puts(b, "  \"log_history\": [],\n");
    } else {
        tn_sb_puts(b, "  \"log_history\": [\n");
        for (int i = 0; i < l->n_hist; i++) {
            tn_sb_puts(b, "    ");
            tn_hist_write_obj(b, &l->hist[i], 2, 2);
            tn_sb_puts(b, i + 1 < l->n_hist ? ",\n" : "\n");
        }
        tn_sb_puts(b, "  ],\n");
    }
    tn_sb_printf(b, "  \"logging_steps\": %d,\n  \"max_steps\": %d,\n  \"num_input_tokens_seen\": %lld,\n",
                 in->logging_steps, in->max_steps, in->num_input_tokens_seen);
    tn_sb_printf(b, "  \"num_train_epochs\": %d,\n  \"save_steps\": %d,\n", in->num_train_epochs, in->save_steps);
    tn_sb_puts(b, "  \"stateful_callbacks\": {\n    \"TrainerControl\": {\n      \"args\": {\n");
    put_flag(b, "should_epoch_stop", in->should_epoch_stop, 0);
    put_flag(b, "should_evaluate", in->should_evaluate, 0);
    put_flag(b, "should_log", in->should_log, 0);
    put_flag(b, "should_save", in->should_save, 0);
    put_flag(b, "should_training_stop", in->should_training_stop, 1);
    tn_sb_puts(b, "      },\n      \"attributes\": {}\n    }\n  },\n");
    tn_sb_puts(b, "  \"total_flos\": ");
    tn_sb_py_float(b, in->total_flos);
    tn_sb_printf(b, ",\n  \"train_batch_size\": %d,\n  \"trial_name\": null,\n  \"trial_params\": null\n}\n",
                 in->train_batch_size);
}

int tn_run_log_write_state(const tn_run_log *l, const char *dir, const tn_trainer_state_info *info) {
    if (!l || !dir || !info) return tn_err("trainer_state.json: no log, folder or state info given");
    if (tn_mkdirs(dir) != 0) return -1;
    tn_strbuf b = {0};
    state_json(&b, l, info);
    char *path = tn_path_join(dir, "trainer_state.json");
    int rc = tn_write_file_atomic(path, b.s, b.n);
    free(path);
    tn_sb_free(&b);
    return rc;
}

/* One log_history object into E; -1 naming the entry and key when it holds what tandem does not write. */
static int load_entry(const char *path, int idx, const cJSON *obj, tn_hist_entry *e) {
    if (!cJSON_IsObject(obj)) return tn_err("%s: log_history[%d]: expected an object", path, idx);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, obj) {
        const char *name = tn_hist_known_key(kv->string, NULL);
        if (!name)
            return tn_err("%s: log_history[%d]: key '%s' is not one tandem writes", path, idx, kv->string);
        if (!cJSON_IsNumber(kv)) return tn_err("%s: log_history[%d]: \"%s\" is not a number", path, idx, name);
        if (e->n == TN_HIST_MAX_KEYS) return tn_err("%s: log_history[%d]: too many keys", path, idx);
        tn_hist_set(e, name, kv->valuedouble);
    }
    if (!tn_hist_get(e, "step")) return tn_err("%s: log_history[%d]: no \"step\"", path, idx);
    return 0;
}

int tn_run_log_load_history(tn_run_log *l, const char *checkpoint_dir) {
    char *path = tn_path_join(checkpoint_dir, "trainer_state.json");
    if (l->n_hist) {
        tn_err("%s: log_history must be loaded before anything is logged", path);
        free(path);
        return -1;
    }
    size_t len = 0;
    char *text = tn_read_file(path, &len, 0);
    if (!text) {
        free(path);
        return -1;
    }
    int rc = 0;
    cJSON *root = cJSON_ParseWithLength(text, len);
    const cJSON *hist = root ? cJSON_GetObjectItemCaseSensitive(root, "log_history") : NULL;
    if (!root) {
        rc = tn_err("%s: not valid JSON", path);
    } else if (!cJSON_IsArray(hist)) {
        rc = tn_err("%s: no \"log_history\" list", path);
    } else {
        int idx = 0;
        const cJSON *obj;
        cJSON_ArrayForEach(obj, hist) {
            tn_hist_entry e = {0};
            if ((rc = load_entry(path, idx, obj, &e)) != 0) break;
            if (l->resume_step <= 0 || *tn_hist_get(&e, "step") <= l->resume_step) *tn_hist_push(l) = e;
            idx++;
        }
        if (rc != 0) l->n_hist = 0;
    }
    cJSON_Delete(root);
    free(text);
    free(path);
    return rc;
}
