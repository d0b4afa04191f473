/* deepspeed_config -- the DeepSpeed JSON that a LLaMA-Factory YAML names with `deepspeed: FILE`.
 *
 * Owns: reading that file, resolving its "auto" values from the training YAML the way Hugging Face's
 * DeepSpeed integration does (train_micro_batch_size_per_gpu = per_device_train_batch_size,
 * gradient_accumulation_steps, train_batch_size = world x micro x accumulation, gradient_clipping =
 * max_grad_norm, optimizer lr/betas/eps/weight_decay), refusing explicit values that disagree with the YAML
 * (as the integration does), and one line per key saying what tandem does with it. */
#ifndef TN_DEEPSPEED_CONFIG_H
#define TN_DEEPSPEED_CONFIG_H

#include "config/train_config.h"

typedef struct {
    int zero_stage;         /* zero_optimization.stage: 0..3 (0 when absent) */
    int offload_optimizer;  /* zero_optimization.offload_optimizer.device is cpu or nvme */
    int offload_param;      /* zero_optimization.offload_param.device is cpu or nvme */
    char notes[2048];       /* "deepspeed FILE: ..." lines, each ending in '\n' */
} tn_deepspeed_config;

/* Read and check the DeepSpeed JSON at path against cfg for a job of `world` ranks. 0 ok, -1 with tn_err:
 * one line naming the file and key ("ds.json: key 'gradient_accumulation_steps' is 4 but the YAML's
 * gradient_accumulation_steps is 2; set it to "auto" or make them agree"). */
int tn_deepspeed_config_load(const char *path, const tn_train_config *cfg, int world, tn_deepspeed_config *ds);

#endif
