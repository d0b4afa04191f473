/* test_unit_image_kernels -- the CPU backend's image kernels (backend/image_kernels.h) against double-precision
 * loops written here from the textbook definitions, on small odd shapes: convolution (7x7/2 pad 3, 3x3/2 pad 1,
 * 3x3/1 pad 1, 1x1/2, 1x1/1: forward, input and weight gradients), batch normalisation (train: output, saved
 * statistics, running estimates; eval; backward against central differences of a double forward), ReLU, max-pool
 * 3x3/2 pad 1 (forward, backward, torch's first-maximum rule on ties), global average pool, label-smoothed
 * cross-entropy, SGD (momentum, dampening, Nesterov, weight decay).
 * Bounds: a sum of K fp32 products in any order errs by at most gamma_K = K u / (1 - K u) times the sum of the
 * absolute products (u = 2^-24; Higham, Accuracy and Stability, 3.1), so each convolution output is held to
 * (K + 2) u x sum|products| with K its inner length (+ the taps col2im adds). Elementwise kernels: a few roundings
 * of terms of the sizes named at each check. Finite-difference references (double, h = 1e-4 relative) are exact
 * to ~1e-8, far below the fp32 bounds. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_kernels.h"
#include "backend/image_kernels.h"
#include "core/core.h"
#include "testlib.h"

#define U 5.9604644775390625e-8 /* 2^-24 */

static const tn_backend *be;
static const tn_image_kernels *ik;
static tn_rng rng;

static double urand(double lo, double hi) { return lo + (hi - lo) * tn_rng_uniform(&rng); }
static float *buf(size_t n) { return be->alloc(n ? n : 1); }
static void fill(float *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = (float)urand(lo, hi);
}

/* ------------------------------------------------------------------ convolution */

/* x [C, N, H, W] at (c, n, h, w); 0 outside */
static double at(const float *x, const tn_conv_shape *s, int c, int n, int h, int w) {
    if (h < 0 || h >= s->H || w < 0 || w >= s->W) return 0.0;
    return x[(((size_t)c * s->N + n) * s->H + h) * s->W + w];
}

/* a convolution implementation under test: the backend's table (oneDNN, whose summation order is its own, so the
 * input gradient is held to the any-order bound over all OC K^2 products; shapes with dead taps go to im2col there)
 * or tandem's im2col + GEMM (cpu_conv.c: OC-long GEMM sums, then at most K^2 taps added by col2im) */
typedef struct {
    const char *name;
    void (*fwd)(float *, const float *, const float *, const tn_conv_shape *, float *);
    void (*bwd)(float *, int, float *, const float *, const float *, const float *, const tn_conv_shape *, float *);
    size_t (*scratch)(const tn_conv_shape *);
    int any_order;
} conv_impl;
static const conv_impl *impl;

static void check_conv(int N, int C, int H, int W, int OC, int K, int stride, int pad) {
    tn_conv_shape s = {.N = N, .C = C, .H = H, .W = W, .OC = OC, .KH = K, .KW = K, .stride = stride, .pad = pad};
    CHECK(tn_conv_shape_finish(&s) == 0);
    CHECK(s.OH == (H + 2 * pad - K) / stride + 1 && s.OW == (W + 2 * pad - K) / stride + 1);
    size_t nx = (size_t)C * N * H * W, nw = (size_t)OC * C * K * K, ny = (size_t)OC * N * s.OH * s.OW;
    float *x = buf(nx), *w = buf(nw), *y = buf(ny), *dy = buf(ny), *dx = buf(nx), *dw = buf(nw);
    float *scratch = buf(impl->scratch(&s));
    fill(x, nx, -1, 1), fill(w, nw, -1, 1), fill(dy, ny, -1, 1), fill(dw, nw, -0.5, 0.5);
    float *dw0 = malloc(nw * sizeof *dw0);
    memcpy(dw0, dw, nw * sizeof *dw0);
    impl->fwd(y, x, w, &s, scratch);
    impl->bwd(dx, 0, dw, dy, x, w, &s, scratch);
    const int CKK = C * K * K, NP = N * s.OH * s.OW;
    int bad = 0;
    /* forward: y[oc, n, oh, ow] = sum_{c,i,j} w[oc, c, i, j] x[c, n, oh*stride - pad + i, ow*stride - pad + j] */
    for (int oc = 0; oc < OC; oc++)
        for (int n = 0; n < N; n++)
            for (int oh = 0; oh < s.OH; oh++)
                for (int ow = 0; ow < s.OW; ow++) {
                    double ref = 0, abs = 0;
                    for (int c = 0; c < C; c++)
                        for (int i = 0; i < K; i++)
                            for (int j = 0; j < K; j++) {
                                double t = w[((oc * C + c) * K + i) * K + j] *
                                           at(x, &s, c, n, oh * stride - pad + i, ow * stride - pad + j);
                                ref += t, abs += fabs(t);
                            }
                    double got = y[(((size_t)oc * N + n) * s.OH + oh) * s.OW + ow];
                    bad += fabs(got - ref) > (CKK + 2) * U * abs;
                }
    CHECKF(bad == 0, "%s conv %dx%d/%d pad %d forward: %d outputs beyond (K+2) u sum|products|", impl->name, K, K, stride, pad, bad);
    /* weight gradient: dw[oc, c, i, j] += sum_{n,oh,ow} dy[oc, n, oh, ow] x[c, n, oh*stride - pad + i, ...] */
    bad = 0;
    for (int oc = 0; oc < OC; oc++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < K; i++)
                for (int j = 0; j < K; j++) {
                    size_t k = (((size_t)oc * C + c) * K + i) * K + j;
                    double ref = dw0[k], abs = fabs(dw0[k]);
                    for (int n = 0; n < N; n++)
                        for (int oh = 0; oh < s.OH; oh++)
                            for (int ow = 0; ow < s.OW; ow++) {
                                double t = dy[(((size_t)oc * N + n) * s.OH + oh) * s.OW + ow] *
                                           at(x, &s, c, n, oh * stride - pad + i, ow * stride - pad + j);
                                ref += t, abs += fabs(t);
                            }
                    bad += fabs(dw[k] - ref) > (NP + 2) * U * abs;
                }
    CHECKF(bad == 0, "%s conv %dx%d/%d pad %d weight gradient: %d elements beyond the bound", impl->name, K, K, stride, pad, bad);
    /* input gradient: dx[c, n, h, w] = sum over (oc, oh, ow, i, j) with h = oh*stride - pad + i, ... */
    double *rx = calloc(nx, sizeof *rx), *ax = calloc(nx, sizeof *ax);
    for (int oc = 0; oc < OC; oc++)
        for (int n = 0; n < N; n++)
            for (int oh = 0; oh < s.OH; oh++)
                for (int ow = 0; ow < s.OW; ow++)
                    for (int c = 0; c < C; c++)
                        for (int i = 0; i < K; i++)
                            for (int j = 0; j < K; j++) {
                                int h = oh * stride - pad + i, ww = ow * stride - pad + j;
                                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                                size_t e = (((size_t)c * N + n) * H + h) * W + ww;
                                double t = (double)w[((oc * C + c) * K + i) * K + j] *
                                           dy[(((size_t)oc * N + n) * s.OH + oh) * s.OW + ow];
                                rx[e] += t, ax[e] += fabs(t);
                            }
    const int terms = impl->any_order ? OC * K * K : OC + K * K; /* input gradient: the bound's length */
    bad = 0;
    for (size_t e = 0; e < nx; e++) bad += fabs(dx[e] - rx[e]) > (terms + 2) * U * ax[e];
    CHECKF(bad == 0, "%s conv %dx%d/%d pad %d input gradient: %d elements beyond the bound", impl->name, K, K, stride, pad, bad);
    /* accumulate_dx adds to what dx holds */
    float *dx2 = buf(nx);
    for (size_t e = 0; e < nx; e++) dx2[e] = 1.0f;
    impl->bwd(dx2, 1, NULL, dy, x, w, &s, scratch);
    bad = 0;
    for (size_t e = 0; e < nx; e++) bad += fabs(dx2[e] - 1.0 - rx[e]) > (terms + 3) * U * (ax[e] + 1.0);
    CHECKF(bad == 0, "%s conv %dx%d/%d pad %d accumulated input gradient: %d elements off", impl->name, K, K, stride, pad, bad);
    free(rx), free(ax), free(dw0);
    float *all[] = {x, w, y, dy, dx, dw, scratch, dx2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->free(all[i]);
}

/* ------------------------------------------------------------------ batch normalisation */

/* double forward of train-mode BN on channel values x[M]; returns sum_i r_i y_i */
static double bn_loss(const double *x, const double *r, int M, double g, double b, double eps) {
    double mu = 0, var = 0, L = 0;
    for (int i = 0; i < M; i++) mu += x[i];
    mu /= M;
    for (int i = 0; i < M; i++) var += (x[i] - mu) * (x[i] - mu);
    var /= M;
    for (int i = 0; i < M; i++) L += r[i] * (g * (x[i] - mu) / sqrt(var + eps) + b);
    return L;
}

static void check_batchnorm(void) {
    const int C = 3, M = 37;
    const float eps = 1e-5f, mom = 0.1f;
    size_t n = (size_t)C * M;
    float *x = buf(n), *y = buf(n), *dy = buf(n), *dx = buf(n), *g = buf(C), *b = buf(C), *mean = buf(C), *rstd = buf(C);
    float *rm = buf(C), *rv = buf(C), *dg = buf(C), *db = buf(C);
    fill(x, n, -2, 3), fill(dy, n, -1, 1), fill(g, C, 0.5, 1.5), fill(b, C, -0.5, 0.5);
    fill(rm, C, -0.2, 0.2), fill(rv, C, 0.8, 1.2), fill(dg, C, -1, 1), fill(db, C, -1, 1);
    float rm0[3], rv0[3], dg0[3], db0[3];
    memcpy(rm0, rm, sizeof rm0), memcpy(rv0, rv, sizeof rv0), memcpy(dg0, dg, sizeof dg0), memcpy(db0, db, sizeof db0);
    ik->batchnorm_train(y, mean, rstd, rm, rv, x, g, b, C, M, eps, mom);
    ik->batchnorm_backward(dx, dg, db, dy, x, mean, rstd, g, C, M);
    for (int c = 0; c < C; c++) {
        const float *xc = x + (size_t)c * M;
        double mu = 0, ss = 0;
        for (int i = 0; i < M; i++) mu += xc[i];
        mu /= M;
        for (int i = 0; i < M; i++) ss += (xc[i] - mu) * (xc[i] - mu);
        double var = ss / M, r = 1 / sqrt(var + eps), xmax = 0;
        for (int i = 0; i < M; i++) xmax = fmax(xmax, fabs(xc[i]));
        /* mean and rstd: double sums rounded once (+ the fp32 eps) */
        CHECK_NEAR(mean[c], mu, 2 * U * xmax);
        CHECK_NEAR(rstd[c], r, 4 * U * r);
        /* running estimates: torch's convention, unbiased variance (M - 1) in the running one */
        CHECK_NEAR(rm[c], (1 - mom) * rm0[c] + mom * mu, 4 * U * (fabs(rm0[c]) + fabs(mu)));
        CHECK_NEAR(rv[c], (1 - mom) * rv0[c] + mom * ss / (M - 1), 4 * U * (rv0[c] + ss / (M - 1)));
        int bad = 0;
        for (int i = 0; i < M; i++) { /* y = x a + b' with a = g r, b' = b - mu a: 6 roundings of terms <= |g| r (|x| + |mu|) + |b| */
            double ref = g[c] * (xc[i] - mu) * r + b[c], mag = fabs(g[c]) * r * (fabs(xc[i]) + fabs(mu)) + fabs(b[c]);
            bad += fabs(y[(size_t)c * M + i] - ref) > 8 * U * mag;
        }
        CHECKF(bad == 0, "batchnorm channel %d: %d outputs off", c, bad);
        /* backward against central differences of the double forward with loss sum dy * y */
        double xd[37], rd[37];
        for (int i = 0; i < M; i++) xd[i] = xc[i], rd[i] = dy[(size_t)c * M + i];
        double num = 0, den = 0;
        for (int i = 0; i < M; i++) {
            double h = 1e-4 * fmax(1.0, fabs(xd[i])), keep = xd[i];
            xd[i] = keep + h;
            double lp = bn_loss(xd, rd, M, g[c], b[c], eps);
            xd[i] = keep - h;
            double lm = bn_loss(xd, rd, M, g[c], b[c], eps);
            xd[i] = keep;
            double fd = (lp - lm) / (2 * h);
            num += (dx[(size_t)c * M + i] - fd) * (dx[(size_t)c * M + i] - fd), den += fd * fd;
        }
        CHECKF(sqrt(num / den) < 1e-5, "batchnorm backward dx channel %d: rel L2 %.2e vs finite differences", c,
               sqrt(num / den));
        double sdy = 0, sdyx = 0, adyx = 0;
        for (int i = 0; i < M; i++)
            sdy += rd[i], sdyx += rd[i] * (xd[i] - mu) * r, adyx += fabs(rd[i] * (xd[i] - mu) * r);
        CHECK_NEAR(db[c], db0[c] + sdy, 4 * U * (fabs(db0[c]) + M));
        CHECK_NEAR(dg[c], dg0[c] + sdyx, 4 * U * (fabs(dg0[c]) + adyx) + 8 * U * adyx);
    }
    /* eval: normalised by the running estimates */
    ik->batchnorm_eval(y, x, rm, rv, g, b, C, M, eps);
    int bad = 0;
    for (int c = 0; c < C; c++)
        for (int i = 0; i < M; i++) {
            double xv = x[(size_t)c * M + i], a = g[c] / sqrt((double)rv[c] + eps);
            double ref = (xv - rm[c]) * a + b[c], mag = fabs(a) * (fabs(xv) + fabs(rm[c])) + fabs(b[c]);
            bad += fabs(y[(size_t)c * M + i] - ref) > 8 * U * mag;
        }
    CHECKF(bad == 0, "batchnorm eval: %d outputs off", bad);
    float *all[] = {x, y, dy, dx, g, b, mean, rstd, rm, rv, dg, db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->free(all[i]);
}

/* SyncBatchNorm seen by one of two ranks holding the same data: the summed statistics are twice this rank's, so
 * outputs, saved statistics and input gradients equal the local kernel's (within fp32 roundings of the one-pass
 * variance: 8 u relative on var for these well-centred values), dgamma/dbeta add this rank's own sums, and the
 * running variance takes the unbiased variance of 2M values: var 2M / (2M - 1). */
static void twice(void *ctx, double *b, int n) {
    (void)ctx;
    for (int i = 0; i < n; i++) b[i] *= 2;
}

static void check_batchnorm_sync(void) {
    const int C = 2, M = 29;
    size_t n = (size_t)C * M;
    float *x = buf(n), *dy = buf(n), *g = buf(C), *b = buf(C), *y1 = buf(n), *y2 = buf(n), *dx1 = buf(n), *dx2 = buf(n);
    float *m1 = buf(C), *r1 = buf(C), *m2 = buf(C), *r2 = buf(C), *rm1 = buf(C), *rv1 = buf(C), *rm2 = buf(C), *rv2 = buf(C);
    float *dg1 = buf(C), *db1 = buf(C), *dg2 = buf(C), *db2 = buf(C);
    fill(x, n, -1, 2), fill(dy, n, -1, 1), fill(g, C, 0.5, 1.5), fill(b, C, -0.5, 0.5);
    for (int c = 0; c < C; c++) rv1[c] = rv2[c] = 1.0f;
    tn_bn_sync sync = {twice, NULL};
    ik->batchnorm_train(y1, m1, r1, rm1, rv1, x, g, b, C, M, 1e-5f, 0.1f);
    ik->batchnorm_train_sync(y2, m2, r2, rm2, rv2, x, g, b, C, M, 1e-5f, 0.1f, &sync);
    ik->batchnorm_backward(dx1, dg1, db1, dy, x, m1, r1, g, C, M);
    ik->batchnorm_backward_sync(dx2, dg2, db2, dy, x, m2, r2, g, C, M, &sync);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += fabs(y1[i] - y2[i]) > 64 * U * (1 + fabs(y1[i])) || fabs(dx1[i] - dx2[i]) > 64 * U * (1 + fabs(dx1[i]));
    for (int c = 0; c < C; c++) {
        double var = 1.0 / ((double)r1[c] * r1[c]) - 1e-5;
        bad += fabs(m1[c] - m2[c]) > 8 * U * (1 + fabs(m1[c])) || fabs(r1[c] - r2[c]) > 16 * U * r1[c];
        bad += fabs(dg1[c] - dg2[c]) > 8 * U * (1 + fabs(dg1[c])) || db1[c] != db2[c];
        bad += fabs(rv2[c] - (0.9 + 0.1 * var * 2 * M / (2 * M - 1))) > 1e-5; /* rstd's fp32 rounding: ~1e-7 */
    }
    CHECKF(bad == 0, "SyncBatchNorm with two identical ranks: %d values differ from the local kernel's", bad);
    float *all[] = {x, dy, g, b, y1, y2, dx1, dx2, m1, r1, m2, r2, rm1, rv1, rm2, rv2, dg1, db1, dg2, db2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->free(all[i]);
}

/* ------------------------------------------------------------------ pooling, ReLU */

static void check_maxpool(void) {
    /* one 5x5 plane, 3x3/2 pad 1 -> 3x3; hand-worked: window (oh, ow) covers rows 2oh-1..2oh+1, cols 2ow-1..2ow+1 */
    const float x[25] = {1, 2, 3, 4, 5,  /* row 0 */
                         6, 9, 9, 0, 1,  /* row 1: a tie (9, 9) */
                         2, 3, 4, 5, 6,  /* row 2 */
                         -1, -2, -3, -4, -5, /* row 3 */
                         -6, -7, -8, -9, -9}; /* row 4: window (2, 2) sees only -4, -5, -9, -9 */
    const float want[9] = {9, 9, 5, 9, 9, 6, -1, -2, -4};
    float *xb = buf(25), *y = buf(9), *dy = buf(9), *dx = buf(25);
    memcpy(xb, x, sizeof x);
    ik->maxpool_forward(y, xb, 1, 5, 5, 3, 2, 1);
    int bad = 0;
    for (int i = 0; i < 9; i++) bad += y[i] != want[i];
    CHECKF(bad == 0, "maxpool forward: %d of 9 outputs differ from the hand-worked ones", bad);
    for (int i = 0; i < 9; i++) dy[i] = (float)(i + 1);
    ik->maxpool_backward(dx, dy, xb, 1, 5, 5, 3, 2, 1);
    /* first maximum wins: (0,0) and (0,1) and (1,0) and (1,1) all pick x[1][1] (the first 9); (0,2)->x[0][4];
     * (1,2)->x[2][4]; (2,0)->x[3][0]; (2,1)->x[3][1]; (2,2)->x[3][3] */
    float wdx[25] = {0};
    wdx[6] = 1 + 2 + 4 + 5, wdx[4] = 3, wdx[14] = 6, wdx[15] = 7, wdx[16] = 8, wdx[18] = 9;
    bad = 0;
    for (int i = 0; i < 25; i++) bad += dx[i] != wdx[i];
    CHECKF(bad == 0, "maxpool backward: %d of 25 input gradients differ from the hand-worked ones", bad);
    float *all[] = {xb, y, dy, dx};
    for (size_t i = 0; i < 4; i++) be->free(all[i]);
}

static void check_relu_avgpool(void) {
    const int C = 3, N = 2, HW = 5;
    size_t n = (size_t)C * N * HW;
    float *x = buf(n), *y = buf(n), *d = buf(n), *p = buf(C * N), *dp = buf(C * N), *dx = buf(n);
    fill(x, n, -1, 1), fill(d, n, -1, 1), fill(dp, C * N, -1, 1);
    float d0[30];
    memcpy(d0, d, sizeof d0);
    ik->relu_forward(y, x, n);
    ik->relu_backward(d, y, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += y[i] != (x[i] > 0 ? x[i] : 0) || d[i] != (x[i] > 0 ? d0[i] : 0);
    CHECKF(bad == 0, "relu: %d elements wrong", bad);
    ik->avgpool_forward(p, x, C, N, HW);
    ik->avgpool_backward(dx, dp, C, N, HW);
    bad = 0;
    for (int c = 0; c < C; c++)
        for (int b = 0; b < N; b++) {
            double s = 0, a = 0;
            for (int i = 0; i < HW; i++) s += x[(c * N + b) * HW + i], a += fabs(x[(c * N + b) * HW + i]);
            bad += fabs(p[b * C + c] - s / HW) > (HW + 2) * U * a / HW; /* output row-major [N, C] */
            for (int i = 0; i < HW; i++) bad += fabs(dx[(c * N + b) * HW + i] - dp[b * C + c] / HW) > U * fabs(dp[b * C + c]);
        }
    CHECKF(bad == 0, "avgpool: %d elements wrong", bad);
    float *all[] = {x, y, d, p, dp, dx};
    for (size_t i = 0; i < 6; i++) be->free(all[i]);
}

/* ------------------------------------------------------------------ loss, optimizer */

static double ce_ref(const double *z, int K, int y, double eps) {
    double mx = z[0], s = 0, l = 0;
    for (int k = 1; k < K; k++) mx = fmax(mx, z[k]);
    for (int k = 0; k < K; k++) s += exp(z[k] - mx);
    double lse = mx + log(s);
    for (int k = 0; k < K; k++) l += (k == y ? 1 - eps + eps / K : eps / K) * (lse - z[k]);
    return l;
}

static void check_cross_entropy(void) {
    const int N = 4, K = 7;
    const float eps = 0.1f, scale = 0.25f;
    float *z = buf(N * K);
    int32_t lab[4] = {0, 6, 3, 3};
    fill(z, N * K, -4, 4);
    double zd[28];
    for (int i = 0; i < N * K; i++) zd[i] = z[i];
    double loss = ik->cross_entropy_smooth(z, lab, N, K, eps, scale), ref = 0;
    int bad = 0;
    for (int n = 0; n < N; n++) {
        ref += ce_ref(zd + n * K, K, lab[n], eps);
        for (int k = 0; k < K; k++) { /* gradient of the mean loss = scale x d(row loss): central differences */
            double h = 1e-5, keep = zd[n * K + k];
            zd[n * K + k] = keep + h;
            double lp = ce_ref(zd + n * K, K, lab[n], eps);
            zd[n * K + k] = keep - h;
            double lm = ce_ref(zd + n * K, K, lab[n], eps);
            zd[n * K + k] = keep;
            bad += fabs(z[n * K + k] - scale * (lp - lm) / (2 * h)) > 1e-6;
        }
    }
    CHECK_NEAR(loss, ref, 1e-12 * N * K * 8);
    CHECKF(bad == 0, "label-smoothed cross-entropy gradient: %d of %d off", bad, N * K);
    be->free(z);
}

static void check_sgd(void) {
    /* two steps of torch.optim.SGD(lr 0.1, momentum 0.9, dampening d, weight_decay 0.01, nesterov n), by hand */
    for (int nesterov = 0; nesterov <= 1; nesterov++) {
        double damp = nesterov ? 0.0 : 0.3;
        float *p = buf(2), *g = buf(2), *b = buf(2);
        p[0] = 1.0f, p[1] = -2.0f;
        double pr[2] = {1.0, -2.0}, br[2] = {0, 0}, gs[2][2] = {{0.5, -0.25}, {0.125, 1.0}};
        for (int t = 0; t < 2; t++) {
            g[0] = (float)gs[t][0], g[1] = (float)gs[t][1];
            ik->sgd(p, g, b, 2, 0.1, 0.9, damp, 0.01, nesterov, t == 0);
            for (int i = 0; i < 2; i++) {
                double d = gs[t][i] + 0.01 * pr[i];
                br[i] = t == 0 ? d : 0.9 * br[i] + (1 - damp) * d;
                pr[i] -= 0.1 * (nesterov ? d + 0.9 * br[i] : br[i]);
            }
        }
        for (int i = 0; i < 2; i++) CHECK_NEAR(p[i], pr[i], 16 * U * 2);
        be->free(p), be->free(g), be->free(b);
    }
}

int main(void) {
    be = tn_backend_cpu();
    ik = be->image;
    CHECK(ik != NULL);
    if (!ik) return tl_done("test_unit_image_kernels");
    tn_rng_seed(&rng, 30);
    const conv_impl impls[] = {
        {"backend (oneDNN; im2col where taps are dead)", ik->conv2d_forward, ik->conv2d_backward, tn_conv_scratch_floats, 1},
        {"im2col + GEMM", tn_cpu_conv2d_gemm_forward, tn_cpu_conv2d_gemm_backward, tn_cpu_conv_gemm_scratch_floats, 0}};
    for (int k = 0; k < 2; k++) {
        impl = &impls[k];
        check_conv(3, 2, 11, 9, 4, 7, 2, 3); /* ResNet's stem shape, scaled */
        check_conv(3, 3, 7, 6, 5, 3, 2, 1);
        check_conv(2, 4, 5, 5, 3, 3, 1, 1);
        check_conv(3, 4, 5, 7, 6, 1, 2, 0); /* downsample */
        check_conv(2, 5, 3, 4, 3, 1, 1, 0); /* pointwise: no columns */
        check_conv(3, 4, 1, 1, 5, 3, 1, 1); /* 1x1 map, 3x3 pad 1: only the centre tap is live */
        check_conv(2, 3, 2, 2, 4, 3, 2, 1); /* 2x2 map, 3x3/2 pad 1: 4 live taps */
        check_conv(2, 3, 2, 3, 2, 5, 1, 2); /* 2x3 map, 5x5 pad 2: partly dead rows and columns */
        check_conv(4, 32, 8, 8, 32, 3, 1, 1);  /* channels enough for oneDNN's blocked (16-channel) kernels */
        check_conv(3, 16, 9, 8, 32, 3, 2, 1);  /* a stage's first convolution, odd map */
        check_conv(3, 16, 9, 8, 32, 1, 2, 0);  /* and its downsample */
    }
    tn_conv_shape bad = {.N = 1, .C = 1, .H = 2, .W = 2, .OC = 1, .KH = 5, .KW = 5, .stride = 1, .pad = 1};
    CHECK(tn_conv_shape_finish(&bad) == -1);
    check_batchnorm();
    check_batchnorm_sync();
    check_maxpool();
    check_relu_avgpool();
    check_cross_entropy();
    check_sgd();
    return tl_done("test_unit_image_kernels");
}
