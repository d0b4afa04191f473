/* cpu_conv -- convolution shapes (tn_conv_shape_finish), and 2-D convolution as im2col + one OpenBLAS GEMM over the
 * whole batch (layout and contract: image_kernels.h): the backend runs oneDNN's (cpu_conv_dnnl.c, 2.8-5.5x faster
 * per layer); this one stays as the independent second implementation test_unit_image_kernels holds to the same
 * bounds and bench_conv measures against. The column matrix col [C*KH*KW, N*OH*OW] holds, in row (c, i, j), input channel c shifted by kernel tap
 * (i, j) at every output position, so
 *   forward   y  [OC, NP]  = w [OC, CKK] col [CKK, NP]
 *   weights   dw [OC, CKK] += dy [OC, NP] col^T
 *   input     dcol [CKK, NP] = w^T dy, scattered back (col2im, adding the taps that share an input).
 * Taps that only ever read padding (a 3x3 pad 1 convolution of a 1x1 map, as ResNet-18's last stage on CIFAR input:
 * 8 of 9 taps) are left out of the columns and of a gathered copy of the weights: their products are all zero, so the
 * result is the same sums without the zero terms, at a fraction of the work. */
#include "backend/cpu_kernels.h"
#include "backend/image_kernels.h"

#include <string.h>

int tn_conv_shape_finish(tn_conv_shape *s) {
    if (s->N <= 0 || s->C <= 0 || s->OC <= 0 || s->KH <= 0 || s->KW <= 0 || s->stride <= 0 || s->pad < 0) return -1;
    if (s->KH * s->KW > TN_CONV_MAX_TAPS) return -1;
    int h = s->H + 2 * s->pad - s->KH, w = s->W + 2 * s->pad - s->KW;
    if (h < 0 || w < 0) return -1;
    s->OH = h / s->stride + 1;
    s->OW = w / s->stride + 1;
    return 0;
}

static int is_pointwise(const tn_conv_shape *s) { return s->KH == 1 && s->KW == 1 && s->stride == 1 && s->pad == 0; }

size_t tn_cpu_conv_gemm_scratch_floats(const tn_conv_shape *s) {
    if (is_pointwise(s)) return 0; /* columns, then the gathered weights of the live taps */
    return (size_t)s->C * s->KH * s->KW * ((size_t)s->N * s->OH * s->OW + 2 * (size_t)s->OC);
}

/* taps (i * KW + j) that read at least one input pixel for some output position, in order; returns their count */
static int live_taps(const tn_conv_shape *s, int *taps) {
    int n = 0;
    for (int i = 0; i < s->KH; i++)
        for (int j = 0; j < s->KW; j++) {
            int hi = 0, wj = 0;
            for (int oh = 0; oh < s->OH && !hi; oh++) hi = (unsigned)(oh * s->stride - s->pad + i) < (unsigned)s->H;
            for (int ow = 0; ow < s->OW && !wj; ow++) wj = (unsigned)(ow * s->stride - s->pad + j) < (unsigned)s->W;
            if (hi && wj) taps[n++] = i * s->KW + j;
        }
    return n;
}

int tn_cpu_conv_has_dead_taps(const tn_conv_shape *s) {
    int taps[TN_CONV_MAX_TAPS];
    return live_taps(s, taps) < s->KH * s->KW;
}

/* wg [OC, C*nt] = the live taps' columns of w [OC, C, KH*KW] */
static void gather_weights(float *wg, const float *w, const tn_conv_shape *s, const int *taps, int nt) {
    const int K2 = s->KH * s->KW;
    for (int o = 0; o < s->OC; o++)
        for (int c = 0; c < s->C; c++)
            for (int t = 0; t < nt; t++) wg[((size_t)o * s->C + c) * nt + t] = w[((size_t)o * s->C + c) * K2 + taps[t]];
}

/* col row (c, t) for live tap t = (i, j), image n: col[oh, ow] = x[c, n, oh*stride - pad + i, ow*stride - pad + j]
 * (0 outside) */
static void im2col(float *col, const float *x, const tn_conv_shape *s, const int *taps, int nt) {
    const int rows = s->C * nt, OHW = s->OH * s->OW;
#pragma omp parallel for collapse(2) schedule(static)
    for (int r = 0; r < rows; r++)
        for (int n = 0; n < s->N; n++) {
            int c = r / nt, i = taps[r % nt] / s->KW, j = taps[r % nt] % s->KW;
            const float *xp = x + ((size_t)c * s->N + n) * s->H * s->W;
            float *cp = col + (size_t)r * s->N * OHW + (size_t)n * OHW;
            for (int oh = 0; oh < s->OH; oh++) {
                int h = oh * s->stride - s->pad + i;
                float *row = cp + (size_t)oh * s->OW;
                if (h < 0 || h >= s->H) {
                    memset(row, 0, (size_t)s->OW * sizeof *row);
                    continue;
                }
                const float *xr = xp + (size_t)h * s->W;
                for (int ow = 0; ow < s->OW; ow++) {
                    int w = ow * s->stride - s->pad + j;
                    row[ow] = (w >= 0 && w < s->W) ? xr[w] : 0.0f;
                }
            }
        }
}

/* dx[c, n] += sum over taps (i, j) of dcol row (c, i, j) at the positions that read it; one (c, n) plane per
 * iteration, so no two threads write the same element */
static void col2im_add(float *dx, const float *dcol, const tn_conv_shape *s, const int *taps, int nt) {
    const int OHW = s->OH * s->OW;
#pragma omp parallel for collapse(2) schedule(static)
    for (int c = 0; c < s->C; c++)
        for (int n = 0; n < s->N; n++) {
            float *xp = dx + ((size_t)c * s->N + n) * s->H * s->W;
            for (int t = 0; t < nt; t++) {
                int i = taps[t] / s->KW, j = taps[t] % s->KW;
                const float *cp = dcol + ((size_t)c * nt + t) * s->N * OHW + (size_t)n * OHW;
                for (int oh = 0; oh < s->OH; oh++) {
                    int h = oh * s->stride - s->pad + i;
                    if (h < 0 || h >= s->H) continue;
                    const float *row = cp + (size_t)oh * s->OW;
                    float *xr = xp + (size_t)h * s->W;
                    for (int ow = 0; ow < s->OW; ow++) {
                        int w = ow * s->stride - s->pad + j;
                        if (w >= 0 && w < s->W) xr[w] += row[ow];
                    }
                }
            }
        }
}

/* the live taps of s; the weights gathered into wg when some tap is dead (else w itself) */
typedef struct {
    int taps[TN_CONV_MAX_TAPS], nt;
    const float *w;
} live;

static void find_live(live *L, const tn_conv_shape *s, const float *w, float *wg) {
    int K2 = s->KH * s->KW;
    L->nt = live_taps(s, L->taps), L->w = w;
    if (L->nt < K2) {
        gather_weights(wg, w, s, L->taps, L->nt);
        L->w = wg;
    }
}

void tn_cpu_conv2d_gemm_forward(float *y, const float *x, const float *w, const tn_conv_shape *s, float *scratch) {
    const int NP = s->N * s->OH * s->OW;
    if (is_pointwise(s)) {
        tn_cpu_matmul(0, 0, s->OC, NP, s->C, 1.0f, w, s->C, x, NP, 0.0f, y, NP);
        return;
    }
    live L;
    float *col = scratch, *wg = scratch + (size_t)s->C * s->KH * s->KW * NP;
    find_live(&L, s, w, wg);
    const int CK = s->C * L.nt;
    im2col(col, x, s, L.taps, L.nt);
    tn_cpu_matmul(0, 0, s->OC, NP, CK, 1.0f, L.w, CK, col, NP, 0.0f, y, NP);
}

void tn_cpu_conv2d_gemm_backward(float *dx, int accumulate_dx, float *dw, const float *dy, const float *x, const float *w,
                            const tn_conv_shape *s, float *scratch) {
    const int NP = s->N * s->OH * s->OW, K2 = s->KH * s->KW;
    if (is_pointwise(s)) { /* the columns are x itself, and dcol is dx */
        if (dw) tn_cpu_matmul(0, 1, s->OC, s->C, NP, 1.0f, dy, NP, x, NP, 1.0f, dw, s->C);
        if (dx) tn_cpu_matmul(1, 0, s->C, NP, s->OC, 1.0f, w, s->C, dy, NP, accumulate_dx ? 1.0f : 0.0f, dx, NP);
        return;
    }
    live L;
    float *col = scratch, *wg = scratch + (size_t)s->C * K2 * NP;
    find_live(&L, s, w, wg);
    const int CK = s->C * L.nt;
    if (dw) {
        im2col(col, x, s, L.taps, L.nt);
        if (L.nt == K2) {
            tn_cpu_matmul(0, 1, s->OC, CK, NP, 1.0f, dy, NP, col, NP, 1.0f, dw, CK);
        } else { /* the live taps' gradient into wg's place, then added into theirs in dw (dead taps get 0) */
            float *dwg = wg + (size_t)s->OC * CK;
            tn_cpu_matmul(0, 1, s->OC, CK, NP, 1.0f, dy, NP, col, NP, 0.0f, dwg, CK);
            for (int o = 0; o < s->OC; o++)
                for (int c = 0; c < s->C; c++)
                    for (int t = 0; t < L.nt; t++)
                        dw[((size_t)o * s->C + c) * K2 + L.taps[t]] += dwg[((size_t)o * s->C + c) * L.nt + t];
        }
    }
    if (dx) {
        tn_cpu_matmul(1, 0, CK, NP, s->OC, 1.0f, L.w, CK, dy, NP, 0.0f, col, NP);
        if (!accumulate_dx) memset(dx, 0, (size_t)s->C * s->N * s->H * s->W * sizeof *dx);
        col2im_add(dx, col, s, L.taps, L.nt);
    }
}
