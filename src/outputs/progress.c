/* progress.c -- see progress.h. */
#include "outputs/progress.h"

#include <math.h>
#include <stdio.h>

#include "outputs/pyfmt.h"

int tn_progress_format(char *out, size_t n, const tn_log_step *s, int is_tty) {
    double frac = s->total_steps > 0 ? (double)s->step / s->total_steps : 1.0;
    if (frac < 0) frac = 0;
    if (frac > 1) frac = 1;
    char eta[48], el[48], tok[32] = "";
    tn_py_timedelta(eta, s->remaining_s);
    tn_py_timedelta(el, s->elapsed_s);
    if (s->tokens_per_s > 0) snprintf(tok, sizeof tok, " | %.0f tok/s", s->tokens_per_s);
    if (is_tty) {
        char bar[TN_PROGRESS_BAR_WIDTH + 1];
        int full = (int)floor(frac * TN_PROGRESS_BAR_WIDTH);
        for (int i = 0; i < TN_PROGRESS_BAR_WIDTH; i++) bar[i] = i < full ? '#' : '.';
        bar[TN_PROGRESS_BAR_WIDTH] = 0;
        /* \r + \033[K: redraw over the previous bar; a newline only once the run is complete */
        return snprintf(out, n, "\r%d/%d [%s] %3.0f%% loss %.4f%s | ETA %s\033[K%s", s->step, s->total_steps, bar,
                        100 * frac, s->loss, tok, eta, s->step >= s->total_steps ? "\n" : "");
    }
    char gn[32] = "";
    if (s->grad_norm >= 0) snprintf(gn, sizeof gn, " | grad_norm %.4f", s->grad_norm);
    return snprintf(out, n, "step %d/%d (%.1f%%) | loss %.4f | lr %.3e%s | epoch %.2f%s | elapsed %s | ETA %s\n",
                    s->step, s->total_steps, 100 * frac, s->loss, s->learning_rate, gn, s->epoch, tok, el, eta);
}

void tn_progress_print(const tn_log_step *s, int is_tty) {
    char line[512];
    tn_progress_format(line, sizeof line, s, is_tty);
    fputs(line, stdout);
    fflush(stdout);
}
