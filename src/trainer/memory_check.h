/* memory_check -- what a training job will allocate, worked out from its configs before anything is.
 *
 * A size typed wrong (hidden_size: 1e9, num_hidden_layers: 1e6, vocab_size: 2^31-1,
 * per_device_train_batch_size=1e9) must stop the job with one line naming the key and the bytes, not with
 * "out of memory" after a huge allocation. From config.json and the training YAML this counts, in floats
 * as model.c and model_forward.c lay them out, the parameter slab, gradients and AdamW moments, and the
 * activation workspace of one micro-batch; with model_name_or_path it first compares config.json's sizes
 * with the tensor shapes in the weights file's header (nothing is read or allocated). The count leaves out
 * small buffers, so it is a lower bound: a job it refuses could not have run. A GPU run is checked against each
 * rank's GPU (its parameters, gradients, moments and activations live there, frozen LoRA weights in bf16 under
 * bf16: true; ranks sharing a GPU add up), and against host RAM for what stays on the host (DiLoCo's vectors, the
 * compressed exchange's residual), for every rank of the machine. */
#ifndef TN_MEMORY_CHECK_H
#define TN_MEMORY_CHECK_H

#include <stdint.h>

#include "config/train_config.h"
#include "model/model_config.h"

typedef struct {
    double param_bytes;   /* parameters, gradients and AdamW moments */
    double layer_bytes;   /* of that, one decoder layer */
    double embed_bytes;   /* of that, embeddings and (untied) lm_head */
    double act_bytes;     /* activations and batch buffers of one micro-batch */
    double tokens;        /* per_device_train_batch_size x seq_len */
    double trainable;     /* trainable parameters (LoRA: the adapters) */
    double frozen;        /* parameters that are not trained (LoRA: the base) */
    double matmul_params; /* weights that multiply every token (layers' projections and the lm_head) */
    double lora_params;   /* of the trainable ones, LoRA adapters */
} tn_memory_need;

/* The bytes one rank needs for model mc trained as cfg says on sequences of seq_len tokens. */
void tn_memory_estimate(const tn_train_config *cfg, const tn_model_config *mc, int seq_len, tn_memory_need *need);
/* The same with frozen (LoRA base) weights held in frozen_bytes each (4 fp32, 2 bf16). */
void tn_memory_estimate_frozen(const tn_train_config *cfg, const tn_model_config *mc, int seq_len, int frozen_bytes,
                               tn_memory_need *need);
/* Where a rank's tensors live: host memory (gpu_bytes 0), or a GPU of gpu_bytes that gpu_ranks ranks of this
 * machine share, frozen weights in frozen_bytes each. */
typedef struct {
    double gpu_bytes;
    int gpu_ranks, frozen_bytes;
    char gpu_name[64];   /* "cuda:0" */
} tn_memory_target;
/* Physical memory of this machine, or its cgroup's limit when lower; 0 when unknown. *limited: the cgroup's. */
double tn_memory_available(int *limited);
/* The whole check for `tandem train`: config.json (and the weights' shapes), then the estimate for
 * local_ranks ranks on this machine against its memory. 0, or -1 + tn_err naming the key and the bytes. */
int tn_memory_check(const tn_train_config *cfg, int seq_len, int local_ranks);
/* The same for a run on target t (NULL: the host, as tn_memory_check). */
int tn_memory_check_on(const tn_train_config *cfg, int seq_len, int local_ranks, const tn_memory_target *t);
/* The target of local rank local_rank of local_size on backend name ("cpu", "cuda"; backend.h tn_backend_select's
 * GPU: local rank mod the visible GPUs). */
void tn_memory_target_of(const char *backend, int bf16, int local_rank, int local_size, tn_memory_target *t);
/* The same check for a command that only builds model mc (config file path), bytes_per_param bytes per parameter
 * (init-model: 8, the weights and their gradients), against avail bytes (tn_memory_available; limited: a cgroup's
 * limit; avail 0: unknown: then only the 2^62 bytes model.c's offsets can count are checked). 0, or -1 + tn_err naming the key. */
int tn_memory_check_model(const char *path, const tn_model_config *mc, double bytes_per_param, double avail,
                          int limited);
/* tn_memory_check_model before tn_model_create(mc) in a command that does not train (init-model, export, chat):
 * the slab and the gradients of a full model (8 bytes per parameter), of a LoRA one the slab (4), against this
 * machine's memory. */
int tn_memory_check_create(const char *path, const tn_model_config *mc, int lora);

#endif
