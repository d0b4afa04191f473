/* vision -- the vision tower of the Qwen VL models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): patches -> features for the
 * <|image_pad|> positions (and Qwen3-VL's deepstack features), forward and backward, on the CPU backend.
 *
 * Files: vision_params.c (tensor layout, names, binding), vision.c (blocks, attention, forward/backward),
 * vision_merge.c (patch mergers, Qwen3-VL position embedding, Qwen2.5-VL windows), vl_rope.c (get_rope_index and
 * the multimodal rotary tables of the text decoder).
 *
 * Shapes: N patches of the micro-batch (all images, pixel_values order), P = patch_dim = C*T*p*p, E vision width,
 * hv = E / heads, I vision MLP width, m = merge size, M = N / m^2 merged tokens, D text width. */
#ifndef TN_VISION_H
#define TN_VISION_H

#include <stddef.h>
#include <stdint.h>

#include "data/mm_batch.h"

struct tn_model;

typedef struct {        /* one vision block; NULL where the model has none (or, for gradients, frozen) */
    float *n1w, *n1b, *qkv_w, *qkv_b, *proj_w, *proj_b, *n2w, *n2b;
    float *fc1_w, *fc1_b; /* [I, E] / [I]; Qwen2.5-VL: gate|up adjacent, [2I, E] / [2I] */
    float *fc2_w, *fc2_b; /* [E, I] / [E] */
} tn_vblock_tensors;

typedef struct {        /* a patch merger: norm, then fc1 [4E, 4E], GELU, fc2 [D, 4E] */
    float *nw, *nb;     /* [E] (merger) or [4E] (Qwen3-VL deepstack: norm after the 2x2 concat) */
    float *fc1_w, *fc1_b, *fc2_w, *fc2_b;
} tn_merger_tensors;

typedef struct tn_vision_tensors {
    float *patch_w, *patch_b; /* [E, P], [E] (Qwen3-VL) */
    float *pos;               /* [G*G, E] (Qwen3-VL) */
    tn_vblock_tensors *blk;   /* [depth] */
    tn_merger_tensors merger;
    tn_merger_tensors *deep;  /* [n_deep] */
    int any;                  /* gradients: some vision tensor trains */
} tn_vision_tensors;

/* Parts of a VL model that can be frozen (tn_lora_config.freeze), as LLaMA-Factory's freeze_vision_tower (patch
 * and position embeddings, blocks, deepstack mergers), freeze_multi_modal_projector (the merger) and
 * freeze_language_model (embeddings, decoder layers, final norm, lm_head). */
enum { TN_FREEZE_VISION = 1, TN_FREEZE_PROJECTOR = 2, TN_FREEZE_LM = 4 };

/* Adds every vision tensor in slab order through add(ctx, trainable, ndim, d0, d1, name); tensors of a frozen part
 * get trainable 0. */
void tn_vision_layout(const struct tn_model *m, unsigned freeze, int trainable,
                      void (*add)(void *ctx, int trainable, int ndim, int64_t d0, int64_t d1, const char *name),
                      void *ctx);
/* Pointers into slab (params) or the gradient slab (grads = 1: frozen tensors NULL). */
void tn_vision_bind(struct tn_model *m, tn_vision_tensors *t, float *slab, int grads);
void tn_vision_tensors_free(tn_vision_tensors *t);

/* Activations of one vision pass (grown to the micro-batch's patch count). */
typedef struct tn_vision_acts tn_vision_acts;
/* checkpointing: one set of block activations, recomputed from each block's input in backward */
tn_vision_acts *tn_vision_acts_create(int checkpointing);
void tn_vision_acts_free(tn_vision_acts *va);
/* Checks an image batch against the model (patch_dim, grids divisible by the merge size): 0, or -1 with err. */
int tn_vision_check(const struct tn_model *m, const tn_mm_batch *mm, char *err, size_t errlen);
/* Forward: *out = merged features [M, D]; deep[k] = deepstack features [M, D] (Qwen3-VL; n_deep of them). The
 * pointers stay valid until the next forward on va. Returns M. */
int tn_vision_forward(struct tn_model *m, tn_vision_acts *va, const tn_mm_batch *mm, float **out, float ***deep);
/* Backward from d(out) [M, D] and d(deep[k]) (may be NULL: zero); accumulates into the vision gradients. */
void tn_vision_backward(struct tn_model *m, tn_vision_acts *va, const float *dout, float *const *ddeep);
/* Seconds spent in the tower's forward and backward passes on va since it was created (wall clock). */
void tn_vision_seconds(const tn_vision_acts *va, double *fwd_s, double *bwd_s);
/* Intermediates of the last forward, for tests: "patch_embeds", "pos_embeds", "vision_blocks_out" [N, E] or
 * "image_embeds" [M, D]; NULL when absent. *rows, *cols set. */
const float *tn_vision_intermediate(const tn_vision_acts *va, const char *name, int *rows, int *cols);

/* ---- vl_rope.c ---- */
/* transformers' get_rope_index for images: pos [3][B*S] (t, h, w rows) from ids [B, S] and the grids of the images
 * in batch order; mask [B, S] (NULL: all valid): masked positions get 1. -1 with err when the <|image_pad|> runs do
 * not match the grids. */
int tn_vl_rope_index(const struct tn_model *m, const int32_t *ids, const int32_t *mask, int B, int S,
                     const int32_t *grid_thw, int n_images, int32_t *pos, char *err, size_t errlen);
/* Text rotary tables per token: cos/sin [T, hd/2], angle of frequency i = pos[owner(i)][t] * theta^(-2i/hd) with
 * owner from mrope_section (sectioned or interleaved). */
void tn_vl_mrope_tables(const struct tn_model *m, const int32_t *pos, int T, float *cos_t, float *sin_t);
/* Which position row (0 t, 1 h, 2 w) drives frequency i. */
int tn_vl_mrope_owner(const struct tn_model *m, int i);

#endif
