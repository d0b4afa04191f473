/* results.c -- end of training as LLaMA-Factory's run_sft does it: HF's final train log, save_metrics
 * (train_results.json / eval_results.json / all_results.json: json.dump(indent=4, sort_keys=True), no
 * trailing newline), save_state (trainer_state.json) and plot_loss. */
#include "outputs/loss_plot.h"
#include "outputs/run_log_internal.h"

#include <stdlib.h>
#include <string.h>

static int write_metrics(const char *output_dir, const char *name, const tn_hist_entry *m) {
    tn_strbuf b = {0};
    tn_hist_write_obj(&b, m, 4, 0);
    char *path = tn_path_join(output_dir, name);
    int rc = tn_write_file_atomic(path, b.s, b.n);
    free(path);
    tn_sb_free(&b);
    return rc;
}

static void merge(tn_hist_entry *into, const tn_hist_entry *from) {
    for (int i = 0; i < from->n; i++) tn_hist_set(into, from->kv[i].key, from->kv[i].v);
}

/* LF's plot_loss for one key: the log_history entries holding KEY, plotted against their step. */
static int plot_key(const tn_run_log *l, const char *output_dir, const char *key) {
    double *x = tn_xmalloc((size_t)(l->n_hist + 1) * sizeof *x), *y = tn_xmalloc((size_t)(l->n_hist + 1) * sizeof *y);
    int n = 0;
    for (int i = 0; i < l->n_hist; i++) {
        const double *v = tn_hist_get(&l->hist[i], key), *st = tn_hist_get(&l->hist[i], "step");
        if (v && st) {
            x[n] = *st;
            y[n++] = *v;
        }
    }
    int rc = 0;
    if (n == 0) {
        if (strcmp(key, "loss") == 0) fprintf(stderr, "tandem: warning: no metric %s to plot\n", key);
    } else {
        tn_strbuf title = {0}, name = {0};
        tn_sb_printf(&title, "training %s of %s", key, output_dir);
        tn_sb_printf(&name, "training_%s.png", key);
        char *path = tn_path_join(output_dir, name.s);
        rc = tn_plot_curve_png(path, title.s, key, x, y, n);
        free(path);
        tn_sb_free(&title);
        tn_sb_free(&name);
    }
    free(x);
    free(y);
    return rc;
}

int tn_run_log_finish(tn_run_log *l, const char *output_dir, const tn_train_summary *s, int plot_loss) {
    if (!l || !s || !s->state) return tn_err("%s: finishing the run log needs the trainer state info", output_dir);
    const tn_trainer_state_info *in = s->state;
    if (tn_mkdirs(output_dir) != 0) return -1;

    /* HF: speed_metrics("train", num_samples, num_steps=max_steps) + total_flos + train_loss; log() adds
     * epoch to the same dict, so train_results.json has it too. */
    tn_hist_entry train = {0};
    double rt = s->train_runtime_s;
    tn_hist_set(&train, "train_runtime", tn_py_round(rt, 4));
    if (rt != 0) {
        tn_hist_set(&train, "train_samples_per_second", tn_py_round(s->n_samples_trained / rt, 3));
        tn_hist_set(&train, "train_steps_per_second", tn_py_round(in->max_steps / rt, 3));
    }
    tn_hist_set(&train, "total_flos", s->total_flos);
    tn_hist_set(&train, "train_loss", s->train_loss);
    tn_hist_set(&train, "epoch", s->epoch);

    tn_hist_entry *e = tn_hist_push(l);
    *e = train;
    tn_hist_set(e, "step", s->global_step);
    if (tn_run_log_tb_entry(l, e) != 0) return -1;
    tn_strbuf b = {0};
    tn_sb_printf(&b, "{\"current_steps\": %d, \"total_steps\": %d, \"epoch\": ", s->global_step, in->max_steps);
    tn_sb_py_float(&b, s->epoch);
    tn_run_log_line_tail(&b, s->global_step, in->max_steps, rt, tn_lf_remaining(s->global_step, in->max_steps, rt));
    int rc = tn_run_log_append_line(l, b.s);
    tn_sb_free(&b);
    if (rc != 0) return -1;

    if (write_metrics(output_dir, "train_results.json", &train) != 0) return -1;
    tn_trainer_state_info fin = *in;
    fin.global_step = s->global_step;
    fin.epoch = s->epoch;
    fin.total_flos = s->total_flos;
    if (tn_run_log_write_state(l, output_dir, &fin) != 0) return -1;
    if (plot_loss && (plot_key(l, output_dir, "loss") != 0 || plot_key(l, output_dir, "eval_loss") != 0)) return -1;

    tn_hist_entry all = train;
    if (s->has_eval) {
        tn_hist_entry ev = {0};
        tn_eval_metrics(&ev, s->eval_loss, s->eval_runtime_s, s->eval_samples, s->eval_batches);
        tn_hist_set(&ev, "epoch", s->epoch);
        if (write_metrics(output_dir, "eval_results.json", &ev) != 0) return -1;
        tn_hist_entry *h = tn_hist_push(l); /* in memory only: the state file was saved before evaluating */
        *h = ev;
        tn_hist_set(h, "step", s->global_step);
        if (tn_run_log_tb_entry(l, h) != 0) return -1;
        merge(&all, &ev);
    }
    return write_metrics(output_dir, "all_results.json", &all);
}
