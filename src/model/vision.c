/* vision.c -- the vision tower's forward and backward: patch embedding, blocks (norm, qkv, 2-D rotary, attention
 * inside each frame or window, proj, norm, MLP), then the mergers (vision_merge.c). CPU backend only: matrix
 * products go through the backend, the rest are host loops on the same (host) memory.
 *
 * Block (x [N, E] -> x [N, E]):  xn1 = norm1(x); qkv = xn1 Wqkv^T + b [N, 3E]; rotary on q, k; att = softmax(q k^T /
 * sqrt(hv)) v per segment and head [N, E]; h = x + att Wp^T + bp; xn2 = norm2(h); pre = xn2 W1^T + b1 [N, I | 2I];
 * act = f(pre) [N, I]; x' = h + act W2^T + b2. Norms: LayerNorm (eps 1e-6), Qwen2.5-VL RMSNorm. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/vmath.h"
#include "core/core.h"
#include "model/model.h"
#include "model/vision_internal.h"

/* ---------------------------------------------------------------- norms and activations (host loops) */

void tn_vnorm_forward(int rms, float *y, float *mu, float *rs, const float *x, const float *w, const float *b, int rows,
                      int cols) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * cols;
        float *yr = y + (size_t)r * cols;
        double mean = 0, var = 0;
        if (!rms) {
            for (int c = 0; c < cols; c++) mean += xr[c];
            mean /= cols;
        }
        for (int c = 0; c < cols; c++) var += (xr[c] - mean) * (xr[c] - mean);
        float rstd = (float)(1.0 / sqrt(var / cols + 1e-6));
        mu[r] = (float)mean, rs[r] = rstd;
        for (int c = 0; c < cols; c++) yr[c] = ((xr[c] - (float)mean) * rstd) * w[c] + (b ? b[c] : 0.0f);
    }
}

/* dx += d/dx; dw, db += (when non-NULL): rows in parallel for dx, the weight sums column by column */
void tn_vnorm_backward(int rms, float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                       const float *mu, const float *rs, int rows, int cols) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * cols, *dyr = dy + (size_t)r * cols;
        double s1 = 0, s2 = 0;
        for (int c = 0; c < cols; c++) {
            double xh = (xr[c] - mu[r]) * rs[r], g = (double)dyr[c] * w[c];
            s1 += g, s2 += g * xh;
        }
        s1 = rms ? 0 : s1 / cols, s2 /= cols;
        float *dxr = dx + (size_t)r * cols;
        for (int c = 0; c < cols; c++) {
            double xh = (xr[c] - mu[r]) * rs[r];
            dxr[c] += (float)(rs[r] * ((double)dyr[c] * w[c] - s1 - xh * s2));
        }
    }
    if (!dw && !db) return;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < cols; c++) {
        double sw = 0, sb = 0;
        for (int r = 0; r < rows; r++) {
            double d = dy[(size_t)r * cols + c];
            sw += d * ((x[(size_t)r * cols + c] - mu[r]) * rs[r]), sb += d;
        }
        if (dw) dw[c] += (float)sw;
        if (db) db[c] += (float)sb;
    }
}

enum { ACT_QUICK, ACT_TANH, ACT_ERF, ACT_SILU };

int tn_vact_kind(const char *name) {
    return strcmp(name, "quick_gelu") == 0 ? ACT_QUICK : strcmp(name, "gelu_pytorch_tanh") == 0 ? ACT_TANH
           : strcmp(name, "silu") == 0                                                  ? ACT_SILU
                                                                                        : ACT_ERF;
}

static double act_d(int kind, double x, double *d) {
    switch (kind) {
    case ACT_QUICK: {
        double s = 1.0 / (1.0 + exp(-1.702 * x));
        *d = s + 1.702 * x * s * (1 - s);
        return x * s;
    }
    case ACT_TANH: {
        const double k = 0.7978845608028654, c = 0.044715;
        double t = tanh(k * (x + c * x * x * x));
        *d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
        return 0.5 * x * (1 + t);
    }
    case ACT_SILU: {
        double s = 1.0 / (1.0 + exp(-x));
        *d = s * (1 + x * (1 - s));
        return x * s;
    }
    default:
        *d = 0.5 * (1 + erf(x * M_SQRT1_2)) + x * exp(-0.5 * x * x) * 0.3989422804014327;
        return 0.5 * x * (1 + erf(x * M_SQRT1_2));
    }
}

/* quick_gelu and silu, the towers' hot activations, in float with the vectorisable exp (vmath.h); the erf and tanh
 * GELUs (Qwen3-VL's MLP, the mergers) in double */
void tn_vact_forward(int kind, float *y, const float *x, size_t n) {
    if (kind == ACT_QUICK || kind == ACT_SILU) {
        float k = kind == ACT_QUICK ? 1.702f : 1.0f;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) y[i] = x[i] * tn_sigmoidf(k * x[i]);
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        double d;
        y[i] = (float)act_d(kind, x[i], &d);
    }
}

/* dx = dy * f'(x); f'(x) = s + k x s (1 - s), s = sigmoid(k x), for quick_gelu (k 1.702) and silu (k 1) */
void tn_vact_backward(int kind, float *dx, const float *dy, const float *x, size_t n) {
    if (kind == ACT_QUICK || kind == ACT_SILU) {
        float k = kind == ACT_QUICK ? 1.702f : 1.0f;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float sg = tn_sigmoidf(k * x[i]);
            dx[i] = dy[i] * (sg + k * x[i] * sg * (1.0f - sg));
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        double d;
        act_d(kind, x[i], &d);
        dx[i] = (float)(dy[i] * d);
    }
}

/* y [rows, out] (+)= x [rows, in] W^T + b */
void tn_vlinear(const tn_model *m, float *y, const float *x, const float *W, const float *b, int rows, int in, int out,
                float beta) {
    m->be->matmul(0, 1, rows, out, in, 1.0f, x, in, W, in, beta, y, out);
    if (b) m->be->add_bias(y, b, rows, out, out);
}

/* dW += dy^T x ; db += colsum dy ; dx (+)= dy W (dx NULL: not needed) */
void tn_vlinear_backward(const tn_model *m, float *dx, float *dW, float *db, const float *dy, const float *x,
                         const float *W, int rows, int in, int out, float beta) {
    const tn_backend *be = m->be;
    if (dW) be->matmul(1, 0, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dW, in);
    if (db) be->bias_backward(db, dy, rows, out, out);
    if (dx) be->matmul(0, 0, rows, in, out, 1.0f, dy, out, W, in, beta, dx, in);
}

/* ---------------------------------------------------------------- attention inside segments */

/* One task per (segment, head), in parallel (the matrix products inside a task then run on one thread each): a
 * 2 x 2 image's segment has 4 rows and a large one thousands, so per-product threading of small products would
 * spend the time in start-up. Rows go in blocks of TN_VATT_BLOCK, so a thread holds [TN_VATT_BLOCK, n] of
 * probabilities (va->P, va->dP: one such slice per thread) and never [n, n]. */

/* P [nr, n] = softmax(q[r0 .. r0+nr) k^T / sqrt(hv)) over the segment's n keys */
static void block_probs(const tn_model *m, float *P, const float *q, const float *k, int ld, int r0, int nr, int n,
                        int hv) {
    m->be->matmul(0, 1, nr, n, hv, 1.0f / sqrtf((float)hv), q + (size_t)r0 * ld, ld, k, ld, 0.0f, P, n);
    for (int i = 0; i < nr; i++) {
        float *r = P + (size_t)i * n, inv = 1.0f / tn_exp_shift_sum(r, n, tn_max(r, n));
        for (int j = 0; j < n; j++) r[j] *= inv;
    }
}

/* att [N, E] = per segment [cu[i], cu[i+1]) and head: softmax(q k^T / sqrt(hv)) v */
void tn_vision_attention_forward(const tn_model *m, tn_vision_acts *va, float *att, const float *qkv, const int *cu,
                                 int ncu) {
    const tn_vision_config *v = &m->cfg.vis;
    int E = v->E, H = v->heads, hv = E / H, ld = 3 * E, ntask = (ncu - 1) * H;
#pragma omp parallel for schedule(dynamic, 1) num_threads(va->threads)
    for (int task = 0; task < ntask; task++) {
        int a = cu[task / H], n = cu[task / H + 1] - a, h = task % H;
        float *P = va->P + (size_t)omp_get_thread_num() * va->pslice;
        const float *q = qkv + (size_t)a * ld + h * hv, *k = q + E, *vv = q + 2 * E;
        for (int r0 = 0; r0 < n; r0 += TN_VATT_BLOCK) {
            int nr = n - r0 < TN_VATT_BLOCK ? n - r0 : TN_VATT_BLOCK;
            block_probs(m, P, q, k, ld, r0, nr, n, hv);
            m->be->matmul(0, 0, nr, hv, n, 1.0f, P, n, vv, ld, 0.0f, att + (size_t)(a + r0) * E + h * hv, E);
        }
    }
}

/* dqkv [N, 3E] written from datt [N, E] (probabilities recomputed block by block) */
void tn_vision_attention_backward(const tn_model *m, tn_vision_acts *va, float *dqkv, const float *datt,
                                  const float *qkv, const int *cu, int ncu) {
    const tn_vision_config *v = &m->cfg.vis;
    const tn_backend *be = m->be;
    int E = v->E, H = v->heads, hv = E / H, ld = 3 * E, ntask = (ncu - 1) * H;
    float scale = 1.0f / sqrtf((float)hv);
#pragma omp parallel for schedule(dynamic, 1) num_threads(va->threads)
    for (int task = 0; task < ntask; task++) {
        int a = cu[task / H], n = cu[task / H + 1] - a, h = task % H;
        float *P = va->P + (size_t)omp_get_thread_num() * va->pslice, *dP = va->dP + (size_t)omp_get_thread_num() * va->pslice;
        const float *q = qkv + (size_t)a * ld + h * hv, *k = q + E, *vv = q + 2 * E, *dout = datt + (size_t)a * E + h * hv;
        float *dq = dqkv + (size_t)a * ld + h * hv, *dk = dq + E, *dv = dq + 2 * E;
        for (int i = 0; i < n; i++) memset(dk + (size_t)i * ld, 0, hv * sizeof *dk), memset(dv + (size_t)i * ld, 0, hv * sizeof *dv);
        for (int r0 = 0; r0 < n; r0 += TN_VATT_BLOCK) {
            int nr = n - r0 < TN_VATT_BLOCK ? n - r0 : TN_VATT_BLOCK;
            const float *qb = q + (size_t)r0 * ld, *db = dout + (size_t)r0 * E;
            block_probs(m, P, q, k, ld, r0, nr, n, hv);
            be->matmul(0, 1, nr, n, hv, 1.0f, db, E, vv, ld, 0.0f, dP, n);            /* dP = dout v^T */
            for (int i = 0; i < nr; i++) {                                           /* dS = P (dP - rowdot) */
                float *pr = P + (size_t)i * n, *dr = dP + (size_t)i * n;
                double dot = 0;
                for (int j = 0; j < n; j++) dot += (double)pr[j] * dr[j];
                for (int j = 0; j < n; j++) dr[j] = pr[j] * (dr[j] - (float)dot);
            }
            be->matmul(0, 0, nr, hv, n, scale, dP, n, k, ld, 0.0f, dq + (size_t)r0 * ld, ld); /* dq = s dS k */
            be->matmul(1, 0, n, hv, nr, scale, dP, n, qb, ld, 1.0f, dk, ld);                 /* dk += s dS^T q */
            be->matmul(1, 0, n, hv, nr, 1.0f, P, n, db, E, 1.0f, dv, ld);                    /* dv += P^T dout */
        }
    }
}

/* ---------------------------------------------------------------- one block */

static void block_forward(const tn_model *m, tn_vision_acts *va, int b, const float *x, float *out) {
    const tn_vision_config *v = &m->cfg.vis;
    const tn_vblock_tensors *w = &m->vw->blk[b];
    vblock_acts *s = &va->blk[b];
    int N = va->N, E = v->E, I = v->I, rms = v->kind == TN_VL_QWEN25, hv = E / v->heads;
    int nI = rms ? 2 * I : I;
    const int *cu = tn_vision_block_full(v, b) ? va->cu : va->cuw;
    int ncu = tn_vision_block_full(v, b) ? va->ncu : va->ncuw;
    tn_vnorm_forward(rms, s->xn1, s->mu1, s->rs1, x, w->n1w, w->n1b, N, E);
    tn_vlinear(m, s->qkv, s->xn1, w->qkv_w, w->qkv_b, N, E, 3 * E, 0.0f);
    m->be->rope(s->qkv, N, N, v->heads, hv, 3 * E, va->cos, va->sin, 0);
    m->be->rope(s->qkv + E, N, N, v->heads, hv, 3 * E, va->cos, va->sin, 0);
    tn_vision_attention_forward(m, va, s->att, s->qkv, cu, ncu);
    memcpy(s->h, x, (size_t)N * E * sizeof *x);
    tn_vlinear(m, s->h, s->att, w->proj_w, w->proj_b, N, E, E, 1.0f);
    tn_vnorm_forward(rms, s->xn2, s->mu2, s->rs2, s->h, w->n2w, w->n2b, N, E);
    tn_vlinear(m, s->pre, s->xn2, w->fc1_w, w->fc1_b, N, E, nI, 0.0f);
    if (rms) m->be->swiglu_forward(s->act, s->pre, N, I);
    else tn_vact_forward(va->act_kind, s->act, s->pre, (size_t)N * I);
    memcpy(out, s->h, (size_t)N * E * sizeof *out);
    tn_vlinear(m, out, s->act, w->fc2_w, w->fc2_b, N, I, E, 1.0f);
}

/* va->dx holds d(out) on entry, d(x) on return */
static void block_backward(const tn_model *m, tn_vision_acts *va, int b, const float *x) {
    const tn_vision_config *v = &m->cfg.vis;
    const tn_vblock_tensors *w = &m->vw->blk[b], *dw = &m->dvw->blk[b];
    vblock_acts *s = &va->blk[b];
    int N = va->N, E = v->E, I = v->I, rms = v->kind == TN_VL_QWEN25, hv = E / v->heads;
    int nI = rms ? 2 * I : I;
    const int *cu = tn_vision_block_full(v, b) ? va->cu : va->cuw;
    int ncu = tn_vision_block_full(v, b) ? va->ncu : va->ncuw;
    float *dx = va->dx, *t1 = va->t1, *t2 = va->t2;
    tn_vlinear_backward(m, t1, dw->fc2_w, dw->fc2_b, dx, s->act, w->fc2_w, N, I, E, 0.0f); /* t1 = dact [N, I] */
    if (rms) m->be->swiglu_backward(t2, t1, s->pre, N, I);                                 /* t2 = dpre */
    else tn_vact_backward(va->act_kind, t2, t1, s->pre, (size_t)N * I);
    tn_vlinear_backward(m, t1, dw->fc1_w, dw->fc1_b, t2, s->xn2, w->fc1_w, N, E, nI, 0.0f); /* t1 = dxn2 [N, E] */
    tn_vnorm_backward(rms, dx, dw->n2w, dw->n2b, t1, s->h, w->n2w, s->mu2, s->rs2, N, E);  /* dx = dh */
    tn_vlinear_backward(m, t1, dw->proj_w, dw->proj_b, dx, s->att, w->proj_w, N, E, E, 0.0f); /* t1 = datt */
    tn_vision_attention_backward(m, va, t2, t1, s->qkv, cu, ncu);                                 /* t2 = dqkv */
    m->be->rope(t2, N, N, v->heads, hv, 3 * E, va->cos, va->sin, 1);
    m->be->rope(t2 + E, N, N, v->heads, hv, 3 * E, va->cos, va->sin, 1);
    tn_vlinear_backward(m, t1, dw->qkv_w, dw->qkv_b, t2, s->xn1, w->qkv_w, N, E, 3 * E, 0.0f); /* t1 = dxn1 */
    tn_vnorm_backward(rms, dx, dw->n1w, dw->n1b, t1, x, w->n1w, s->mu1, s->rs1, N, E);
}

/* ---------------------------------------------------------------- the tower */

static int deep_slot(const tn_vision_config *v, int b) {
    for (int k = 0; k < v->n_deep; k++)
        if (v->deep_idx[k] == b) return k;
    return -1;
}

int tn_vision_forward(tn_model *m, tn_vision_acts *va, const tn_mm_batch *mm, float **out, float ***deep) {
    const tn_vision_config *v = &m->cfg.vis;
    double t0 = tn_now();
    tn_vision_prepare(m, va, mm);
    int N = va->N, E = v->E;
    /* patch embedding: a Conv3d with stride = kernel over one patch is pv [N, P] W^T [P, E] (+ b) */
    tn_vlinear(m, va->pe, mm->pixel_values, m->vw->patch_w, m->vw->patch_b, N, mm->patch_dim, E, 0.0f);
    memcpy(va->x0, va->pe, (size_t)N * E * sizeof *va->x0);
    if (v->kind == TN_VL_QWEN3) {
        tn_vision_pos_embed(m, va, va->pos_e);
        for (size_t i = 0; i < (size_t)N * E; i++) va->x0[i] += va->pos_e[i];
    }
    tn_vision_to_windows(m, va, va->x0); /* Qwen2.5-VL: rows into window order (rotary tables already are) */
    const float *x = va->x0;
    for (int b = 0; b < v->depth; b++) {
        block_forward(m, va, b, x, va->blk[b].xout);
        x = va->blk[b].xout;
        int k = deep_slot(v, b);
        if (k >= 0) tn_merger_forward(m, &m->vw->deep[k], &va->deep[k], x, va->M, 1);
    }
    tn_merger_forward(m, &m->vw->merger, &va->merger, x, va->M, 0);
    tn_vision_from_windows_merged(m, va, va->img, va->merger.out); /* natural image order */
    for (int k = 0; k < v->n_deep; k++) va->deep_out[k] = va->deep[k].out;
    *out = va->img;
    *deep = va->deep_out;
    va->fwd_s += tn_now() - t0;
    return va->M;
}

/* the tower's gradients from d(out), some vision tensor training */
static void vision_backward(tn_model *m, tn_vision_acts *va, const float *dout, float *const *ddeep) {
    const tn_vision_config *v = &m->cfg.vis;
    const tn_vision_tensors *dw = m->dvw;
    int N = va->N, E = v->E, tower = dw->patch_w != NULL;
    tn_vision_to_windows_merged(m, va, va->dimg, dout);
    memset(va->dx, 0, (size_t)N * E * sizeof *va->dx);
    const float *xl = v->depth ? va->blk[v->depth - 1].xout : va->x0;
    tn_merger_backward(m, &m->vw->merger, &dw->merger, &va->merger, tower ? va->dx : NULL, va->dimg, xl, va->M, 0);
    if (!tower) return;
    for (int b = v->depth - 1; b >= 0; b--) {
        int k = deep_slot(v, b);
        if (k >= 0 && ddeep && ddeep[k])
            tn_merger_backward(m, &m->vw->deep[k], &dw->deep[k], &va->deep[k], va->dx, ddeep[k], va->blk[b].xout, va->M,
                               1);
        const float *xin = b ? va->blk[b - 1].xout : va->x0;
        if (va->checkpointing) block_forward(m, va, b, xin, va->t1); /* the block's activations again (output unused) */
        block_backward(m, va, b, xin);
    }
    tn_vision_from_windows(m, va, va->dx); /* d(x0) back to pixel_values order */
    if (dw->pos) tn_vision_pos_embed_backward(m, va, va->dx);
    tn_vlinear_backward(m, NULL, dw->patch_w, dw->patch_b, va->dx, va->mm->pixel_values, m->vw->patch_w, N,
                        va->mm->patch_dim, E, 0.0f);
}

void tn_vision_backward(tn_model *m, tn_vision_acts *va, const float *dout, float *const *ddeep) {
    if (!m->dvw->any) return;
    double t0 = tn_now();
    vision_backward(m, va, dout, ddeep);
    va->bwd_s += tn_now() - t0;
}

void tn_vision_seconds(const tn_vision_acts *va, double *fwd_s, double *bwd_s) {
    *fwd_s = va ? va->fwd_s : 0, *bwd_s = va ? va->bwd_s : 0;
}

const float *tn_vision_intermediate(const tn_vision_acts *va, const char *name, int *rows, int *cols) {
    *rows = va->N, *cols = va->E;
    if (strcmp(name, "patch_embeds") == 0) return va->pe;
    if (strcmp(name, "pos_embeds") == 0) return va->has_pos ? va->pos_e : NULL;
    if (strcmp(name, "vision_blocks_out") == 0) return va->depth ? va->blk[va->depth - 1].xout : va->x0;
    *rows = va->M, *cols = va->D;
    if (strcmp(name, "image_embeds") == 0) return va->img;
    if (strncmp(name, "deepstack.", 10) == 0) {
        int k = atoi(name + 10);
        return k >= 0 && k < va->n_deep ? va->deep[k].out : NULL;
    }
    return NULL;
}
