/* kv_forward -- the forward pass of generation: keys and values of every sequence stay cached, so a new token
 * costs one pass over the weights instead of a pass over the whole sequence.
 *
 * Owns: the KV cache (per slot: for each layer, K and V rows of KV*hd floats for positions 0..ctx-1, in backend
 * memory, one block per slot so that an idle slot's pages can be handed back) and the forward over a batch of
 * segments: segment i appends n_i tokens to slot_i. A prompt is one segment (prefill: its tokens go through
 * every layer together, as a batch), a decode step is one segment of one token per sequence; both may share a
 * forward (continuous batching). Rotary positions continue from what the slot holds; Qwen3's q/k norms, GQA,
 * biases and LoRA adapters (unmerged: the A and B products run beside the base one; merged: tn_model_fold_lora)
 * are as in model_forward.c, from which only the summation order differs.
 *
 * Images (vision-language models, CPU backend): tn_kv_forward_mm takes the step's images (data/mm_batch.h, row =
 * the segment that holds each image's <|image_pad|> run); the vision tower's features replace those rows'
 * embeddings (Qwen3-VL: deepstack features added after the first layers), and every row's rotary angles come from
 * its multimodal t/h/w position (get_rope_index per segment, continuing from the slot's next position: after an
 * image, text positions run max(t, h, w) ahead of the token count, kept per slot). */
#ifndef TN_KV_FORWARD_H
#define TN_KV_FORWARD_H

#include <stdint.h>

#include "model/model.h"

typedef struct tn_kv tn_kv;

/* A cache of n_slots sequences of up to ctx tokens each. NULL + tn_err when m's backend has no generation kernels
 * (backend.h linear_rows, rope_at, attention_cached) or ctx is out of range. Memory is reserved, not touched: a slot
 * costs what it holds. */
tn_kv *tn_kv_create(tn_model *m, int n_slots, int ctx);
void tn_kv_free(tn_kv *kv);
int tn_kv_ctx(const tn_kv *kv);
int tn_kv_slots(const tn_kv *kv);
int tn_kv_len(const tn_kv *kv, int slot);            /* tokens cached */
/* Keep the first len tokens of slot (len <= its length); 0 empties it. */
void tn_kv_truncate(tn_kv *kv, int slot, int len);
/* Empty the slot and give its memory back to the system. */
void tn_kv_release(tn_kv *kv, int slot);
/* Bytes of cache the system holds for this kv (resident pages), for the server's memory checks. */
size_t tn_kv_resident(const tn_kv *kv);

typedef struct {
    int slot, n;             /* append n >= 1 tokens to slot */
    const int32_t *ids;      /* [n], host memory */
} tn_kv_seg;

/* One forward over the segments (distinct slots): logits [n_segs, V] (host memory) of each segment's last token.
 * 0, or -1 + tn_err (a slot would overflow ctx, an id outside the vocabulary): then nothing was cached. */
int tn_kv_forward(tn_model *m, tn_kv *kv, const tn_kv_seg *segs, int n_segs, float *logits);
/* The same with images (mm NULL: none); mm is read during the call only. */
int tn_kv_forward_mm(tn_model *m, tn_kv *kv, const tn_kv_seg *segs, int n_segs, const tn_mm_batch *mm, float *logits);

#endif
