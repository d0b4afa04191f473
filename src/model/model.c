/* model.c -- parameter layout, HF names, random init. Loading/saving is in model_io.c. */
#include "model/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/vision.h"

const char *const tn_lora_target_names[TN_LT_COUNT] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                        "gate_proj", "up_proj", "down_proj"};
static const char *const target_module[TN_LT_COUNT] = {"self_attn", "self_attn", "self_attn", "self_attn",
                                                       "mlp",       "mlp",       "mlp"};

int tn_lora_parse_targets(const char *list, unsigned *mask) {
    *mask = 0;
    char *copy = tn_xstrdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        if (strcmp(tok, "all") == 0) {
            *mask = (1u << TN_LT_COUNT) - 1;
            continue;
        }
        if (strcmp(tok, "embed_tokens") == 0) {
            *mask |= TN_LORA_EMBED;
            continue;
        }
        int found = -1;
        for (int t = 0; t < TN_LT_COUNT; t++)
            if (strcmp(tok, tn_lora_target_names[t]) == 0) found = t;
        if (found < 0) {
            tn_err("lora_target: '%s' is not a projection of this model (expected all or q_proj, k_proj, v_proj, "
                   "o_proj, gate_proj, up_proj, down_proj, embed_tokens)", tok);
            free(copy);
            return -1;
        }
        *mask |= 1u << found;
    }
    free(copy);
    if (!*mask) return tn_err("lora_target: no projection named");
    return 0;
}

/* in/out features of a LoRA target */
static void target_dims(const tn_model *m, int t, int *in, int *out) {
    int q = m->H * m->hd, kv = m->KV * m->hd;
    switch (t) {
    case TN_LT_Q: *in = m->D, *out = q; break;
    case TN_LT_K:
    case TN_LT_V: *in = m->D, *out = kv; break;
    case TN_LT_O: *in = q, *out = m->D; break;
    case TN_LT_GATE:
    case TN_LT_UP: *in = m->D, *out = m->I; break;
    default: *in = m->I, *out = m->D; break;
    }
}

typedef struct {
    tn_model *m;
    int cap;
    size_t offset;
    int pass_trainable; /* which tensors this pass adds: 1 = trainable ones, 0 = frozen ones */
} layout_builder;

static void add_param(layout_builder *lb, int trainable, int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
    TN_PRINTF(6, 7);

static void add_param(layout_builder *lb, int trainable, int ndim, int64_t d0, int64_t d1, const char *fmt, ...) {
    if (trainable != lb->pass_trainable) return;
    tn_model *m = lb->m;
    if (m->n_params == lb->cap) {
        lb->cap = lb->cap ? 2 * lb->cap : 64;
        m->params = tn_xrealloc(m->params, (size_t)lb->cap * sizeof *m->params);
    }
    tn_param *p = &m->params[m->n_params++];
    memset(p, 0, sizeof *p);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim > 1 ? d1 : 1;
    p->numel = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1);
    p->offset = lb->offset;
    p->trainable = trainable;
    p->decay = ndim >= 2;
    lb->offset += p->numel;
}

static void add_vision_param(void *ctx, int trainable, int ndim, int64_t d0, int64_t d1, const char *name) {
    layout_builder *lb = ctx;
    int before = lb->m->n_params;
    add_param(lb, trainable, ndim, d0, d1, "%s", name);
    const tn_vision_config *v = &lb->m->cfg.vis;
    if (lb->m->n_params > before && strcmp(name, "model.visual.patch_embed.proj.weight") == 0) {
        tn_param *p = &lb->m->params[before]; /* a Conv3d kernel in the checkpoint */
        p->file_ndim = 5;
        int64_t fs[5] = {d0, v->in_ch, v->tpatch, v->patch, v->patch};
        memcpy(p->file_shape, fs, sizeof fs);
    }
}

/* One pass over every tensor in slab order; only those whose trainability matches pass_trainable land. */
static void layout_pass(layout_builder *lb) {
    tn_model *m = lb->m;
    const tn_model_config *c = &m->cfg;
    int lm_train = m->lora.r == 0 && !(m->lora.freeze & TN_FREEZE_LM), q = m->H * m->hd, kv = m->KV * m->hd;
    int full = lm_train;
    if (m->lora.r) {
        if (m->lora.targets & TN_LORA_EMBED) { /* group -1, before the layers' adapters */
            add_param(lb, 1, 2, m->V, m->lora.r, "model.embed_tokens.lora_embedding_A");
            if (lb->pass_trainable) lb->m->params[lb->m->n_params - 1].file_transposed = 1;
            add_param(lb, 1, 2, m->D, m->lora.r, "model.embed_tokens.lora_embedding_B");
        }
        for (int l = 0; l < m->L; l++)
            for (int t = 0; t < TN_LT_COUNT; t++) {
                if (!(m->lora.targets & (1u << t))) continue;
                int in, out;
                target_dims(m, t, &in, &out);
                const char *mod = target_module[t], *nm = tn_lora_target_names[t];
                add_param(lb, 1, 2, m->lora.r, in, "model.layers.%d.%s.%s.lora_A.weight", l, mod, nm);
                add_param(lb, 1, 2, out, m->lora.r, "model.layers.%d.%s.%s.lora_B.weight", l, mod, nm);
            }
    }
    add_param(lb, full, 2, m->V, m->D, "model.embed_tokens.weight");
    if (c->vis.kind != TN_VL_NONE) /* group -1 with the embedding: their gradients are final at the end */
        tn_vision_layout(m, m->lora.freeze, m->lora.r == 0, add_vision_param, lb);
    for (int l = 0; l < m->L; l++) {
        add_param(lb, full, 1, m->D, 0, "model.layers.%d.input_layernorm.weight", l);
        add_param(lb, full, 2, q, m->D, "model.layers.%d.self_attn.q_proj.weight", l);
        add_param(lb, full, 2, kv, m->D, "model.layers.%d.self_attn.k_proj.weight", l);
        add_param(lb, full, 2, kv, m->D, "model.layers.%d.self_attn.v_proj.weight", l);
        if (c->qkv_bias) {
            add_param(lb, full, 1, q, 0, "model.layers.%d.self_attn.q_proj.bias", l);
            add_param(lb, full, 1, kv, 0, "model.layers.%d.self_attn.k_proj.bias", l);
            add_param(lb, full, 1, kv, 0, "model.layers.%d.self_attn.v_proj.bias", l);
        }
        add_param(lb, full, 2, m->D, q, "model.layers.%d.self_attn.o_proj.weight", l);
        if (c->o_bias) add_param(lb, full, 1, m->D, 0, "model.layers.%d.self_attn.o_proj.bias", l);
        if (c->qk_norm) {
            add_param(lb, full, 1, m->hd, 0, "model.layers.%d.self_attn.q_norm.weight", l);
            add_param(lb, full, 1, m->hd, 0, "model.layers.%d.self_attn.k_norm.weight", l);
        }
        add_param(lb, full, 1, m->D, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        add_param(lb, full, 2, m->I, m->D, "model.layers.%d.mlp.gate_proj.weight", l);
        add_param(lb, full, 2, m->I, m->D, "model.layers.%d.mlp.up_proj.weight", l);
        add_param(lb, full, 2, m->D, m->I, "model.layers.%d.mlp.down_proj.weight", l);
    }
    add_param(lb, full, 1, m->D, 0, "model.norm.weight");
    if (!c->tie_word_embeddings) add_param(lb, full, 2, m->V, m->D, "lm_head.weight");
}

const tn_param *tn_model_find(const tn_model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
    return NULL;
}

static float *param_ptr(tn_model *m, float *slab, const char *fmt, int l, int need_trainable) {
    char name[112];
    snprintf(name, sizeof name, fmt, l);
    const tn_param *p = tn_model_find(m, name);
    if (!p || (need_trainable && !p->trainable)) return NULL;
    return slab + p->offset;
}

/* Resolve per-layer pointers into a slab (params, or grads with frozen tensors left NULL). */
static void bind_tensors(tn_model *m, float *slab, tn_layer_tensors *lt, int grads) {
    for (int l = 0; l < m->L; l++) {
        tn_layer_tensors *t = &lt[l];
        memset(t, 0, sizeof *t);
        t->ln1 = param_ptr(m, slab, "model.layers.%d.input_layernorm.weight", l, grads);
        t->wqkv = param_ptr(m, slab, "model.layers.%d.self_attn.q_proj.weight", l, grads);
        t->bqkv = param_ptr(m, slab, "model.layers.%d.self_attn.q_proj.bias", l, grads);
        t->wo = param_ptr(m, slab, "model.layers.%d.self_attn.o_proj.weight", l, grads);
        t->bo = param_ptr(m, slab, "model.layers.%d.self_attn.o_proj.bias", l, grads);
        t->qn = param_ptr(m, slab, "model.layers.%d.self_attn.q_norm.weight", l, grads);
        t->kn = param_ptr(m, slab, "model.layers.%d.self_attn.k_norm.weight", l, grads);
        t->ln2 = param_ptr(m, slab, "model.layers.%d.post_attention_layernorm.weight", l, grads);
        t->wgu = param_ptr(m, slab, "model.layers.%d.mlp.gate_proj.weight", l, grads);
        t->wdown = param_ptr(m, slab, "model.layers.%d.mlp.down_proj.weight", l, grads);
        for (int k = 0; k < TN_LT_COUNT; k++) {
            char fmt[128];
            snprintf(fmt, sizeof fmt, "model.layers.%%d.%s.%s.lora_A.weight", target_module[k],
                     tn_lora_target_names[k]);
            t->lora[k].A = param_ptr(m, slab, fmt, l, grads);
            snprintf(fmt, sizeof fmt, "model.layers.%%d.%s.%s.lora_B.weight", target_module[k],
                     tn_lora_target_names[k]);
            t->lora[k].B = param_ptr(m, slab, fmt, l, grads);
        }
    }
}

/* Group of a tensor for the backward order: its layer, L for the final norm / lm_head, -1 for the embedding. */
static int param_group(const tn_model *m, const char *name) {
    int l;
    if (sscanf(name, "model.layers.%d.", &l) == 1) return l;
    if (strncmp(name, "model.visual.", 13) == 0 || strncmp(name, "model.embed_tokens.", 19) == 0) return -1;
    return m->L;
}

static void compute_frontiers(tn_model *m) {
    m->frontier = tn_xcalloc((size_t)m->L + 2, sizeof *m->frontier);
    for (int g = -1; g <= m->L; g++) {
        size_t lo = m->n_trainable;
        for (int i = 0; i < m->n_params; i++) {
            const tn_param *p = &m->params[i];
            if (p->trainable && param_group(m, p->name) >= g && p->offset < lo) lo = p->offset;
        }
        m->frontier[g + 1] = lo;
    }
}

size_t tn_model_param_resident(const tn_model *m) {
    size_t bytes = m->be->resident(m->slab, m->n_trainable);
    return m->slab_sharers > 1 ? bytes / (size_t)m->slab_sharers : bytes;
}

void tn_model_group_range(const tn_model *m, int g, size_t *lo, size_t *hi) {
    *lo = tn_model_grad_frontier(m, g);
    *hi = g >= m->L ? m->n_trainable : tn_model_grad_frontier(m, g + 1);
}

size_t tn_model_grad_frontier(const tn_model *m, int g) {
    if (g < -1) g = -1;
    if (g > m->L) g = m->L;
    return m->frontier[g + 1];
}

tn_model *tn_model_create(const tn_model_config *cfg, const tn_lora_config *lora, const tn_backend *be) {
    /* the vision tower's loops run on host memory: its GPU kernels come when they can be checked on a GPU */
    if (cfg->vis.kind != TN_VL_NONE && strcmp(be->name, "cpu") != 0)
        tn_die("model_type %s (vision-language) runs on the CPU backend only for now (the %s backend was chosen): "
               "set device: cpu (or TANDEM_DEVICE=cpu, --device cpu)", cfg->model_type, be->name ? be->name : "?");
    tn_model *m = tn_xcalloc(1, sizeof *m);
    m->cfg = *cfg;
    if (lora && lora->r > 0) m->lora = *lora;
    if (lora) m->lora.freeze = lora->freeze; /* full fine-tuning of a VL model may freeze parts */
    m->be = be;
    m->D = cfg->hidden_size, m->I = cfg->intermediate_size, m->H = cfg->num_attention_heads;
    m->KV = cfg->num_key_value_heads, m->hd = cfg->head_dim, m->V = cfg->vocab_size, m->L = cfg->num_hidden_layers;
    m->qkv_cols = (m->H + 2 * m->KV) * m->hd;
    m->lora_scale = m->lora.r ? (float)(m->lora.alpha / m->lora.r) : 0.0f;

    /* callers check the sizes first (model_config: int widths; memory_check: the bytes, at most 2^62), so the size_t
     * offsets below are exact; a caller that skipped the check stops here rather than wrapping around */
    double floats = (double)m->L * (3.0 * m->I + 4.0 * m->qkv_cols + 2) * m->D + 2.0 * m->V * m->D + m->D;
    if (floats > 0x1p60) tn_die("model of %.4g parameters: more than the 2^60 tandem can address", floats);
    layout_builder lb = {.m = m, .pass_trainable = 1};
    layout_pass(&lb);
    m->n_trainable = lb.offset;
    lb.pass_trainable = 0;
    layout_pass(&lb);
    m->n_total = lb.offset;

    m->slab = be->alloc_params(m->n_total, m->n_trainable); /* frozen tail: the backend's compute precision */
    m->grad = be->alloc(m->n_trainable);
    m->w = tn_xcalloc((size_t)m->L, sizeof *m->w);
    m->dw = tn_xcalloc((size_t)m->L, sizeof *m->dw);
    bind_tensors(m, m->slab, m->w, 0);
    bind_tensors(m, m->grad, m->dw, 1);
    m->embed = param_ptr(m, m->slab, "model.embed_tokens.weight", 0, 0);
    m->norm = param_ptr(m, m->slab, "model.norm.weight", 0, 0);
    m->lm_head = cfg->tie_word_embeddings ? m->embed : param_ptr(m, m->slab, "lm_head.weight", 0, 0);
    m->d_embed = param_ptr(m, m->grad, "model.embed_tokens.weight", 0, 1);
    m->d_norm = param_ptr(m, m->grad, "model.norm.weight", 0, 1);
    m->d_lm_head = cfg->tie_word_embeddings ? m->d_embed : param_ptr(m, m->grad, "lm_head.weight", 0, 1);
    m->lora_emb.A = param_ptr(m, m->slab, "model.embed_tokens.lora_embedding_A", 0, 0);
    m->lora_emb.B = param_ptr(m, m->slab, "model.embed_tokens.lora_embedding_B", 0, 0);
    m->d_lora_emb.A = param_ptr(m, m->grad, "model.embed_tokens.lora_embedding_A", 0, 1);
    m->d_lora_emb.B = param_ptr(m, m->grad, "model.embed_tokens.lora_embedding_B", 0, 1);
    if (cfg->vis.kind != TN_VL_NONE) {
        m->vw = tn_xcalloc(1, sizeof *m->vw);
        m->dvw = tn_xcalloc(1, sizeof *m->dvw);
        tn_vision_bind(m, m->vw, m->slab, 0);
        tn_vision_bind(m, m->dvw, m->grad, 1);
    }
    compute_frontiers(m);
    return m;
}

const char *tn_model_file_name(const tn_model *m, const char *name, char *buf, size_t n) {
    int vis = strncmp(name, "model.visual.", 13) == 0;
    if (m->cfg.vis.kind == TN_VL_NONE || strncmp(name, "model.", 6) != 0) snprintf(buf, n, "%s", name);
    else if (m->vl_legacy_names) snprintf(buf, n, "%s", vis ? name + 6 : name); /* visual.*, model.layers.* */
    else if (vis) snprintf(buf, n, "%s", name);
    else snprintf(buf, n, "model.language_model.%s", name + 6);
    return buf;
}

void tn_model_free(tn_model *m) {
    if (!m) return;
    m->be->free(m->slab);
    m->be->free(m->grad);
    free(m->w);
    free(m->dw);
    free(m->params);
    free(m->frontier);
    tn_vision_tensors_free(m->vw);
    tn_vision_tensors_free(m->dvw);
    free(m);
}

void tn_model_get(const tn_model *m, const tn_param *p, float *host) {
    m->be->download(host, m->slab + p->offset, p->numel);
}

void tn_model_set(tn_model *m, const tn_param *p, const float *host) {
    m->be->upload(m->slab + p->offset, host, p->numel);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

void tn_model_init_random(tn_model *m, uint64_t seed) {
    tn_rng rng;
    tn_rng_seed(&rng, seed);
    float *host = NULL;
    size_t cap = 0;
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        if (p->numel > cap) {
            cap = p->numel;
            host = tn_xrealloc(host, cap * sizeof *host);
        }
        if (ends_with(p->name, "norm.weight") || ends_with(p->name, "norm1.weight") ||
            ends_with(p->name, "norm2.weight") || ends_with(p->name, "ln_q.weight")) {
            for (size_t j = 0; j < p->numel; j++) host[j] = 1.0f;
        } else if (strstr(p->name, ".lora_embedding_")) { /* PEFT: A zeros, B N(0, 1) */
            int is_b = strstr(p->name, "lora_embedding_B") != NULL;
            for (size_t j = 0; j < p->numel; j++) host[j] = is_b ? (float)tn_rng_normal(&rng) : 0.0f;
        } else if (ends_with(p->name, ".bias") || strstr(p->name, ".lora_B.")) {
            memset(host, 0, p->numel * sizeof *host);
        } else if (strstr(p->name, ".lora_A.")) {
            double bound = 1.0 / sqrt((double)p->shape[1]); /* kaiming_uniform(a=sqrt(5)) */
            for (size_t j = 0; j < p->numel; j++) host[j] = (float)((2.0 * tn_rng_uniform(&rng) - 1.0) * bound);
        } else {
            double sd = m->cfg.initializer_range;
            for (size_t j = 0; j < p->numel; j++) host[j] = (float)(sd * tn_rng_normal(&rng));
        }
        tn_model_set(m, p, host);
    }
    free(host);
}

int64_t tn_count_targets(const int32_t *labels, int B, int S) {
    int64_t n = 0;
    for (int b = 0; b < B; b++)
        for (int s = 1; s < S; s++) n += labels[(size_t)b * S + s] != -100;
    return n;
}
