/* memory_check -- what a training job will allocate, worked out from its configs before anything is.
 *
 * A size typed wrong (hidden_size: 1e9, num_hidden_layers: 1e6, vocab_size: 2^31-1,
 * per_device_train_batch_size=1e9) must stop the job with one line naming the key and the bytes, not with
 * "out of memory" after a huge allocation. From config.json and the training YAML this counts, in floats
 * as model.c and model_forward.c lay them out, the parameter slab, gradients and AdamW moments, and the
 * activation workspace of one micro-batch; with model_name_or_path it first compares config.json's sizes
 * with the tensor shapes in the weights file's header (nothing is read or allocated). The count leaves out
 * small buffers, so it is a lower bound: a job it refuses could not have run. */
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
/* Physical memory of this machine, or its cgroup's limit when lower; 0 when unknown. *limited: the cgroup's. */
double tn_memory_available(int *limited);
/* The whole check for `tandem train`: config.json (and the weights' shapes), then the estimate for
 * local_ranks ranks on this machine against its memory. 0, or -1 + tn_err naming the key and the bytes. */
int tn_memory_check(const tn_train_config *cfg, int seq_len, int local_ranks);

#endif
