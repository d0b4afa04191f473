/* rank_log.c -- see rank_log.h. */
#include "outputs/rank_log.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "outputs/pyfmt.h"

struct tn_rank_log {
    char *path;
    FILE *f;
};

/* The lines of text with "step" <= resume_step; a line that does not parse is dropped (this log is tandem's
 * own: a torn line after a crash must not stop the resumed run). */
static void keep_until(const char *text, size_t len, int resume_step, tn_strbuf *keep) {
    for (size_t pos = 0; pos < len;) {
        const char *start = text + pos, *nl = memchr(start, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - start) : len - pos;
        pos += n + (nl ? 1 : 0);
        if (!nl) break; /* torn */
        cJSON *obj = cJSON_ParseWithLength(start, n);
        const cJSON *step = obj ? cJSON_GetObjectItemCaseSensitive(obj, "step") : NULL;
        if (cJSON_IsNumber(step) && step->valuedouble <= resume_step) {
            tn_sb_putn(keep, start, n);
            tn_sb_puts(keep, "\n");
        }
        cJSON_Delete(obj);
    }
}

tn_rank_log *tn_rank_log_open(const char *output_dir, int resume_step) {
    if (tn_mkdirs(output_dir) != 0) return NULL;
    char *path = tn_path_join(output_dir, TN_RANK_LOG_NAME);
    tn_strbuf keep = {0};
    if (resume_step > 0 && tn_file_exists(path)) {
        size_t len = 0;
        char *text = tn_read_file(path, &len, 0);
        if (text) keep_until(text, len, resume_step, &keep);
        free(text);
    }
    int rc = tn_write_file_atomic(path, keep.s ? keep.s : "", keep.n); /* a new file: a reader starts over */
    tn_sb_free(&keep);
    FILE *f = rc == 0 ? fopen(path, "ab") : NULL;
    if (!f) {
        if (rc == 0) tn_err("%s: cannot open for appending: %s", path, strerror(errno));
        free(path);
        return NULL;
    }
    tn_rank_log *l = tn_xcalloc(1, sizeof *l);
    l->path = path, l->f = f;
    return l;
}

int tn_rank_log_line(tn_rank_log *l, const char *json) {
    if (fputs(json, l->f) == EOF || fputc('\n', l->f) == EOF || fflush(l->f) != 0)
        return tn_err("%s: write failed: %s", l->path, strerror(errno));
    return 0;
}

void tn_rank_log_close(tn_rank_log *l) {
    if (!l) return;
    if (fclose(l->f) != 0) fprintf(stderr, "tandem: warning: %s: %s\n", l->path, strerror(errno));
    free(l->path);
    free(l);
}
