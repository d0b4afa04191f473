/* optimizer -- AdamW exactly as torch 1.13 computes it, and global gradient-norm clipping.
 *
 * Owns the two moment slabs (same layout as the gradient slab). Weight decay is decoupled and applies
 * only to tensors with ndim >= 2 (embeddings, linear and LoRA weights), never to norms or biases. */
#ifndef TN_OPTIMIZER_H
#define TN_OPTIMIZER_H

#include "model/model.h"

typedef struct {
    double beta1, beta2, eps, weight_decay;
} tn_adamw_hparams;

typedef struct {
    const tn_backend *be;
    size_t n;
    float *m, *v;  /* [n_trainable] */
    int step;      /* optimizer steps taken */
} tn_adamw;

tn_adamw *tn_adamw_create(const tn_model *model);
void tn_adamw_free(tn_adamw *o);
/* One step with learning rate lr on every trainable tensor (increments o->step first, as torch does). */
void tn_adamw_step(tn_adamw *o, tn_model *model, const tn_adamw_hparams *h, double lr);

/* torch.nn.utils.clip_grad_norm_: total = ||all grads||_2; grads *= min(1, max_norm / (total + 1e-6)).
 * Returns the pre-clip norm. max_norm <= 0 only measures. */
double tn_clip_grad_norm(tn_model *model, double max_norm);

#endif
