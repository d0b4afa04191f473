/* chat_template.c -- see chat_template.h. */
#include "outputs/chat_template.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

int tn_write_chat_template(const char *model_dir, const char *out_dir) {
    char *own = tn_path_join(model_dir, "chat_template.jinja"), *cfg_path = tn_path_join(model_dir, "tokenizer_config.json");
    int rc = 0;
    if (tn_file_exists(own) || !tn_file_exists(cfg_path)) goto out;
    size_t n = 0;
    char *text = tn_read_file(cfg_path, &n, (size_t)64 << 20);
    if (!text) {
        rc = -1;
        goto out;
    }
    cJSON *j = cJSON_ParseWithLength(text, n);
    free(text);
    if (!j) {
        rc = tn_err("%s: not valid JSON", cfg_path);
        goto out;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    if (cJSON_IsString(t) && t->valuestring[0]) {
        char *dst = tn_path_join(out_dir, "chat_template.jinja");
        rc = tn_write_file_atomic(dst, t->valuestring, strlen(t->valuestring)) == 0 ? 1 : -1;
        free(dst);
    }
    cJSON_Delete(j);
out:
    free(own), free(cfg_path);
    return rc;
}
