/* resnet_forward -- the ResNet's forward and backward passes, layer by layer on the backend's image kernels
 * (contract: resnet.h). Activations are [C, N, H, W] (image_kernels.h); shapes in the comments omit N.
 * Each BasicBlock keeps what its backward reads: conv1's output c1 (BN input), b1 = ReLU(BN(c1)), c2, and
 * out = ReLU(BN(c2) + identity) (identity = BN(downsample conv(in)) where the shape changes). */
#include "model/resnet_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static size_t act_floats(const tn_conv_shape *s) { return (size_t)s->OC * s->N * s->OH * s->OW; }

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* every activation buffer sized for the batch the shapes were last set for */
static void alloc_workspace(tn_resnet *m) {
    const tn_backend *be = m->be;
    const tn_conv_shape *s = &m->stem.s;
    size_t stem = act_floats(s), pool = (size_t)s->OC * s->N * ((s->OH - 1) / 2 + 1) * ((s->OW - 1) / 2 + 1);
    m->max_act = max_sz(stem, (size_t)s->C * s->N * s->H * s->W);
    m->max_scratch = tn_conv_scratch_floats(s);
    m->x = be->alloc((size_t)s->C * s->N * s->H * s->W);
    m->c0 = be->alloc(stem), m->b0 = be->alloc(stem), m->p0 = be->alloc(pool);
    m->acts = tn_xcalloc((size_t)m->n_blocks, sizeof *m->acts);
    int maxC = m->cfg.base_width << 3;
    for (int i = 0; i < m->n_blocks; i++) {
        rn_block *b = &m->blocks[i];
        rn_block_acts *a = &m->acts[i];
        size_t n1 = act_floats(&b->c1.s), n2 = act_floats(&b->c2.s);
        a->c1 = be->alloc(n1), a->b1 = be->alloc(n1), a->c2 = be->alloc(n2), a->out = be->alloc(n2);
        if (b->has_ds) a->dsc = be->alloc(n2), a->dsb = be->alloc(n2);
        m->max_act = max_sz(m->max_act, max_sz(n1, n2));
        m->max_scratch = max_sz(m->max_scratch, max_sz(tn_conv_scratch_floats(&b->c1.s), tn_conv_scratch_floats(&b->c2.s)));
        if (b->has_ds) m->max_scratch = max_sz(m->max_scratch, tn_conv_scratch_floats(&b->ds.s));
    }
    m->feat_buf = be->alloc((size_t)s->N * m->feat);
    m->logits = be->alloc((size_t)s->N * m->cfg.num_classes);
    m->mean = be->alloc((size_t)m->n_bn * maxC), m->rstd = be->alloc((size_t)m->n_bn * maxC);
    for (int k = 0; k < 4; k++) m->g[k] = be->alloc(m->max_act);
    m->scratch = be->alloc(m->max_scratch ? m->max_scratch : 1);
    m->host_x = tn_xmalloc((size_t)s->C * s->N * s->H * s->W * sizeof *m->host_x);
    m->labels = be->alloc_i32((size_t)s->N);
}

void tn_resnet_free_workspace(tn_resnet *m) {
    const tn_backend *be = m->be;
    for (int i = 0; m->acts && i < m->n_blocks; i++) {
        rn_block_acts *a = &m->acts[i];
        float *p[] = {a->c1, a->b1, a->c2, a->out, a->dsc, a->dsb};
        for (int k = 0; k < 6; k++) be->free(p[k]);
    }
    float *p[] = {m->x, m->c0, m->b0, m->p0, m->feat_buf, m->logits, m->mean, m->rstd, m->g[0], m->g[1], m->g[2],
                  m->g[3], m->scratch};
    for (size_t k = 0; k < sizeof p / sizeof *p; k++) be->free(p[k]);
    be->free(m->labels);
    free(m->acts), free(m->host_x);
    m->acts = NULL, m->host_x = NULL;
}

int tn_resnet_reserve(tn_resnet *m, int B, int H, int W) {
    if (B <= m->cap_B && H == m->cap_H && W == m->cap_W) return 0;
    if (B < 1) return tn_err("a batch needs at least one image");
    if (tn_resnet_shapes(m, B, H, W)) return -1;
    if (m->acts) tn_resnet_free_workspace(m);
    alloc_workspace(m);
    m->cap_B = B, m->cap_H = H, m->cap_W = W;
    return 0;
}

/* images [N, C, H, W] (host) -> m->x [C, N, H, W] (backend) */
static void upload_images(tn_resnet *m, const float *images, int N) {
    if (N < 1 || N > m->cap_B) tn_die("resnet: a batch of %d images for a workspace of %d (tn_resnet_reserve)", N, m->cap_B);
    int C = m->cfg.in_channels;
    size_t hw = (size_t)m->cap_H * m->cap_W;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            memcpy(m->host_x + ((size_t)c * N + n) * hw, images + ((size_t)n * C + c) * hw, hw * sizeof(float));
    m->be->upload(m->x, m->host_x, (size_t)C * N * hw);
}

static void conv_fwd(tn_resnet *m, const rn_conv *c, float *y, const float *x) {
    m->ik->conv2d_forward(y, x, m->params + c->w, &c->s, m->scratch);
}

static void bn_fwd(tn_resnet *m, const rn_bn *b, float *y, const float *x, int M, int train) {
    const float *P = m->params;
    float *B = m->buffers;
    size_t row = (size_t)b->idx * (m->cfg.base_width << 3);
    if (train && m->sync_bn)
        m->ik->batchnorm_train_sync(y, m->mean + row, m->rstd + row, B + b->rm, B + b->rv, x, P + b->g, P + b->b, b->C,
                                    M, (float)m->cfg.bn_eps, (float)m->cfg.bn_momentum, m->sync_bn);
    else if (train)
        m->ik->batchnorm_train(y, m->mean + row, m->rstd + row, B + b->rm, B + b->rv, x, P + b->g, P + b->b, b->C, M,
                               (float)m->cfg.bn_eps, (float)m->cfg.bn_momentum);
    else
        m->ik->batchnorm_eval(y, x, B + b->rm, B + b->rv, P + b->g, P + b->b, b->C, M, (float)m->cfg.bn_eps);
}

static int spatial(const tn_conv_shape *s) { return s->N * s->OH * s->OW; } /* M of the BN after conv s */

/* the whole forward up to logits [N, classes] (m->logits) */
static void forward(tn_resnet *m, int N, int train) {
    const tn_image_kernels *ik = m->ik;
    tn_resnet_shapes(m, N, m->cap_H, m->cap_W);
    const tn_conv_shape *s = &m->stem.s;
    conv_fwd(m, &m->stem, m->c0, m->x);                        /* [w, H/2, W/2] */
    bn_fwd(m, &m->bn1, m->b0, m->c0, spatial(s), train);
    ik->relu_forward(m->b0, m->b0, act_floats(s));
    ik->maxpool_forward(m->p0, m->b0, s->OC * N, s->OH, s->OW, 3, 2, 1); /* [w, H/4, W/4] */
    const float *in = m->p0;
    for (int i = 0; i < m->n_blocks; i++) {
        const rn_block *b = &m->blocks[i];
        rn_block_acts *a = &m->acts[i];
        size_t n2 = act_floats(&b->c2.s);
        conv_fwd(m, &b->c1, a->c1, in);
        bn_fwd(m, &b->b1, a->b1, a->c1, spatial(&b->c1.s), train);
        ik->relu_forward(a->b1, a->b1, act_floats(&b->c1.s));
        conv_fwd(m, &b->c2, a->c2, a->b1);
        bn_fwd(m, &b->b2, a->out, a->c2, spatial(&b->c2.s), train);
        if (b->has_ds) {
            conv_fwd(m, &b->ds, a->dsc, in);
            bn_fwd(m, &b->dsb, a->dsb, a->dsc, spatial(&b->ds.s), train);
            m->be->add(a->out, a->dsb, n2);
        } else {
            m->be->add(a->out, in, n2);
        }
        ik->relu_forward(a->out, a->out, n2);
        in = a->out;
    }
    const tn_conv_shape *last = &m->blocks[m->n_blocks - 1].c2.s;
    ik->avgpool_forward(m->feat_buf, in, m->feat, N, last->OH * last->OW); /* [N, feat] */
    int K = m->cfg.num_classes;                                          /* logits = feat fc^T + b */
    m->be->matmul(0, 1, N, K, m->feat, 1.0f, m->feat_buf, m->feat, m->params + m->fc_w, m->feat, 0.0f, m->logits, K);
    m->be->add_bias(m->logits, m->params + m->fc_b, N, K, K);
    if (train) m->batches_tracked++;
}

static void bn_bwd(tn_resnet *m, const rn_bn *b, float *dx, const float *dy, const float *x, int M) {
    size_t row = (size_t)b->idx * (m->cfg.base_width << 3);
    if (m->sync_bn)
        m->ik->batchnorm_backward_sync(dx, m->grad + b->g, m->grad + b->b, dy, x, m->mean + row, m->rstd + row,
                                       m->params + b->g, b->C, M, m->sync_bn);
    else
        m->ik->batchnorm_backward(dx, m->grad + b->g, m->grad + b->b, dy, x, m->mean + row, m->rstd + row,
                                  m->params + b->g, b->C, M);
}

static void conv_bwd(tn_resnet *m, const rn_conv *c, float *dx, int acc, const float *dy, const float *x) {
    m->ik->conv2d_backward(dx, acc, m->grad + c->w, dy, x, m->params + c->w, &c->s, m->scratch);
}

/* G: gradient of block i's output on entry; on return *G points at the gradient of its input */
static void block_backward(tn_resnet *m, int i, float **G, float **DX, float *T1, float *T2, const float *in) {
    const rn_block *b = &m->blocks[i];
    rn_block_acts *a = &m->acts[i];
    m->ik->relu_backward(*G, a->out, act_floats(&b->c2.s));       /* d(BN(c2) + identity) */
    bn_bwd(m, &b->b2, T1, *G, a->c2, spatial(&b->c2.s));           /* d c2 */
    conv_bwd(m, &b->c2, T2, 0, T1, a->b1);                          /* d b1 */
    m->ik->relu_backward(T2, a->b1, act_floats(&b->c1.s));
    bn_bwd(m, &b->b1, T2, T2, a->c1, spatial(&b->c1.s));            /* d c1 */
    conv_bwd(m, &b->c1, *DX, 0, T2, in);                            /* d in, from the main path */
    if (b->has_ds) {
        bn_bwd(m, &b->dsb, T1, *G, a->dsc, spatial(&b->ds.s));
        conv_bwd(m, &b->ds, *DX, 1, T1, in);
    } else {
        m->be->add(*DX, *G, act_floats(&b->c2.s));
    }
    float *t = *G;
    *G = *DX, *DX = t;
}

static void ready(tn_resnet *m, size_t from) {
    if (m->grad_ready) m->grad_ready(m->grad_ready_ctx, from);
}

static void backward(tn_resnet *m, int N) {
    int K = m->cfg.num_classes;
    float *G = m->g[0], *DX = m->g[1], *T1 = m->g[2], *T2 = m->g[3];
    /* fc: dW += dlogits^T feat, db += sum dlogits, dfeat = dlogits W */
    m->be->matmul(1, 0, K, m->feat, N, 1.0f, m->logits, K, m->feat_buf, m->feat, 1.0f, m->grad + m->fc_w, m->feat);
    m->be->bias_backward(m->grad + m->fc_b, m->logits, N, K, K);
    m->be->matmul(0, 0, N, m->feat, K, 1.0f, m->logits, K, m->params + m->fc_w, m->feat, 0.0f, T1, m->feat);
    const tn_conv_shape *last = &m->blocks[m->n_blocks - 1].c2.s;
    ready(m, m->fc_w);
    m->ik->avgpool_backward(G, T1, m->feat, N, last->OH * last->OW);
    for (int i = m->n_blocks - 1; i >= 0; i--) {
        block_backward(m, i, &G, &DX, T1, T2, i ? m->acts[i - 1].out : m->p0);
        ready(m, m->blocks[i].c1.w); /* a block's conv1.weight comes first in its parameters */
    }
    const tn_conv_shape *s = &m->stem.s;
    m->ik->maxpool_backward(DX, G, m->b0, s->OC * N, s->OH, s->OW, 3, 2, 1); /* d b0 */
    m->ik->relu_backward(DX, m->b0, act_floats(s));
    bn_bwd(m, &m->bn1, DX, DX, m->c0, spatial(s));
    conv_bwd(m, &m->stem, NULL, 0, DX, m->x); /* the images need no gradient */
    ready(m, 0);
}

double tn_resnet_forward_backward(tn_resnet *m, const float *images, const int32_t *labels, int N, float grad_scale,
                                  float label_smoothing, float *logits_host) {
    upload_images(m, images, N);
    forward(m, N, 1);
    int K = m->cfg.num_classes;
    if (logits_host) m->be->download(logits_host, m->logits, (size_t)N * K);
    m->be->upload_i32(m->labels, labels, (size_t)N);
    double loss = m->ik->cross_entropy_smooth(m->logits, m->labels, N, K, label_smoothing, grad_scale);
    backward(m, N);
    return loss;
}

void tn_resnet_set_sync_bn(tn_resnet *m, const void *sync) { m->sync_bn = sync; }

void tn_resnet_set_grad_ready(tn_resnet *m, void (*fn)(void *ctx, size_t from), void *ctx) {
    m->grad_ready = fn, m->grad_ready_ctx = ctx;
}

void tn_resnet_logits(tn_resnet *m, const float *images, int N, float *logits_host) {
    upload_images(m, images, N);
    forward(m, N, 0);
    m->be->download(logits_host, m->logits, (size_t)N * m->cfg.num_classes);
}
