/* accelerate_config -- the `accelerate launch --config_file` YAML that LLaMA-Factory's FSDP and DeepSpeed
 * recipes start from (examples/accelerate/fsdp_config.yaml), read by `tandem launch --config_file FILE`.
 *
 * Owns: what such a file says that tandem can do: the number of processes, and the sharding
 * (distributed_type FSDP with fsdp_config.fsdp_sharding_strategy FULL_SHARD / SHARD_GRAD_OP / NO_SHARD /
 * HYBRID_SHARD(_ZERO2), or their numbers 1-5; DEEPSPEED with deepspeed_config.zero_stage), as a ZeRO
 * stage; one note per other key that matters (mixed precision, offload, several machines). A file that
 * is missing, does not parse or holds a value tandem cannot map is one line naming the file and key. */
#ifndef TN_ACCELERATE_CONFIG_H
#define TN_ACCELERATE_CONFIG_H

typedef struct {
    int num_processes;  /* 0 when absent */
    int zero_stage;     /* -1 when the file implies none (MULTI_GPU, NO, ...: plain data parallelism is 0) */
    char notes[1024];   /* "accelerate FILE: ..." lines, each ending in '\n' */
} tn_accelerate_config;

int tn_accelerate_config_load(const char *path, tn_accelerate_config *a);
int tn_accelerate_config_parse(const char *yaml_text, const char *path_for_errors, tn_accelerate_config *a);

#endif
