/* cpu_image -- the CPU backend's image-classifier kernels other than convolution (cpu_conv.c): batch
 * normalisation, ReLU, max and average pooling, label-smoothed cross-entropy, SGD, and the kernel table
 * (contract: image_kernels.h). Per-channel sums are accumulated in double: a channel holds N*H*W values
 * (65536 for ResNet-18's stem at batch 64), too many for an fp32 running sum to stay at fp32 accuracy. */
#include "backend/cpu_kernels.h"
#include "backend/image_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static void bn_train(float *y, float *mean, float *rstd, float *run_mean, float *run_var, const float *x,
                     const float *gamma, const float *beta, int C, int M, float eps, float momentum) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int c = 0; c < C; c++) {
        const float *xc = x + (size_t)c * M;
        double s = 0.0, ss = 0.0;
        for (int i = 0; i < M; i++) s += xc[i];
        double mu = s / M;
        for (int i = 0; i < M; i++) ss += ((double)xc[i] - mu) * ((double)xc[i] - mu);
        double var = ss / M; /* biased: what normalises */
        float r = (float)(1.0 / sqrt(var + eps)), m = (float)mu;
        mean[c] = m, rstd[c] = r;
        float a = gamma[c] * r, b = beta[c] - m * a;
        float *yc = y + (size_t)c * M;
        for (int i = 0; i < M; i++) yc[i] = xc[i] * a + b;
        float unbiased = M > 1 ? (float)(ss / (M - 1)) : (float)var;
        run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * m;
        run_var[c] = (1.0f - momentum) * run_var[c] + momentum * unbiased;
    }
}

static void bn_eval(float *y, const float *x, const float *run_mean, const float *run_var, const float *gamma,
                    const float *beta, int C, int M, float eps) {
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        float a = gamma[c] / sqrtf(run_var[c] + eps), b = beta[c] - run_mean[c] * a;
        const float *xc = x + (size_t)c * M;
        float *yc = y + (size_t)c * M;
        for (int i = 0; i < M; i++) yc[i] = xc[i] * a + b;
    }
}

/* dx = gamma rstd (dy - mean(dy) - xhat mean(dy xhat)), xhat = (x - mean) rstd */
static void bn_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x, const float *mean,
                        const float *rstd, const float *gamma, int C, int M) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int c = 0; c < C; c++) {
        const float *xc = x + (size_t)c * M, *dyc = dy + (size_t)c * M;
        float m = mean[c], r = rstd[c];
        double sdy = 0.0, sdyx = 0.0;
        for (int i = 0; i < M; i++) {
            sdy += dyc[i];
            sdyx += (double)dyc[i] * ((xc[i] - m) * r);
        }
        dgamma[c] += (float)sdyx;
        dbeta[c] += (float)sdy;
        float k = gamma[c] * r, mdy = (float)(sdy / M), mdyx = (float)(sdyx / M);
        float *dxc = dx + (size_t)c * M;
        for (int i = 0; i < M; i++) dxc[i] = k * (dyc[i] - mdy - (xc[i] - m) * r * mdyx);
    }
}

static void bn_train_sync(float *y, float *mean, float *rstd, float *run_mean, float *run_var, const float *x,
                          const float *gamma, const float *beta, int C, int M, float eps, float momentum,
                          const tn_bn_sync *sync) {
    double *buf = tn_xcalloc((size_t)2 * C + 1, sizeof *buf); /* sum x [C], sum x^2 [C], count */
#pragma omp parallel for schedule(dynamic, 1)
    for (int c = 0; c < C; c++) {
        const float *xc = x + (size_t)c * M;
        double s = 0.0, ss = 0.0;
        for (int i = 0; i < M; i++) s += xc[i], ss += (double)xc[i] * xc[i];
        buf[c] = s, buf[C + c] = ss;
    }
    buf[2 * C] = M;
    sync->sum(sync->ctx, buf, 2 * C + 1);
    double n = buf[2 * C];
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        double mu = buf[c] / n, var = fmax(buf[C + c] / n - mu * mu, 0.0);
        float r = (float)(1.0 / sqrt(var + eps)), m = (float)mu, a = gamma[c] * r, b = beta[c] - m * a;
        mean[c] = m, rstd[c] = r;
        const float *xc = x + (size_t)c * M;
        float *yc = y + (size_t)c * M;
        for (int i = 0; i < M; i++) yc[i] = xc[i] * a + b;
        float unbiased = n > 1 ? (float)(var * n / (n - 1)) : (float)var;
        run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * m;
        run_var[c] = (1.0f - momentum) * run_var[c] + momentum * unbiased;
    }
    free(buf);
}

static void bn_backward_sync(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x, const float *mean,
                             const float *rstd, const float *gamma, int C, int M, const tn_bn_sync *sync) {
    double *buf = tn_xcalloc((size_t)2 * C + 1, sizeof *buf); /* sum dy [C], sum dy xhat [C], count */
#pragma omp parallel for schedule(dynamic, 1)
    for (int c = 0; c < C; c++) {
        const float *xc = x + (size_t)c * M, *dyc = dy + (size_t)c * M;
        float m = mean[c], r = rstd[c];
        double sdy = 0.0, sdyx = 0.0;
        for (int i = 0; i < M; i++) sdy += dyc[i], sdyx += (double)dyc[i] * ((xc[i] - m) * r);
        buf[c] = sdy, buf[C + c] = sdyx;
        dgamma[c] += (float)sdyx;
        dbeta[c] += (float)sdy;
    }
    buf[2 * C] = M;
    sync->sum(sync->ctx, buf, 2 * C + 1);
    double n = buf[2 * C];
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        const float *xc = x + (size_t)c * M, *dyc = dy + (size_t)c * M;
        float m = mean[c], r = rstd[c], k = gamma[c] * r, mdy = (float)(buf[c] / n), mdyx = (float)(buf[C + c] / n);
        float *dxc = dx + (size_t)c * M;
        for (int i = 0; i < M; i++) dxc[i] = k * (dyc[i] - mdy - (xc[i] - m) * r * mdyx);
    }
    free(buf);
}

static void relu_forward(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n > 32768)
    for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
static void relu_backward(float *d, const float *y, size_t n) {
#pragma omp parallel for schedule(static) if (n > 32768)
    for (size_t i = 0; i < n; i++) d[i] = y[i] > 0.0f ? d[i] : 0.0f;
}

/* index into the plane of output (oh, ow)'s first maximum (NaN wins, as torch); -1 when the window is all padding */
static int pool_argmax(const float *xp, int H, int W, int oh, int ow, int k, int stride, int pad) {
    int best = -1;
    float m = -INFINITY;
    for (int i = 0; i < k; i++) {
        int h = oh * stride - pad + i;
        if (h < 0 || h >= H) continue;
        for (int j = 0; j < k; j++) {
            int w = ow * stride - pad + j;
            if (w < 0 || w >= W) continue;
            float v = xp[h * W + w];
            if (best < 0 || v > m || isnan(v)) m = v, best = h * W + w;
            if (isnan(v)) return best;
        }
    }
    return best;
}

static void maxpool_forward(float *y, const float *x, int P, int H, int W, int k, int stride, int pad) {
    int OH = (H + 2 * pad - k) / stride + 1, OW = (W + 2 * pad - k) / stride + 1;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < P; p++) {
        const float *xp = x + (size_t)p * H * W;
        float *yp = y + (size_t)p * OH * OW;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                int a = pool_argmax(xp, H, W, oh, ow, k, stride, pad);
                yp[oh * OW + ow] = a < 0 ? -INFINITY : xp[a];
            }
    }
}

static void maxpool_backward(float *dx, const float *dy, const float *x, int P, int H, int W, int k, int stride,
                             int pad) {
    int OH = (H + 2 * pad - k) / stride + 1, OW = (W + 2 * pad - k) / stride + 1;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < P; p++) {
        const float *xp = x + (size_t)p * H * W, *dyp = dy + (size_t)p * OH * OW;
        float *dxp = dx + (size_t)p * H * W;
        memset(dxp, 0, (size_t)H * W * sizeof *dxp);
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                int a = pool_argmax(xp, H, W, oh, ow, k, stride, pad);
                if (a >= 0) dxp[a] += dyp[oh * OW + ow];
            }
    }
}

static void avgpool_forward(float *y, const float *x, int C, int N, int HW) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int c = 0; c < C; c++)
        for (int n = 0; n < N; n++) {
            const float *xp = x + ((size_t)c * N + n) * HW;
            float s = 0.0f;
            for (int i = 0; i < HW; i++) s += xp[i];
            y[(size_t)n * C + c] = s / HW;
        }
}
static void avgpool_backward(float *dx, const float *dy, int C, int N, int HW) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int c = 0; c < C; c++)
        for (int n = 0; n < N; n++) {
            float g = dy[(size_t)n * C + c] / HW, *xp = dx + ((size_t)c * N + n) * HW;
            for (int i = 0; i < HW; i++) xp[i] = g;
        }
}

/* loss = (1 - eps) (lse - z_y) + eps/K sum_k (lse - z_k); dz = softmax - (1 - eps) onehot - eps/K */
static double ce_smooth(float *logits, const int32_t *labels, int N, int K, float eps, float grad_scale) {
    double loss = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : loss)
    for (int n = 0; n < N; n++) {
        float *z = logits + (size_t)n * K;
        float mx = z[0];
        for (int k = 1; k < K; k++) mx = z[k] > mx ? z[k] : mx;
        double sum = 0.0, zsum = 0.0;
        for (int k = 0; k < K; k++) sum += exp((double)z[k] - mx), zsum += (double)z[k] - mx;
        double lse = log(sum); /* of the shifted logits */
        int y = labels[n];
        loss += (1.0 - eps) * (lse - ((double)z[y] - mx)) + eps * (lse - zsum / K);
        for (int k = 0; k < K; k++)
            z[k] = (float)((exp((double)z[k] - mx) / sum - eps / K - (k == y ? 1.0 - eps : 0.0)) * grad_scale);
    }
    return loss;
}

static void argmax_rows(int32_t *out, const float *logits, int N, int K) {
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * K;
        int best = 0;
        for (int k = 1; k < K; k++)
            if (z[k] > z[best]) best = k;
        out[n] = best;
    }
}

static void sgd(float *p, const float *g, float *buf, size_t n, double lr, double momentum, double dampening,
                double weight_decay, int nesterov, int first) {
    const float lrf = (float)lr, mom = (float)momentum, keep = (float)(1.0 - dampening), wd = (float)weight_decay;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (size_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        if (mom != 0.0f) {
            buf[i] = first ? d : mom * buf[i] + keep * d;
            d = nesterov ? d + mom * buf[i] : buf[i];
        }
        p[i] -= lrf * d;
    }
}

const tn_image_kernels tn_cpu_image_table = {
    .conv2d_forward = tn_cpu_conv2d_forward,
    .conv2d_backward = tn_cpu_conv2d_backward,
    .batchnorm_train = bn_train,
    .batchnorm_eval = bn_eval,
    .batchnorm_backward = bn_backward,
    .batchnorm_train_sync = bn_train_sync,
    .batchnorm_backward_sync = bn_backward_sync,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .maxpool_forward = maxpool_forward,
    .maxpool_backward = maxpool_backward,
    .avgpool_forward = avgpool_forward,
    .avgpool_backward = avgpool_backward,
    .cross_entropy_smooth = ce_smooth,
    .argmax_rows = argmax_rows,
    .sgd = sgd,
};
