/* loss_plot.c -- see loss_plot.h. Sizes follow matplotlib's rc defaults at 100 dpi (1 pt = 100/72 px):
 * tick labels 10 pt, title 12 pt, lines 1.5 pt, axes and ticks 0.8 pt, ticks 3.5 pt long pointing out. */
#include "outputs/loss_plot.h"

#include <cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define PT (100.0 / 72.0)
#define FONT "DejaVu Sans"
#define BLUE_R (0x1f / 255.0)
#define BLUE_G (0x77 / 255.0)
#define BLUE_B (0xb4 / 255.0)
#define NBINS 9 /* MaxNLocator('auto') caps the tick intervals at 9 */

void tn_smooth_ema(const double *x, int n, double *out) {
    if (n <= 0) return;
    double last = x[0];
    double weight = 1.8 * (1 / (1 + exp(-0.05 * n)) - 0.5); /* a sigmoid of the number of points */
    for (int i = 0; i < n; i++) {
        double v = last * weight + (1 - weight) * x[i];
        out[i] = v;
        last = v;
    }
}

typedef struct {
    double lo, hi;     /* view limits */
    double step;       /* tick spacing */
    int decimals;      /* tick label decimals, the same for every label as matplotlib's ScalarFormatter */
} axis;

/* Data limits of the finite values, widened like matplotlib: nonsingular() for a flat range, then 5% margins,
 * then the tick spacing (steps 1, 2, 2.5, 5, 10 x 10^k, at most NBINS intervals). */
static axis make_axis(const double *v, int n) {
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) {
            lo = fmin(lo, v[i]);
            hi = fmax(hi, v[i]);
        }
    if (!(lo <= hi)) lo = 0, hi = 1;
    if (hi - lo <= 1e-15 * fmax(fabs(lo), fabs(hi))) {
        if (lo == 0 && hi == 0) lo = -0.05, hi = 0.05;
        else lo -= 0.05 * fabs(lo), hi += 0.05 * fabs(hi);
    }
    double d = 0.05 * (hi - lo);
    axis a = {lo - d, hi + d, 1, 0};
    static const double mult[] = {1, 2, 2.5, 5};
    int e = (int)floor(log10((a.hi - a.lo) / NBINS));
    for (;; e++) {
        for (int k = 0; k < 4; k++) {
            double st = mult[k] * pow(10, e);
            if (ceil(a.hi / st - 1e-9) - floor(a.lo / st + 1e-9) <= NBINS) {
                a.step = st;
                a.decimals = -e + (k == 2);
                if (a.decimals < 0) a.decimals = 0;
                return a;
            }
        }
    }
}

typedef struct {
    double x0, x1, y0, y1; /* pixel box */
    axis ax, ay;
} frame;

static double px(const frame *f, double x) { return f->x0 + (x - f->ax.lo) / (f->ax.hi - f->ax.lo) * (f->x1 - f->x0); }
static double py(const frame *f, double y) { return f->y1 - (y - f->ay.lo) / (f->ay.hi - f->ay.lo) * (f->y1 - f->y0); }

/* Tick label as matplotlib writes it: fixed decimals, U+2212 for the minus sign. */
static void tick_label(char *out, size_t n, double t, const axis *a) {
    if (fabs(t) < a->step * 1e-6) t = 0;
    char buf[48];
    if (a->step >= 1e6 || a->step < 1e-5) /* matplotlib would switch to an offset/exponent; keep it short */
        snprintf(buf, sizeof buf, "%.3g", t);
    else
        snprintf(buf, sizeof buf, "%.*f", a->decimals, t);
    if (buf[0] == '-')
        snprintf(out, n, "\xe2\x88\x92%s", buf + 1);
    else
        snprintf(out, n, "%s", buf);
}

/* Draws S with its ink box anchored at (x, y): fx/fy are the fractions of its width/height left of/above it. */
static void text_at(cairo_t *cr, const char *s, double x, double y, double fx, double fy) {
    cairo_text_extents_t te;
    cairo_text_extents(cr, s, &te);
    cairo_move_to(cr, x - fx * te.width - te.x_bearing, y - fy * te.height - te.y_bearing);
    cairo_show_text(cr, s);
}

static double text_width(cairo_t *cr, const char *s) {
    cairo_text_extents_t te;
    cairo_text_extents(cr, s, &te);
    return te.width;
}

static void curve_path(cairo_t *cr, const frame *f, const double *x, const double *y, int n) {
    cairo_new_path(cr);
    int pen = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) { /* matplotlib breaks the line at NaN */
            pen = 0;
            continue;
        }
        if (pen)
            cairo_line_to(cr, px(f, x[i]), py(f, y[i]));
        else
            cairo_move_to(cr, px(f, x[i]), py(f, y[i]));
        pen = 1;
    }
}

static void draw_axes(cairo_t *cr, const frame *f, double *ylabel_x) {
    const double tick = 3.5 * PT, pad = 3.5 * PT, fs = 10 * PT;
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 0.8 * PT);
    cairo_rectangle(cr, f->x0, f->y0, f->x1 - f->x0, f->y1 - f->y0);
    cairo_stroke(cr);
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, fs);
    char lab[64];
    double first = ceil(f->ax.lo / f->ax.step - 1e-9);
    for (double k = first; k * f->ax.step <= f->ax.hi + 1e-9 * f->ax.step; k++) {
        double t = k * f->ax.step, x = px(f, t);
        cairo_move_to(cr, x, f->y1);
        cairo_line_to(cr, x, f->y1 + tick);
        cairo_stroke(cr);
        tick_label(lab, sizeof lab, t, &f->ax);
        text_at(cr, lab, x, f->y1 + tick + pad, 0.5, 0);
    }
    double widest = 0;
    first = ceil(f->ay.lo / f->ay.step - 1e-9);
    for (double k = first; k * f->ay.step <= f->ay.hi + 1e-9 * f->ay.step; k++) {
        double t = k * f->ay.step, y = py(f, t);
        cairo_move_to(cr, f->x0, y);
        cairo_line_to(cr, f->x0 - tick, y);
        cairo_stroke(cr);
        tick_label(lab, sizeof lab, t, &f->ay);
        text_at(cr, lab, f->x0 - tick - pad, y, 1, 0.5);
        widest = fmax(widest, text_width(cr, lab));
    }
    *ylabel_x = f->x0 - tick - pad - widest - 4 * PT; /* labelpad 4 pt */
}

/* Points of both curves that a legend box at (bx, by, bw, bh) would cover, sampled along the segments as
 * matplotlib's loc='best' counts vertices and crossings. */
static int legend_badness(const frame *f, const double *x, const double *ys[2], int n, double bx, double by,
                          double bw, double bh) {
    int bad = 0;
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < n; i++) {
            int segs = i + 1 < n ? 8 : 1;
            for (int s = 0; s < segs; s++) {
                double t = (double)s / segs;
                double xv = i + 1 < n ? x[i] + t * (x[i + 1] - x[i]) : x[i];
                double yv = i + 1 < n ? ys[c][i] + t * (ys[c][i + 1] - ys[c][i]) : ys[c][i];
                double X = px(f, xv), Y = py(f, yv);
                if (X >= bx && X <= bx + bw && Y >= by && Y <= by + bh) bad++;
            }
        }
    return bad;
}

static void draw_legend(cairo_t *cr, const frame *f, const double *x, const double *ys[2], int n) {
    const double fs = 10 * PT, border = 0.4 * fs, handle = 2 * fs, gap = 0.8 * fs, spacing = 0.5 * fs;
    const double axpad = 0.5 * fs;
    static const char *labels[2] = {"original", "smoothed"};
    cairo_set_font_size(cr, fs);
    double tw = fmax(text_width(cr, labels[0]), text_width(cr, labels[1]));
    double bw = 2 * border + handle + gap + tw, bh = 2 * border + 2 * fs + spacing;
    /* matplotlib's order of preference: upper right, upper left, lower left, lower right */
    double cx[4] = {f->x1 - axpad - bw, f->x0 + axpad, f->x0 + axpad, f->x1 - axpad - bw};
    double cy[4] = {f->y0 + axpad, f->y0 + axpad, f->y1 - axpad - bh, f->y1 - axpad - bh};
    int best = 0, best_bad = -1;
    for (int k = 0; k < 4; k++) {
        int bad = legend_badness(f, x, ys, n, cx[k], cy[k], bw, bh);
        if (best_bad < 0 || bad < best_bad) best = k, best_bad = bad;
    }
    double bx = cx[best], by = cy[best], r = 0.2 * fs;
    cairo_new_path(cr);
    cairo_arc(cr, bx + bw - r, by + r, r, -M_PI / 2, 0);
    cairo_arc(cr, bx + bw - r, by + bh - r, r, 0, M_PI / 2);
    cairo_arc(cr, bx + r, by + bh - r, r, M_PI / 2, M_PI);
    cairo_arc(cr, bx + r, by + r, r, M_PI, 3 * M_PI / 2);
    cairo_close_path(cr);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.8);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.8, 0.8, 0.8);
    cairo_set_line_width(cr, 1.0 * PT);
    cairo_stroke(cr);
    cairo_set_line_width(cr, 1.5 * PT);
    for (int i = 0; i < 2; i++) {
        double yc = by + border + 0.5 * fs + i * (fs + spacing);
        cairo_set_source_rgba(cr, BLUE_R, BLUE_G, BLUE_B, i == 0 ? 0.4 : 1.0);
        cairo_move_to(cr, bx + border, yc);
        cairo_line_to(cr, bx + border + handle, yc);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        text_at(cr, labels[i], bx + border + handle + gap, yc, 0, 0.5);
    }
}

static void draw(cairo_t *cr, const char *title, const char *ylabel, const double *x, const double *y,
                 const double *sm, int n) {
    frame f = {TN_PLOT_AX_LEFT, TN_PLOT_AX_RIGHT, TN_PLOT_AX_TOP, TN_PLOT_AX_BOTTOM, make_axis(x, n),
               make_axis(y, n)};
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);

    cairo_save(cr);
    cairo_rectangle(cr, f.x0, f.y0, f.x1 - f.x0, f.y1 - f.y0);
    cairo_clip(cr);
    cairo_set_line_width(cr, 1.5 * PT);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_SQUARE);
    curve_path(cr, &f, x, y, n);
    cairo_set_source_rgba(cr, BLUE_R, BLUE_G, BLUE_B, 0.4);
    cairo_stroke(cr);
    curve_path(cr, &f, x, sm, n);
    cairo_set_source_rgb(cr, BLUE_R, BLUE_G, BLUE_B);
    cairo_stroke(cr);
    cairo_restore(cr);

    double ylabel_x;
    draw_axes(cr, &f, &ylabel_x);
    const double *ys[2] = {y, sm};
    draw_legend(cr, &f, x, ys, n);

    const double fs = 10 * PT;
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_font_size(cr, fs);
    /* x label under the tick labels (tick 3.5 + pad 3.5 + one line + labelpad 4 pt) */
    text_at(cr, "step", 0.5 * (f.x0 + f.x1), f.y1 + 7 * PT + fs + 4 * PT, 0.5, 0);
    cairo_save(cr);
    cairo_translate(cr, ylabel_x, 0.5 * (f.y0 + f.y1));
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, ylabel, 0, 0, 0.5, 1);
    cairo_restore(cr);
    /* title 12 pt, 6 pt above the axes; shrunk when a long output_dir would run off the figure */
    double tfs = 12 * PT;
    cairo_set_font_size(cr, tfs);
    double tw = text_width(cr, title), room = TN_PLOT_W - 8;
    if (tw > room) cairo_set_font_size(cr, fmax(6.0, tfs * room / tw));
    text_at(cr, title, 0.5 * (f.x0 + f.x1), f.y0 - 6 * PT, 0.5, 1);
}

static cairo_status_t png_write(void *closure, const unsigned char *data, unsigned int len) {
    return tn_atomic_write(closure, data, len) == 0 ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

int tn_plot_curve_png(const char *path, const char *title, const char *ylabel, const double *x, const double *y,
                      int n) {
    if (n <= 0) return tn_err("%s: no points to plot", path);
    double *sm = tn_xmalloc((size_t)n * sizeof *sm);
    tn_smooth_ema(y, n, sm);
    cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, TN_PLOT_W, TN_PLOT_H);
    cairo_t *cr = cairo_create(surf);
    draw(cr, title, ylabel, x, y, sm, n);
    free(sm);
    int rc = 0;
    cairo_status_t st = cairo_status(cr);
    if (st != CAIRO_STATUS_SUCCESS) rc = tn_err("%s: drawing failed: %s", path, cairo_status_to_string(st));
    cairo_destroy(cr);
    if (rc == 0) {
        tn_atomic_file *af = tn_atomic_open(path);
        if (!af) {
            rc = -1;
        } else {
            st = cairo_surface_write_to_png_stream(surf, png_write, af);
            if (st != CAIRO_STATUS_SUCCESS) {
                if (st != CAIRO_STATUS_WRITE_ERROR) /* else png_write recorded the cause */
                    tn_err("%s: PNG encoding failed: %s", path, cairo_status_to_string(st));
                tn_atomic_abort(af);
                rc = -1;
            } else {
                rc = tn_atomic_commit(af);
            }
        }
    }
    cairo_surface_destroy(surf);
    return rc;
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TN_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(TN_ASAN)
/* Sanitizer builds: fontconfig 2.14 loses a few hundred bytes once, while parsing its XML configuration
 * for cairo's first font lookup; LeakSanitizer would fail every test that draws a plot on it. Weak, so
 * that a binary which also links src/comm (it has its own list, which must then name libfontconfig too)
 * still links. */
const char *__lsan_default_suppressions(void);
__attribute__((weak)) const char *__lsan_default_suppressions(void) { return "leak:libfontconfig.so\n"; }
#endif
