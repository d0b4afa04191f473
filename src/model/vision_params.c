/* vision_params.c -- the vision tower's tensors: slab order, names (internal: model.visual.*, as transformers >= 4.52
 * saves them), trainability by frozen part, and pointer binding. See vision.h for the shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model.h"
#include "model/vision.h"

typedef struct {
    void (*add)(void *ctx, int trainable, int ndim, int64_t d0, int64_t d1, const char *name);
    void *ctx;
    int trainable;
} adder;

static void put(const adder *a, int ndim, int64_t d0, int64_t d1, const char *fmt, int i) {
    char name[112];
    snprintf(name, sizeof name, fmt, i);
    a->add(a->ctx, a->trainable, ndim, d0, d1, name);
}

/* norm (weight, and bias for LayerNorm), fc1, fc2 of a merger whose name starts with prefix (a printf format of i) */
static void merger_layout(const adder *a, const tn_vision_config *v, int D, const char *prefix, int i, int norm_dim,
                          int ln_bias, const char *nname, const char *f1, const char *f2) {
    char fmt[128];
    int H4 = v->E * v->merge * v->merge;
    snprintf(fmt, sizeof fmt, "%s.%s.weight", prefix, nname), put(a, 1, norm_dim, 0, fmt, i);
    if (ln_bias) snprintf(fmt, sizeof fmt, "%s.%s.bias", prefix, nname), put(a, 1, norm_dim, 0, fmt, i);
    snprintf(fmt, sizeof fmt, "%s.%s.weight", prefix, f1), put(a, 2, H4, H4, fmt, i);
    snprintf(fmt, sizeof fmt, "%s.%s.bias", prefix, f1), put(a, 1, H4, 0, fmt, i);
    snprintf(fmt, sizeof fmt, "%s.%s.weight", prefix, f2), put(a, 2, D, H4, fmt, i);
    snprintf(fmt, sizeof fmt, "%s.%s.bias", prefix, f2), put(a, 1, D, 0, fmt, i);
}

static void block_layout(const adder *a, const tn_vision_config *v, int b) {
    int E = v->E, I = v->I, ln = v->kind != TN_VL_QWEN25;
    put(a, 1, E, 0, "model.visual.blocks.%d.norm1.weight", b);
    if (ln) put(a, 1, E, 0, "model.visual.blocks.%d.norm1.bias", b);
    put(a, 2, 3 * E, E, "model.visual.blocks.%d.attn.qkv.weight", b);
    put(a, 1, 3 * E, 0, "model.visual.blocks.%d.attn.qkv.bias", b);
    put(a, 2, E, E, "model.visual.blocks.%d.attn.proj.weight", b);
    put(a, 1, E, 0, "model.visual.blocks.%d.attn.proj.bias", b);
    put(a, 1, E, 0, "model.visual.blocks.%d.norm2.weight", b);
    if (ln) put(a, 1, E, 0, "model.visual.blocks.%d.norm2.bias", b);
    if (v->kind == TN_VL_QWEN25) { /* gate, up adjacent (one [2I, E] GEMM), then their biases, adjacent too */
        put(a, 2, I, E, "model.visual.blocks.%d.mlp.gate_proj.weight", b);
        put(a, 2, I, E, "model.visual.blocks.%d.mlp.up_proj.weight", b);
        put(a, 1, I, 0, "model.visual.blocks.%d.mlp.gate_proj.bias", b);
        put(a, 1, I, 0, "model.visual.blocks.%d.mlp.up_proj.bias", b);
        put(a, 2, E, I, "model.visual.blocks.%d.mlp.down_proj.weight", b);
        put(a, 1, E, 0, "model.visual.blocks.%d.mlp.down_proj.bias", b);
        return;
    }
    const char *f1 = v->kind == TN_VL_QWEN3 ? "linear_fc1" : "fc1", *f2 = v->kind == TN_VL_QWEN3 ? "linear_fc2" : "fc2";
    char fmt[96];
    snprintf(fmt, sizeof fmt, "model.visual.blocks.%%d.mlp.%s.weight", f1), put(a, 2, I, E, fmt, b);
    snprintf(fmt, sizeof fmt, "model.visual.blocks.%%d.mlp.%s.bias", f1), put(a, 1, I, 0, fmt, b);
    snprintf(fmt, sizeof fmt, "model.visual.blocks.%%d.mlp.%s.weight", f2), put(a, 2, E, I, fmt, b);
    snprintf(fmt, sizeof fmt, "model.visual.blocks.%%d.mlp.%s.bias", f2), put(a, 1, E, 0, fmt, b);
}

void tn_vision_layout(const tn_model *m, unsigned freeze, int trainable,
                      void (*add)(void *ctx, int trainable, int ndim, int64_t d0, int64_t d1, const char *name),
                      void *ctx) {
    const tn_vision_config *v = &m->cfg.vis;
    int E = v->E, P = v->in_ch * v->tpatch * v->patch * v->patch, q3 = v->kind == TN_VL_QWEN3;
    adder tower = {add, ctx, trainable && !(freeze & TN_FREEZE_VISION)};
    adder proj = {add, ctx, trainable && !(freeze & TN_FREEZE_PROJECTOR)};
    put(&tower, 2, E, P, "model.visual.patch_embed.proj.weight", 0);
    if (q3) {
        put(&tower, 1, E, 0, "model.visual.patch_embed.proj.bias", 0);
        put(&tower, 2, v->num_pos, E, "model.visual.pos_embed.weight", 0);
    }
    for (int b = 0; b < v->depth; b++) block_layout(&tower, v, b);
    if (q3) {
        merger_layout(&proj, v, m->D, "model.visual.merger", 0, E, 1, "norm", "linear_fc1", "linear_fc2");
        for (int k = 0; k < v->n_deep; k++)
            merger_layout(&tower, v, m->D, "model.visual.deepstack_merger_list.%d", k, E * v->merge * v->merge, 1, "norm",
                          "linear_fc1", "linear_fc2");
    } else {
        merger_layout(&proj, v, m->D, "model.visual.merger", 0, E, v->kind == TN_VL_QWEN2, "ln_q", "mlp.0", "mlp.2");
    }
}

static float *ptr(tn_model *m, float *slab, int grads, const char *fmt, int i) {
    char name[112];
    snprintf(name, sizeof name, fmt, i);
    const tn_param *p = tn_model_find(m, name);
    return !p || (grads && !p->trainable) ? NULL : slab + p->offset;
}

static void bind_merger(tn_model *m, tn_merger_tensors *t, float *slab, int grads, const char *prefix, int i) {
    const char *q3 = m->cfg.vis.kind == TN_VL_QWEN3 ? "" : NULL;
    char f[6][128];
    snprintf(f[0], 128, "%s.%s.weight", prefix, q3 ? "norm" : "ln_q");
    snprintf(f[1], 128, "%s.%s.bias", prefix, q3 ? "norm" : "ln_q");
    snprintf(f[2], 128, "%s.%s.weight", prefix, q3 ? "linear_fc1" : "mlp.0");
    snprintf(f[3], 128, "%s.%s.bias", prefix, q3 ? "linear_fc1" : "mlp.0");
    snprintf(f[4], 128, "%s.%s.weight", prefix, q3 ? "linear_fc2" : "mlp.2");
    snprintf(f[5], 128, "%s.%s.bias", prefix, q3 ? "linear_fc2" : "mlp.2");
    t->nw = ptr(m, slab, grads, f[0], i), t->nb = ptr(m, slab, grads, f[1], i);
    t->fc1_w = ptr(m, slab, grads, f[2], i), t->fc1_b = ptr(m, slab, grads, f[3], i);
    t->fc2_w = ptr(m, slab, grads, f[4], i), t->fc2_b = ptr(m, slab, grads, f[5], i);
}

static void bind_block(tn_model *m, tn_vblock_tensors *t, float *slab, int g, int b) {
    int k = m->cfg.vis.kind;
    t->n1w = ptr(m, slab, g, "model.visual.blocks.%d.norm1.weight", b);
    t->n1b = ptr(m, slab, g, "model.visual.blocks.%d.norm1.bias", b);
    t->qkv_w = ptr(m, slab, g, "model.visual.blocks.%d.attn.qkv.weight", b);
    t->qkv_b = ptr(m, slab, g, "model.visual.blocks.%d.attn.qkv.bias", b);
    t->proj_w = ptr(m, slab, g, "model.visual.blocks.%d.attn.proj.weight", b);
    t->proj_b = ptr(m, slab, g, "model.visual.blocks.%d.attn.proj.bias", b);
    t->n2w = ptr(m, slab, g, "model.visual.blocks.%d.norm2.weight", b);
    t->n2b = ptr(m, slab, g, "model.visual.blocks.%d.norm2.bias", b);
    const char *f1 = k == TN_VL_QWEN25 ? "gate_proj" : k == TN_VL_QWEN3 ? "linear_fc1" : "fc1";
    const char *f2 = k == TN_VL_QWEN25 ? "down_proj" : k == TN_VL_QWEN3 ? "linear_fc2" : "fc2";
    char fmt[96];
    snprintf(fmt, sizeof fmt, "model.visual.blocks.%%d.mlp.%s.weight", f1), t->fc1_w = ptr(m, slab, g, fmt, b);
    snprintf(fmt, sizeof fmt, "model.visual.blocks.%%d.mlp.%s.bias", f1), t->fc1_b = ptr(m, slab, g, fmt, b);
    snprintf(fmt, sizeof fmt, "model.visual.blocks.%%d.mlp.%s.weight", f2), t->fc2_w = ptr(m, slab, g, fmt, b);
    snprintf(fmt, sizeof fmt, "model.visual.blocks.%%d.mlp.%s.bias", f2), t->fc2_b = ptr(m, slab, g, fmt, b);
}

void tn_vision_bind(tn_model *m, tn_vision_tensors *t, float *slab, int grads) {
    const tn_vision_config *v = &m->cfg.vis;
    memset(t, 0, sizeof *t);
    t->patch_w = ptr(m, slab, grads, "model.visual.patch_embed.proj.weight", 0);
    t->patch_b = ptr(m, slab, grads, "model.visual.patch_embed.proj.bias", 0);
    t->pos = ptr(m, slab, grads, "model.visual.pos_embed.weight", 0);
    t->blk = tn_xcalloc((size_t)v->depth, sizeof *t->blk);
    for (int b = 0; b < v->depth; b++) bind_block(m, &t->blk[b], slab, grads, b);
    bind_merger(m, &t->merger, slab, grads, "model.visual.merger", 0);
    t->deep = tn_xcalloc((size_t)v->n_deep + 1, sizeof *t->deep);
    for (int k = 0; k < v->n_deep; k++) bind_merger(m, &t->deep[k], slab, grads, "model.visual.deepstack_merger_list.%d", k);
    for (int i = 0; i < m->n_params; i++)
        t->any |= m->params[i].trainable && strncmp(m->params[i].name, "model.visual.", 13) == 0;
}

void tn_vision_tensors_free(tn_vision_tensors *t) {
    if (!t) return;
    free(t->blk);
    free(t->deep);
    free(t);
}
