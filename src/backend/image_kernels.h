/* image_kernels -- the kernels an image classifier (model/resnet.c) needs, as one table a backend points to
 * (backend.h `image`; NULL in a backend without them: the model refuses there in one line).
 *
 * Layout: activations are channel-major [C, N, H, W] ("CNHW"): a convolution is then one GEMM over the whole
 * batch (weights [OC, C*KH*KW] times columns [C*KH*KW, N*OH*OW] gives [OC, N*OH*OW], already the next layer's
 * layout), and batch normalisation reduces over contiguous rows of N*H*W. Weights keep torch's layouts
 * (conv [OC, C, KH, KW], linear [out, in]). As everywhere in backend.h, pointers are backend memory, parameter
 * gradients are ACCUMULATED (+=) and input gradients written unless documented otherwise. */
#ifndef TN_IMAGE_KERNELS_H
#define TN_IMAGE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int N, C, H, W;         /* input [C, N, H, W] */
    int OC, KH, KW, stride, pad;
    int OH, OW;             /* output [OC, N, OH, OW]: (H + 2 pad - KH) / stride + 1 */
} tn_conv_shape;

#define TN_CONV_MAX_TAPS 256 /* KH x KW */
/* Fills OH, OW; -1 when the kernel does not fit the padded input (or has more than TN_CONV_MAX_TAPS taps). */
int tn_conv_shape_finish(tn_conv_shape *s);
/* Floats of scratch a convolution of shape s needs (its column matrix and two copies of the weights; 0 for a 1x1,
 * stride 1, pad 0 one). */
size_t tn_conv_scratch_floats(const tn_conv_shape *s);

/* SyncBatchNorm across data-parallel ranks: sum(ctx, buf, n) replaces buf[0..n) by its sum over the ranks (host
 * memory; a failure is the caller's to record in ctx and report after the step). */
typedef struct {
    void (*sum)(void *ctx, double *buf, int n);
    void *ctx;
} tn_bn_sync;

typedef struct tn_image_kernels {
    /* y [OC, N*OH*OW] = conv(x, w) (no bias, as torchvision's convolutions); scratch: tn_conv_scratch_floats */
    void (*conv2d_forward)(float *y, const float *x, const float *w, const tn_conv_shape *s, float *scratch);
    /* dw += dL/dw (if dw); dx (if dx) = dL/dx, or += when accumulate_dx. scratch as forward. */
    void (*conv2d_backward)(float *dx, int accumulate_dx, float *dw, const float *dy, const float *x, const float *w,
                            const tn_conv_shape *s, float *scratch);

    /* Batch normalisation of x [C, M] (M = N*H*W values per channel), train mode as torch: the batch mean and
     * biased variance normalise (mean[c], rstd[c] = 1/sqrt(var + eps) saved for backward); the running estimates
     * become (1 - momentum) run + momentum batch, with the unbiased variance (var * M / (M - 1)). */
    void (*batchnorm_train)(float *y, float *mean, float *rstd, float *run_mean, float *run_var, const float *x,
                            const float *gamma, const float *beta, int C, int M, float eps, float momentum);
    /* eval mode: normalised by the running estimates */
    void (*batchnorm_eval)(float *y, const float *x, const float *run_mean, const float *run_var,
                           const float *gamma, const float *beta, int C, int M, float eps);
    /* dx written (may be dy itself); dgamma, dbeta += */
    void (*batchnorm_backward)(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                               const float *mean, const float *rstd, const float *gamma, int C, int M);

    /* SyncBatchNorm (torch.nn.SyncBatchNorm): as batchnorm_train and batchnorm_backward with the per-channel sums
     * (count, sum x, sum x^2; sum dy, sum dy xhat) summed over the ranks by sync before use, mean and variance from
     * the double sums; dgamma, dbeta += this rank's own sums (the gradient all-reduce adds the ranks' up). */
    void (*batchnorm_train_sync)(float *y, float *mean, float *rstd, float *run_mean, float *run_var, const float *x,
                                 const float *gamma, const float *beta, int C, int M, float eps, float momentum,
                                 const tn_bn_sync *sync);
    void (*batchnorm_backward_sync)(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                                    const float *mean, const float *rstd, const float *gamma, int C, int M,
                                    const tn_bn_sync *sync);

    void (*relu_forward)(float *y, const float *x, size_t n);       /* y may be x */
    void (*relu_backward)(float *d, const float *y, size_t n);      /* d *= (y > 0), y the ReLU's output */

    /* max-pool over each of P = C*N planes [H, W], window k, stride, pad (padding never wins, as torch) */
    void (*maxpool_forward)(float *y, const float *x, int P, int H, int W, int k, int stride, int pad);
    /* dx written: each output's gradient goes to the first maximum of its window (torch's choice) */
    void (*maxpool_backward)(float *dx, const float *dy, const float *x, int P, int H, int W, int k, int stride,
                             int pad);
    /* y [N, C] = mean over HW of x [C, N, HW] (the classifier's row-major input) */
    void (*avgpool_forward)(float *y, const float *x, int C, int N, int HW);
    void (*avgpool_backward)(float *dx, const float *dy, int C, int N, int HW);

    /* Cross-entropy of logits [N, K] against labels with label smoothing eps (torch: the target is
     * (1 - eps) one-hot + eps / K). Returns the summed loss; logits become dlogits x grad_scale. */
    double (*cross_entropy_smooth)(float *logits, const int32_t *labels, int N, int K, float smoothing,
                                   float grad_scale);
    /* Predicted class (first maximum) of each row of logits [N, K], into host memory. */
    void (*argmax_rows)(int32_t *out, const float *logits, int N, int K);
    /* torch.optim.SGD: g += wd p; buf = first ? g : momentum buf + (1 - dampening) g; step = nesterov ?
     * g + momentum buf : buf (momentum 0: g); p -= lr step. g is not modified. */
    void (*sgd)(float *p, const float *g, float *buf, size_t n, double lr, double momentum, double dampening,
                double weight_decay, int nesterov, int first);
} tn_image_kernels;

#endif
