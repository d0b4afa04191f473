/* test_unit_kernels -- the CPU backend's kernels against plain double-precision loops written here, on
 * small odd sizes: rmsnorm, per-head rmsnorm (Qwen3's q/k norm, strided, in place), rope, swiglu, cross-entropy, causal GQA attention (forward and backward),
 * dropout, bias and embedding reductions. Each reference is derived from the textbook formula, not
 * from tandem's code; the analytic backward references are themselves checked against central finite
 * differences of the double forward, so a wrong reference cannot make a wrong kernel pass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/core.h"
#include "testlib.h"

static const tn_backend *be;
static tn_rng rng;

static double urand(double lo, double hi) { return lo + (hi - lo) * tn_rng_uniform(&rng); }

/* backend buffer of n floats (CPU memory: filled and read directly) */
static float *buf(size_t n) { return be->alloc(n ? n : 1); }

static void fill(float *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = (float)urand(lo, hi);
}

/* max |a - b| / max(max |b|, floor) */
static double rel_max(const float *a, const double *b, size_t n, double floor) {
    double num = 0, den = floor;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    return num / den;
}

/* ------------------------------------------------------------------ rmsnorm */

static void rms_ref(double *y, double *rstd, const double *x, const double *w, int T, int D, double eps) {
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int j = 0; j < D; j++) ss += x[t * D + j] * x[t * D + j];
        double r = 1.0 / sqrt(ss / D + eps);
        if (rstd) rstd[t] = r;
        for (int j = 0; j < D; j++) y[t * D + j] = w[j] * x[t * D + j] * r;
    }
}

/* L = sum dy * y:  dL/dx_k = r w_k dy_k - x_k r^3 / D * sum_j dy_j w_j x_j ;  dL/dw_j = sum_t dy_j x_j r */
static void rms_grad_ref(double *dx, double *dw, const double *dy, const double *x, const double *w, int T, int D,
                         double eps) {
    for (int j = 0; j < D; j++) dw[j] = 0;
    for (int t = 0; t < T; t++) {
        const double *xr = x + t * D, *dyr = dy + t * D;
        double ss = 0, dot = 0;
        for (int j = 0; j < D; j++) ss += xr[j] * xr[j], dot += dyr[j] * w[j] * xr[j];
        double r = 1.0 / sqrt(ss / D + eps);
        for (int k = 0; k < D; k++) dx[t * D + k] = r * w[k] * dyr[k] - xr[k] * r * r * r / D * dot;
        for (int j = 0; j < D; j++) dw[j] += dyr[j] * xr[j] * r;
    }
}

static double rms_loss(const double *x, const double *w, const double *dy, int T, int D, double eps) {
    double *y = malloc(sizeof(double) * T * D), L = 0;
    rms_ref(y, NULL, x, w, T, D, eps);
    for (int i = 0; i < T * D; i++) L += dy[i] * y[i];
    free(y);
    return L;
}

static void test_rmsnorm(void) {
    enum { T = 5, D = 37 }; /* D > 16: the kernels' 16-lane blocks and their tail */
    const float eps = 1e-5f;
    float *x = buf(T * D), *w = buf(D), *y = buf(T * D), *rstd = buf(T), *dy = buf(T * D), *dx = buf(T * D),
          *dw = buf(D), *dx2 = buf(T * D);
    fill(x, T * D, -2, 2);
    x[3 * D + 4] = 0.0f; /* one small row element, one row scaled tiny */
    for (int j = 0; j < D; j++) x[4 * D + j] *= 1e-3f;
    fill(w, D, 0.5, 1.5);
    fill(dy, T * D, -1, 1);
    fill(dx, T * D, -1, 1); /* dx accumulates: start from non-zero values */
    fill(dw, D, -1, 1);
    double *xd = malloc(sizeof(double) * T * D), *wd = malloc(sizeof(double) * D), *dyd = malloc(sizeof(double) * T * D);
    double *yr = malloc(sizeof(double) * T * D), rr[T], *dxr = malloc(sizeof(double) * T * D), dwr[D];
    for (int i = 0; i < T * D; i++) xd[i] = x[i], dyd[i] = dy[i];
    for (int j = 0; j < D; j++) wd[j] = w[j];
    float dx0[T * D], dw0[D];
    memcpy(dx0, dx, sizeof dx0);
    memcpy(dw0, dw, sizeof dw0);

    be->rmsnorm_forward(y, rstd, x, w, T, D, eps);
    rms_ref(yr, rr, xd, wd, T, D, eps);
    CHECKF(rel_max(y, yr, T * D, 1e-30) < 2e-6, "rmsnorm forward rel err %.3g", rel_max(y, yr, T * D, 1e-30));
    for (int t = 0; t < T; t++) CHECKF(fabs(rstd[t] - rr[t]) <= 2e-6 * rr[t], "rstd[%d] %.9g vs %.9g", t, rstd[t], rr[t]);

    /* the reference gradient against central differences of the double forward */
    rms_grad_ref(dxr, dwr, dyd, xd, wd, T, D, eps);
    double worst = 0;
    for (int i = 0; i < T * D; i += 3) {
        double h = 1e-6 * fmax(1.0, fabs(xd[i])), s = xd[i];
        xd[i] = s + h;
        double lp = rms_loss(xd, wd, dyd, T, D, eps);
        xd[i] = s - h;
        double lm = rms_loss(xd, wd, dyd, T, D, eps);
        xd[i] = s;
        worst = fmax(worst, fabs((lp - lm) / (2 * h) - dxr[i]) / fmax(1e-3, fabs(dxr[i])));
    }
    for (int j = 0; j < D; j++) {
        double h = 1e-6, s = wd[j];
        wd[j] = s + h;
        double lp = rms_loss(xd, wd, dyd, T, D, eps);
        wd[j] = s - h;
        double lm = rms_loss(xd, wd, dyd, T, D, eps);
        wd[j] = s;
        worst = fmax(worst, fabs((lp - lm) / (2 * h) - dwr[j]) / fmax(1e-3, fabs(dwr[j])));
    }
    CHECKF(worst < 1e-5, "rmsnorm reference gradient vs finite differences: %.3g", worst);

    be->rmsnorm_backward(dx, dw, dy, x, w, rstd, T, D);
    double e_dx = 0, e_dw = 0;
    for (int i = 0; i < T * D; i++) e_dx = fmax(e_dx, fabs((dx[i] - dx0[i]) - dxr[i]) / fmax(1.0, fabs(dxr[i])));
    for (int j = 0; j < D; j++) e_dw = fmax(e_dw, fabs((dw[j] - dw0[j]) - dwr[j]) / fmax(1.0, fabs(dwr[j])));
    CHECKF(e_dx < 2e-5, "rmsnorm dx (accumulated) err %.3g", e_dx);
    CHECKF(e_dw < 2e-5, "rmsnorm dw (accumulated) err %.3g", e_dw);
    /* dw may be NULL: dx still computed (here into zeros) */
    be->rmsnorm_backward(dx2, NULL, dy, x, w, rstd, T, D);
    CHECKF(rel_max(dx2, dxr, T * D, 1.0) < 2e-5, "rmsnorm dx without dw err %.3g", rel_max(dx2, dxr, T * D, 1.0));
    free(xd), free(wd), free(dyd), free(yr), free(dxr);
    be->free(x), be->free(w), be->free(y), be->free(rstd), be->free(dy), be->free(dx), be->free(dw), be->free(dx2);
}

/* ------------------------------------------------------------------ per-head rmsnorm (Qwen3 q_norm / k_norm) */

/* Each head of a strided row is an independent RMSNorm of width hd: the reference gathers the heads into
 * [T * nheads, hd] rows and uses rms_ref / rms_grad_ref (checked against finite differences above). */
static void test_head_rmsnorm(void) {
    enum { T = 6, NH = 3, HD = 20, LDX = NH * HD + 3, LDY = NH * HD + 7, R = T * NH };
    const float eps = 1e-6f;
    float *x = buf(T * LDX), *w = buf(HD), *y = buf(T * LDY), *rstd = buf(R), *g = buf(T * LDY), *dw = buf(HD);
    float *cp = buf(T * LDY);
    fill(x, T * LDX, -2, 2);
    fill(w, HD, 0.5, 1.5);
    fill(y, T * LDY, 7, 8); /* sentinels: columns past the heads must stay as they are */
    fill(dw, HD, -1, 1);
    double xd[R * HD], wd[HD], yr[R * HD], rr[R], dyd[R * HD], dxr[R * HD], dwr[HD];
    for (int t = 0; t < T; t++)
        for (int i = 0; i < NH * HD; i++) xd[t * NH * HD + i] = x[t * LDX + i];
    for (int j = 0; j < HD; j++) wd[j] = w[j];
    float y_pad = y[LDY - 1], dw0[HD];
    memcpy(dw0, dw, sizeof dw0);

    be->head_rmsnorm_forward(y, LDY, rstd, x, LDX, w, T, NH, HD, eps);
    rms_ref(yr, rr, xd, wd, R, HD, eps);
    double ef = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < NH * HD; i++)
            ef = fmax(ef, fabs(y[t * LDY + i] - yr[t * NH * HD + i]) / fmax(1e-30, fabs(yr[t * NH * HD + i])));
    CHECKF(ef < 2e-6, "head rmsnorm forward rel err %.3g", ef);
    for (int r = 0; r < R; r++) CHECKF(fabs(rstd[r] - rr[r]) <= 2e-6 * rr[r], "head rstd[%d] %.9g vs %.9g", r, rstd[r], rr[r]);
    CHECKF(y[LDY - 1] == y_pad, "head rmsnorm wrote past the heads");

    /* backward in place: the gradient buffer is both dy and dx, as the model calls it */
    fill(g, T * LDY, -1, 1);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < NH * HD; i++) dyd[t * NH * HD + i] = g[t * LDY + i];
    float g_pad = g[LDY - 1];
    rms_grad_ref(dxr, dwr, dyd, xd, wd, R, HD, eps);
    be->head_rmsnorm_backward(g, LDY, dw, g, LDY, x, LDX, w, rstd, T, NH, HD);
    double edx = 0, edw = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < NH * HD; i++)
            edx = fmax(edx, fabs(g[t * LDY + i] - dxr[t * NH * HD + i]) / fmax(1.0, fabs(dxr[t * NH * HD + i])));
    for (int j = 0; j < HD; j++) edw = fmax(edw, fabs((dw[j] - dw0[j]) - dwr[j]) / fmax(1.0, fabs(dwr[j])));
    CHECKF(edx < 2e-5, "head rmsnorm dx (in place) err %.3g", edx);
    CHECKF(edw < 2e-5, "head rmsnorm dw (accumulated) err %.3g", edw);
    CHECKF(g[LDY - 1] == g_pad, "head rmsnorm backward wrote past the heads");

    /* copy_rows: strided 2-D copy, nothing outside [rows, cols) touched */
    fill(cp, T * LDY, 7, 8);
    float cp_pad = cp[LDY - 1];
    be->copy_rows(cp, LDY, x, LDX, T, NH * HD);
    int same = 1;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < NH * HD; i++) same &= cp[t * LDY + i] == x[t * LDX + i];
    CHECK(same && cp[LDY - 1] == cp_pad);
    be->free(x), be->free(w), be->free(y), be->free(rstd), be->free(g), be->free(dw), be->free(cp);
}

/* ------------------------------------------------------------------ rope */

static void test_rope(void) {
    const int B = 2, S = 7, T = B * S, nh = 3, hd = 6, half = hd / 2, ld = nh * hd + 5;
    const double theta = 10000.0;
    float *cs = buf(S * half), *sn = buf(S * half), *x = buf(T * ld), *orig = buf(T * ld), *y = buf(T * ld);
    for (int p = 0; p < S; p++)
        for (int i = 0; i < half; i++) {
            double ang = p * pow(theta, -2.0 * i / hd);
            cs[p * half + i] = (float)cos(ang);
            sn[p * half + i] = (float)sin(ang);
        }
    fill(orig, T * ld, -1, 1);
    memcpy(x, orig, sizeof(float) * T * ld);
    be->rope(x, T, S, nh, hd, ld, cs, sn, 0);
    /* direct formula: out = x * cat(cos, cos) + rotate_half(x) * cat(sin, sin), rotate_half = cat(-x2, x1) */
    double worst = 0;
    int untouched = 1;
    for (int t = 0; t < T; t++) {
        int pos = t % S;
        for (int h = 0; h < nh; h++)
            for (int k = 0; k < hd; k++) {
                int i = k % half;
                double ang = pos * pow(theta, -2.0 * i / hd);
                const float *xr = orig + (size_t)t * ld + h * hd;
                double rot = k < half ? -(double)xr[k + half] : (double)xr[k - half];
                double ref = xr[k] * cos(ang) + rot * sin(ang);
                worst = fmax(worst, fabs(x[(size_t)t * ld + h * hd + k] - ref));
            }
        for (int c = nh * hd; c < ld; c++) untouched &= x[(size_t)t * ld + c] == orig[(size_t)t * ld + c];
    }
    CHECKF(worst < 1e-6, "rope vs rotate_half formula: max err %.3g", worst);
    CHECK(untouched);
    /* position 0 is the identity */
    CHECK(memcmp(x, orig, sizeof(float) * nh * hd) == 0);
    /* inverse after forward: identity */
    memcpy(y, x, sizeof(float) * T * ld);
    be->rope(y, T, S, nh, hd, ld, cs, sn, 1);
    double inv_err = 0;
    for (int i = 0; i < T * ld; i++) inv_err = fmax(inv_err, fabs(y[i] - orig[i]));
    CHECKF(inv_err < 1e-6, "rope inverse(forward(x)) - x: %.3g", inv_err);
    /* inverse is the transpose: <R a, b> = <a, R^T b> */
    float *a = buf(T * ld), *b = buf(T * ld), *ra = buf(T * ld), *rtb = buf(T * ld);
    fill(a, T * ld, -1, 1);
    fill(b, T * ld, -1, 1);
    memcpy(ra, a, sizeof(float) * T * ld);
    memcpy(rtb, b, sizeof(float) * T * ld);
    be->rope(ra, T, S, nh, hd, ld, cs, sn, 0);
    be->rope(rtb, T, S, nh, hd, ld, cs, sn, 1);
    double d1 = 0, d2 = 0;
    for (int i = 0; i < T * ld; i++) d1 += (double)ra[i] * b[i], d2 += (double)a[i] * rtb[i];
    CHECKF(fabs(d1 - d2) < 1e-5 * fmax(1.0, fabs(d1)), "rope adjoint: %.9g vs %.9g", d1, d2);
    be->free(cs), be->free(sn), be->free(x), be->free(orig), be->free(y);
    be->free(a), be->free(b), be->free(ra), be->free(rtb);
}

/* ------------------------------------------------------------------ swiglu */

static void test_swiglu(void) {
    const int T = 3, I = 11;
    float *gu = buf(T * 2 * I), *act = buf(T * I), *dact = buf(T * I), *dgu = buf(T * 2 * I);
    fill(gu, T * 2 * I, -6, 6);
    gu[0] = 0.0f, gu[1] = -30.0f, gu[2] = 30.0f; /* saturated and zero gates */
    fill(dact, T * I, -1, 1);
    for (int i = 0; i < T * 2 * I; i++) dgu[i] = 777.0f; /* written, not accumulated */
    be->swiglu_forward(act, gu, T, I);
    be->swiglu_backward(dgu, dact, gu, T, I);
    double ef = 0, eg = 0, eu = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < I; j++) {
            double g = gu[t * 2 * I + j], u = gu[t * 2 * I + I + j], da = dact[t * I + j];
            double sg = 1.0 / (1.0 + exp(-g)), silu = g * sg;
            double ref = silu * u;
            /* d silu/dg = sg + g sg (1 - sg) */
            double dg = da * u * (sg + g * sg * (1 - sg)), du = da * silu;
            ef = fmax(ef, fabs(act[t * I + j] - ref) / fmax(1.0, fabs(ref)));
            eg = fmax(eg, fabs(dgu[t * 2 * I + j] - dg) / fmax(1.0, fabs(dg)));
            eu = fmax(eu, fabs(dgu[t * 2 * I + I + j] - du) / fmax(1.0, fabs(du)));
            /* the reference derivative against a central difference in double */
            double h = 1e-6, fp = (g + h) / (1 + exp(-(g + h))) * u, fm = (g - h) / (1 + exp(-(g - h))) * u;
            CHECKF(fabs(da * (fp - fm) / (2 * h) - dg) < 1e-6 * fmax(1.0, fabs(dg)), "swiglu reference derivative");
        }
    CHECKF(ef < 2e-6, "swiglu forward err %.3g", ef);
    CHECKF(eg < 2e-6, "swiglu d(gate) err %.3g", eg);
    CHECKF(eu < 2e-6, "swiglu d(up) err %.3g", eu);
    be->free(gu), be->free(act), be->free(dact), be->free(dgu);
}

/* ------------------------------------------------------------------ cross-entropy */

static void test_cross_entropy(void) {
    enum { T = 6, V = 19 };
    float *lg = buf(T * V), orig[T * V];
    fill(lg, T * V, -3, 3);
    for (int j = 0; j < V; j++) lg[4 * V + j] += 60.0f; /* large logits: needs max subtraction */
    lg[5 * V + 7] = 25.0f;                             /* a peaked row */
    memcpy(orig, lg, sizeof orig);
    int32_t targets[T] = {3, 0, -100, 18, 11, 7};
    const float scale = 0.37f;
    int64_t nv = 5; /* accumulates */
    double loss = be->cross_entropy(lg, targets, T, V, scale, &nv);
    double ref = 0, worst = 0;
    for (int t = 0; t < T; t++) {
        if (targets[t] < 0) {
            int zero = 1;
            for (int j = 0; j < V; j++) zero &= lg[t * V + j] == 0.0f;
            CHECKF(zero, "ignored row %d not zeroed", t);
            continue;
        }
        double mx = -INFINITY, se = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, orig[t * V + j]);
        for (int j = 0; j < V; j++) se += exp(orig[t * V + j] - mx);
        double lse = mx + log(se);
        ref += lse - orig[t * V + targets[t]];
        for (int j = 0; j < V; j++) {
            double d = (exp(orig[t * V + j] - lse) - (j == targets[t])) * scale;
            worst = fmax(worst, fabs(lg[t * V + j] - d));
        }
    }
    CHECKF(fabs(loss - ref) < 1e-5 * fabs(ref), "cross-entropy loss %.9g vs %.9g", loss, ref);
    CHECKF(worst < 1e-6, "dlogits max err %.3g", worst);
    CHECK(nv == 10);
    /* all rows ignored: loss 0, nothing counted */
    memcpy(lg, orig, sizeof orig);
    int32_t none[T] = {-100, -100, -100, -100, -100, -100};
    int64_t nv2 = 0;
    CHECK(be->cross_entropy(lg, none, T, V, 1.0f, &nv2) == 0.0 && nv2 == 0);
    be->free(lg);
}

/* cross_entropy_add + cross_entropy_total (the lm_head's chunks, one read-back): the same loss to the bit as adding
 * cross_entropy's returns chunk by chunk, the same dlogits, the count added, and the total cleared by reading it */
static void test_cross_entropy_total(void) {
    enum { T = 7, V = 23 };
    float *a = buf(T * V), *b = buf(T * V);
    fill(a, T * V, -4, 4);
    memcpy(b, a, sizeof(float) * T * V);
    int32_t targets[T] = {1, -100, 22, 5, 0, 13, -100};
    int64_t nv_sum = 2, nv_total = 2;
    double sum = 0.0;
    for (int t0 = 0; t0 < T; t0 += 3) { /* chunks of 3, 3, 1 rows */
        int n = t0 + 3 < T ? 3 : T - t0;
        sum += be->cross_entropy(a + t0 * V, targets + t0, n, V, 0.5f, &nv_sum);
        be->cross_entropy_add(b + t0 * V, targets + t0, n, V, 0.5f);
    }
    double total = be->cross_entropy_total(&nv_total);
    CHECKF(total == sum, "cross_entropy_total %.17g, the chunks' returns add to %.17g", total, sum);
    CHECK(nv_total == nv_sum && nv_total == 2 + 5);
    CHECK(memcmp(a, b, sizeof(float) * T * V) == 0);
    int64_t nv_again = 0;
    CHECK(be->cross_entropy_total(&nv_again) == 0.0 && nv_again == 0); /* read clears it */
    be->free(a), be->free(b);
}

/* ------------------------------------------------------------------ attention */

/* naive causal GQA attention in double: out [B*S, H*hd], lse [B, H, S] */
static void att_ref(double *out, double *lse, const double *qkv, int B, int S, int H, int KV, int hd, int ld) {
    double *p = malloc(sizeof(double) * S);
    double sc = 1.0 / sqrt((double)hd);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int g = h / (H / KV);
            for (int i = 0; i < S; i++) {
                const double *q = qkv + (size_t)(b * S + i) * ld + h * hd;
                double mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + (size_t)(b * S + j) * ld + H * hd + g * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += q[d] * k[d];
                    p[j] = s * sc;
                    mx = fmax(mx, p[j]);
                }
                double se = 0;
                for (int j = 0; j <= i; j++) se += exp(p[j] - mx);
                if (lse) lse[((size_t)b * H + h) * S + i] = mx + log(se);
                double *o = out + (size_t)(b * S + i) * H * hd + h * hd;
                for (int d = 0; d < hd; d++) o[d] = 0;
                for (int j = 0; j <= i; j++) {
                    const double *v = qkv + (size_t)(b * S + j) * ld + (H + KV) * hd + g * hd;
                    double pj = exp(p[j] - mx) / se;
                    for (int d = 0; d < hd; d++) o[d] += pj * v[d];
                }
            }
        }
    free(p);
}

/* naive backward in double: dqkv (all columns written) for L = sum dout * out */
static void att_grad_ref(double *dqkv, const double *dout, const double *qkv, int B, int S, int H, int KV, int hd,
                         int ld) {
    double *p = malloc(sizeof(double) * S), *dp = malloc(sizeof(double) * S);
    double sc = 1.0 / sqrt((double)hd);
    memset(dqkv, 0, sizeof(double) * B * S * ld);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int g = h / (H / KV);
            for (int i = 0; i < S; i++) {
                const double *q = qkv + (size_t)(b * S + i) * ld + h * hd;
                const double *dO = dout + (size_t)(b * S + i) * H * hd + h * hd;
                double mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + (size_t)(b * S + j) * ld + H * hd + g * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += q[d] * k[d];
                    p[j] = s * sc;
                    mx = fmax(mx, p[j]);
                }
                double se = 0;
                for (int j = 0; j <= i; j++) se += exp(p[j] - mx);
                double dot = 0;
                for (int j = 0; j <= i; j++) {
                    p[j] = exp(p[j] - mx) / se;
                    const double *v = qkv + (size_t)(b * S + j) * ld + (H + KV) * hd + g * hd;
                    dp[j] = 0;
                    for (int d = 0; d < hd; d++) dp[j] += dO[d] * v[d];
                    dot += p[j] * dp[j];
                }
                for (int j = 0; j <= i; j++) {
                    double ds = p[j] * (dp[j] - dot) * sc; /* d score (before scaling) */
                    const double *k = qkv + (size_t)(b * S + j) * ld + H * hd + g * hd;
                    double *dq = dqkv + (size_t)(b * S + i) * ld + h * hd;
                    double *dk = dqkv + (size_t)(b * S + j) * ld + H * hd + g * hd;
                    double *dv = dqkv + (size_t)(b * S + j) * ld + (H + KV) * hd + g * hd;
                    for (int d = 0; d < hd; d++) {
                        dq[d] += ds * k[d];
                        dk[d] += ds * q[d];
                        dv[d] += p[j] * dO[d];
                    }
                }
            }
        }
    free(p);
    free(dp);
}

static double att_loss(const double *qkv, const double *dout, int B, int S, int H, int KV, int hd, int ld) {
    size_t no = (size_t)B * S * H * hd;
    double *o = malloc(sizeof(double) * no), L = 0;
    att_ref(o, NULL, qkv, B, S, H, KV, hd, ld);
    for (size_t i = 0; i < no; i++) L += o[i] * dout[i];
    free(o);
    return L;
}

static void test_attention(int B, int S, int H, int KV, int hd) {
    const int ld = (H + 2 * KV) * hd, T = B * S;
    const size_t nq = (size_t)T * ld, no = (size_t)T * H * hd, nl = (size_t)B * H * S;
    float *qkv = buf(nq), *out = buf(no), *lse = buf(nl), *dout = buf(no), *dqkv = buf(nq);
    fill(qkv, nq, -1.5, 1.5);
    fill(dout, no, -1, 1);
    for (size_t i = 0; i < nq; i++) dqkv[i] = 12345.0f; /* every column must be written */
    double *qd = malloc(sizeof(double) * nq), *dod = malloc(sizeof(double) * no);
    double *oref = malloc(sizeof(double) * no), *lref = malloc(sizeof(double) * nl), *dref = malloc(sizeof(double) * nq);
    for (size_t i = 0; i < nq; i++) qd[i] = qkv[i];
    for (size_t i = 0; i < no; i++) dod[i] = dout[i];

    be->attention_forward(out, lse, qkv, B, S, H, KV, hd, ld);
    att_ref(oref, lref, qd, B, S, H, KV, hd, ld);
    double eo = rel_max(out, oref, no, 1e-30), el = 0;
    for (size_t i = 0; i < nl; i++) el = fmax(el, fabs(lse[i] - lref[i]) / fmax(1.0, fabs(lref[i])));
    CHECKF(eo < 1e-5, "attention (hd %d) out rel err %.3g", hd, eo);
    CHECKF(el < 1e-5, "attention (hd %d) lse err %.3g", hd, el);
    /* row 0 attends only to key 0: out = v_0 exactly (per head) */
    for (int h = 0; h < H; h++)
        CHECK_NEAR(out[h * hd + 3], qkv[(H + KV) * hd + (h / (H / KV)) * hd + 3], 1e-6);

    /* reference backward vs central differences of the double forward, on sampled elements */
    att_grad_ref(dref, dod, qd, B, S, H, KV, hd, ld);
    double worst_fd = 0;
    for (size_t i = 7; i < nq; i += 397) {
        double h = 1e-5, s = qd[i];
        qd[i] = s + h;
        double lp = att_loss(qd, dod, B, S, H, KV, hd, ld);
        qd[i] = s - h;
        double lm = att_loss(qd, dod, B, S, H, KV, hd, ld);
        qd[i] = s;
        worst_fd = fmax(worst_fd, fabs((lp - lm) / (2 * h) - dref[i]) / fmax(1e-2, fabs(dref[i])));
    }
    CHECKF(worst_fd < 1e-5, "attention reference gradient vs finite differences: %.3g", worst_fd);

    be->attention_backward(dqkv, dout, out, lse, qkv, B, S, H, KV, hd, ld);
    double eq = 0, ek = 0, ev = 0, scale_q = 0, scale_k = 0, scale_v = 0;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < ld; c++) {
            double r = dref[(size_t)t * ld + c], d = fabs(dqkv[(size_t)t * ld + c] - r);
            if (c < H * hd) eq = fmax(eq, d), scale_q = fmax(scale_q, fabs(r));
            else if (c < (H + KV) * hd) ek = fmax(ek, d), scale_k = fmax(scale_k, fabs(r));
            else ev = fmax(ev, d), scale_v = fmax(scale_v, fabs(r));
        }
    CHECKF(eq < 2e-5 * scale_q, "attention (hd %d) dq err %.3g (scale %.3g)", hd, eq, scale_q);
    CHECKF(ek < 2e-5 * scale_k, "attention (hd %d) dk err %.3g (scale %.3g)", hd, ek, scale_k);
    CHECKF(ev < 2e-5 * scale_v, "attention (hd %d) dv err %.3g (scale %.3g)", hd, ev, scale_v);
    free(qd), free(dod), free(oref), free(lref), free(dref);
    be->free(qkv), be->free(out), be->free(lse), be->free(dout), be->free(dqkv);
}

/* ------------------------------------------------------------------ dropout */

static void test_dropout(void) {
    const size_t n = 10007;
    const float p = 0.3f;
    float *x = buf(n), *y = buf(n), *y2 = buf(n), *y3 = buf(n), *inplace = buf(n);
    fill(x, n, 0.5, 2.0); /* no zeros in x: y == 0 means dropped */
    be->dropout(y, x, n, p, 42);
    be->dropout(y2, x, n, p, 42);
    be->dropout(y3, x, n, p, 43);
    memcpy(inplace, x, n * sizeof *x);
    be->dropout(inplace, inplace, n, p, 42);
    size_t kept = 0, bad_scale = 0, differ = 0;
    for (size_t i = 0; i < n; i++) {
        if (y[i] != 0.0f) {
            kept++;
            if (fabs(y[i] - x[i] / 0.7) > 1e-6 * fabs(x[i] / 0.7)) bad_scale++;
        }
        differ += (y3[i] != 0.0f) != (y[i] != 0.0f);
    }
    double frac = (double)kept / n;
    CHECKF(frac > 0.68 && frac < 0.72, "dropout kept fraction %.4f (want ~0.70)", frac);
    CHECKF(bad_scale == 0, "%zu kept values not scaled by 1/0.7", bad_scale);
    CHECK(memcmp(y, y2, n * sizeof *y) == 0);
    CHECK(memcmp(y, inplace, n * sizeof *y) == 0);
    CHECKF(differ > n / 10, "seeds 42 and 43 give nearly the same mask (%zu differ)", differ);
    be->free(x), be->free(y), be->free(y2), be->free(y3), be->free(inplace);
}

/* ------------------------------------------------------------------ bias / embedding reductions */

static void test_bias_embedding(void) {
    enum { T = 9, n = 70, ld = 75, V = 5, D = 67 };
    float *y = buf(T * ld), *bias = buf(n), *db = buf(n), orig[T * ld];
    fill(y, T * ld, -1, 1);
    fill(bias, n, -1, 1);
    fill(db, n, -1, 1);
    memcpy(orig, y, sizeof orig);
    float db0[n];
    memcpy(db0, db, sizeof db0);
    be->add_bias(y, bias, T, n, ld);
    double e = 0;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < ld; c++) {
            double r = orig[t * ld + c] + (c < n ? bias[c] : 0.0);
            e = fmax(e, fabs(y[t * ld + c] - r));
        }
    CHECKF(e < 1e-6, "add_bias err %.3g", e);
    be->bias_backward(db, orig, T, n, ld);
    e = 0;
    for (int c = 0; c < n; c++) {
        double s = db0[c];
        for (int t = 0; t < T; t++) s += orig[t * ld + c];
        e = fmax(e, fabs(db[c] - s));
    }
    CHECKF(e < 1e-5, "bias_backward err %.3g", e);

    float *table = buf(V * D), *emb = buf(T * D), *dt = buf(V * D), *dout = buf(T * D);
    int32_t ids[T] = {4, 0, 4, 2, 4, 1, 0, 3, 4};
    fill(table, V * D, -1, 1);
    fill(dout, T * D, -1, 1);
    be->embedding_forward(emb, table, ids, T, D);
    int same = 1;
    for (int t = 0; t < T; t++) same &= memcmp(emb + t * D, table + ids[t] * D, D * sizeof(float)) == 0;
    CHECK(same);
    be->embedding_backward(dt, dout, ids, T, D);
    e = 0;
    for (int v = 0; v < V; v++)
        for (int d = 0; d < D; d++) {
            double s = 0;
            for (int t = 0; t < T; t++) s += ids[t] == v ? dout[t * D + d] : 0.0;
            e = fmax(e, fabs(dt[v * D + d] - s));
        }
    CHECKF(e < 1e-5, "embedding_backward (repeated ids) err %.3g", e);
    be->free(y), be->free(bias), be->free(db), be->free(table), be->free(emb), be->free(dt), be->free(dout);
}

int main(void) {
    be = tn_backend_cpu();
    tn_rng_seed(&rng, 1234);
    test_rmsnorm();
    test_head_rmsnorm();
    test_rope();
    test_swiglu();
    test_cross_entropy();
    test_cross_entropy_total();
    test_attention(2, 70, 4, 2, 8);  /* GQA 4 -> 2, rows cross two 64-row blocks */
    test_attention(1, 131, 3, 1, 18); /* 3 -> 1, three blocks, hd > 16 (vector lanes + tail) */
    test_dropout();
    test_bias_embedding();
    return tl_done("test_unit_kernels");
}
