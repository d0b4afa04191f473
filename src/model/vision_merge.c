/* vision_merge.c -- the vision tower's geometry and mergers: the per-pass workspace, 2-D rotary tables, frame and
 * (Qwen2.5-VL) window segments and permutation, Qwen3-VL's bilinearly interpolated position embedding, and the
 * 2x2 patch mergers (norm, concat of m*m consecutive patches, fc1, exact GELU, fc2).
 *
 * Patch row order (pixel_values): per image, per frame t, merge windows (bh, bw) row-major, then (ih, iw) inside:
 * patch (row, col) = (bh*m + ih, bw*m + iw). So m*m consecutive rows are one merged token. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model.h"
#include "model/vision_internal.h"

int tn_vision_block_full(const tn_vision_config *v, int b) {
    if (v->kind != TN_VL_QWEN25) return 1;
    for (int i = 0; i < v->n_full; i++)
        if (v->full_idx[i] == b) return 1;
    return 0;
}

tn_vision_acts *tn_vision_acts_create(int checkpointing) {
    tn_vision_acts *va = tn_xcalloc(1, sizeof(tn_vision_acts));
    va->checkpointing = checkpointing;
    return va;
}

void tn_vision_acts_free(tn_vision_acts *va) {
    if (!va) return;
    free(va->slab), free(va->blk), free(va->deep), free(va->deep_out);
    free(va->cu), free(va->cuw), free(va->perm), free(va->pidx), free(va->pwt);
    free(va);
}

int tn_vision_check(const tn_model *m, const tn_mm_batch *mm, char *err, size_t errlen) {
    const tn_vision_config *v = &m->cfg.vis;
    int P = v->in_ch * v->tpatch * v->patch * v->patch;
    if (mm->patch_dim != P) {
        snprintf(err, errlen, "images: pixel_values rows have %d values, the model's patches %d (channels %d x frames %d "
                 "x %d x %d)", mm->patch_dim, P, v->in_ch, v->tpatch, v->patch, v->patch);
        return -1;
    }
    for (int i = 0; i < mm->n_images; i++) {
        const int32_t *g = mm->grid_thw + 3 * i;
        if (g[0] < 1 || g[1] < 1 || g[2] < 1 || g[1] % v->merge || g[2] % v->merge) {
            snprintf(err, errlen, "image %d: grid (%d, %d, %d) is not a positive multiple of the merge size %d", i, g[0],
                     g[1], g[2], v->merge);
            return -1;
        }
    }
    return 0;
}

static float *take(float **cur, size_t n) {
    float *p = *cur;
    *cur += (n + 15) & ~(size_t)15;
    return p;
}

static void carve_merger(merger_acts *s, float **cur, int N, int E, int M, int D, float *t1, float *t2) {
    s->xn = take(cur, (size_t)N * E), s->mu = take(cur, N), s->rs = take(cur, N);
    s->pre = take(cur, (size_t)N * E), s->act = take(cur, (size_t)N * E), s->out = take(cur, (size_t)M * D);
    s->t1 = t1, s->t2 = t2;
}

/* Lays every buffer out from base (NULL: measures); returns the floats needed. */
static size_t carve(const tn_model *m, tn_vision_acts *va, float *base, int maxseg) {
    const tn_vision_config *v = &m->cfg.vis;
    size_t N = (size_t)va->N, E = (size_t)v->E, I = (size_t)v->I, wide = 3 * E > 2 * I ? 3 * E : 2 * I;
    float *cur = base;
    va->pe = take(&cur, N * E), va->pos_e = take(&cur, N * E), va->x0 = take(&cur, N * E);
    va->cos = take(&cur, N * E / v->heads / 2), va->sin = take(&cur, N * E / v->heads / 2);
    for (int b = 0; b < v->depth; b++) {
        vblock_acts *s = &va->blk[b];
        if (va->checkpointing && b > 0) { /* share block 0's set; only the outputs (next inputs) stay per block */
            *s = va->blk[0];
        } else {
            s->xn1 = take(&cur, N * E), s->mu1 = take(&cur, N), s->rs1 = take(&cur, N);
            s->qkv = take(&cur, N * 3 * E), s->att = take(&cur, N * E), s->h = take(&cur, N * E);
            s->xn2 = take(&cur, N * E), s->mu2 = take(&cur, N), s->rs2 = take(&cur, N);
            s->pre = take(&cur, N * (v->kind == TN_VL_QWEN25 ? 2 * I : I)), s->act = take(&cur, N * I);
        }
        s->xout = take(&cur, N * E);
    }
    va->dx = take(&cur, N * E), va->t1 = take(&cur, N * wide), va->t2 = take(&cur, N * wide);
    carve_merger(&va->merger, &cur, va->N, v->E, va->M, m->D, va->t1, va->t2);
    for (int k = 0; k < v->n_deep; k++) carve_merger(&va->deep[k], &cur, va->N, v->E, va->M, m->D, va->t1, va->t2);
    va->img = take(&cur, (size_t)va->M * m->D), va->dimg = take(&cur, (size_t)va->M * m->D);
    int threads = va->threads = omp_get_max_threads(); /* the attention's tasks: one probability slice per thread */
    va->pslice = ((size_t)TN_VATT_BLOCK * maxseg + 15) & ~(size_t)15;
    va->P = take(&cur, va->pslice * threads), va->dP = take(&cur, va->pslice * threads);
    return (size_t)(cur - base);
}

/* Frame segments; Qwen2.5-VL: window permutation of merged tokens and window segments (HF's get_window_index:
 * each image's merged grid padded by ws - side % ws, a full empty window when divisible; empty windows dropped). */
static void segments(const tn_model *m, tn_vision_acts *va, const tn_mm_batch *mm) {
    const tn_vision_config *v = &m->cfg.vis;
    int nf = 0, mm2 = v->merge * v->merge;
    for (int i = 0; i < mm->n_images; i++) nf += mm->grid_thw[3 * i];
    va->cu = tn_xrealloc(va->cu, (size_t)(nf + 1) * sizeof *va->cu);
    va->ncu = 1, va->cu[0] = 0;
    for (int i = 0; i < mm->n_images; i++)
        for (int t = 0; t < mm->grid_thw[3 * i]; t++, va->ncu++)
            va->cu[va->ncu] = va->cu[va->ncu - 1] + mm->grid_thw[3 * i + 1] * mm->grid_thw[3 * i + 2];
    va->perm = tn_xrealloc(va->perm, (size_t)va->M * sizeof *va->perm);
    va->cuw = tn_xrealloc(va->cuw, (size_t)(va->M + 1) * sizeof *va->cuw);
    va->ncuw = 1, va->cuw[0] = 0;
    int ws = v->kind == TN_VL_QWEN25 ? v->window / v->merge / v->patch : 0, j = 0, base = 0;
    for (int i = 0; i < mm->n_images; i++) {
        int t = mm->grid_thw[3 * i], gh = mm->grid_thw[3 * i + 1] / v->merge, gw = mm->grid_thw[3 * i + 2] / v->merge;
        if (!ws) { /* no windows: identity */
            for (int k = 0; k < t * gh * gw; k++) va->perm[j++] = base + k;
            base += t * gh * gw;
            continue;
        }
        int nh = (gh + ws - gh % ws) / ws, nw = (gw + ws - gw % ws) / ws;
        for (int ti = 0; ti < t; ti++)
            for (int wr = 0; wr < nh; wr++)
                for (int wc = 0; wc < nw; wc++) {
                    int n = 0;
                    for (int r = wr * ws; r < wr * ws + ws && r < gh; r++)
                        for (int c = wc * ws; c < wc * ws + ws && c < gw; c++, n++)
                            va->perm[j++] = base + ti * gh * gw + r * gw + c;
                    if (n) va->cuw[va->ncuw] = va->cuw[va->ncuw - 1] + n * mm2, va->ncuw++;
                }
        base += t * gh * gw;
    }
}

/* patch row -> (row, col) in its image and its raster index; *img_w the image's width in patches */
static void patch_coords(const tn_vision_config *v, const tn_mm_batch *mm, int n, int *row, int *col, int *w_out) {
    int i = 0, start = 0;
    while (start + mm->grid_thw[3 * i] * mm->grid_thw[3 * i + 1] * mm->grid_thw[3 * i + 2] <= n)
        start += mm->grid_thw[3 * i] * mm->grid_thw[3 * i + 1] * mm->grid_thw[3 * i + 2], i++;
    int h = mm->grid_thw[3 * i + 1], w = mm->grid_thw[3 * i + 2], m = v->merge;
    int k = (n - start) % (h * w), blk = k / (m * m), in = k % (m * m);
    *row = (blk / (w / m)) * m + in / m;
    *col = (blk % (w / m)) * m + in % m;
    *w_out = i; /* image index */
}

/* Row n of the blocks' order is pixel row order(n): the window permutation expanded to patches. */
static int block_row(const tn_vision_acts *va, int mm2, int n) { return va->perm[n / mm2] * mm2 + n % mm2; }

static void rotary_tables(const tn_model *m, tn_vision_acts *va, const tn_mm_batch *mm) {
    const tn_vision_config *v = &m->cfg.vis;
    int hv = v->E / v->heads, dim = hv / 2, q = dim / 2, mm2 = v->merge * v->merge;
    for (int n = 0; n < va->N; n++) {
        int row, col, img;
        patch_coords(v, mm, block_row(va, mm2, n), &row, &col, &img);
        for (int j = 0; j < q; j++) { /* inv_freq = 10000^(-2j/dim); angles [row * inv, col * inv] */
            double inv = 1.0 / pow(10000.0, (double)(2 * j) / dim);
            va->cos[(size_t)n * dim + j] = (float)cos(row * inv), va->sin[(size_t)n * dim + j] = (float)sin(row * inv);
            va->cos[(size_t)n * dim + q + j] = (float)cos(col * inv), va->sin[(size_t)n * dim + q + j] = (float)sin(col * inv);
        }
    }
}

/* torch.linspace(0, G-1, n) in float32, as ATen's CPU kernel: start + step*i below n/2, end - step*(n-1-i) above */
static float linspace_f32(int G, int n, int i) {
    if (n == 1) return 0.0f;
    float step = (float)(G - 1) / (float)(n - 1);
    return i < n / 2 ? step * (float)i : (float)(G - 1) - step * (float)(n - 1 - i);
}

/* Qwen3-VL: the 4 grid rows and float32 bilinear weights of every patch (HF's fast_pos_embed_interpolate). */
static void interp_weights(const tn_model *m, tn_vision_acts *va, const tn_mm_batch *mm) {
    const tn_vision_config *v = &m->cfg.vis;
    int G = (int)lround(sqrt((double)v->num_pos));
    va->pidx = tn_xrealloc(va->pidx, (size_t)va->N * 4 * sizeof *va->pidx);
    va->pwt = tn_xrealloc(va->pwt, (size_t)va->N * 4 * sizeof *va->pwt);
    for (int n = 0; n < va->N; n++) {
        int row, col, img;
        patch_coords(v, mm, n, &row, &col, &img);
        int h = mm->grid_thw[3 * img + 1], w = mm->grid_thw[3 * img + 2];
        float hs = linspace_f32(G, h, row), ws = linspace_f32(G, w, col);
        int hf = (int)hs, wf = (int)ws, hc = hf + 1 < G - 1 ? hf + 1 : G - 1, wc = wf + 1 < G - 1 ? wf + 1 : G - 1;
        float dh = hs - (float)hf, dw = ws - (float)wf;
        int32_t *ix = va->pidx + 4 * (size_t)n;
        float *wt = va->pwt + 4 * (size_t)n;
        ix[0] = hf * G + wf, ix[1] = hf * G + wc, ix[2] = hc * G + wf, ix[3] = hc * G + wc;
        wt[0] = (1 - dh) * (1 - dw), wt[1] = (1 - dh) * dw, wt[2] = dh * (1 - dw), wt[3] = dh * dw;
    }
}

void tn_vision_prepare(tn_model *m, tn_vision_acts *va, const tn_mm_batch *mm) {
    const tn_vision_config *v = &m->cfg.vis;
    int N = 0;
    for (int i = 0; i < mm->n_images; i++) N += mm->grid_thw[3 * i] * mm->grid_thw[3 * i + 1] * mm->grid_thw[3 * i + 2];
    va->mm = mm, va->N = N, va->M = N / (v->merge * v->merge), va->E = v->E, va->D = m->D;
    va->depth = v->depth, va->n_deep = v->n_deep, va->has_pos = v->kind == TN_VL_QWEN3;
    va->act_kind = tn_vact_kind(v->act);
    if (!va->blk) {
        va->blk = tn_xcalloc((size_t)v->depth + 1, sizeof *va->blk);
        va->deep = tn_xcalloc((size_t)v->n_deep + 1, sizeof *va->deep);
        va->deep_out = tn_xcalloc((size_t)v->n_deep + 1, sizeof *va->deep_out);
    }
    segments(m, va, mm);
    int maxseg = 1;
    for (int s = 0; s + 1 < va->ncu; s++) maxseg = va->cu[s + 1] - va->cu[s] > maxseg ? va->cu[s + 1] - va->cu[s] : maxseg;
    size_t need = carve(m, va, NULL, maxseg);
    if (need > va->cap) {
        free(va->slab);
        va->slab = tn_xmalloc(need * sizeof *va->slab);
        va->cap = need;
    }
    carve(m, va, va->slab, maxseg);
    rotary_tables(m, va, mm);
    if (va->has_pos) interp_weights(m, va, mm);
}

/* ---------------------------------------------------------------- Qwen3-VL position embedding */

void tn_vision_pos_embed(const tn_model *m, const tn_vision_acts *va, float *out) {
    int E = m->cfg.vis.E;
    const float *W = m->vw->pos;
    for (int n = 0; n < va->N; n++) {
        const int32_t *ix = va->pidx + 4 * (size_t)n;
        const float *wt = va->pwt + 4 * (size_t)n;
        float *o = out + (size_t)n * E;
        for (int e = 0; e < E; e++)
            o[e] = W[(size_t)ix[0] * E + e] * wt[0] + W[(size_t)ix[1] * E + e] * wt[1] + W[(size_t)ix[2] * E + e] * wt[2] +
                   W[(size_t)ix[3] * E + e] * wt[3];
    }
}

void tn_vision_pos_embed_backward(tn_model *m, const tn_vision_acts *va, const float *dx) {
    int E = m->cfg.vis.E;
    float *dW = m->dvw->pos;
    for (int n = 0; n < va->N; n++)
        for (int c = 0; c < 4; c++) {
            float wt = va->pwt[4 * (size_t)n + c], *d = dW + (size_t)va->pidx[4 * (size_t)n + c] * E;
            for (int e = 0; e < E; e++) d[e] += wt * dx[(size_t)n * E + e];
        }
}

/* ---------------------------------------------------------------- window order (Qwen2.5-VL) */

static int windowed(const tn_model *m) { return m->cfg.vis.kind == TN_VL_QWEN25; }

void tn_vision_to_windows(const tn_model *m, tn_vision_acts *va, float *x) {
    if (!windowed(m)) return;
    int E = va->E, mm2 = m->cfg.vis.merge * m->cfg.vis.merge;
    for (int n = 0; n < va->N; n++) memcpy(va->t1 + (size_t)n * E, x + (size_t)block_row(va, mm2, n) * E, E * sizeof *x);
    memcpy(x, va->t1, (size_t)va->N * E * sizeof *x);
}

void tn_vision_from_windows(const tn_model *m, tn_vision_acts *va, float *x) {
    if (!windowed(m)) return;
    int E = va->E, mm2 = m->cfg.vis.merge * m->cfg.vis.merge;
    for (int n = 0; n < va->N; n++) memcpy(va->t1 + (size_t)block_row(va, mm2, n) * E, x + (size_t)n * E, E * sizeof *x);
    memcpy(x, va->t1, (size_t)va->N * E * sizeof *x);
}

void tn_vision_from_windows_merged(const tn_model *m, const tn_vision_acts *va, float *dst, const float *src) {
    for (int j = 0; j < va->M; j++) memcpy(dst + (size_t)va->perm[j] * m->D, src + (size_t)j * m->D, m->D * sizeof *dst);
}

void tn_vision_to_windows_merged(const tn_model *m, const tn_vision_acts *va, float *dst, const float *src) {
    for (int j = 0; j < va->M; j++) memcpy(dst + (size_t)j * m->D, src + (size_t)va->perm[j] * m->D, m->D * sizeof *dst);
}

/* ---------------------------------------------------------------- mergers */

/* x [N, E] -> out [M, D]: norm per patch over E (postshuffle: per merged token over 4E), the m*m patches of a
 * merged token side by side [M, 4E], fc1, exact GELU, fc2 */
void tn_merger_forward(const tn_model *m, const tn_merger_tensors *w, merger_acts *s, const float *x, int M,
                       int postshuffle) {
    const tn_vision_config *v = &m->cfg.vis;
    int H4 = v->E * v->merge * v->merge, rms = v->kind == TN_VL_QWEN25;
    if (postshuffle) tn_vnorm_forward(0, s->xn, s->mu, s->rs, x, w->nw, w->nb, M, H4);
    else tn_vnorm_forward(rms, s->xn, s->mu, s->rs, x, w->nw, w->nb, M * v->merge * v->merge, v->E);
    tn_vlinear(m, s->pre, s->xn, w->fc1_w, w->fc1_b, M, H4, H4, 0.0f);
    tn_vact_forward(tn_vact_kind("gelu"), s->act, s->pre, (size_t)M * H4);
    tn_vlinear(m, s->out, s->act, w->fc2_w, w->fc2_b, M, H4, m->D, 0.0f);
}

/* dx += d/dx (dx NULL: parameter gradients only) */
void tn_merger_backward(const tn_model *m, const tn_merger_tensors *w, const tn_merger_tensors *dw, merger_acts *s,
                        float *dx, const float *dout, const float *x, int M, int postshuffle) {
    const tn_vision_config *v = &m->cfg.vis;
    int H4 = v->E * v->merge * v->merge, rms = v->kind == TN_VL_QWEN25;
    tn_vlinear_backward(m, s->t1, dw->fc2_w, dw->fc2_b, dout, s->act, w->fc2_w, M, H4, m->D, 0.0f);
    tn_vact_backward(tn_vact_kind("gelu"), s->t2, s->t1, s->pre, (size_t)M * H4);
    tn_vlinear_backward(m, s->t1, dw->fc1_w, dw->fc1_b, s->t2, s->xn, w->fc1_w, M, H4, H4, 0.0f);
    if (!dx && !dw->nw) return;
    float *sink = dx;
    if (!dx) { /* norm weight gradients only: accumulate dx into scratch */
        sink = s->t2;
        memset(sink, 0, (size_t)M * H4 * sizeof *sink);
    }
    if (postshuffle) tn_vnorm_backward(0, sink, dw->nw, dw->nb, s->t1, x, w->nw, s->mu, s->rs, M, H4);
    else tn_vnorm_backward(rms, sink, dw->nw, dw->nb, s->t1, x, w->nw, s->mu, s->rs, M * v->merge * v->merge, v->E);
}
