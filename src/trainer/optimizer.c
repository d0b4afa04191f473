/* optimizer.c -- see optimizer.h. */
#include "trainer/optimizer.h"

#include <math.h>
#include <stdlib.h>

#include "core/core.h"

tn_adamw *tn_adamw_create(const tn_model *model) {
    tn_adamw *o = tn_xcalloc(1, sizeof *o);
    o->be = model->be;
    o->n = model->n_trainable;
    o->m = o->be->alloc(o->n);
    o->v = o->be->alloc(o->n);
    return o;
}

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
        double wd = p->decay ? h->weight_decay : 0.0;
        o->be->adamw(model->slab + p->offset, model->grad + p->offset, o->m + p->offset, o->v + p->offset, p->numel,
                     lr, h->beta1, h->beta2, h->eps, wd, bc1, bc2);
    }
}

double tn_clip_grad_norm(tn_model *model, double max_norm) {
    double norm = sqrt(model->be->sumsq(model->grad, model->n_trainable));
    if (max_norm > 0) {
        double coef = max_norm / (norm + 1e-6);
        if (coef < 1.0) model->be->scale(model->grad, model->n_trainable, (float)coef);
    }
    return norm;
}
