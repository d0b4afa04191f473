/* progress -- the console view of training: on a terminal one bar redrawn in place after every step
 * "step/total [####....] pct loss x | lr y | grad_norm z | tok/s | ETA", otherwise (logs, CI) one plain line per
 * logging step; evaluations are announced when they start and reported when they end. tok/s counts training
 * time only (the caller leaves evaluation time out of tokens_per_s). */
#ifndef TN_PROGRESS_H
#define TN_PROGRESS_H

#include <stddef.h>

#include "outputs/run_log.h"

#define TN_PROGRESS_BAR_WIDTH 30

/* The text tn_progress_print writes (including its leading "\r" and clear-to-end-of-line on a terminal, and
 * the final newline) with a bar of TN_PROGRESS_BAR_WIDTH. Returns its length, as snprintf. */
int tn_progress_format(char *out, size_t n, const tn_log_step *s, int is_tty);
/* Writes to stdout and flushes; is_tty is usually isatty(fileno(stdout)). On a terminal narrower than the
 * line the bar is shortened (down to 10 cells) so that the line does not wrap and can be redrawn. */
void tn_progress_print(const tn_log_step *s, int is_tty);
/* "evaluating N samples at step S ..." while an evaluation runs (on a terminal in place of the bar), then
 * its result as a line of its own. */
void tn_progress_eval_begin(int step, int n_samples, int is_tty);
void tn_progress_eval_end(int step, double eval_loss, int n_samples, double seconds, int is_tty);

#endif
