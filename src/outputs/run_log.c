/* run_log.c -- trainer_log.jsonl (LLaMA-Factory's LogCallback) and the in-memory log_history (HF's
 * TrainerState.log_history). See run_log.h. */
#include "outputs/run_log_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "outputs/tensorboard.h"

/* ---- log_history entries ---- */

static const struct {
    const char *name;
    int is_int;
} known_keys[] = {
    {"epoch", 0}, {"grad_norm", 0}, {"learning_rate", 0}, {"loss", 0}, {"step", 1},
    {"eval_loss", 0}, {"eval_runtime", 0}, {"eval_samples_per_second", 0}, {"eval_steps_per_second", 0},
    {"total_flos", 0}, {"train_loss", 0}, {"train_runtime", 0}, {"train_samples_per_second", 0},
    {"train_steps_per_second", 0}, {"num_input_tokens_seen", 1},
};

const char *tn_hist_known_key(const char *key, int *is_int) {
    for (size_t i = 0; i < sizeof known_keys / sizeof known_keys[0]; i++)
        if (strcmp(key, known_keys[i].name) == 0) {
            if (is_int) *is_int = known_keys[i].is_int;
            return known_keys[i].name;
        }
    return NULL;
}

tn_hist_entry *tn_hist_push(tn_run_log *l) {
    if (l->n_hist == l->cap_hist) {
        l->cap_hist = l->cap_hist ? 2 * l->cap_hist : 64;
        l->hist = tn_xrealloc(l->hist, (size_t)l->cap_hist * sizeof *l->hist);
    }
    tn_hist_entry *e = &l->hist[l->n_hist++];
    memset(e, 0, sizeof *e);
    return e;
}

void tn_hist_set(tn_hist_entry *e, const char *key, double v) {
    const char *name = tn_hist_known_key(key, NULL);
    if (!name) tn_die("log_history: key '%s' is not one tandem writes", key);
    for (int i = 0; i < e->n; i++)
        if (e->kv[i].key == name) {
            e->kv[i].v = v;
            return;
        }
    if (e->n == TN_HIST_MAX_KEYS) tn_die("log_history: more than %d keys in one entry", TN_HIST_MAX_KEYS);
    e->kv[e->n].key = name;
    e->kv[e->n].v = v;
    e->n++;
}

const double *tn_hist_get(const tn_hist_entry *e, const char *key) {
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->kv[i].key, key) == 0) return &e->kv[i].v;
    return NULL;
}

static int kv_cmp(const void *a, const void *b) {
    return strcmp(((const tn_hist_kv *)a)->key, ((const tn_hist_kv *)b)->key);
}

static void put_indent(tn_strbuf *b, int n) {
    for (int i = 0; i < n; i++) tn_sb_puts(b, " ");
}

void tn_hist_write_obj(tn_strbuf *b, const tn_hist_entry *e, int indent, int level) {
    if (e->n == 0) {
        tn_sb_puts(b, "{}");
        return;
    }
    tn_hist_kv kv[TN_HIST_MAX_KEYS];
    memcpy(kv, e->kv, (size_t)e->n * sizeof kv[0]);
    qsort(kv, (size_t)e->n, sizeof kv[0], kv_cmp); /* sort_keys=True */
    tn_sb_puts(b, "{\n");
    for (int i = 0; i < e->n; i++) {
        int is_int = 0;
        tn_hist_known_key(kv[i].key, &is_int);
        put_indent(b, indent * (level + 1));
        tn_sb_printf(b, "\"%s\": ", kv[i].key);
        if (is_int)
            tn_sb_printf(b, "%lld", (long long)kv[i].v);
        else
            tn_sb_py_float(b, kv[i].v);
        tn_sb_puts(b, i + 1 < e->n ? ",\n" : "\n");
    }
    put_indent(b, indent * level);
    tn_sb_puts(b, "}");
}

int tn_run_log_history_len(const tn_run_log *l) { return l ? l->n_hist : 0; }

/* ---- trainer_log.jsonl ---- */

/* Keeps the lines of TEXT whose "current_steps" is <= resume_step. A last line without its newline that
 * does not parse is a write torn by a crash and is dropped; any other bad line is an error. */
static int filter_lines(const char *path, const char *text, size_t len, int resume_step, tn_strbuf *keep) {
    int lineno = 0;
    for (size_t pos = 0; pos < len;) {
        const char *start = text + pos, *nl = memchr(start, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - start) : len - pos;
        pos += n + (nl ? 1 : 0);
        lineno++;
        if (strspn(start, " \t\r") >= n) continue; /* blank */
        cJSON *obj = cJSON_ParseWithLength(start, n);
        if (!obj || !cJSON_IsObject(obj)) {
            cJSON_Delete(obj);
            if (!nl) { /* torn last line */
                fprintf(stderr, "tandem: warning: %s:%d: dropping an incomplete last line\n", path, lineno);
                break;
            }
            return tn_err("%s:%d: not a JSON object (expected one trainer_log line per row)", path, lineno);
        }
        const cJSON *cur = cJSON_GetObjectItemCaseSensitive(obj, "current_steps");
        if (!cJSON_IsNumber(cur)) {
            cJSON_Delete(obj);
            return tn_err("%s:%d: no numeric \"current_steps\"", path, lineno);
        }
        double step = cur->valuedouble;
        cJSON_Delete(obj);
        if (step > resume_step) continue;
        tn_sb_putn(keep, start, n);
        tn_sb_puts(keep, "\n");
    }
    return 0;
}

tn_run_log *tn_run_log_open(const char *output_dir, int resume_step) {
    if (tn_mkdirs(output_dir) != 0) return NULL;
    char *path = tn_path_join(output_dir, "trainer_log.jsonl");
    tn_strbuf keep = {0};
    if (resume_step > 0 && tn_file_exists(path)) {
        size_t len = 0;
        char *text = tn_read_file(path, &len, 0);
        int rc = text ? filter_lines(path, text, len, resume_step, &keep) : -1;
        free(text);
        if (rc != 0) {
            tn_sb_free(&keep);
            free(path);
            return NULL;
        }
    }
    /* Rewritten even when fresh: an old run's lines must not precede this run's (LF deletes the file
     * when overwrite_output_dir). */
    int rc = tn_write_file_atomic(path, keep.s ? keep.s : "", keep.n);
    tn_sb_free(&keep);
    if (rc != 0) {
        free(path);
        return NULL;
    }
    FILE *f = fopen(path, "ab");
    if (!f) {
        tn_err("%s: cannot open for appending: %s", path, strerror(errno));
        free(path);
        return NULL;
    }
    tn_run_log *l = tn_xcalloc(1, sizeof *l);
    l->log_path = path;
    l->f = f;
    l->resume_step = resume_step > 0 ? resume_step : 0;
    return l;
}

int tn_run_log_append_line(tn_run_log *l, const char *line) {
    if (!l->f) return tn_err("%s: log is closed", l->log_path);
    if (fputs(line, l->f) == EOF || fputc('\n', l->f) == EOF || fflush(l->f) != 0)
        return tn_err("%s: write failed: %s", l->log_path, strerror(errno));
    return 0;
}

double tn_lf_remaining(int step, int total_steps, double elapsed_s) {
    double avg = step != 0 ? elapsed_s / step : 0;
    return (total_steps - step) * avg;
}

void tn_run_log_line_tail(tn_strbuf *b, int step, int total_steps, double elapsed_s, double remaining_s) {
    char el[48], rem[48];
    tn_py_timedelta(el, elapsed_s);
    tn_py_timedelta(rem, remaining_s);
    if (total_steps != 0) {
        tn_sb_puts(b, ", \"percentage\": ");
        tn_sb_py_float(b, tn_py_round((double)step / (double)total_steps * 100, 2));
    } else {
        tn_sb_puts(b, ", \"percentage\": 100"); /* LF's int literal */
    }
    tn_sb_printf(b, ", \"elapsed_time\": \"%s\", \"remaining_time\": \"%s\"}", el, rem);
}

int tn_run_log_step(tn_run_log *l, const tn_log_step *s) {
    double loss = tn_py_round(s->loss, 4);
    tn_hist_entry *e = tn_hist_push(l);
    tn_hist_set(e, "loss", loss);
    if (s->grad_norm >= 0 || isnan(s->grad_norm)) tn_hist_set(e, "grad_norm", s->grad_norm);
    tn_hist_set(e, "learning_rate", s->learning_rate);
    tn_hist_set(e, "epoch", s->epoch);
    tn_hist_set(e, "step", s->step);
    if (tn_run_log_tb_entry(l, e) != 0 ||
        (l->tb && s->tokens_per_s > 0 && tn_tb_scalar(l->tb, "train/tokens_per_second", s->tokens_per_s, s->step) != 0))
        return -1;

    tn_strbuf b = {0};
    tn_sb_printf(&b, "{\"current_steps\": %d, \"total_steps\": %d, \"loss\": ", s->step, s->total_steps);
    tn_sb_py_float(&b, loss);
    tn_sb_puts(&b, ", \"lr\": ");
    tn_sb_py_float(&b, s->learning_rate);
    tn_sb_puts(&b, ", \"epoch\": ");
    tn_sb_py_float(&b, s->epoch);
    tn_run_log_line_tail(&b, s->step, s->total_steps, s->elapsed_s, s->remaining_s);
    int rc = tn_run_log_append_line(l, b.s);
    tn_sb_free(&b);
    return rc;
}

void tn_eval_metrics(tn_hist_entry *e, double loss, double runtime, int n_samples, int n_batches) {
    tn_hist_set(e, "eval_loss", loss);
    tn_hist_set(e, "eval_runtime", tn_py_round(runtime, 4));
    if (runtime != 0) {
        tn_hist_set(e, "eval_samples_per_second", tn_py_round(n_samples / runtime, 3));
        tn_hist_set(e, "eval_steps_per_second", tn_py_round(n_batches / runtime, 3));
    }
}

int tn_run_log_eval(tn_run_log *l, const tn_log_eval *ev) {
    tn_hist_entry *e = tn_hist_push(l);
    tn_eval_metrics(e, ev->eval_loss, ev->runtime_s, ev->n_samples, ev->n_batches);
    tn_hist_set(e, "epoch", ev->epoch);
    tn_hist_set(e, "step", ev->step);
    if (tn_run_log_tb_entry(l, e) != 0) return -1;

    tn_strbuf b = {0};
    tn_sb_printf(&b, "{\"current_steps\": %d, \"total_steps\": %d, \"eval_loss\": ", ev->step, ev->total_steps);
    tn_sb_py_float(&b, ev->eval_loss);
    tn_sb_puts(&b, ", \"epoch\": ");
    tn_sb_py_float(&b, ev->epoch);
    tn_run_log_line_tail(&b, ev->step, ev->total_steps, ev->elapsed_s,
                         tn_lf_remaining(ev->step, ev->total_steps, ev->elapsed_s));
    int rc = tn_run_log_append_line(l, b.s);
    tn_sb_free(&b);
    return rc;
}

int tn_run_log_tensorboard(tn_run_log *l, const char *logdir) {
    if (l->tb) return tn_err("%s: TensorBoard is already on for this run", logdir);
    l->tb = tn_tb_open(logdir);
    return l->tb ? 0 : -1;
}

int tn_run_log_tb_entry(tn_run_log *l, const tn_hist_entry *e) {
    const double *step = tn_hist_get(e, "step");
    if (!l->tb || !step) return 0;
    for (int i = 0; i < e->n; i++) {
        const char *k = e->kv[i].key;
        if (strcmp(k, "step") == 0) continue;
        char tag[96];
        if (strncmp(k, "eval_", 5) == 0) snprintf(tag, sizeof tag, "eval/%s", k + 5); /* HF's rewrite_logs */
        else snprintf(tag, sizeof tag, "train/%s", k);
        if (tn_tb_scalar(l->tb, tag, e->kv[i].v, (int64_t)*step) != 0) return -1;
    }
    return 0;
}

void tn_run_log_close(tn_run_log *l) {
    if (!l) return;
    tn_tb_close(l->tb);
    if (l->f) fclose(l->f);
    free(l->log_path);
    free(l->hist);
    free(l);
}
