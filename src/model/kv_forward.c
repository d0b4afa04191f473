/* kv_forward.c -- see kv_forward.h. Shapes: T rows (the tokens of every segment, back to back), D hidden, H query
 * and KV key/value heads of hd, HD = H hd, KVD = KV hd, Q3 = HD + 2 KVD (q|k|v columns), I intermediate, V vocab. */
#include "model/kv_forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/vision.h"

struct tn_kv {
    tn_model *m;
    const tn_backend *be;
    int n_slots, ctx;
    float **cache;           /* [n_slots]: [L][2][ctx][KVD] (K then V of each layer) */
    int *len;                /* [n_slots] */
    float *rope_cos, *rope_sin; /* [ctx, hd/2] */
    /* workspace for up to rows_cap rows (grown on demand) */
    int rows_cap, segs_cap;
    float *ws;
    float *x, *xn, *rstd, *qkv, *qk_raw, *qk_rstd, *att, *gu, *act, *la, *xs, *xs_n, *logits;
    int32_t *ids, *pos, *last;  /* backend memory [rows_cap], [rows_cap], [segs_cap] */
    int32_t *host_ids, *host_pos, *host_last;
    const float **krow, **vrow; /* [rows_cap] host: row t's K and V block of the current layer */
    /* VL models: rotary tables per row from multimodal positions; a slot's next text position is its length plus
     * delta[slot] (an image advances positions by max(t, h, w), not by its token count) */
    int vl, *delta, *new_delta;
    float *row_cos, *row_sin;   /* [rows_cap, hd/2] */
    int32_t *rowid, *host_rowid, *host_pos3; /* identity rows [rows_cap]; host t/h/w positions [3, rows_cap] */
    float *host_cos, *host_sin;
    tn_vision_acts *va;
    int32_t *img_rows;          /* [rows_cap] rows of the <|image_pad|> tokens of this step */
    int n_img;
    float **deep;               /* deepstack features of this step's images (NULL: none) */
};

static size_t slot_floats(const tn_kv *kv) { return (size_t)kv->m->L * 2 * kv->ctx * kv->m->KV * kv->m->hd; }

static void fill_rope(tn_kv *kv) {
    const tn_model *m = kv->m;
    int half = m->hd / 2;
    size_t n = (size_t)kv->ctx * half;
    float *c = tn_xmalloc(n * sizeof *c), *s = tn_xmalloc(n * sizeof *s);
    for (int p = 0; p < kv->ctx; p++) /* the tables of model_forward.c: the same float for the same position */
        for (int i = 0; i < half; i++) {
            double ang = (double)p * (1.0 / pow(m->cfg.rope_theta, (double)(2 * i) / m->hd));
            c[(size_t)p * half + i] = (float)cos(ang);
            s[(size_t)p * half + i] = (float)sin(ang);
        }
    kv->rope_cos = kv->be->alloc(n);
    kv->rope_sin = kv->be->alloc(n);
    kv->be->upload(kv->rope_cos, c, n);
    kv->be->upload(kv->rope_sin, s, n);
    free(c), free(s);
}

tn_kv *tn_kv_create(tn_model *m, int n_slots, int ctx) {
    const tn_backend *be = m->be;
    if (!be->linear_rows || !be->rope_at || !be->attention_cached) {
        tn_err("the %s backend has no generation kernels yet: generation runs on the CPU (device: cpu)", be->name);
        return NULL;
    }
    if (n_slots < 1 || ctx < 2) {
        tn_err("generation needs at least one sequence of 2 tokens (got %d x %d)", n_slots, ctx);
        return NULL;
    }
    tn_kv *kv = tn_xcalloc(1, sizeof *kv);
    kv->m = m, kv->be = be, kv->n_slots = n_slots, kv->ctx = ctx;
    kv->cache = tn_xcalloc((size_t)n_slots, sizeof *kv->cache);
    kv->len = tn_xcalloc((size_t)n_slots, sizeof *kv->len);
    /* A new slot is released as a finished one is: on the CPU that marks it for transparent huge pages. Every
     * decode step reads each layer's cached rows front to back, one 4 KiB row per position for Qwen3-0.6B: on
     * small pages a TLB miss (a two-level walk under a hypervisor) per row, K and V, layer and token. */
    for (int s = 0; s < n_slots; s++) {
        kv->cache[s] = be->alloc(slot_floats(kv));
        be->release(kv->cache[s], slot_floats(kv));
    }
    fill_rope(kv);
    if (m->cfg.vis.kind != TN_VL_NONE) {
        kv->vl = 1;
        kv->delta = tn_xcalloc((size_t)n_slots, sizeof *kv->delta);
        kv->new_delta = tn_xcalloc((size_t)n_slots, sizeof *kv->new_delta);
        kv->va = tn_vision_acts_create(1);
    }
    return kv;
}

static void free_workspace(tn_kv *kv) {
    const tn_backend *be = kv->be;
    be->free(kv->ws);
    be->free(kv->ids), be->free(kv->pos), be->free(kv->last);
    free(kv->host_ids), free(kv->host_pos), free(kv->host_last), free(kv->krow), free(kv->vrow);
    if (kv->vl) {
        be->free(kv->row_cos), be->free(kv->row_sin), be->free(kv->rowid);
        free(kv->host_rowid), free(kv->host_pos3), free(kv->host_cos), free(kv->host_sin), free(kv->img_rows);
        kv->row_cos = kv->row_sin = NULL, kv->rowid = NULL;
        kv->host_rowid = kv->host_pos3 = kv->img_rows = NULL, kv->host_cos = kv->host_sin = NULL;
    }
    kv->ws = NULL, kv->ids = kv->pos = kv->last = NULL;
    kv->host_ids = kv->host_pos = kv->host_last = NULL, kv->krow = kv->vrow = NULL;
}

void tn_kv_free(tn_kv *kv) {
    if (!kv) return;
    for (int s = 0; s < kv->n_slots; s++) kv->be->free(kv->cache[s]);
    kv->be->free(kv->rope_cos), kv->be->free(kv->rope_sin);
    free_workspace(kv);
    free(kv->cache), free(kv->len), free(kv->delta), free(kv->new_delta);
    tn_vision_acts_free(kv->va);
    free(kv);
}

int tn_kv_ctx(const tn_kv *kv) { return kv->ctx; }
int tn_kv_slots(const tn_kv *kv) { return kv->n_slots; }
int tn_kv_len(const tn_kv *kv, int slot) { return kv->len[slot]; }
void tn_kv_truncate(tn_kv *kv, int slot, int len) {
    if (len >= 0 && len < kv->len[slot]) kv->len[slot] = len;
    if (kv->vl && len == 0) kv->delta[slot] = 0; /* (a cut inside an image's text would need its positions again) */
}
void tn_kv_release(tn_kv *kv, int slot) {
    kv->len[slot] = 0;
    if (kv->vl) kv->delta[slot] = 0;
    kv->be->release(kv->cache[slot], slot_floats(kv));
}
size_t tn_kv_resident(const tn_kv *kv) {
    size_t b = 0;
    for (int s = 0; s < kv->n_slots; s++) b += kv->be->resident(kv->cache[s], slot_floats(kv));
    return b;
}

static float *take(float **cur, size_t n) {
    float *p = *cur;
    *cur += (n + 15) & ~(size_t)15;
    return p;
}

/* Lays the row buffers out from base (NULL: only measures); returns floats used. */
static size_t carve(tn_kv *kv, float *base, int T, int NS) {
    const tn_model *m = kv->m;
    size_t t = (size_t)T, r = m->lora.r ? (size_t)m->lora.r : 1;
    float *c = base;
    kv->x = take(&c, t * m->D), kv->xn = take(&c, t * m->D), kv->rstd = take(&c, t);
    kv->qkv = take(&c, t * m->qkv_cols), kv->qk_raw = take(&c, t * (m->H + m->KV) * m->hd);
    kv->qk_rstd = take(&c, t * (m->H + m->KV)), kv->att = take(&c, t * m->H * m->hd);
    kv->gu = take(&c, t * 2 * m->I), kv->act = take(&c, t * m->I), kv->la = take(&c, t * r);
    kv->xs = take(&c, (size_t)NS * m->D), kv->xs_n = take(&c, (size_t)NS * m->D);
    kv->logits = take(&c, (size_t)NS * m->V);
    return (size_t)(c - base);
}

static void ensure_workspace(tn_kv *kv, int T, int NS) {
    if (T <= kv->rows_cap && NS <= kv->segs_cap) return;
    int rows = T > kv->rows_cap ? T : kv->rows_cap, segs = NS > kv->segs_cap ? NS : kv->segs_cap;
    free_workspace(kv);
    const tn_backend *be = kv->be;
    kv->ws = be->alloc(carve(kv, NULL, rows, segs));
    carve(kv, kv->ws, rows, segs);
    kv->ids = be->alloc_i32((size_t)rows), kv->pos = be->alloc_i32((size_t)rows), kv->last = be->alloc_i32((size_t)segs);
    kv->host_ids = tn_xmalloc((size_t)rows * sizeof *kv->host_ids);
    kv->host_pos = tn_xmalloc((size_t)rows * sizeof *kv->host_pos);
    kv->host_last = tn_xmalloc((size_t)segs * sizeof *kv->host_last);
    kv->krow = tn_xmalloc((size_t)rows * sizeof *kv->krow), kv->vrow = tn_xmalloc((size_t)rows * sizeof *kv->vrow);
    if (kv->vl) {
        size_t half = (size_t)kv->m->hd / 2;
        kv->row_cos = be->alloc((size_t)rows * half), kv->row_sin = be->alloc((size_t)rows * half);
        kv->rowid = be->alloc_i32((size_t)rows);
        kv->host_rowid = tn_xmalloc((size_t)rows * sizeof *kv->host_rowid);
        kv->host_pos3 = tn_xmalloc((size_t)3 * rows * sizeof *kv->host_pos3);
        kv->host_cos = tn_xmalloc((size_t)rows * half * sizeof *kv->host_cos);
        kv->host_sin = tn_xmalloc((size_t)rows * half * sizeof *kv->host_sin);
        kv->img_rows = tn_xmalloc((size_t)rows * sizeof *kv->img_rows);
        for (int t = 0; t < rows; t++) kv->host_rowid[t] = t;
        be->upload_i32(kv->rowid, kv->host_rowid, (size_t)rows);
    }
    kv->rows_cap = rows, kv->segs_cap = segs;
}

/* y[T, out] (row stride ldy) += scale (x A^T) B^T: an unmerged LoRA adapter beside its base product */
static void lora(const tn_model *m, tn_kv *kv, const tn_lora_pair *p, const float *x, int in, int out, float *y,
                 int ldy, int T) {
    if (!p->A) return;
    int r = m->lora.r;
    m->be->linear_rows(kv->la, r, x, in, p->A, r, in, T, 1.0f, 0.0f);
    m->be->linear_rows(y, ldy, kv->la, r, p->B, out, r, T, m->lora_scale, 1.0f);
}

static float *k_block(const tn_kv *kv, int slot, int l) {
    return kv->cache[slot] + (size_t)(2 * l) * kv->ctx * kv->m->KV * kv->m->hd;
}

/* x [T, D] = layer l (x), storing this layer's keys and values of the T rows in their slots first */
static void layer(tn_model *m, tn_kv *kv, int l, const tn_kv_seg *segs, int n_segs, int T) {
    const tn_backend *be = m->be;
    const tn_layer_tensors *w = &m->w[l];
    const int D = m->D, I = m->I, Q3 = m->qkv_cols, HD = m->H * m->hd, KVD = m->KV * m->hd;
    const float eps = (float)m->cfg.rms_norm_eps;
    size_t vstep = (size_t)kv->ctx * KVD; /* V of layer l follows its K */

    be->rmsnorm_forward(kv->xn, kv->rstd, kv->x, w->ln1, T, D, eps);
    /* qkv [T, Q3] = xn Wqkv^T + b (+ LoRA), q and k head norms (Qwen3), rotary at each row's position */
    be->linear_rows(kv->qkv, Q3, kv->xn, D, w->wqkv, Q3, D, T, 1.0f, 0.0f);
    if (w->bqkv) be->add_bias(kv->qkv, w->bqkv, T, Q3, Q3);
    lora(m, kv, &w->lora[TN_LT_Q], kv->xn, D, HD, kv->qkv, Q3, T);
    lora(m, kv, &w->lora[TN_LT_K], kv->xn, D, KVD, kv->qkv + HD, Q3, T);
    lora(m, kv, &w->lora[TN_LT_V], kv->xn, D, KVD, kv->qkv + HD + KVD, Q3, T);
    if (w->qn) {
        be->copy_rows(kv->qk_raw, HD + KVD, kv->qkv, Q3, T, HD + KVD);
        be->head_rmsnorm_forward(kv->qkv, Q3, kv->qk_rstd, kv->qk_raw, HD + KVD, w->qn, T, m->H, m->hd, eps);
        be->head_rmsnorm_forward(kv->qkv + HD, Q3, kv->qk_rstd + (size_t)T * m->H, kv->qk_raw + HD, HD + KVD, w->kn, T,
                                 m->KV, m->hd, eps);
    }
    const int32_t *rp = kv->vl ? kv->rowid : kv->pos; /* VL: a table row per token (multimodal positions) */
    const float *rc = kv->vl ? kv->row_cos : kv->rope_cos, *rs = kv->vl ? kv->row_sin : kv->rope_sin;
    be->rope_at(kv->qkv, T, m->H, m->hd, Q3, rp, rc, rs);
    be->rope_at(kv->qkv + HD, T, m->KV, m->hd, Q3, rp, rc, rs);
    /* each segment's k and v rows into its slot at positions len.., then attention against the whole slot */
    for (int i = 0, t = 0; i < n_segs; t += segs[i++].n) {
        float *K = k_block(kv, segs[i].slot, l), *V = K + vstep;
        size_t at = (size_t)kv->len[segs[i].slot] * KVD;
        be->copy_rows(K + at, KVD, kv->qkv + (size_t)t * Q3 + HD, Q3, segs[i].n, KVD);
        be->copy_rows(V + at, KVD, kv->qkv + (size_t)t * Q3 + HD + KVD, Q3, segs[i].n, KVD);
        for (int j = 0; j < segs[i].n; j++) kv->krow[t + j] = K, kv->vrow[t + j] = V;
    }
    be->attention_cached(kv->att, kv->qkv, Q3, kv->krow, kv->vrow, kv->pos, T, m->H, m->KV, m->hd);
    /* x += att Wo^T + bo (+ LoRA) */
    be->linear_rows(kv->x, D, kv->att, HD, w->wo, D, HD, T, 1.0f, 1.0f);
    if (w->bo) be->add_bias(kv->x, w->bo, T, D, D);
    lora(m, kv, &w->lora[TN_LT_O], kv->att, HD, D, kv->x, D, T);
    /* MLP: gu = xn Wgu^T ; act = silu(gate) up ; x += act Wdown^T */
    be->rmsnorm_forward(kv->xn, kv->rstd, kv->x, w->ln2, T, D, eps);
    be->linear_rows(kv->gu, 2 * I, kv->xn, D, w->wgu, 2 * I, D, T, 1.0f, 0.0f);
    lora(m, kv, &w->lora[TN_LT_GATE], kv->xn, D, I, kv->gu, 2 * I, T);
    lora(m, kv, &w->lora[TN_LT_UP], kv->xn, D, I, kv->gu + I, 2 * I, T);
    be->swiglu_forward(kv->act, kv->gu, T, I);
    be->linear_rows(kv->x, D, kv->act, I, w->wdown, D, I, T, 1.0f, 1.0f);
    lora(m, kv, &w->lora[TN_LT_DOWN], kv->act, I, D, kv->x, D, T);
}

/* VL: t/h/w positions of every row (get_rope_index per segment, continuing from the slot's next position) and
 * their rotary tables; the slots' deltas after this step go to new_delta. 0 or -1 + tn_err. */
static int stage_mrope(const tn_model *m, tn_kv *kv, const tn_kv_seg *segs, int n_segs, int T, const tn_mm_batch *mm) {
    int img = 0;
    char err[256];
    for (int i = 0, t = 0; i < n_segs; t += segs[i++].n) {
        int first = img, n_img = 0;
        while (mm && img < mm->n_images && mm->row[img] == i) img++, n_img++;
        int32_t *p3 = tn_xmalloc((size_t)3 * segs[i].n * sizeof *p3);
        if (tn_vl_rope_index(m, segs[i].ids, NULL, 1, segs[i].n, n_img ? mm->grid_thw + 3 * first : NULL, n_img, p3, err,
                             sizeof err) != 0) {
            free(p3);
            return tn_err("generation: segment %d: %s", i, err);
        }
        int base = kv->len[segs[i].slot] + kv->delta[segs[i].slot], mx = 0;
        for (int r = 0; r < 3; r++)
            for (int j = 0; j < segs[i].n; j++) {
                kv->host_pos3[(size_t)r * T + t + j] = base + p3[(size_t)r * segs[i].n + j];
                mx = p3[(size_t)r * segs[i].n + j] > mx ? p3[(size_t)r * segs[i].n + j] : mx;
            }
        kv->new_delta[segs[i].slot] = base + mx + 1 - (kv->len[segs[i].slot] + segs[i].n);
        free(p3);
    }
    if (mm && img != mm->n_images) return tn_err("generation: %d images, %d placed in segments", mm->n_images, img);
    tn_vl_mrope_tables(m, kv->host_pos3, T, kv->host_cos, kv->host_sin);
    size_t n = (size_t)T * (m->hd / 2);
    kv->be->upload(kv->row_cos, kv->host_cos, n);
    kv->be->upload(kv->row_sin, kv->host_sin, n);
    return 0;
}

/* ids and positions of every row, checked: 0 or -1 + tn_err with nothing changed */
static int stage_rows(const tn_model *m, tn_kv *kv, const tn_kv_seg *segs, int n_segs, const tn_mm_batch *mm,
                      int *T_out) {
    int T = 0;
    for (int i = 0; i < n_segs; i++) {
        const tn_kv_seg *s = &segs[i];
        if (s->slot < 0 || s->slot >= kv->n_slots || s->n < 1)
            return tn_err("generation: segment %d: slot %d of %d, %d tokens", i, s->slot, kv->n_slots, s->n);
        for (int j = 0; j < i; j++)
            if (segs[j].slot == s->slot) return tn_err("generation: slot %d appears twice in one step", s->slot);
        if (kv->len[s->slot] + s->n > kv->ctx)
            return tn_err("generation: %d tokens do not fit the %d-token context (%d already held)", s->n, kv->ctx,
                          kv->len[s->slot]);
        for (int j = 0; j < s->n; j++)
            if (s->ids[j] < 0 || s->ids[j] >= m->V)
                return tn_err("generation: token id %d outside the model's vocabulary [0, %d)", s->ids[j], m->V);
        T += s->n;
    }
    ensure_workspace(kv, T, n_segs);
    for (int i = 0, t = 0; i < n_segs; i++) {
        for (int j = 0; j < segs[i].n; j++, t++) {
            kv->host_ids[t] = segs[i].ids[j];
            kv->host_pos[t] = kv->len[segs[i].slot] + j;
        }
        kv->host_last[i] = t - 1;
    }
    if (kv->vl && stage_mrope(m, kv, segs, n_segs, T, mm) != 0) return -1;
    kv->be->upload_i32(kv->ids, kv->host_ids, (size_t)T);
    kv->be->upload_i32(kv->pos, kv->host_pos, (size_t)T);
    kv->be->upload_i32(kv->last, kv->host_last, (size_t)n_segs);
    *T_out = T;
    return 0;
}

/* x [T, D] = the token embeddings (an image-aware prefill would write image features over some rows here) */
static void embed_segments(tn_model *m, tn_kv *kv, int T, const tn_mm_batch *mm) {
    m->be->embedding_forward(kv->x, m->embed, kv->ids, T, m->D);
    if (m->lora_emb.A) { /* unmerged embed_tokens LoRA: x += s (A^T[ids]) B^T */
        m->be->embedding_forward(kv->la, m->lora_emb.A, kv->ids, T, m->lora.r);
        m->be->linear_rows(kv->x, m->D, kv->la, m->lora.r, m->lora_emb.B, m->D, m->lora.r, T, m->lora_scale, 1.0f);
    }
    kv->n_img = 0, kv->deep = NULL;
    if (!kv->vl) return;
    for (int t = 0; t < T; t++)
        if (kv->host_ids[t] == m->cfg.vis.image_token_id) kv->img_rows[kv->n_img++] = t;
    if (!mm || !mm->n_images) return;
    float *img; /* VL is CPU-only: backend memory is host memory */
    int M = tn_vision_forward(m, kv->va, mm, &img, &kv->deep);
    if (M != kv->n_img) tn_die("generation: %d <|image_pad|> tokens but the images give %d features", kv->n_img, M);
    for (int j = 0; j < M; j++) memcpy(kv->x + (size_t)kv->img_rows[j] * m->D, img + (size_t)j * m->D, m->D * sizeof *img);
    if (!m->cfg.vis.n_deep) kv->deep = NULL;
}

/* Qwen3-VL deepstack: after decoder layer l, the l-th features are added at the image rows */
static void add_deepstack(const tn_model *m, tn_kv *kv, int l) {
    if (!kv->deep || l >= m->cfg.vis.n_deep) return;
    for (int j = 0; j < kv->n_img; j++)
        for (int d = 0; d < m->D; d++) kv->x[(size_t)kv->img_rows[j] * m->D + d] += kv->deep[l][(size_t)j * m->D + d];
}

int tn_kv_forward(tn_model *m, tn_kv *kv, const tn_kv_seg *segs, int n_segs, float *logits) {
    return tn_kv_forward_mm(m, kv, segs, n_segs, NULL, logits);
}

int tn_kv_forward_mm(tn_model *m, tn_kv *kv, const tn_kv_seg *segs, int n_segs, const tn_mm_batch *mm, float *logits) {
    int T = 0;
    if (n_segs < 1) return tn_err("generation: an empty step");
    if (mm && mm->n_images && !kv->vl) return tn_err("generation: this model takes no images");
    char err[256];
    if (mm && mm->n_images && tn_vision_check(m, mm, err, sizeof err) != 0) return tn_err("generation: %s", err);
    if (stage_rows(m, kv, segs, n_segs, mm, &T) != 0) return -1;
    const tn_backend *be = m->be;
    embed_segments(m, kv, T, mm);
    for (int l = 0; l < m->L; l++) {
        layer(m, kv, l, segs, n_segs, T);
        add_deepstack(m, kv, l);
    }
    for (int i = 0; i < n_segs; i++) kv->len[segs[i].slot] += segs[i].n;
    for (int i = 0; kv->vl && i < n_segs; i++) kv->delta[segs[i].slot] = kv->new_delta[segs[i].slot];
    /* the final norm and lm_head for each segment's last row only */
    be->embedding_forward(kv->xs, kv->x, kv->last, n_segs, m->D); /* a row gather */
    be->rmsnorm_forward(kv->xs_n, kv->rstd, kv->xs, m->norm, n_segs, m->D, (float)m->cfg.rms_norm_eps);
    be->linear_rows(kv->logits, m->V, kv->xs_n, m->D, m->lm_head, m->V, m->D, n_segs, 1.0f, 0.0f);
    be->download(logits, kv->logits, (size_t)n_segs * m->V);
    return 0;
}
