/* model -- a LLaMA-family decoder (llama, qwen2, qwen3, mistral) with optional PEFT-style LoRA.
 *
 * Owns: the parameter layout (one flat slab per kind of state, fixed tensor order), HF names, loading
 * and saving HF model folders and PEFT adapters, random initialisation, and the layer-by-layer
 * forward and backward passes (model_forward.c). Everything numeric goes through a tn_backend.
 *
 * Slab order: trainable tensors first, so the gradient and optimizer-moment slabs are a prefix-sized
 * range of the parameter slab (same offsets) and a bucket or shard is a contiguous range. Within a
 * layer, q/k/v weights are adjacent (one [q+k+v, D] matrix, one GEMM) and so are gate/up. */
#ifndef TN_MODEL_H
#define TN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/model_config.h"
#include "data/mm_batch.h"

enum { TN_LT_Q, TN_LT_K, TN_LT_V, TN_LT_O, TN_LT_GATE, TN_LT_UP, TN_LT_DOWN, TN_LT_COUNT };
extern const char *const tn_lora_target_names[TN_LT_COUNT]; /* "q_proj", ... "down_proj" */
/* lora_target embed_tokens: a PEFT embedding adapter (lora_embedding_A [r, V], lora_embedding_B [D, r]; A starts at
 * zero, B at N(0, 1); y = E[id] + (alpha / r) B A[:, id]; no dropout), in bit TN_LORA_EMBED of the target mask */
#define TN_LORA_EMBED (1u << TN_LT_COUNT)

typedef struct {
    int r;              /* 0 = no LoRA (full fine-tuning) */
    double alpha;       /* scale = alpha / r */
    double dropout;
    unsigned targets;   /* bit (1 << TN_LT_*) per adapted projection, TN_LORA_EMBED for embed_tokens */
    unsigned freeze;    /* VL models, full fine-tuning: TN_FREEZE_* parts kept frozen (model/vision.h) */
} tn_lora_config;

/* Parse "all" or "q_proj,v_proj,..." into a target mask; -1 with tn_err on an unknown name. */
int tn_lora_parse_targets(const char *list, unsigned *mask);

typedef struct {
    char name[112];     /* HF name, e.g. model.layers.3.self_attn.q_proj.weight */
    int ndim;
    int64_t shape[2];
    size_t offset;      /* in floats, into the parameter slab (and grad/moment slabs when trainable) */
    size_t numel;
    int trainable;
    int decay;          /* AdamW weight decay applies (ndim >= 2) */
    int file_transposed; /* stored [d1, d0] in checkpoints (PEFT's lora_embedding_A [r, V] is held as [V, r]) */
    int file_ndim;      /* > 0: the checkpoint's shape differs (Qwen VL patch_embed [E, C, T, p, p] held as [E, P]) */
    int64_t file_shape[5];
} tn_param;

typedef struct {
    float *A, *B;       /* A [r, in], B [out, r] */
} tn_lora_pair;

typedef struct {        /* pointers into a slab; NULL where absent (or frozen, for gradients) */
    float *ln1, *wqkv, *bqkv, *wo, *bo, *ln2, *wgu, *wdown;
    float *qn, *kn;     /* Qwen3: q_norm, k_norm [hd] */
    tn_lora_pair lora[TN_LT_COUNT];
} tn_layer_tensors;

typedef struct tn_model {
    tn_model_config cfg;
    tn_lora_config lora;
    const tn_backend *be;
    int D, I, H, KV, hd, V, L, qkv_cols; /* shorthand: sizes; qkv_cols = (H + 2 KV) hd */
    float lora_scale;
    const char *base_name_or_path;       /* adapter_config.json's base_model_name_or_path (NULL: null) */

    int n_params;
    tn_param *params;
    size_t n_total, n_trainable;         /* floats */
    float *slab;                         /* parameters [n_total] (backend memory) */
    int slab_sharers;                    /* ranks whose slab is these very pages (ZeRO-3 on one machine: zero.c);
                                          * 0 or 1: this rank's own */
    float *grad;                         /* gradients [n_trainable] */

    float *embed, *norm, *lm_head;       /* lm_head == embed when tied */
    float *d_embed, *d_norm, *d_lm_head; /* NULL when frozen */
    tn_lora_pair lora_emb, d_lora_emb;   /* embed_tokens LoRA: A held transposed [V, r] (a row per token), B [D, r] */
    tn_layer_tensors *w, *dw;            /* per layer */
    struct tn_vision_tensors *vw, *dvw;  /* VL models: the vision tower (model/vision.h); NULL otherwise */
    int vl_legacy_names;                 /* VL: checkpoint names model.layers.* / visual.* (else model.language_model.*,
                                          * model.visual.*); set by tn_model_load_hf, used by every save */

    /* Backward calls grad_ready(ctx, from) each time the gradients [from, n_trainable) are final (after
     * the lm_head/final norm, after each layer, after the embedding): the data-parallel trainer launches
     * each bucket's all-reduce from there, overlapping communication with the rest of backward. */
    void (*grad_ready)(void *ctx, size_t from);
    void *grad_ready_ctx;
    /* Sharded parameters (ZeRO stage 3) are gathered per group (a layer; -1 the embedding; L the final norm
     * and lm_head) just before use: every pass calls param_hook(ctx, g, 1, next) before it reads group g's
     * weights, next being the group it will read after g (-2: none), and param_hook(ctx, g, 0, -2) once it
     * is done with them. NULL: every weight is always there. */
    void (*param_hook)(void *ctx, int group, int need, int next);
    void *param_hook_ctx;
    size_t *frontier;                    /* [L + 2]: see tn_model_grad_frontier */
} tn_model;

/* Lowest trainable-slab offset of the tensors of group >= g, where a tensor's group is its layer index,
 * L for the final norm and lm_head, -1 for the embedding (its gradient is final only at the very end). The
 * slab order makes groups contiguous and ascending, so [frontier, n_trainable) is exactly groups >= g. */
size_t tn_model_grad_frontier(const tn_model *m, int g);
/* This rank's share of the resident bytes of the trainable parameters: all it holds, or, when its slab is the
 * same pages as slab_sharers ranks', that divided among them (what the memory reports compare with ZeRO's). */
size_t tn_model_param_resident(const tn_model *m);
/* The trainable-slab range [*lo, *hi) of group g alone (empty when the group has no trainable tensor). */
void tn_model_group_range(const tn_model *m, int g, size_t *lo, size_t *hi);

/* Build the layout and allocate zeroed slabs. lora may be NULL (full fine-tuning). */
tn_model *tn_model_create(const tn_model_config *cfg, const tn_lora_config *lora, const tn_backend *be);
void tn_model_free(tn_model *m);
const tn_param *tn_model_find(const tn_model *m, const char *name);
/* A tensor's name in the model's checkpoints: internal names are the text models' (model.layers.*, and
 * model.visual.* for a vision tower); a VL model maps them to its naming (vl_legacy_names). Returns buf. */
const char *tn_model_file_name(const tn_model *m, const char *name, char *buf, size_t n);

/* HF init: linear/embedding N(0, initializer_range), norms 1, biases 0; LoRA A kaiming-uniform(a=sqrt 5),
 * B zeros (PEFT). Deterministic in seed. */
void tn_model_init_random(tn_model *m, uint64_t seed);
/* Base weights from an HF folder (model.safetensors or sharded index); shapes must match the config. */
int tn_model_load_hf(tn_model *m, const char *dir);
/* Save base weights (LoRA not merged) as an HF folder: config.json + safetensors. */
int tn_model_save_hf(const tn_model *m, const char *dir, size_t max_shard_bytes);
/* PEFT adapter: adapter_config.json + adapter_model.safetensors ("base_model.model." + name). */
int tn_lora_config_load(const char *adapter_dir, tn_lora_config *lora);
int tn_model_load_adapter(tn_model *m, const char *adapter_dir);
int tn_model_save_adapter(const tn_model *m, const char *adapter_dir);
/* Copies the tokenizer files of an HF folder (tokenizer.json, tokenizer_config.json, ...) that exist in
 * from/ into to/, each atomically. The number copied, or -1 + tn_err (the file, and why) at the first failed write. */
int tn_model_copy_tokenizer_files(const char *from, const char *to);
/* W += (alpha / r) B A for every adapted projection (merge.c): the base alone then equals base + adapter. */
void tn_model_merge_lora(tn_model *m);
/* Merge, then run the forward pass on the merged weights alone (inference: the LoRA GEMMs are skipped). */
void tn_model_fold_lora(tn_model *m);
/* Host copies of one tensor (for tests/exports). */
void tn_model_get(const tn_model *m, const tn_param *p, float *host);
void tn_model_set(tn_model *m, const tn_param *p, const float *host);

/* ---- activations and passes (model_forward.c) ---- */
typedef struct tn_acts tn_acts;
/* Workspace for batches of up to B rows and up to S tokens; checkpointing keeps only each layer's input and
 * recomputes. */
tn_acts *tn_acts_create(const tn_model *m, int B, int S, int checkpointing);
void tn_acts_free(tn_acts *a);
/* Position of the next micro-batch's row 0 in its global batch (LoRA dropout masks are drawn per global
 * row, so any split of the global batch into ranks and micro-batches draws the same masks). */
void tn_acts_set_first_row(tn_acts *a, int64_t first_row);
size_t tn_acts_bytes(const tn_acts *a);
/* Images of the next micro-batch for a vision-language model (layout: data/mm_batch.h), borrowed until the
 * next forward on this workspace returns; NULL or n_images 0: text only. A model that takes no images refuses
 * a batch that has some: -1 and one line in err. */
int tn_acts_set_images(tn_acts *a, const tn_mm_batch *mm, char *err, size_t errlen);

/* After a forward of a VL model: "inputs_embeds" [T, D] (embeddings with image features), or the vision tower's
 * "patch_embeds", "pos_embeds", "vision_blocks_out" [N, E], "image_embeds", "deepstack.K" [M, D]; NULL when absent
 * (tests). */
const float *tn_acts_intermediate(const tn_acts *a, const char *name, int *rows, int *cols);
/* Wall-clock seconds this workspace's vision tower spent in forward and in backward since it was created (0 for a
 * text model): `bench vl` reports the tower's share of a step from them. */
void tn_acts_vision_seconds(const tn_acts *a, double *fwd_s, double *bwd_s);

/* Forward + cross-entropy + backward for one micro-batch [B, S] (HF label convention: position t is
 * scored against labels[t + 1]; -100 ignored). Gradients are ACCUMULATED into m->grad, scaled by
 * grad_scale (1 / trained tokens of the global batch). Returns the summed loss; *n_valid += targets.
 * dropout_seed varies per micro-step (LoRA dropout masks). */
double tn_model_forward_backward(tn_model *m, tn_acts *a, const int32_t *ids, const int32_t *labels, int B,
                                 int S, float grad_scale, int64_t *n_valid, uint64_t dropout_seed);
/* Forward + cross-entropy only (no dropout, no gradients): the summed loss; *n_valid += targets. */
double tn_model_eval_loss(tn_model *m, tn_acts *a, const int32_t *ids, const int32_t *labels, int B, int S,
                          int64_t *n_valid);
/* Forward only: logits [B*S, V] (host memory) for evaluation and generation. */
void tn_model_logits(tn_model *m, tn_acts *a, const int32_t *ids, int B, int S, float *logits_host);

/* Count of targets (labels[b][s+1] != -100) in a batch. */
int64_t tn_count_targets(const int32_t *labels, int B, int S);

#endif
