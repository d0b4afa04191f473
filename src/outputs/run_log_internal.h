/* run_log_internal -- what run_log.c, trainer_state.c and results.c share: the in-memory log_history
 * (HF's list of dicts, each a few known keys) and writing it as json.dumps(indent=N, sort_keys=True). */
#ifndef TN_RUN_LOG_INTERNAL_H
#define TN_RUN_LOG_INTERNAL_H

#include <stdio.h>

#include "outputs/pyfmt.h"
#include "outputs/run_log.h"

#define TN_HIST_MAX_KEYS 12 /* all_results.json: 5 train + 4 eval metrics + epoch */

typedef struct {
    const char *key; /* one of the static names of tn_hist_known_key() */
    double v;
} tn_hist_kv;

typedef struct {
    int n;
    tn_hist_kv kv[TN_HIST_MAX_KEYS];
} tn_hist_entry;

struct tn_run_log {
    char *log_path;    /* output_dir/trainer_log.jsonl */
    FILE *f;           /* open for append */
    tn_hist_entry *hist;
    int n_hist, cap_hist;
    int resume_step;   /* entries loaded from a checkpoint must not go past it */
    struct tn_tb_writer *tb; /* report_to: tensorboard; NULL otherwise */
};

/* The static name for KEY when it is one HF writes into log_history, else NULL; *is_int tells whether
 * Python holds it as an int ("step") rather than a float. */
const char *tn_hist_known_key(const char *key, int *is_int);
tn_hist_entry *tn_hist_push(tn_run_log *l);
void tn_hist_set(tn_hist_entry *e, const char *key, double v); /* key must be a known name */
const double *tn_hist_get(const tn_hist_entry *e, const char *key);

/* json.dumps(entry, indent=INDENT, sort_keys=True) nested LEVEL deep (the first '{' is not indented). */
void tn_hist_write_obj(tn_strbuf *b, const tn_hist_entry *e, int indent, int level);

/* HF's evaluate() metrics: eval_loss, eval_runtime rounded to 4 decimals, samples/s and steps/s rounded to
 * 3 (both omitted when the runtime is 0, as HF's speed_metrics does). */
void tn_eval_metrics(tn_hist_entry *e, double loss, double runtime, int n_samples, int n_batches);

/* The entry's numbers (all keys but "step") as TensorBoard scalars at its step, under HF's tags; 0 when
 * TensorBoard is off. */
int tn_run_log_tb_entry(tn_run_log *l, const tn_hist_entry *e);

/* One trainer_log.jsonl line, flushed. */
int tn_run_log_append_line(tn_run_log *l, const char *line);
/* LF's tail of every line: "percentage", "elapsed_time", "remaining_time" (after "epoch"). */
void tn_run_log_line_tail(tn_strbuf *b, int step, int total_steps, double elapsed_s, double remaining_s);
/* LF's remaining time: average step time so far x steps left. */
double tn_lf_remaining(int step, int total_steps, double elapsed_s);

#endif
