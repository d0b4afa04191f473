/* model_forward.c -- activations slab, layer_forward / layer_backward, lm_head + cross-entropy.
 *
 * Shapes: T = B*S tokens, D hidden, H query heads, KV key/value heads, hd head dim, I intermediate,
 * Q3 = (H + 2 KV) hd (fused q|k|v columns), V vocab. Every tensor is row-major [rows, cols].
 * The lm_head and loss run in chunks of TC tokens: logits for a chunk are turned into dlogits in place
 * and consumed at once, so the [T, V] logits never exist whole. Only positions with a target enter the
 * lm_head (their rows gathered first): in SFT the prompt and the padding, often most of a batch, have no
 * logits to compute. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model.h"
#include "model/vision.h"

typedef struct {
    float *xn1, *rstd1;  /* [T, D], [T]  input_layernorm output and 1/rms */
    float *qkv;          /* [T, Q3]      q|k|v after bias, LoRA, (Qwen3) head norm and rotary */
    float *qk_raw;       /* [T, QK]      Qwen3: q|k before the head norm (QK = (H + KV) hd) */
    float *qk_rstd;      /* [T, H + KV]  Qwen3: 1/rms per q head, then per k head (T H, then T KV) */
    float *lse;          /* [B, H, S]    attention log-sum-exp per row */
    float *att;          /* [T, H hd]    attention output (o_proj input) */
    float *h;            /* [T, D]       residual after attention */
    float *xn2, *rstd2;  /* [T, D], [T]  post_attention_layernorm */
    float *gu;           /* [T, 2I]      gate | up pre-activations */
    float *la[TN_LT_COUNT]; /* [T, r]    LoRA A x per adapted projection */
} layer_acts;

struct tn_acts {
    const tn_backend *be;
    int B, S, T, TC, checkpointing; /* S, T: the current batch's; every buffer is sized for S_cap */
    int S_cap, B_cap;
    int64_t first_row;   /* index of row 0 in the global batch: keys the per-row dropout masks */
    size_t n_floats;
    float *slab;         /* every float buffer below is a range of this */
    layer_acts *layer;   /* [L] (checkpointing: all entries alias one set) */
    float *x;            /* [L+1, T, D]  layer inputs; x[L] = final residual stream */
    float *xnf, *rstdf;  /* final norm output [T, D] and 1/rms [T] */
    float *act, *dact;   /* [T, I]       silu(gate) * up and its gradient */
    float *dres;         /* [T, D]       gradient of the residual stream */
    float *dxn;          /* [T, D]       gradient of a norm's output */
    float *dqkv;         /* [T, Q3] */
    float *datt;         /* [T, H hd] */
    float *dgu;          /* [T, 2I] */
    float *dla;          /* [T, r] */
    float *la_emb;       /* [T, r]       embed_tokens LoRA: A^T rows of the tokens */
    float *drop_x, *drop_dx; /* [T, max(D, I, H hd)] LoRA dropout input and its gradient */
    float *logits;       /* [TC, V] */
    float *rope_cos, *rope_sin; /* [S, hd/2] */
    int32_t *ids, *targets;    /* [T]; targets: those of the scored rows, in order (n_scored of them) */
    int32_t *scored;           /* [T] positions that have a target */
    float *xs;                 /* [TC, D] final-norm output of one chunk of scored rows */
    int n_scored;
    int32_t *host_targets, *host_scored; /* [T] host staging */
    int takes_images;          /* the model has a vision tower */
    const tn_model *vis_model; /* that model (for checking image batches) */
    const tn_mm_batch *mm;     /* images of the next forward (borrowed), NULL: text only */
    /* VL models: rotary tables are per token ([T, hd/2], multimodal positions), images enter after the embedding */
    int32_t *pos3;             /* [3, T] t/h/w positions (get_rope_index) */
    int32_t *img_pos;          /* [T] token positions of the <|image_pad|> tokens, batch-row order */
    int n_img;                 /* how many (= merged image tokens of the batch) */
    tn_vision_acts *va;
    float **deep;              /* deepstack features [n_deep][n_img, D] (vision workspace), NULL: none */
    float *dimg, *ddeep;       /* [n_img, D], [n_deep, n_img, D] gradients gathered in backward */
};

/* ---------------------------------------------------------------- workspace */

static float *take(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += (n + 15) & ~(size_t)15; /* 64-byte alignment for every buffer */
    return p;
}

static void carve_layer(const tn_model *m, const tn_acts *a, layer_acts *s, float **cur) {
    size_t T = (size_t)a->T;
    s->xn1 = take(cur, T * m->D);
    s->rstd1 = take(cur, T);
    s->qkv = take(cur, T * m->qkv_cols);
    s->qk_raw = m->cfg.qk_norm ? take(cur, T * (m->H + m->KV) * m->hd) : NULL;
    s->qk_rstd = m->cfg.qk_norm ? take(cur, T * (m->H + m->KV)) : NULL;
    s->lse = take(cur, (size_t)a->B * m->H * a->S);
    s->att = take(cur, T * m->H * m->hd);
    s->h = take(cur, T * m->D);
    s->xn2 = take(cur, T * m->D);
    s->rstd2 = take(cur, T);
    s->gu = take(cur, T * 2 * m->I);
    for (int k = 0; k < TN_LT_COUNT; k++)
        s->la[k] = (m->lora.targets & (1u << k)) ? take(cur, T * m->lora.r) : NULL;
}

/* Lay out every buffer from *cur; called once to measure (base NULL) and once to assign. */
static void carve(const tn_model *m, tn_acts *a, float *base) {
    float *cur = base;
    size_t T = (size_t)a->T;
    int widest = m->D > m->I ? m->D : m->I;
    widest = widest > m->H * m->hd ? widest : m->H * m->hd;
    int n_sets = a->checkpointing ? 1 : m->L;
    for (int l = 0; l < n_sets; l++) carve_layer(m, a, &a->layer[l], &cur);
    for (int l = n_sets; l < m->L; l++) a->layer[l] = a->layer[0];
    a->x = take(&cur, (size_t)(m->L + 1) * T * m->D);
    a->xnf = take(&cur, T * m->D);
    a->rstdf = take(&cur, T);
    a->act = take(&cur, T * m->I);
    a->dact = take(&cur, T * m->I);
    a->dres = take(&cur, T * m->D);
    a->dxn = take(&cur, T * m->D);
    a->dqkv = take(&cur, T * m->qkv_cols);
    a->datt = take(&cur, T * m->H * m->hd);
    a->dgu = take(&cur, T * 2 * m->I);
    a->dla = m->lora.r ? take(&cur, T * m->lora.r) : NULL;
    a->la_emb = (m->lora.targets & TN_LORA_EMBED) ? take(&cur, T * m->lora.r) : NULL;
    a->drop_x = m->lora.dropout > 0 ? take(&cur, T * widest) : NULL;
    a->drop_dx = m->lora.dropout > 0 ? take(&cur, T * widest) : NULL;
    a->logits = take(&cur, (size_t)a->TC * m->V);
    a->xs = take(&cur, (size_t)a->TC * m->D);
    size_t rope_rows = m->cfg.vis.kind != TN_VL_NONE ? T : (size_t)a->S; /* VL: one table row per token */
    a->rope_cos = take(&cur, rope_rows * m->hd / 2);
    a->rope_sin = take(&cur, rope_rows * m->hd / 2);
    a->n_floats = (size_t)(cur - base);
}

/* HF default rotary tables: inv_freq[i] = theta^(-2i/hd), angle = pos * inv_freq (computed in double). */
static void fill_rope(const tn_model *m, tn_acts *a) {
    int half = m->hd / 2;
    size_t n = (size_t)a->S * half;
    float *c = tn_xmalloc(n * sizeof *c), *s = tn_xmalloc(n * sizeof *s);
    for (int p = 0; p < a->S; p++)
        for (int i = 0; i < half; i++) {
            double inv_freq = 1.0 / pow(m->cfg.rope_theta, (double)(2 * i) / m->hd);
            double ang = (double)p * inv_freq;
            c[(size_t)p * half + i] = (float)cos(ang);
            s[(size_t)p * half + i] = (float)sin(ang);
        }
    m->be->upload(a->rope_cos, c, n);
    m->be->upload(a->rope_sin, s, n);
    free(c);
    free(s);
}

tn_acts *tn_acts_create(const tn_model *m, int B, int S, int checkpointing) {
    tn_acts *a = tn_xcalloc(1, sizeof *a);
    a->be = m->be;
    a->B = a->B_cap = B, a->S = a->S_cap = S, a->T = B * S, a->checkpointing = checkpointing;
    /* lm_head chunk: the backend's logits budget (CPU 16M floats), a multiple of 64 rows */
    size_t budget = m->be->logits_floats ? m->be->logits_floats : (size_t)1 << 24;
    int tc = (int)(budget / (size_t)m->V > (size_t)1 << 20 ? (size_t)1 << 20 : budget / (size_t)m->V);
    tc = tc < 64 ? 64 : tc & ~63;
    a->TC = tc < a->T ? tc : a->T;
    a->layer = tn_xcalloc((size_t)m->L, sizeof *a->layer);
    carve(m, a, NULL);
    a->slab = m->be->alloc(a->n_floats);
    carve(m, a, a->slab);
    a->ids = m->be->alloc_i32((size_t)a->T);
    a->targets = m->be->alloc_i32((size_t)a->T);
    a->scored = m->be->alloc_i32((size_t)a->T);
    a->host_targets = tn_xcalloc((size_t)a->T, sizeof *a->host_targets);
    a->host_scored = tn_xcalloc((size_t)a->T, sizeof *a->host_scored);
    if (m->cfg.vis.kind != TN_VL_NONE) {
        a->takes_images = 1;
        a->vis_model = m;
        a->pos3 = tn_xcalloc((size_t)3 * a->T, sizeof *a->pos3);
        a->img_pos = tn_xcalloc((size_t)a->T, sizeof *a->img_pos);
        a->va = tn_vision_acts_create(checkpointing);
    } else {
        fill_rope(m, a);
    }
    return a;
}

void tn_acts_free(tn_acts *a) {
    if (!a) return;
    a->be->free(a->slab);
    a->be->free(a->ids);
    a->be->free(a->targets);
    a->be->free(a->scored);
    free(a->layer);
    free(a->host_targets);
    free(a->host_scored);
    free(a->pos3), free(a->img_pos), free(a->dimg), free(a->ddeep);
    tn_vision_acts_free(a->va);
    free(a);
}

size_t tn_acts_bytes(const tn_acts *a) { return a->n_floats * sizeof(float); }

/* ---------------------------------------------------------------- linear layers with LoRA */

static uint64_t lora_seed(uint64_t seed, int layer, int target) {
    return seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(layer * TN_LT_COUNT + target + 1));
}

/* Dropout mask of one row of the global batch: depends on the row's place in the global batch, not on
 * how the batch is split into ranks and micro-batches, so every split draws the same masks. */
static void row_dropout(const tn_model *m, const tn_acts *a, float *y, const float *x, int in, uint64_t seed) {
    size_t row = (size_t)a->S * in;
    for (int b = 0; b < a->B; b++)
        m->be->dropout(y + b * row, x + b * row, row, (float)m->lora.dropout,
                       seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(a->first_row + b + 1)));
}

/* LoRA input: x itself, or its dropout (regenerated identically in backward from the seed). */
static const float *lora_input(const tn_model *m, tn_acts *a, const float *x, int in, uint64_t seed) {
    if (m->lora.dropout <= 0) return x;
    row_dropout(m, a, a->drop_x, x, in, seed);
    return a->drop_x;
}

void tn_acts_set_first_row(tn_acts *a, int64_t first_row) { a->first_row = first_row; }

int tn_acts_set_images(tn_acts *a, const tn_mm_batch *mm, char *err, size_t errlen) {
    if (mm && mm->n_images > 0 && !a->takes_images) {
        snprintf(err, errlen, "this model takes no images, but a batch holds %d (a vision-language model_type "
                 "is needed)", mm->n_images);
        return -1;
    }
    if (mm && mm->n_images > 0 && a->vis_model && tn_vision_check(a->vis_model, mm, err, errlen) != 0) return -1;
    a->mm = (mm && mm->n_images > 0) ? mm : NULL;
    return 0;
}

/* y[T, out] (row stride ldy) += scale * (drop(x)[T, in] A^T) B^T ; saves la = drop(x) A^T [T, r] */
static void lora_forward(const tn_model *m, tn_acts *a, const tn_lora_pair *w, float *la, const float *x,
                         int in, int out, float *y, int ldy, uint64_t seed) {
    if (!w->A) return;
    const tn_backend *be = m->be;
    int r = m->lora.r;
    const float *xi = lora_input(m, a, x, in, seed);
    be->matmul(0, 1, a->T, r, in, 1.0f, xi, in, w->A, in, 0.0f, la, r);
    be->matmul(0, 1, a->T, out, r, m->lora_scale, la, r, w->B, r, 1.0f, y, ldy);
}

/* Given dy [T, out] (stride ldy): dB += s dy^T la ; dla = s dy B ; dA += dla^T drop(x) ; dx += drop'(dla A) */
static void lora_backward(const tn_model *m, tn_acts *a, const tn_lora_pair *w, const tn_lora_pair *dw,
                          const float *la, const float *x, int in, int out, const float *dy, int ldy, float *dx,
                          uint64_t seed) {
    if (!w->A) return;
    const tn_backend *be = m->be;
    int T = a->T, r = m->lora.r;
    float s = m->lora_scale;
    be->matmul(1, 0, out, r, T, s, dy, ldy, la, r, 1.0f, dw->B, r);
    be->matmul(0, 0, T, r, out, s, dy, ldy, w->B, r, 0.0f, a->dla, r);
    const float *xi = lora_input(m, a, x, in, seed);
    be->matmul(1, 0, r, in, T, 1.0f, a->dla, r, xi, in, 1.0f, dw->A, in);
    if (m->lora.dropout <= 0) {
        be->matmul(0, 0, T, in, r, 1.0f, a->dla, r, w->A, in, 1.0f, dx, in);
    } else {
        size_t n = (size_t)T * in;
        be->matmul(0, 0, T, in, r, 1.0f, a->dla, r, w->A, in, 0.0f, a->drop_dx, in);
        row_dropout(m, a, a->drop_dx, a->drop_dx, in, seed); /* same mask, same 1/(1-p) */
        be->add(dx, a->drop_dx, n);
    }
}

/* Base linear backward for y = x W^T + b: dW += dy^T x ; db += colsum(dy) ; dx = (or +=) dy W */
static void linear_backward(const tn_model *m, int T, int in, int out, const float *dy, int ldy, const float *x,
                            const float *W, float *dW, float *db, float *dx, float beta_dx) {
    const tn_backend *be = m->be;
    if (dW) be->matmul(1, 0, out, in, T, 1.0f, dy, ldy, x, in, 1.0f, dW, in);
    if (db) be->bias_backward(db, dy, T, out, ldy);
    be->matmul(0, 0, T, in, out, 1.0f, dy, ldy, W, in, beta_dx, dx, in);
}

/* ---------------------------------------------------------------- one decoder layer */

/* out = layer(x): attention block then MLP block, both pre-norm with residuals. */
static void layer_forward(const tn_model *m, tn_acts *a, int l, const float *x, float *out, uint64_t seed) {
    const tn_backend *be = m->be;
    const tn_layer_tensors *w = &m->w[l];
    layer_acts *s = &a->layer[l];
    const int T = a->T, D = m->D, I = m->I, Q3 = m->qkv_cols, HD = m->H * m->hd, KVD = m->KV * m->hd;
    const float eps = (float)m->cfg.rms_norm_eps;

    be->rmsnorm_forward(s->xn1, s->rstd1, x, w->ln1, T, D, eps);
    /* qkv [T, Q3] = xn1 [T, D] Wqkv^T [D, Q3] + b, + LoRA per projection, then rotary on q and k */
    be->matmul(0, 1, T, Q3, D, 1.0f, s->xn1, D, w->wqkv, D, 0.0f, s->qkv, Q3);
    if (w->bqkv) be->add_bias(s->qkv, w->bqkv, T, Q3, Q3);
    lora_forward(m, a, &w->lora[TN_LT_Q], s->la[TN_LT_Q], s->xn1, D, HD, s->qkv, Q3, lora_seed(seed, l, TN_LT_Q));
    lora_forward(m, a, &w->lora[TN_LT_K], s->la[TN_LT_K], s->xn1, D, KVD, s->qkv + HD, Q3,
                 lora_seed(seed, l, TN_LT_K));
    lora_forward(m, a, &w->lora[TN_LT_V], s->la[TN_LT_V], s->xn1, D, KVD, s->qkv + HD + KVD, Q3,
                 lora_seed(seed, l, TN_LT_V));
    if (w->qn) { /* Qwen3: RMSNorm of each q and k head before rotary; the raw values are kept for backward */
        be->copy_rows(s->qk_raw, HD + KVD, s->qkv, Q3, T, HD + KVD);
        be->head_rmsnorm_forward(s->qkv, Q3, s->qk_rstd, s->qk_raw, HD + KVD, w->qn, T, m->H, m->hd, eps);
        be->head_rmsnorm_forward(s->qkv + HD, Q3, s->qk_rstd + (size_t)T * m->H, s->qk_raw + HD, HD + KVD, w->kn, T,
                                 m->KV, m->hd, eps);
    }
    const int RS = a->va ? T : a->S; /* VL: a table row per token */
    be->rope(s->qkv, T, RS, m->H, m->hd, Q3, a->rope_cos, a->rope_sin, 0);
    be->rope(s->qkv + HD, T, RS, m->KV, m->hd, Q3, a->rope_cos, a->rope_sin, 0);
    /* att [T, H hd] = causal softmax(q k^T / sqrt(hd)) v */
    be->attention_forward(s->att, s->lse, s->qkv, a->B, a->S, m->H, m->KV, m->hd, Q3);
    /* h [T, D] = x + att Wo^T + bo + LoRA */
    be->copy(s->h, x, (size_t)T * D);
    be->matmul(0, 1, T, D, HD, 1.0f, s->att, HD, w->wo, HD, 1.0f, s->h, D);
    if (w->bo) be->add_bias(s->h, w->bo, T, D, D);
    lora_forward(m, a, &w->lora[TN_LT_O], s->la[TN_LT_O], s->att, HD, D, s->h, D, lora_seed(seed, l, TN_LT_O));
    /* MLP: gu [T, 2I] = xn2 Wgu^T ; act = silu(gate) * up ; out = h + act Wdown^T */
    be->rmsnorm_forward(s->xn2, s->rstd2, s->h, w->ln2, T, D, eps);
    be->matmul(0, 1, T, 2 * I, D, 1.0f, s->xn2, D, w->wgu, D, 0.0f, s->gu, 2 * I);
    lora_forward(m, a, &w->lora[TN_LT_GATE], s->la[TN_LT_GATE], s->xn2, D, I, s->gu, 2 * I,
                 lora_seed(seed, l, TN_LT_GATE));
    lora_forward(m, a, &w->lora[TN_LT_UP], s->la[TN_LT_UP], s->xn2, D, I, s->gu + I, 2 * I,
                 lora_seed(seed, l, TN_LT_UP));
    be->swiglu_forward(a->act, s->gu, T, I);
    be->copy(out, s->h, (size_t)T * D);
    be->matmul(0, 1, T, D, I, 1.0f, a->act, I, w->wdown, I, 1.0f, out, D);
    lora_forward(m, a, &w->lora[TN_LT_DOWN], s->la[TN_LT_DOWN], a->act, I, D, out, D,
                 lora_seed(seed, l, TN_LT_DOWN));
}

/* a->dres holds d(out) on entry and d(x) on return; parameter gradients accumulate into m->dw[l]. */
static void layer_backward(tn_model *m, tn_acts *a, int l, const float *x, uint64_t seed) {
    const tn_backend *be = m->be;
    const tn_layer_tensors *w = &m->w[l], *dw = &m->dw[l];
    layer_acts *s = &a->layer[l];
    const int T = a->T, D = m->D, I = m->I, Q3 = m->qkv_cols, HD = m->H * m->hd, KVD = m->KV * m->hd;

    /* MLP block. act is not stored: recompute it from gu. */
    be->swiglu_forward(a->act, s->gu, T, I);
    linear_backward(m, T, I, D, a->dres, D, a->act, w->wdown, dw->wdown, NULL, a->dact, 0.0f);
    lora_backward(m, a, &w->lora[TN_LT_DOWN], &dw->lora[TN_LT_DOWN], s->la[TN_LT_DOWN], a->act, I, D, a->dres, D,
                  a->dact, lora_seed(seed, l, TN_LT_DOWN));
    be->swiglu_backward(a->dgu, a->dact, s->gu, T, I);
    linear_backward(m, T, D, 2 * I, a->dgu, 2 * I, s->xn2, w->wgu, dw->wgu, NULL, a->dxn, 0.0f);
    lora_backward(m, a, &w->lora[TN_LT_GATE], &dw->lora[TN_LT_GATE], s->la[TN_LT_GATE], s->xn2, D, I, a->dgu,
                  2 * I, a->dxn, lora_seed(seed, l, TN_LT_GATE));
    lora_backward(m, a, &w->lora[TN_LT_UP], &dw->lora[TN_LT_UP], s->la[TN_LT_UP], s->xn2, D, I, a->dgu + I,
                  2 * I, a->dxn, lora_seed(seed, l, TN_LT_UP));
    be->rmsnorm_backward(a->dres, dw->ln2, a->dxn, s->h, w->ln2, s->rstd2, T, D); /* dres = dh */

    /* attention block */
    linear_backward(m, T, HD, D, a->dres, D, s->att, w->wo, dw->wo, dw->bo, a->datt, 0.0f);
    lora_backward(m, a, &w->lora[TN_LT_O], &dw->lora[TN_LT_O], s->la[TN_LT_O], s->att, HD, D, a->dres, D,
                  a->datt, lora_seed(seed, l, TN_LT_O));
    be->attention_backward(a->dqkv, a->datt, s->att, s->lse, s->qkv, a->B, a->S, m->H, m->KV, m->hd, Q3);
    const int RS = a->va ? T : a->S;
    be->rope(a->dqkv, T, RS, m->H, m->hd, Q3, a->rope_cos, a->rope_sin, 1);
    be->rope(a->dqkv + HD, T, RS, m->KV, m->hd, Q3, a->rope_cos, a->rope_sin, 1);
    if (w->qn) { /* through Qwen3's head norms, in place: d(normed q|k) -> d(raw q|k) */
        be->head_rmsnorm_backward(a->dqkv, Q3, dw->qn, a->dqkv, Q3, s->qk_raw, HD + KVD, w->qn, s->qk_rstd, T, m->H,
                                  m->hd);
        be->head_rmsnorm_backward(a->dqkv + HD, Q3, dw->kn, a->dqkv + HD, Q3, s->qk_raw + HD, HD + KVD, w->kn,
                                  s->qk_rstd + (size_t)T * m->H, T, m->KV, m->hd);
    }
    linear_backward(m, T, D, Q3, a->dqkv, Q3, s->xn1, w->wqkv, dw->wqkv, dw->bqkv, a->dxn, 0.0f);
    lora_backward(m, a, &w->lora[TN_LT_Q], &dw->lora[TN_LT_Q], s->la[TN_LT_Q], s->xn1, D, HD, a->dqkv, Q3, a->dxn,
                  lora_seed(seed, l, TN_LT_Q));
    lora_backward(m, a, &w->lora[TN_LT_K], &dw->lora[TN_LT_K], s->la[TN_LT_K], s->xn1, D, KVD, a->dqkv + HD, Q3,
                  a->dxn, lora_seed(seed, l, TN_LT_K));
    lora_backward(m, a, &w->lora[TN_LT_V], &dw->lora[TN_LT_V], s->la[TN_LT_V], s->xn1, D, KVD,
                  a->dqkv + HD + KVD, Q3, a->dxn, lora_seed(seed, l, TN_LT_V));
    be->rmsnorm_backward(a->dres, dw->ln1, a->dxn, x, w->ln1, s->rstd1, T, D); /* dres = dx */
}

/* ---------------------------------------------------------------- whole model */

static void check_batch(const tn_model *m, const tn_acts *a, const int32_t *ids, const int32_t *labels, int B,
                        int S) {
    if (B * S > a->T || S > a->S) tn_die("batch %dx%d exceeds the workspace %dx%d", B, S, a->B, a->S);
    for (int i = 0; i < B * S; i++) {
        if (ids[i] < 0 || ids[i] >= m->V) tn_die("token id %d at position %d outside the vocabulary [0, %d)", ids[i], i, m->V);
        if (labels && labels[i] != -100 && (labels[i] < 0 || labels[i] >= m->V))
            tn_die("label %d at position %d is neither -100 nor a token id", labels[i], i);
    }
}

static void params(const tn_model *m, int g, int need, int next) {
    if (m->param_hook) m->param_hook(m->param_hook_ctx, g, need, next);
}

/* ---------------------------------------------------------------- vision-language inputs */

/* x[pos[j]] += src[j] (rows of D) */
static void rows_add(float *x, const float *src, const int32_t *pos, int n, int D) {
    for (int j = 0; j < n; j++)
        for (int d = 0; d < D; d++) x[(size_t)pos[j] * D + d] += src[(size_t)j * D + d];
}

/* Positions (get_rope_index over the whole rows: with right padding the valid tokens' positions are those of
 * transformers with the attention mask), the per-token rotary tables, and the image features: the vision tower's
 * output replaces the embeddings of the <|image_pad|> tokens in batch-row order; deepstack features wait in a->deep
 * for the first decoder layers. */
static void vl_inputs(tn_model *m, tn_acts *a, const int32_t *ids) {
    const tn_vision_config *v = &m->cfg.vis;
    const tn_mm_batch *mm = a->mm;
    char err[256];
    int n_images = mm ? mm->n_images : 0;
    if (tn_vl_rope_index(m, ids, NULL, a->B, a->S, mm ? mm->grid_thw : NULL, n_images, a->pos3, err, sizeof err) != 0)
        tn_die("vision-language batch: %s", err);
    tn_vl_mrope_tables(m, a->pos3, a->T, a->rope_cos, a->rope_sin);
    a->n_img = 0;
    for (int t = 0; t < a->T; t++)
        if (ids[t] == v->image_token_id) a->img_pos[a->n_img++] = t;
    a->deep = NULL;
    if (!mm) {
        if (a->n_img) tn_die("vision-language batch: %d <|image_pad|> tokens but no images", a->n_img);
        return;
    }
    float *img;
    int M = tn_vision_forward(m, a->va, mm, &img, &a->deep);
    if (M != a->n_img) tn_die("vision-language batch: %d <|image_pad|> tokens but the images give %d features", a->n_img, M);
    for (int j = 0; j < M; j++) memcpy(a->x + (size_t)a->img_pos[j] * m->D, img + (size_t)j * m->D, m->D * sizeof *img);
    if (!v->n_deep) a->deep = NULL;
}

/* Gradients of the image features from the residual-stream gradient: after layer l's backward when l feeds a
 * deepstack level; at the end the image rows of d(embeddings), which are then cleared (those rows were replaced). */
static void vl_gather(const tn_model *m, tn_acts *a, float *dst, int clear) {
    for (int j = 0; j < a->n_img; j++) {
        float *r = a->dres + (size_t)a->img_pos[j] * m->D;
        if (dst) memcpy(dst + (size_t)j * m->D, r, m->D * sizeof *r);
        if (clear) memset(r, 0, m->D * sizeof *r);
    }
}

const float *tn_acts_intermediate(const tn_acts *a, const char *name, int *rows, int *cols) {
    if (!a->vis_model) return NULL;
    if (strcmp(name, "inputs_embeds") == 0) {
        *rows = a->T, *cols = a->vis_model->D;
        return a->x;
    }
    return a->va ? tn_vision_intermediate(a->va, name, rows, cols) : NULL;
}

void tn_acts_vision_seconds(const tn_acts *a, double *fwd_s, double *bwd_s) {
    tn_vision_seconds(a->va, fwd_s, bwd_s);
}

static void vl_grad_buffers(const tn_model *m, tn_acts *a) {
    size_t n = (size_t)a->n_img * m->D;
    a->dimg = tn_xrealloc(a->dimg, (n ? n : 1) * sizeof *a->dimg);
    a->ddeep = tn_xrealloc(a->ddeep, (n * m->cfg.vis.n_deep + 1) * sizeof *a->ddeep);
}

/* Forward through every layer: a->x[0] = embeddings, ..., a->x[L] = final residual; xnf = final norm. Leaves
 * group L (final norm, lm_head) and, when tied, the embedding in use: the caller releases them after the
 * lm_head (lm_head_done). backward: the pass goes on with layer L-1's backward (what to prefetch). */
static void forward_layers(tn_model *m, tn_acts *a, const int32_t *ids, uint64_t seed, int backward) {
    const tn_backend *be = m->be;
    size_t TD = (size_t)a->T * m->D;
    be->upload_i32(a->ids, ids, (size_t)a->T);
    params(m, -1, 1, m->L ? 0 : m->L);
    be->embedding_forward(a->x, m->embed, a->ids, a->T, m->D);
    if (m->lora_emb.A) { /* PEFT embedding adapter: x += s (A^T[ids]) B^T, no dropout */
        be->embedding_forward(a->la_emb, m->lora_emb.A, a->ids, a->T, m->lora.r);
        be->matmul(0, 1, a->T, m->D, m->lora.r, m->lora_scale, a->la_emb, m->lora.r, m->lora_emb.B, m->lora.r, 1.0f,
                   a->x, m->D);
    }
    if (a->va) vl_inputs(m, a, ids); /* the vision tower is in group -1 with the embedding */
    if (!m->cfg.tie_word_embeddings) params(m, -1, 0, -2);
    for (int l = 0; l < m->L; l++) {
        params(m, l, 1, l + 1);
        layer_forward(m, a, l, a->x + l * TD, a->x + (l + 1) * TD, seed);
        params(m, l, 0, -2);
        if (a->deep && l < m->cfg.vis.n_deep) rows_add(a->x + (l + 1) * TD, a->deep[l], a->img_pos, a->n_img, m->D);
    }
    params(m, m->L, 1, backward && m->L ? m->L - 1 : -2);
    be->rmsnorm_forward(a->xnf, a->rstdf, a->x + m->L * TD, m->norm, a->T, m->D, (float)m->cfg.rms_norm_eps);
}

static void lm_head_done(const tn_model *m) {
    params(m, m->L, 0, -2);
    if (m->cfg.tie_word_embeddings) params(m, -1, 0, -2);
}

/* Tells the hook that every gradient of group >= g (layers g.., then final norm and lm_head; -1 = all)
 * is final for this backward pass. */
static void grad_ready(const tn_model *m, int g) {
    if (m->grad_ready) m->grad_ready(m->grad_ready_ctx, tn_model_grad_frontier(m, g));
}

/* A batch has up to the workspace's B rows and any length up to its S: buffers sized for B_cap x S_cap
 * hold a smaller batch as they are (rotary tables are indexed by position, attention by the current B, S). */
static void set_shape(tn_acts *a, int B, int S) {
    if (B < 1 || B > a->B_cap || S < 1 || S > a->S_cap)
        tn_die("batch %dx%d does not fit the workspace %dx%d", B, S, a->B_cap, a->S_cap);
    a->B = B, a->S = S, a->T = B * S;
}

/* The positions with a target (HF shift: position t is scored against labels[t + 1]) and their targets. */
static void stage_targets(const tn_model *m, tn_acts *a, const int32_t *labels, int B, int S) {
    int n = 0;
    for (int b = 0; b < B; b++)
        for (int s = 0; s + 1 < S; s++) {
            int32_t y = labels[b * S + s + 1];
            if (y == -100) continue;
            a->host_scored[n] = b * S + s;
            a->host_targets[n++] = y;
        }
    a->n_scored = n;
    m->be->upload_i32(a->scored, a->host_scored, (size_t)n);
    m->be->upload_i32(a->targets, a->host_targets, (size_t)n);
}

/* lm_head + cross-entropy over the scored rows of xnf, in chunks: gather the rows, logits, loss (and, with
 * backward, dlogits in place -> dW_lm += dlogits^T xs, dxn[row] = dlogits W; unscored rows of dxn are 0). */
static double lm_head_loss(tn_model *m, tn_acts *a, float grad_scale, int64_t *n_valid, int backward) {
    const tn_backend *be = m->be;
    const int D = m->D, V = m->V;
    if (backward) be->zero(a->dxn, (size_t)a->T * D);
    for (int t0 = 0; t0 < a->n_scored; t0 += a->TC) {
        int n = t0 + a->TC < a->n_scored ? a->TC : a->n_scored - t0;
        be->embedding_forward(a->xs, a->xnf, a->scored + t0, n, D); /* a row gather */
        be->matmul(0, 1, n, V, D, 1.0f, a->xs, D, m->lm_head, D, 0.0f, a->logits, V);
        be->cross_entropy_add(a->logits, a->targets + t0, n, V, backward ? grad_scale : 0.0f);
        if (!backward) continue;
        if (m->d_lm_head) be->matmul(1, 0, V, D, n, 1.0f, a->logits, V, a->xs, D, 1.0f, m->d_lm_head, D);
        be->matmul(0, 0, n, D, V, 1.0f, a->logits, V, m->lm_head, D, 0.0f, a->xs, D);
        be->embedding_backward(a->dxn, a->xs, a->scored + t0, n, D); /* a row scatter: scored rows are distinct */
    }
    return be->cross_entropy_total(n_valid); /* the forward's one wait for the device */
}

double tn_model_forward_backward(tn_model *m, tn_acts *a, const int32_t *ids, const int32_t *labels, int B,
                                 int S, float grad_scale, int64_t *n_valid, uint64_t dropout_seed) {
    const tn_backend *be = m->be;
    set_shape(a, B, S);
    check_batch(m, a, ids, labels, B, S);
    const int T = a->T, D = m->D;
    size_t TD = (size_t)T * D;
    stage_targets(m, a, labels, B, S);

    forward_layers(m, a, ids, dropout_seed, 1);
    double loss = lm_head_loss(m, a, grad_scale, n_valid, 1);
    be->zero(a->dres, TD);
    be->rmsnorm_backward(a->dres, m->d_norm, a->dxn, a->x + m->L * TD, m->norm, a->rstdf, T, D);
    lm_head_done(m);
    grad_ready(m, m->L);

    int vl = a->va && a->mm && m->dvw->any, n_deep = m->cfg.vis.n_deep;
    float *ddeep[TN_VL_MAX_IDX] = {0};
    if (vl) vl_grad_buffers(m, a);
    for (int l = m->L - 1; l >= 0; l--) {
        params(m, l, 1, l > 0 ? l - 1 : -2);
        if (vl && l < n_deep) vl_gather(m, a, ddeep[l] = a->ddeep + (size_t)l * a->n_img * D, 0);
        if (a->checkpointing) layer_forward(m, a, l, a->x + l * TD, a->x + (l + 1) * TD, dropout_seed);
        layer_backward(m, a, l, a->x + l * TD, dropout_seed);
        params(m, l, 0, -2);
        grad_ready(m, l);
    }
    if (a->va && a->mm) vl_gather(m, a, vl ? a->dimg : NULL, 1);
    if (m->d_embed) be->embedding_backward(m->d_embed, a->dres, a->ids, T, D);
    if (m->d_lora_emb.A) { /* dB += s dx^T la ; d(A^T)[ids] += s dx B */
        int r = m->lora.r;
        be->matmul(1, 0, D, r, T, m->lora_scale, a->dres, D, a->la_emb, r, 1.0f, m->d_lora_emb.B, r);
        be->matmul(0, 0, T, r, D, m->lora_scale, a->dres, D, m->lora_emb.B, r, 0.0f, a->dla, r);
        be->embedding_backward(m->d_lora_emb.A, a->dla, a->ids, T, r);
    }
    if (vl) {
        params(m, -1, 1, -2);
        tn_vision_backward(m, a->va, a->dimg, ddeep);
        params(m, -1, 0, -2);
    }
    a->mm = NULL;
    grad_ready(m, -1);
    return loss;
}

double tn_model_eval_loss(tn_model *m, tn_acts *a, const int32_t *ids, const int32_t *labels, int B, int S,
                          int64_t *n_valid) {
    set_shape(a, B, S);
    check_batch(m, a, ids, labels, B, S);
    stage_targets(m, a, labels, B, S);
    double p = m->lora.dropout; /* evaluation runs without dropout */
    m->lora.dropout = 0;
    forward_layers(m, a, ids, 0, 0);
    m->lora.dropout = p;
    double loss = lm_head_loss(m, a, 0.0f, n_valid, 0);
    lm_head_done(m);
    a->mm = NULL;
    return loss;
}

void tn_model_logits(tn_model *m, tn_acts *a, const int32_t *ids, int B, int S, float *logits_host) {
    const tn_backend *be = m->be;
    set_shape(a, B, S);
    check_batch(m, a, ids, NULL, B, S);
    /* no dropout at inference: a model with dropout > 0 evaluates with it disabled */
    double p = m->lora.dropout;
    m->lora.dropout = 0;
    forward_layers(m, a, ids, 0, 0);
    m->lora.dropout = p;
    for (int t0 = 0; t0 < a->T; t0 += a->TC) {
        int n = t0 + a->TC < a->T ? a->TC : a->T - t0;
        be->matmul(0, 1, n, m->V, m->D, 1.0f, a->xnf + (size_t)t0 * m->D, m->D, m->lm_head, m->D, 0.0f, a->logits,
                   m->V);
        be->download(logits_host + (size_t)t0 * m->V, a->logits, (size_t)n * m->V);
    }
    lm_head_done(m);
    a->mm = NULL;
}
