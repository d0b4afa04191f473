/* previous_run -- an output_dir never looks like a finished run that it is not.
 *
 * The files that say "a run finished here" are its final model (weights, configs, tokenizer files, chat
 * template) and its results (train/eval/all_results.json, trainer_state.json, the loss plots), written at the
 * end, results after the model, all_results.json last of all: all_results.json is the completion marker. A new
 * run (fresh or resumed) removes an earlier run's such files before it writes anything, so a run that then fails
 * (a full disk at any write, a crash) leaves its own partial files and checkpoints beside nothing of the earlier
 * run's that claims completion. Checkpoints (checkpoint-N/, each with its own manifest) and logs stay: a resumed
 * run continues them. */
#ifndef TN_PREVIOUS_RUN_H
#define TN_PREVIOUS_RUN_H

/* Removes the earlier run's final files from output_dir; *removed: how many there were. 0, or -1 + tn_err naming
 * the file that could not be removed. */
int tn_previous_run_clear(const char *output_dir, int *removed);

#endif
