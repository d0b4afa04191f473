/* optimizer.c -- see optimizer.h. */
#include "trainer/optimizer.h"

#include <math.h>
#include <stdlib.h>

#include "core/core.h"

tn_adamw *tn_adamw_create_range(const tn_model *model, size_t lo, size_t n) {
    tn_adamw *o = tn_xcalloc(1, sizeof *o);
    o->be = model->be;
    o->lo = lo, o->n = n;
    o->m = o->be->alloc(o->n);
    o->v = o->be->alloc(o->n);
    return o;
}

tn_adamw *tn_adamw_create(const tn_model *model) { return tn_adamw_create_range(model, 0, model->n_trainable); }

void tn_adamw_free(tn_adamw *o) {
    if (!o) return;
    o->be->free(o->m);
    o->be->free(o->v);
    free(o);
}

void tn_adamw_step(tn_adamw *o, tn_model *model, const tn_adamw_hparams *h, double lr) {
    o->step++;
    double bc1 = 1.0 - pow(h->beta1, o->step), bc2 = 1.0 - pow(h->beta2, o->step);
    for (int i = 0; i < model->n_params; i++) {
        const tn_param *p = &model->params[i];
        if (!p->trainable) continue;
        /* the part of this tensor inside the moments' range */
        size_t a = p->offset > o->lo ? p->offset : o->lo, b = p->offset + p->numel < o->lo + o->n ? p->offset + p->numel
                                                                                                 : o->lo + o->n;
        if (b <= a) continue;
        double wd = p->decay ? h->weight_decay : 0.0;
        o->be->adamw(model->slab + a, model->grad + a, o->m + (a - o->lo), o->v + (a - o->lo), b - a, lr, h->beta1,
                     h->beta2, h->eps, wd, bc1, bc2);
    }
}

double tn_grad_sumsq(const tn_model *model, size_t lo, size_t n) { return model->be->sumsq(model->grad + lo, n); }

double tn_clip_grad_norm(tn_model *model, double max_norm) {
    double norm = sqrt(model->be->sumsq(model->grad, model->n_trainable));
    if (max_norm > 0) {
        double coef = max_norm / (norm + 1e-6);
        if (coef < 1.0) model->be->scale(model->grad, model->n_trainable, (float)coef);
    }
    return norm;
}
