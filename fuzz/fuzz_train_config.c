/* fuzz_train_config -- the training YAML (src/config/train_config.c): tn_train_config_parse on the input
 * up to its first NUL byte; when that parses, every further NUL-separated piece is a `key=value`
 * command-line override (tn_train_config_override), then tn_train_config_finish. Every refusal must
 * be one line naming the file (or "command line"); every string field must stay NUL-terminated. */
#include "config/train_config.h"
#include "fuzz_util.h"

#define PATH "cfg/fuzz.yaml"

static void check_strings(const tn_train_config *c) {
    FZ_ASSERT(memchr(c->model_name_or_path, 0, sizeof c->model_name_or_path));
    FZ_ASSERT(memchr(c->model_config, 0, sizeof c->model_config));
    FZ_ASSERT(memchr(c->adapter_name_or_path, 0, sizeof c->adapter_name_or_path));
    FZ_ASSERT(memchr(c->export_dir, 0, sizeof c->export_dir));
    FZ_ASSERT(memchr(c->lora_target, 0, sizeof c->lora_target));
    FZ_ASSERT(memchr(c->dataset, 0, sizeof c->dataset));
    FZ_ASSERT(memchr(c->dataset_dir, 0, sizeof c->dataset_dir));
    FZ_ASSERT(memchr(c->template_name, 0, sizeof c->template_name));
    FZ_ASSERT(memchr(c->default_system, 0, sizeof c->default_system));
    FZ_ASSERT(memchr(c->output_dir, 0, sizeof c->output_dir));
    FZ_ASSERT(memchr(c->resume_from_checkpoint, 0, sizeof c->resume_from_checkpoint));
    FZ_ASSERT(memchr(c->notices, 0, sizeof c->notices));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fz_cstr(data, size);
    tn_train_config *c = malloc(sizeof *c);
    if (!c) abort();
    fz_err_reset();
    if (tn_train_config_parse(text, PATH, c) != 0) {
        fz_check_error(PATH);
    } else {
        check_strings(c);
        int ok = 1;
        for (size_t at = strlen(text) + 1; ok && at <= size; at += strlen(text + at) + 1) {
            fz_err_reset();
            if (tn_train_config_override(c, text + at) != 0) {
                fz_check_error("command line");
                ok = 0;
            }
            check_strings(c);
        }
        fz_err_reset();
        if (ok && tn_train_config_finish(c) != 0) fz_check_error(PATH);
        check_strings(c);
    }
    free(c);
    free(text);
    return 0;
}
