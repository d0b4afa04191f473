/* progress -- the console view of training: on a terminal one bar redrawn in place
 * "step/total [####....] pct loss x | tok/s | ETA", otherwise (logs, CI) one plain line per logging step. */
#ifndef TN_PROGRESS_H
#define TN_PROGRESS_H

#include <stddef.h>

#include "outputs/run_log.h"

#define TN_PROGRESS_BAR_WIDTH 30

/* The text tn_progress_print writes (including its leading "\r" and clear-to-end-of-line on a terminal, and
 * the final newline). Returns its length, as snprintf. */
int tn_progress_format(char *out, size_t n, const tn_log_step *s, int is_tty);
/* Writes to stdout and flushes; is_tty is usually isatty(fileno(stdout)). */
void tn_progress_print(const tn_log_step *s, int is_tty);

#endif
