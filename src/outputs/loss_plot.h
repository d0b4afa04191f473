/* loss_plot -- LLaMA-Factory's training_loss.png (extras/ploting.py::plot_loss), drawn with cairo the way
 * matplotlib's defaults draw it: 640x480 px (6.4x4.8 in at 100 dpi), the raw curve in #1f77b4 at alpha 0.4,
 * LF's EMA-smoothed curve in #1f77b4, axes with ticks and labels, a legend and the title. */
#ifndef TN_LOSS_PLOT_H
#define TN_LOSS_PLOT_H

#define TN_PLOT_W 640
#define TN_PLOT_H 480
/* The axes box in pixels (matplotlib's subplot parameters left .125, right .9, bottom .11, top .88). */
#define TN_PLOT_AX_LEFT 80.0
#define TN_PLOT_AX_RIGHT 576.0
#define TN_PLOT_AX_TOP 57.6
#define TN_PLOT_AX_BOTTOM 427.2

/* LF's smooth(): TensorBoard-style EMA, last = x[0], weight = 1.8 * (sigmoid(0.05 * n) - 0.5),
 * out[i] = last * weight + (1 - weight) * x[i]. out may equal x. */
void tn_smooth_ema(const double *x, int n, double *out);

/* One PNG at PATH (atomic): the points (x[i], y[i]) raw and smoothed, TITLE above, "step" under the x axis
 * and YLABEL beside the y axis. Both axes span the data with matplotlib's 5% margins. */
int tn_plot_curve_png(const char *path, const char *title, const char *ylabel, const double *x, const double *y,
                      int n);

#endif
