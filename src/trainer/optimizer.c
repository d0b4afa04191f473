/* optimizer.c -- see optimizer.h. */
#include "trainer/optimizer.h"

#include <math.h>
#include <stdlib.h>

#include "core/core.h"

tn_adamw *tn_adamw_create_spans(const tn_model *model, const tn_span *spans, int k) {
    tn_adamw *o = tn_xcalloc(1, sizeof *o);
    o->be = model->be;
    o->spans = tn_xmalloc(((size_t)k + 1) * sizeof *o->spans);
    for (int i = 0; i < k; i++) o->spans[i] = spans[i];
    o->n_spans = k, o->n = tn_span_total(spans, k);
    o->m = o->be->alloc(o->n);
    o->v = o->be->alloc(o->n);
    return o;
}

tn_adamw *tn_adamw_create_range(const tn_model *model, size_t lo, size_t n) {
    return tn_adamw_create_spans(model, &(tn_span){lo, n}, 1);
}

tn_adamw *tn_adamw_create(const tn_model *model) { return tn_adamw_create_range(model, 0, model->n_trainable); }

void tn_adamw_free(tn_adamw *o) {
    if (!o) return;
    o->be->free(o->m);
    o->be->free(o->v);
    free(o->spans);
    free(o);
}

/* The parameters' parts inside span sp, whose moments start at packed offset at. */
static void step_span(tn_adamw *o, tn_model *model, const tn_adamw_hparams *h, double lr, double bc1, double bc2,
                      tn_span sp, size_t at) {
    for (int i = 0; i < model->n_params; i++) {
        const tn_param *p = &model->params[i];
        if (!p->trainable) continue;
        size_t a = p->offset > sp.lo ? p->offset : sp.lo;
        size_t b = p->offset + p->numel < sp.lo + sp.n ? p->offset + p->numel : sp.lo + sp.n;
        if (b <= a) continue;
        double wd = p->decay ? h->weight_decay : 0.0; /* per tensor, wherever the span cuts it */
        size_t k = at + (a - sp.lo);
        o->be->adamw(model->slab + a, model->grad + a, o->m + k, o->v + k, b - a, lr, h->beta1, h->beta2, h->eps, wd,
                     bc1, bc2);
    }
}

void tn_adamw_step(tn_adamw *o, tn_model *model, const tn_adamw_hparams *h, double lr) {
    o->step++;
    double bc1 = 1.0 - pow(h->beta1, o->step), bc2 = 1.0 - pow(h->beta2, o->step);
    size_t at = 0;
    for (int s = 0; s < o->n_spans; at += o->spans[s].n, s++) step_span(o, model, h, lr, bc1, bc2, o->spans[s], at);
}

double tn_grad_sumsq(const tn_model *model, const tn_span *spans, int k) {
    double t = 0;
    for (int i = 0; i < k; i++) t += model->be->sumsq(model->grad + spans[i].lo, spans[i].n);
    return t;
}

void tn_grad_scale(tn_model *model, const tn_span *spans, int k, float coef) {
    for (int i = 0; i < k; i++) model->be->scale(model->grad + spans[i].lo, spans[i].n, coef);
}

double tn_clip_grad_norm(tn_model *model, double max_norm) {
    double norm = sqrt(model->be->sumsq(model->grad, model->n_trainable));
    if (max_norm > 0) {
        double coef = max_norm / (norm + 1e-6);
        if (coef < 1.0) model->be->scale(model->grad, model->n_trainable, (float)coef);
    }
    return norm;
}
