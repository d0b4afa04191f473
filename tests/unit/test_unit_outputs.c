/* test_unit_outputs -- src/outputs against expected files made independently by Python
 * (tests/fixtures/outputs/make_expected.py re-enacts HF Trainer's and LLaMA-Factory's code with Python's own
 * json/round/timedelta) and hand-written expectations: trainer_log.jsonl, trainer_state.json,
 * *_results.json byte for byte, number formats, LF's smoothing, the PNG, resume truncation, atomicity. */
#include <cairo.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "outputs/loss_plot.h"
#include "outputs/progress.h"
#include "outputs/pyfmt.h"
#include "outputs/run_log.h"
#include "outputs/quiet_watch.h"
#include "testlib.h"

static char fixdir[512];

static char *fixture(const char *name, size_t *len) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", fixdir, name);
    char *t = tn_read_file(path, len, 0);
    if (!t) fprintf(stderr, "cannot read fixture: %s\n", tn_errmsg());
    return t;
}

/* GOT_PATH must hold exactly the bytes of fixture NAME; on a difference, show where. */
static void same_as_fixture(const char *got_path, const char *name) {
    size_t ne = 0, ng = 0;
    char *exp = fixture(name, &ne), *got = tn_read_file(got_path, &ng, 0);
    if (!CHECKF(exp && got, "%s: cannot read (%s)", got_path, tn_errmsg())) {
        free(exp);
        free(got);
        return;
    }
    size_t i = 0;
    while (i < ne && i < ng && exp[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    CHECKF(ne == ng && i == ne, "%s differs from fixture %s at byte %zu:\n  expected ...%.80s\n  got      ...%.80s",
           got_path, name, i, exp + from, got + from);
    free(exp);
    free(got);
}

static int count_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

static char *mkpath(const char *a, const char *b) { return tn_path_join(a, b); }

/* ---- number and time formats ---- */

static void formats(void) {
    char buf[TN_PY_FLOAT_MAX];
    /* hand-written: Python 3's repr of these doubles */
    static const struct {
        double v;
        const char *s;
    } hand[] = {{0.1, "0.1"}, {1.0, "1.0"}, {-0.0, "-0.0"}, {1e-05, "1e-05"}, {0.0001, "0.0001"},
                {1e16, "1e+16"}, {1e15, "1000000000000000.0"}, {2.0772363998572052e18, "2.0772363998572052e+18"},
                {1.0 / 3, "0.3333333333333333"}, {(double)0.1f, "0.10000000149011612"}, {100.0, "100.0"},
                {1.5e-7, "1.5e-07"}, {1e100, "1e+100"}, {5e-324, "5e-324"}, {NAN, "NaN"}, {-INFINITY, "-Infinity"}};
    for (size_t i = 0; i < sizeof hand / sizeof hand[0]; i++) {
        tn_py_float(buf, hand[i].v);
        CHECKF(strcmp(buf, hand[i].s) == 0, "repr(%a): got %s, expected %s", hand[i].v, buf, hand[i].s);
    }
    tn_py_float(buf, tn_py_round(2.34567, 4));
    CHECKF(strcmp(buf, "2.3457") == 0, "round(2.34567, 4) = %s", buf);
    tn_py_float(buf, tn_py_round(0.125, 2)); /* exact tie: to even */
    CHECKF(strcmp(buf, "0.12") == 0, "round(0.125, 2) = %s", buf);
    tn_py_float(buf, tn_py_round(2.675, 2)); /* 2.675 is 2.67499999... in binary */
    CHECKF(strcmp(buf, "2.67") == 0, "round(2.675, 2) = %s", buf);
    char td[48];
    tn_py_timedelta(td, 90061.9);
    CHECKF(strcmp(td, "1 day, 1:01:01") == 0, "timedelta: %s", td);
    tn_py_timedelta(td, -3);
    CHECKF(strcmp(td, "0:00:00") == 0, "negative time clamps to 0: %s", td);

    /* Python's own output for ~450 doubles, ~340 roundings and 13 durations */
    char *text = fixture("formats.txt", NULL);
    if (!CHECK(text != NULL)) return;
    int nf = 0, bad = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char hex[64], want[64];
        int nd;
        const char *got = buf;
        if (line[0] == 'F' && sscanf(line, "F %63s %63s", hex, want) == 2) {
            tn_py_float(buf, strtod(hex, NULL));
        } else if (line[0] == 'R' && sscanf(line, "R %63s %d %63s", hex, &nd, want) == 3) {
            tn_py_float(buf, tn_py_round(strtod(hex, NULL), nd));
        } else if (line[0] == 'T') {
            char *sp = strchr(line + 2, ' ');
            if (!CHECKF(sp != NULL, "formats.txt: bad line %s", line)) continue;
            snprintf(want, sizeof want, "%s", sp + 1);
            tn_py_timedelta(td, strtod(line + 2, NULL));
            got = td;
        } else {
            CHECKF(0, "formats.txt: bad line '%s'", line);
            continue;
        }
        nf++;
        if (strcmp(got, want) != 0 && ++bad <= 10) fprintf(stderr, "formats.txt: %s -> got %s\n", line, got);
    }
    CHECKF(bad == 0, "formats.txt: %d of %d lines differ", bad, nf);
    CHECKF(nf > 700, "formats.txt: only %d lines", nf);
    free(text);
}

/* ---- LF's smoothing against Python's ---- */

static int read_doubles(char *line, double *out, int n) {
    char *p = line;
    for (int i = 0; i < n; i++) {
        char *end;
        out[i] = strtod(p, &end);
        if (end == p) return -1;
        p = end;
    }
    return 0;
}

static void smoothing(void) {
    char *text = fixture("smooth.txt", NULL);
    if (!CHECK(text != NULL)) return;
    int cases = 0;
    char *save = NULL;
    for (char *hdr = strtok_r(text, "\n", &save); hdr; hdr = strtok_r(NULL, "\n", &save)) {
        int n = 0;
        if (!CHECKF(sscanf(hdr, "n %d", &n) == 1 && n > 0, "smooth.txt: bad header '%s'", hdr)) break;
        char *xs = strtok_r(NULL, "\n", &save), *ys = strtok_r(NULL, "\n", &save);
        double *x = tn_xmalloc((size_t)n * sizeof *x), *want = tn_xmalloc((size_t)n * sizeof *want);
        double *got = tn_xmalloc((size_t)n * sizeof *got);
        if (CHECK(xs && ys && read_doubles(xs, x, n) == 0 && read_doubles(ys, want, n) == 0)) {
            tn_smooth_ema(x, n, got);
            double worst = 0;
            for (int i = 0; i < n; i++) worst = fmax(worst, fabs(got[i] - want[i]) / fabs(want[i]));
            CHECKF(worst <= 1e-13, "smooth n=%d: worst relative difference %.3g", n, worst);
            tn_smooth_ema(x, n, x); /* in place */
            CHECKF(memcmp(x, got, (size_t)n * sizeof *x) == 0, "smooth n=%d in place differs", n);
            cases++;
        }
        free(x);
        free(want);
        free(got);
    }
    CHECK(cases == 5);
    /* by hand: n = 2, weight = 1.8 * (1 / (1 + e^-0.1) - 0.5) = 1.8 * (0.5249791875 - 0.5) = 0.0449625375,
     * x = {1, 0}: smoothed {1, weight} */
    double w = 1.8 * (1 / (1 + exp(-0.1)) - 0.5), x2[2] = {1, 0}, y2[2];
    tn_smooth_ema(x2, 2, y2);
    CHECK_NEAR(w, 0.0449625375, 1e-10);
    CHECK_NEAR(y2[0], 1.0, 0);
    CHECK_NEAR(y2[1], w, 1e-15);
    free(text);
}

/* ---- the scenario of make_expected.py ---- */

static const tn_log_step steps[3] = {
    {2, 6, 2.34567, 1.2345678806304932, 1e-05, 0.6666666666666666, 61.9, 123.8, 1500},
    {4, 6, 1.00004, 0.5, 0.0001, 1.3333333333333333, 3725.2, 1862.6, 1500},
    {6, 6, 0.12345, 12.75, 0.0, 2.0, 5590.5, 0.0, 1500},
};
static const tn_log_eval eval4 = {4, 1.3333333333333333, 1.6410622596740723, 2.71828, 10, 3, 6, 3730.0};

static tn_trainer_state_info state_info(int step, double epoch, double flos, int stop) {
    tn_trainer_state_info in = {0};
    in.global_step = step;
    in.max_steps = 6;
    in.epoch = epoch;
    in.num_train_epochs = 2;
    in.logging_steps = 2;
    in.eval_steps = 4;
    in.save_steps = 4;
    in.train_batch_size = 2;
    in.total_flos = flos;
    in.should_save = 1;
    in.should_training_stop = stop;
    return in;
}

static void full_run(const char *out) {
    tn_run_log *l = tn_run_log_open(out, 0);
    if (!CHECKF(l != NULL, "open: %s", tn_errmsg())) return;
    CHECK(tn_run_log_step(l, &steps[0]) == 0);
    CHECK(tn_run_log_step(l, &steps[1]) == 0);
    CHECK(tn_run_log_eval(l, &eval4) == 0);
    tn_trainer_state_info ck = state_info(4, 1.3333333333333333, 123456789012.0, 0);
    char *ckdir = mkpath(out, "checkpoint-4");
    CHECKF(tn_run_log_write_state(l, ckdir, &ck) == 0, "write_state: %s", tn_errmsg());
    CHECK(tn_run_log_step(l, &steps[2]) == 0);
    tn_trainer_state_info fin = state_info(6, 2.0, 0, 1);
    tn_train_summary s = {0};
    s.train_runtime_s = 5591.23456;
    s.train_loss = 1.2345678901234567;
    s.epoch = 2.0;
    s.global_step = 6;
    s.n_samples_trained = 24;
    s.total_flos = 2.0772363998572052e18;
    s.has_eval = 1;
    s.eval_loss = 0.9876543;
    s.eval_runtime_s = 0.5;
    s.eval_samples = 10;
    s.eval_batches = 3;
    s.state = &fin;
    CHECKF(tn_run_log_finish(l, out, &s, 1) == 0, "finish: %s", tn_errmsg());
    CHECK(tn_run_log_history_len(l) == 6); /* 3 steps, eval, summary, final eval (in memory only) */
    tn_run_log_close(l);

    static const char *names[] = {"trainer_log.jsonl", "trainer_state.json", "train_results.json",
                                  "eval_results.json", "all_results.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *p = mkpath(out, names[i]);
        same_as_fixture(p, names[i]);
        free(p);
    }
    char *p = mkpath(ckdir, "trainer_state.json");
    same_as_fixture(p, "checkpoint_trainer_state.json");
    free(p);
    CHECKF(count_temp_files(out) == 0 && count_temp_files(ckdir) == 0, "temporary files left in %s", out);
    free(ckdir);
}

/* ---- the PNG ---- */

static int near_rgb(uint32_t px, int r, int g, int b, int tol) {
    int pr = (px >> 16) & 255, pg = (px >> 8) & 255, pb = px & 255;
    return abs(pr - r) <= tol && abs(pg - g) <= tol && abs(pb - b) <= tol;
}

/* Is there a pixel of colour (r, g, b) within RADIUS of (x, y)? */
static int colour_near(cairo_surface_t *s, double x, double y, int radius, int r, int g, int b, int tol) {
    int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
    int stride = cairo_image_surface_get_stride(s);
    const unsigned char *data = cairo_image_surface_get_data(s);
    for (int j = (int)y - radius; j <= (int)y + radius; j++)
        for (int i = (int)x - radius; i <= (int)x + radius; i++)
            if (i >= 0 && j >= 0 && i < w && j < h && near_rgb(*(const uint32_t *)(data + j * stride + 4 * i), r, g, b, tol))
                return 1;
    return 0;
}

static void png_checks(const char *png, int check_curve) {
    size_t n = 0;
    unsigned char *d = (unsigned char *)tn_read_file(png, &n, 0);
    if (!CHECKF(d != NULL, "%s: %s", png, tn_errmsg())) return;
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    CHECKF(n > 33 && memcmp(d, sig, 8) == 0, "%s: no PNG signature", png);
    if (n > 33) {
        CHECK(memcmp(d + 12, "IHDR", 4) == 0);
        unsigned w = (unsigned)d[16] << 24 | (unsigned)d[17] << 16 | (unsigned)d[18] << 8 | d[19];
        unsigned h = (unsigned)d[20] << 24 | (unsigned)d[21] << 16 | (unsigned)d[22] << 8 | d[23];
        CHECKF(w == 640 && h == 480, "%s: IHDR %ux%u, expected 640x480 (matplotlib's 6.4x4.8 in at 100 dpi)", png, w, h);
        /* cairo stores an opaque image as RGB (type 2); matplotlib's is RGBA (6): both decode alike */
        CHECKF(d[24] == 8 && (d[25] == 2 || d[25] == 6), "%s: bit depth %d colour type %d, expected 8-bit RGB(A)",
               png, d[24], d[25]);
    }
    free(d);

    cairo_surface_t *s = cairo_image_surface_create_from_png(png);
    if (!CHECKF(cairo_surface_status(s) == CAIRO_STATUS_SUCCESS, "%s: cairo cannot read it back", png)) {
        cairo_surface_destroy(s);
        return;
    }
    cairo_surface_flush(s);
    int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
    int stride = cairo_image_surface_get_stride(s);
    const unsigned char *data = cairo_image_surface_get_data(s);
    int blue = 0, raw = 0, dark = 0, blue_outside = 0;
    for (int j = 0; j < h; j++)
        for (int i = 0; i < w; i++) {
            uint32_t px = *(const uint32_t *)(data + j * stride + 4 * i);
            int in_axes = i >= TN_PLOT_AX_LEFT && i < TN_PLOT_AX_RIGHT && j >= TN_PLOT_AX_TOP && j < TN_PLOT_AX_BOTTOM;
            if (near_rgb(px, 0x1f, 0x77, 0xb4, 2)) {
                blue++;
                if (!in_axes) blue_outside++;
            }
            if (near_rgb(px, 165, 201, 225, 3)) raw++; /* #1f77b4 at alpha 0.4 over white */
            if (near_rgb(px, 0, 0, 0, 30)) dark++;     /* axes, ticks, text */
        }
    CHECKF(blue > 100, "%s: %d pixels of the smoothed curve's #1f77b4", png, blue);
    CHECKF(raw > 50, "%s: %d pixels of the raw curve's colour", png, raw);
    CHECKF(dark > 1000, "%s: %d dark pixels (frame, ticks, labels, title)", png, dark);
    CHECKF(blue_outside == 0, "%s: %d curve pixels outside the axes box", png, blue_outside);
    if (check_curve) {
        /* x 1..20, y = 20 - x (+ noise on odd x): with 5% margins on both axes the first point (1, 19.x) lies
         * 1/22 of the way into the axes box from its left and top edges, where the smoothed curve starts. */
        double x0 = TN_PLOT_AX_LEFT + (TN_PLOT_AX_RIGHT - TN_PLOT_AX_LEFT) / 22.0;
        double y0 = TN_PLOT_AX_TOP + (TN_PLOT_AX_BOTTOM - TN_PLOT_AX_TOP) / 22.0;
        CHECKF(colour_near(s, x0, y0, 2, 0x1f, 0x77, 0xb4, 2), "%s: smoothed curve does not start at (%.1f, %.1f)",
               png, x0, y0);
        /* the raw curve's last point (20, 0) sits at the bottom right, 1/22 in; the smoothed one is above it */
        double x1 = TN_PLOT_AX_RIGHT - (TN_PLOT_AX_RIGHT - TN_PLOT_AX_LEFT) / 22.0;
        double y1 = TN_PLOT_AX_BOTTOM - (TN_PLOT_AX_BOTTOM - TN_PLOT_AX_TOP) / 22.0;
        CHECKF(colour_near(s, x1, y1, 2, 165, 201, 225, 3), "%s: raw curve does not end at (%.1f, %.1f)", png, x1, y1);
        CHECKF(!colour_near(s, x1, y1, 2, 0x1f, 0x77, 0xb4, 2), "%s: smoothed curve reaches the last raw point", png);
    }
    cairo_surface_destroy(s);
}

static void plots(const char *out) {
    char *p = mkpath(out, "training_loss.png");
    png_checks(p, 0);
    free(p);
    p = mkpath(out, "training_eval_loss.png");
    CHECKF(tn_file_exists(p), "%s: not written although log_history has an eval_loss", p);
    free(p);

    double x[20], y[20];
    for (int i = 0; i < 20; i++) {
        x[i] = i + 1;
        y[i] = 19 - i + (i % 2 ? 0.3 : 0) + (i == 0 ? 0.3 : 0); /* max 19.3 at x=1, min 0 at x=20 */
    }
    y[19] = 0;
    p = mkpath(out, "curve.png");
    CHECKF(tn_plot_curve_png(p, "training loss of saves/demo", "loss", x, y, 20) == 0, "plot: %s", tn_errmsg());
    png_checks(p, 1);
    free(p);
}

/* ---- resume: trainer_log.jsonl truncated to the resumed step, history reloaded ---- */

static void resume(const char *base) {
    char *dir = mkpath(base, "resume"), *log = mkpath(dir, "trainer_log.jsonl");
    CHECK(tn_mkdirs(dir) == 0);
    size_t n = 0;
    char *full = fixture("trainer_log.jsonl", &n);
    if (!CHECK(full != NULL)) goto done;
    const char *torn = "{\"current_steps\": 8, \"total_st"; /* a crash in mid-write */
    tn_strbuf b = {0};
    tn_sb_putn(&b, full, n);
    tn_sb_puts(&b, torn);
    CHECK(tn_write_file_atomic(log, b.s, b.n) == 0);
    tn_sb_free(&b);

    tn_run_log *l = tn_run_log_open(dir, 4);
    if (CHECKF(l != NULL, "resume open: %s", tn_errmsg())) {
        tn_log_step again = {6, 6, 0.5, 0.25, 0.0, 2.0, 100.0, 0.0, 0};
        CHECK(tn_run_log_step(l, &again) == 0);
        tn_run_log_close(l);
        same_as_fixture(log, "trainer_log_resumed.jsonl");
    }

    /* log_history from the final trainer_state.json cut at step 4 is the checkpoint-4 state */
    l = tn_run_log_open(dir, 4);
    if (CHECKF(l != NULL, "resume open: %s", tn_errmsg())) {
        CHECKF(tn_run_log_load_history(l, fixdir) == 0, "load_history: %s", tn_errmsg());
        CHECK(tn_run_log_history_len(l) == 3);
        tn_trainer_state_info ck = state_info(4, 1.3333333333333333, 123456789012.0, 0);
        char *ckdir = mkpath(dir, "checkpoint-4"), *st = mkpath(ckdir, "trainer_state.json");
        CHECK(tn_run_log_write_state(l, ckdir, &ck) == 0);
        same_as_fixture(st, "checkpoint_trainer_state.json");
        /* history must come before the first log line */
        CHECK(tn_run_log_load_history(l, fixdir) == -1);
        tn_run_log_close(l);
        /* a state file with a key tandem does not write is refused, naming it */
        CHECK(tn_write_file_atomic(st, "{\"log_history\": [{\"step\": 1, \"reward\": 0.5}]}", 45) == 0);
        l = tn_run_log_open(dir, 4);
        CHECK(l && tn_run_log_load_history(l, ckdir) == -1 && strstr(tn_errmsg(), "'reward'") &&
              strstr(tn_errmsg(), "log_history[0]"));
        tn_run_log_close(l);
        free(ckdir);
        free(st);
    }

    /* a malformed line that is not the last is an error naming the file and line */
    CHECK(tn_write_file_atomic(log, "{\"current_steps\": 2}\nnot json\n{\"current_steps\": 4}\n", 51) == 0);
    l = tn_run_log_open(dir, 4);
    CHECKF(l == NULL && strstr(tn_errmsg(), "trainer_log.jsonl:2:"), "bad middle line: %s", tn_errmsg());
    tn_run_log_close(l);
    /* resume_step 0 starts afresh */
    l = tn_run_log_open(dir, 0);
    CHECK(l != NULL);
    tn_run_log_close(l);
    size_t len = 99;
    char *t = tn_read_file(log, &len, 0);
    CHECK(t && len == 0);
    free(t);
    CHECK(count_temp_files(dir) == 0);
done:
    free(full);
    free(dir);
    free(log);
}

/* ---- failures: one clear error, -1, nothing half-written ---- */

static void failures(const char *base) {
    char *file = mkpath(base, "not_a_dir");
    CHECK(tn_write_file_atomic(file, "x", 1) == 0);
    tn_run_log *l = tn_run_log_open(file, 0);
    CHECKF(l == NULL && strstr(tn_errmsg(), "not_a_dir") && strstr(tn_errmsg(), "not a folder"),
           "open on a file: %s", tn_errmsg());

    char *dir = mkpath(base, "fail");
    l = tn_run_log_open(dir, 0);
    if (!CHECK(l != NULL)) goto done;
    CHECK(tn_run_log_step(l, &steps[0]) == 0);
    tn_trainer_state_info in = state_info(2, 0.6666666666666666, 1.0, 0);
    char *sub = mkpath(file, "checkpoint-2");
    CHECKF(tn_run_log_write_state(l, sub, &in) == -1 && strstr(tn_errmsg(), "not_a_dir"), "state under a file: %s",
           tn_errmsg());
    free(sub);
    tn_train_summary s = {0};
    s.train_runtime_s = 1;
    s.global_step = 2;
    CHECKF(tn_run_log_finish(l, dir, &s, 1) == -1 && strstr(tn_errmsg(), "state info"), "no state: %s",
           tn_errmsg());
    s.state = &in;
    CHECKF(tn_run_log_finish(l, file, &s, 1) == -1 && strstr(tn_errmsg(), "not a folder"), "finish into a file: %s",
           tn_errmsg());
    /* the target name taken by a folder: the rename fails, the temporary is removed */
    char *blocker = mkpath(dir, "trainer_state.json");
    CHECK(mkdir(blocker, 0777) == 0);
    CHECKF(tn_run_log_write_state(l, dir, &in) == -1 && strstr(tn_errmsg(), "trainer_state.json"),
           "state onto a folder: %s", tn_errmsg());
    CHECK(count_temp_files(dir) == 0);
    rmdir(blocker);
    free(blocker);
    blocker = mkpath(dir, "training_loss.png");
    CHECK(mkdir(blocker, 0777) == 0);
    double x[2] = {1, 2}, y[2] = {3, 2};
    CHECKF(tn_plot_curve_png(blocker, "t", "loss", x, y, 2) == -1 && strstr(tn_errmsg(), "training_loss.png"),
           "png onto a folder: %s", tn_errmsg());
    CHECK(count_temp_files(dir) == 0);
    rmdir(blocker);
    free(blocker);
    CHECK(tn_plot_curve_png("/nonexistent-dir/x.png", "t", "loss", x, y, 2) == -1);
    CHECK(tn_plot_curve_png("unused.png", "t", "loss", x, y, 0) == -1);
    tn_run_log_close(l);
done:
    free(file);
    free(dir);
}

/* ---- grad_norm omitted when not computed, as HF does without clipping ---- */

static void no_grad_norm(const char *base) {
    char *dir = mkpath(base, "nogn"), *st = mkpath(dir, "trainer_state.json");
    tn_run_log *l = tn_run_log_open(dir, 0);
    if (!CHECK(l != NULL)) goto done;
    tn_log_step s = {1, 10, 3.0, -1, 0.5, 0.1, 1, 9, 0};
    CHECK(tn_run_log_step(l, &s) == 0);
    tn_trainer_state_info in = state_info(1, 0.1, 0, 0);
    CHECK(tn_run_log_write_state(l, dir, &in) == 0);
    tn_run_log_close(l);
    char *t = tn_read_file(st, NULL, 0);
    CHECKF(t && strstr(t, "  \"log_history\": [\n    {\n      \"epoch\": 0.1,\n      \"learning_rate\": 0.5,\n"
                          "      \"loss\": 3.0,\n      \"step\": 1\n    }\n  ],\n"),
           "log_history without grad_norm:\n%s", t ? t : "");
    free(t);
done:
    free(dir);
    free(st);
}

/* ---- progress ---- */

static void progress(void) {
    char out[512];
    tn_log_step s = {120, 1000, 2.34567, 0.95, 1e-4, 0.12, 62.5, 312.9, 15234.4};
    tn_progress_format(out, sizeof out, &s, 1);
    const char *tty = "\r120/1000 [###...........................]  12% loss 2.3457 | lr 1.00e-04 | grad_norm 0.950 | "
                      "15234 tok/s | ETA 0:05:12\033[K";
    CHECKF(strcmp(out, tty) == 0, "tty bar:\n  got      '%s'\n  expected '%s'", out, tty);
    s.grad_norm = -1; /* clipping off: no grad_norm, as HF omits it */
    tn_progress_format(out, sizeof out, &s, 1);
    CHECKF(!strstr(out, "grad_norm") && strstr(out, "| lr 1.00e-04 | 15234 tok/s"), "no grad_norm: '%s'", out);
    s.grad_norm = 0.95;
    tn_progress_format(out, sizeof out, &s, 0);
    const char *plain = "step 120/1000 (12.0%) | loss 2.3457 | lr 1.000e-04 | grad_norm 0.9500 | epoch 0.12 | "
                        "15234 tok/s | elapsed 0:01:02 | ETA 0:05:12\n";
    CHECKF(strcmp(out, plain) == 0, "plain line:\n  got      '%s'\n  expected '%s'", out, plain);
    s.step = 1000;
    s.remaining_s = 0;
    tn_progress_format(out, sizeof out, &s, 1);
    CHECKF(strstr(out, "[##############################] 100%") && out[strlen(out) - 1] == '\n',
           "last bar is full and ends the line: '%s'", out);
}

/* quiet_watch: a progress line is due after `every` seconds with nothing shown, then again `every` seconds after
 * it; something shown resets the clock (issue 24, item 5: no command silent through seconds of work). */
static void quiet(void) {
    tn_quiet q;
    tn_quiet_start(&q, 3.0, 100.0);
    CHECK(!tn_quiet_tick(&q, 101.0, 0) && !tn_quiet_tick(&q, 102.9, 0)); /* under 3 s of silence */
    CHECK(tn_quiet_tick(&q, 103.0, 0));                                  /* 3 s: a line */
    CHECK(!tn_quiet_tick(&q, 105.0, 0) && tn_quiet_tick(&q, 106.1, 0));  /* the line counts as shown */
    CHECK(!tn_quiet_tick(&q, 108.0, 1));                                 /* text shown: no line, clock reset */
    CHECK(!tn_quiet_tick(&q, 110.9, 0) && tn_quiet_tick(&q, 111.0, 0));
    CHECK_NEAR(tn_quiet_for(&q, 112.5), 1.5, 1e-12);
    tn_quiet_start(&q, 0, 0.0); /* 0: the default */
    CHECK(!tn_quiet_tick(&q, TN_QUIET_SECONDS - 0.01, 0) && tn_quiet_tick(&q, TN_QUIET_SECONDS, 0));
}

int main(void) {
    quiet();
    snprintf(fixdir, sizeof fixdir, "%s/fixtures/outputs", tl_tests_dir());
    const char *tmp = tl_tmpdir();
    char *out = mkpath(tmp, "run");
    formats();
    smoothing();
    full_run(out);
    plots(out);
    resume(tmp);
    failures(tmp);
    no_grad_norm(tmp);
    progress();
    free(out);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (tl_failures == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return tl_done("test_unit_outputs");
}
