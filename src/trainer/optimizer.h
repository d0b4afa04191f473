/* optimizer -- AdamW exactly as torch 1.13 computes it, and global gradient-norm clipping.
 *
 * Owns the two moment slabs (same layout as the gradient slab, or, sharded, this rank's spans of it alone,
 * packed in slab order: one range, or FSDP's chunk of every unit, shard_layout.h).
 * Weight decay is decoupled and applies only to tensors with ndim >= 2 (embeddings, linear and LoRA
 * weights), never to norms or biases. */
#ifndef TN_OPTIMIZER_H
#define TN_OPTIMIZER_H

#include "model/model.h"
#include "trainer/shard_layout.h"

typedef struct {
    double beta1, beta2, eps, weight_decay;
} tn_adamw_hparams;

typedef struct {
    const tn_backend *be;
    tn_span *spans; /* [n_spans] the moments cover these ranges of the trainable slab, packed in this order */
    int n_spans;
    size_t n;       /* their values */
    float *m, *v;   /* [n] */
    int step;      /* optimizer steps taken */
} tn_adamw;

tn_adamw *tn_adamw_create(const tn_model *model);
/* Moments for the range [lo, lo + n) only (a ZeRO shard); steps update that range of the parameters. */
tn_adamw *tn_adamw_create_range(const tn_model *model, size_t lo, size_t n);
/* The same for k ranges (a balanced ZeRO shard), copied. */
tn_adamw *tn_adamw_create_spans(const tn_model *model, const tn_span *spans, int k);
void tn_adamw_free(tn_adamw *o);
/* One step with learning rate lr on every trainable tensor (increments o->step first, as torch does). */
void tn_adamw_step(tn_adamw *o, tn_model *model, const tn_adamw_hparams *h, double lr);

/* torch.nn.utils.clip_grad_norm_: total = ||all grads||_2; grads *= min(1, max_norm / (total + 1e-6)).
 * Returns the pre-clip norm. max_norm <= 0 only measures. */
double tn_clip_grad_norm(tn_model *model, double max_norm);
/* Sum of squares of the gradients in k spans (one shard's part of the global norm), and their scaling. */
double tn_grad_sumsq(const tn_model *model, const tn_span *spans, int k);
void tn_grad_scale(tn_model *model, const tn_span *spans, int k, float coef);

#endif
