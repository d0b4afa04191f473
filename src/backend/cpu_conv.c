/* cpu_conv -- 2-D convolution on the CPU backend as im2col + one OpenBLAS GEMM over the whole batch (layout and
 * contract: image_kernels.h). Why not oneDNN: docs/image_classification.md (measured on CIFAR-sized ResNet-18
 * layers). The column matrix col [C*KH*KW, N*OH*OW] holds, in row (c, i, j), input channel c shifted by kernel tap
 * (i, j) at every output position, so
 *   forward   y  [OC, NP]  = w [OC, CKK] col [CKK, NP]
 *   weights   dw [OC, CKK] += dy [OC, NP] col^T
 *   input     dcol [CKK, NP] = w^T dy, scattered back (col2im, adding the taps that share an input). */
#include "backend/cpu_kernels.h"
#include "backend/image_kernels.h"

#include <string.h>

int tn_conv_shape_finish(tn_conv_shape *s) {
    if (s->N <= 0 || s->C <= 0 || s->OC <= 0 || s->KH <= 0 || s->KW <= 0 || s->stride <= 0 || s->pad < 0) return -1;
    int h = s->H + 2 * s->pad - s->KH, w = s->W + 2 * s->pad - s->KW;
    if (h < 0 || w < 0) return -1;
    s->OH = h / s->stride + 1;
    s->OW = w / s->stride + 1;
    return 0;
}

static int is_pointwise(const tn_conv_shape *s) { return s->KH == 1 && s->KW == 1 && s->stride == 1 && s->pad == 0; }

size_t tn_conv_scratch_floats(const tn_conv_shape *s) {
    if (is_pointwise(s)) return 0;
    return (size_t)s->C * s->KH * s->KW * s->N * s->OH * s->OW;
}

/* col row (c, i, j), image n: col[oh, ow] = x[c, n, oh*stride - pad + i, ow*stride - pad + j] (0 outside) */
static void im2col(float *col, const float *x, const tn_conv_shape *s) {
    const int K2 = s->KH * s->KW, rows = s->C * K2, OHW = s->OH * s->OW;
#pragma omp parallel for collapse(2) schedule(static)
    for (int r = 0; r < rows; r++)
        for (int n = 0; n < s->N; n++) {
            int c = r / K2, i = r % K2 / s->KW, j = r % s->KW;
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
static void col2im_add(float *dx, const float *dcol, const tn_conv_shape *s) {
    const int K2 = s->KH * s->KW, OHW = s->OH * s->OW;
#pragma omp parallel for collapse(2) schedule(static)
    for (int c = 0; c < s->C; c++)
        for (int n = 0; n < s->N; n++) {
            float *xp = dx + ((size_t)c * s->N + n) * s->H * s->W;
            for (int t = 0; t < K2; t++) {
                int i = t / s->KW, j = t % s->KW;
                const float *cp = dcol + ((size_t)c * K2 + t) * s->N * OHW + (size_t)n * OHW;
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

void tn_cpu_conv2d_forward(float *y, const float *x, const float *w, const tn_conv_shape *s, float *scratch) {
    const int CKK = s->C * s->KH * s->KW, NP = s->N * s->OH * s->OW;
    const float *col = x;
    if (!is_pointwise(s)) {
        im2col(scratch, x, s);
        col = scratch;
    }
    tn_cpu_matmul(0, 0, s->OC, NP, CKK, 1.0f, w, CKK, col, NP, 0.0f, y, NP);
}

void tn_cpu_conv2d_backward(float *dx, int accumulate_dx, float *dw, const float *dy, const float *x, const float *w,
                            const tn_conv_shape *s, float *scratch) {
    const int CKK = s->C * s->KH * s->KW, NP = s->N * s->OH * s->OW;
    if (is_pointwise(s)) { /* the columns are x itself, and dcol is dx */
        if (dw) tn_cpu_matmul(0, 1, s->OC, CKK, NP, 1.0f, dy, NP, x, NP, 1.0f, dw, CKK);
        if (dx) tn_cpu_matmul(1, 0, CKK, NP, s->OC, 1.0f, w, CKK, dy, NP, accumulate_dx ? 1.0f : 0.0f, dx, NP);
        return;
    }
    if (dw) {
        im2col(scratch, x, s);
        tn_cpu_matmul(0, 1, s->OC, CKK, NP, 1.0f, dy, NP, scratch, NP, 1.0f, dw, CKK);
    }
    if (dx) {
        tn_cpu_matmul(1, 0, CKK, NP, s->OC, 1.0f, w, CKK, dy, NP, 0.0f, scratch, NP);
        if (!accumulate_dx) memset(dx, 0, (size_t)s->C * s->N * s->H * s->W * sizeof *dx);
        col2im_add(dx, scratch, s);
    }
}
