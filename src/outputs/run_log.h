/* run_log -- the files LLaMA-Factory (HF Trainer + its LogCallback) writes into output_dir, written by rank 0
 * so users' tools keep working: trainer_log.jsonl (one line per log event), trainer_state.json (HF
 * TrainerState with log_history; also into checkpoint-N/), train_results.json / eval_results.json /
 * all_results.json (HF save_metrics), and training_loss.png (+ training_eval_loss.png) when plot_loss.
 * Formats, key order and number formatting follow ../shared/docs/llamafactory.md section 3; numbers are
 * written as Python's json.dumps writes them (see pyfmt.h). Result files are written atomically. */
#ifndef TN_RUN_LOG_H
#define TN_RUN_LOG_H

typedef struct {                 /* one logging_steps window, as LLaMA-Factory's LogCallback writes it */
    int step, total_steps;
    double loss;                 /* mean loss over the window; written rounded to 4 decimals, as HF does */
    double grad_norm;            /* < 0: not computed (HF omits the key when clipping is off) */
    double learning_rate, epoch; /* epoch: fractional, as HF */
    double elapsed_s, remaining_s;  /* elapsed_time / remaining_time "H:MM:SS"; LF's remaining is the mean
                                     * step time so far x steps left */
    double tokens_per_s;         /* tandem extra: the progress bar and TensorBoard (not one of LF's keys) */
} tn_log_step;

typedef struct {
    int step;
    double epoch, eval_loss, runtime_s;
    int n_samples;
    int n_batches;               /* eval steps: ceil(n_samples / global eval batch), for eval_steps_per_second */
    int total_steps;             /* max_steps, for trainer_log.jsonl's total_steps / percentage */
    double elapsed_s;            /* since training began; remaining_time is derived as LF does */
} tn_log_eval;

/* What HF's trainer_state.json holds that the log cannot know (HF TrainerState fields). */
typedef struct {
    int global_step, max_steps;
    double epoch;                /* fractional */
    int num_train_epochs;        /* HF: ceil(epochs), or the epochs max_steps spans */
    int logging_steps, eval_steps, save_steps; /* absolute step counts; HF keeps 500 for unused ones */
    int train_batch_size;        /* per-device micro-batch, as HF's _train_batch_size */
    long long num_input_tokens_seen; /* 0 unless tokens are counted */
    double total_flos;
    /* TrainerControl flags at the moment of saving: HF's checkpoint has should_save = 1, and
     * should_training_stop = 1 at the last step; all 0 when no checkpoint was ever saved. */
    int should_epoch_stop, should_evaluate, should_log, should_save, should_training_stop;
} tn_trainer_state_info;

typedef struct {                 /* end of training (HF's train metrics) */
    double train_runtime_s, train_loss, epoch;
    int global_step, n_samples_trained;  /* samples/s derived; steps/s = max_steps / runtime, as HF */
    double total_flos;           /* FLOPs estimate, HF's "total_flos" */
    int has_eval; double eval_loss, eval_runtime_s; int eval_samples, eval_batches;
    const tn_trainer_state_info *state; /* required: the final trainer_state.json's fields (max_steps, ...) */
} tn_train_summary;

typedef struct tn_run_log tn_run_log;

/* Opens output_dir/trainer_log.jsonl (created with output_dir if missing). resume_step > 0: keeps the lines
 * with current_steps <= resume_step and drops later ones (rewritten atomically; a torn last line from a
 * crash is dropped); resume_step <= 0: a fresh, empty log. NULL with tn_err set on failure. */
tn_run_log *tn_run_log_open(const char *output_dir, int resume_step);
/* On resume: reloads log_history entries with step <= resume_step from CHECKPOINT_DIR/trainer_state.json
 * (as HF does from the checkpoint it resumes), so the final trainer_state.json and plot cover the whole run. */
int tn_run_log_load_history(tn_run_log *l, const char *checkpoint_dir);
/* report_to: tensorboard: from now on every logged entry also goes to a TensorBoard event file in LOGDIR
 * (tensorboard.h), as HF's TensorBoardCallback.on_log writes it: each number under "eval/<name>" for
 * eval_<name> keys, else "train/<key>", at the global step; plus tandem's "train/tokens_per_second" with each
 * training log. Entries reloaded from a checkpoint are not written again. */
int tn_run_log_tensorboard(tn_run_log *l, const char *logdir);
int tn_run_log_step(tn_run_log *l, const tn_log_step *s);     /* one trainer_log.jsonl line + log_history */
int tn_run_log_eval(tn_run_log *l, const tn_log_eval *e);
/* trainer_state.json into dir (output_dir or checkpoint-N/, created if missing) with log_history so far.
 * Atomic. */
int tn_run_log_write_state(const tn_run_log *l, const char *dir, const tn_trainer_state_info *info);
/* As LLaMA-Factory's run_sft: the end-of-training log line and log_history entry, train_results.json,
 * trainer_state.json, training_loss.png (+ training_eval_loss.png when log_history has eval losses) when
 * plot_loss, then, when has_eval, eval_results.json; all_results.json holds train and eval metrics. The
 * final eval is not in trainer_state.json nor trainer_log.jsonl (LF saves the state and closes its log
 * before evaluating). All atomic. */
int tn_run_log_finish(tn_run_log *l, const char *output_dir, const tn_train_summary *s, int plot_loss);
void tn_run_log_close(tn_run_log *l);

/* Number of log_history entries held (for tests and the trainer's own checks). */
int tn_run_log_history_len(const tn_run_log *l);

#endif
