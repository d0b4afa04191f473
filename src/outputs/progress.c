/* progress.c -- see progress.h. */
#include "outputs/progress.h"

#include <math.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "outputs/pyfmt.h"

static int format(char *out, size_t n, const tn_log_step *s, int is_tty, int width) {
    double frac = s->total_steps > 0 ? (double)s->step / s->total_steps : 1.0;
    if (frac < 0) frac = 0;
    if (frac > 1) frac = 1;
    char eta[48], el[48], tok[32] = "", gn[32] = "";
    tn_py_timedelta(eta, s->remaining_s);
    tn_py_timedelta(el, s->elapsed_s);
    if (s->tokens_per_s > 0) snprintf(tok, sizeof tok, " | %.0f tok/s", s->tokens_per_s);
    if (is_tty) {
        char bar[TN_PROGRESS_BAR_WIDTH + 1];
        int full = (int)floor(frac * width);
        for (int i = 0; i < width; i++) bar[i] = i < full ? '#' : '.';
        bar[width] = 0;
        if (s->grad_norm >= 0) snprintf(gn, sizeof gn, " | grad_norm %.3f", s->grad_norm);
        /* \r + \033[K: redraw over the previous bar; a newline only once the run is complete */
        return snprintf(out, n, "\r%d/%d [%s] %3.0f%% loss %.4f | lr %.2e%s%s | ETA %s\033[K%s", s->step, s->total_steps,
                        bar, 100 * frac, s->loss, s->learning_rate, gn, tok, eta, s->step >= s->total_steps ? "\n" : "");
    }
    if (s->grad_norm >= 0) snprintf(gn, sizeof gn, " | grad_norm %.4f", s->grad_norm);
    return snprintf(out, n, "step %d/%d (%.1f%%) | loss %.4f | lr %.3e%s | epoch %.2f%s | elapsed %s | ETA %s\n",
                    s->step, s->total_steps, 100 * frac, s->loss, s->learning_rate, gn, s->epoch, tok, el, eta);
}

int tn_progress_format(char *out, size_t n, const tn_log_step *s, int is_tty) {
    return format(out, n, s, is_tty, TN_PROGRESS_BAR_WIDTH);
}

static int terminal_columns(void) {
    struct winsize ws;
    return ioctl(fileno(stdout), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 0;
}

void tn_progress_print(const tn_log_step *s, int is_tty) {
    char line[512];
    int len = format(line, sizeof line, s, is_tty, TN_PROGRESS_BAR_WIDTH), cols = is_tty ? terminal_columns() : 0;
    int visible = len - 4 - (s->step >= s->total_steps); /* less "\r", "\033[K" and the newline */
    if (cols > 0 && visible >= cols) {
        int width = TN_PROGRESS_BAR_WIDTH - (visible - cols + 1);
        format(line, sizeof line, s, is_tty, width < 10 ? 10 : width);
    }
    fputs(line, stdout);
    fflush(stdout);
}

void tn_progress_eval_begin(int step, int n_samples, int is_tty) {
    if (is_tty) printf("\revaluating %d samples at step %d ...\033[K", n_samples, step);
    else printf("tandem: step %d: evaluating %d samples\n", step, n_samples);
    fflush(stdout);
}

void tn_progress_eval_end(int step, double eval_loss, int n_samples, double seconds, int is_tty) {
    printf("%standem: step %d eval_loss %.4f (%d samples, %.1f s)\n", is_tty ? "\r\033[K" : "", step, eval_loss,
           n_samples, seconds);
    fflush(stdout);
}
