/* merge.c -- folding LoRA adapters into the base weights (for `tandem export`). */
#include "model/model.h"

/* W[out, in] += scale * B[out, r] A[r, in] for every adapted projection. Afterwards the base weights alone
 * compute what base + adapter computed; the adapter tensors are left as they were. */
void tn_model_merge_lora(tn_model *m) {
    if (!m->lora.r) return;
    const tn_backend *be = m->be;
    const int D = m->D, I = m->I, q = m->H * m->hd, kv = m->KV * m->hd, r = m->lora.r;
    if (m->lora_emb.A) /* PEFT's embedding delta (B A)^T: E[V, D] += scale * A^T[V, r] B^T[r, D] */
        be->matmul(0, 1, m->V, D, r, m->lora_scale, m->lora_emb.A, r, m->lora_emb.B, r, 1.0f, m->embed, D);
    for (int l = 0; l < m->L; l++) {
        tn_layer_tensors *w = &m->w[l];
        struct {
            float *W;
            int out, in;
        } t[TN_LT_COUNT] = {
            [TN_LT_Q] = {w->wqkv, q, D},
            [TN_LT_K] = {w->wqkv + (size_t)q * D, kv, D},
            [TN_LT_V] = {w->wqkv + (size_t)(q + kv) * D, kv, D},
            [TN_LT_O] = {w->wo, D, q},
            [TN_LT_GATE] = {w->wgu, I, D},
            [TN_LT_UP] = {w->wgu + (size_t)I * D, I, D},
            [TN_LT_DOWN] = {w->wdown, D, I},
        };
        for (int k = 0; k < TN_LT_COUNT; k++) {
            const tn_lora_pair *p = &w->lora[k];
            if (!p->A) continue;
            be->matmul(0, 0, t[k].out, t[k].in, r, m->lora_scale, p->B, r, p->A, t[k].in, 1.0f, t[k].W, t[k].in);
        }
    }
}

void tn_model_fold_lora(tn_model *m) {
    tn_model_merge_lora(m);
    m->lora_emb.A = m->lora_emb.B = NULL;
    for (int l = 0; l < m->L; l++)
        for (int k = 0; k < TN_LT_COUNT; k++) m->w[l].lora[k].A = m->w[l].lora[k].B = NULL;
}
