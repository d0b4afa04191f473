/* resnet_internal -- the ResNet's layout shared by resnet.c (parameters, files) and resnet_forward.c (passes). */
#ifndef TN_RESNET_INTERNAL_H
#define TN_RESNET_INTERNAL_H

#include "backend/image_kernels.h"
#include "model/resnet.h"

typedef struct {
    tn_conv_shape s;       /* N, H, W set per batch */
    size_t w;              /* weight offset in params / grad */
} rn_conv;

typedef struct {
    int C;
    size_t g, b;           /* weight, bias offsets in params / grad */
    size_t rm, rv;         /* running_mean, running_var offsets in buffers */
    int idx;               /* which saved-statistics row (mean, rstd) it uses */
} rn_bn;

typedef struct {           /* activations of one BasicBlock, [C, N, H, W] each */
    float *c1, *b1, *c2, *out, *dsc, *dsb;
} rn_block_acts;

typedef struct {
    rn_conv c1, c2, ds;
    rn_bn b1, b2, dsb;
    int has_ds;
} rn_block;

struct tn_resnet {
    tn_resnet_config cfg;
    const tn_backend *be;
    const tn_image_kernels *ik;
    int n_tensors;
    tn_resnet_tensor *t;
    size_t n_params, n_buffers;
    float *params, *grad, *buffers;
    rn_conv stem;
    rn_bn bn1;
    int n_blocks, n_bn;
    rn_block *blocks;
    size_t fc_w, fc_b;
    int feat;                        /* channels into fc */
    int64_t batches_tracked;         /* num_batches_tracked (train-mode forwards) */
    const tn_bn_sync *sync_bn;       /* SyncBatchNorm across ranks; NULL: per-rank statistics (DDP's default) */
    void (*grad_ready)(void *ctx, size_t from); /* tn_resnet_set_grad_ready */
    void *grad_ready_ctx;
    /* workspace (tn_resnet_reserve) */
    int cap_B, cap_H, cap_W;
    float *x, *c0, *b0, *p0;         /* input, stem conv, stem BN (ReLU'd), max-pool */
    rn_block_acts *acts;
    float *feat_buf, *logits;        /* [N, feat], [N, classes] */
    float *mean, *rstd;              /* [n_bn, max C] saved statistics */
    float *g[4];                     /* gradient buffers of the largest activation */
    float *scratch;                  /* convolution columns */
    float *host_x;                   /* CNHW staging of the images */
    int32_t *labels;                 /* [N] backend copy of the labels */
    size_t max_act, max_scratch;
};

/* frees the activation workspace (resnet_forward.c) */
void tn_resnet_free_workspace(tn_resnet *m);
/* sets every conv's N, H, W (and OH, OW) for a batch of N images of H x W; -1 when the image is too small */
int tn_resnet_shapes(tn_resnet *m, int N, int H, int W);

#endif
