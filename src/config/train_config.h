/* train_config -- the training job's YAML (LLaMA-Factory key names), parsed and validated.
 *
 * Owns: key table (name, type, default, range), parsing a YAML mapping of scalars (and flow/block
 * sequences of scalars for list keys) with libyaml, `key=value` overrides, and one-line errors:
 *   "CONFIG.yaml:LINE: key 'lora_rnak' is not known (did you mean 'lora_rank'?)"
 *   "CONFIG.yaml:LINE: key 'learning_rate' expects a positive number, got 'fast'"
 * Relative paths (model_name_or_path, model_config, output_dir) are resolved against the YAML's folder
 * when that path exists there, else kept as given (relative to the working directory). */
#ifndef TN_TRAIN_CONFIG_H
#define TN_TRAIN_CONFIG_H

typedef enum { TN_FT_LORA, TN_FT_FULL } tn_finetuning_type;
typedef enum { TN_SCHED_CONSTANT, TN_SCHED_LINEAR, TN_SCHED_COSINE } tn_sched_type;

#define TN_PATH_MAX 1024

typedef struct {
    /* model */
    char model_name_or_path[TN_PATH_MAX]; /* HF model folder (config.json + safetensors) */
    char model_config[TN_PATH_MAX];       /* tandem: config.json for a fresh random model (no weights) */
    /* method */
    tn_finetuning_type finetuning_type;   /* default lora (LLaMA-Factory) */
    int lora_rank;                        /* default 8 */
    double lora_alpha;                    /* default 2 * lora_rank (LLaMA-Factory); 0 = not given until
                                           * tn_train_config_finish fills it in */
    double lora_dropout;                  /* default 0 */
    char lora_target[256];                /* "all" (default) or comma list of q_proj,...,down_proj */
    /* data */
    char dataset[256];                    /* tandem demo tasks: "demo_addition" etc. (data stage decides) */
    int cutoff_len;                       /* default 2048 */
    /* training */
    double learning_rate;                 /* default 5e-5 (HF) */
    int max_steps;                        /* default -1: use num_train_epochs */
    double num_train_epochs;              /* default 3.0 */
    int per_device_train_batch_size;      /* default 8 (HF) */
    int gradient_accumulation_steps;      /* default 1 */
    tn_sched_type lr_scheduler_type;      /* default linear (HF) */
    int no_warmup;                        /* 1 for HF 'constant' (TN_SCHED_CONSTANT, warmup ignored);
                                           * 0 for 'constant_with_warmup' and the others */
    double warmup_ratio;                  /* default 0 */
    int warmup_steps;                     /* default 0; wins over warmup_ratio when > 0 (HF rule) */
    double max_grad_norm;                 /* default 1.0; <= 0 disables clipping */
    double weight_decay;                  /* default 0 (HF) */
    double adam_beta1, adam_beta2, adam_epsilon; /* 0.9, 0.999, 1e-8 (HF) */
    int gradient_checkpointing;           /* default 0 */
    int seed;                             /* default 42 */
    /* output */
    char output_dir[TN_PATH_MAX];         /* default "saves/tandem" */
    int logging_steps;                    /* default 10 (LLaMA-Factory examples) */
    int save_steps;                       /* default 0: only at the end */
    int overwrite_output_dir;             /* default 0 */
    /* bookkeeping */
    char source_path[TN_PATH_MAX];        /* the YAML file this came from */
    unsigned cli_paths;                   /* path keys set by a command-line override (kept relative to
                                           * the working directory by finish); bits are private */
} tn_train_config;

void tn_train_config_defaults(tn_train_config *c);
/* Parse YAML text/file into c (defaults first). 0 ok, -1 with tn_err (one line, file:line: ...). */
int tn_train_config_load(const char *path, tn_train_config *c);
int tn_train_config_parse(const char *yaml_text, const char *path_for_errors, tn_train_config *c);
/* Apply one "key=value" command-line override (same validation). */
int tn_train_config_override(tn_train_config *c, const char *key_eq_value);
/* Cross-key checks after parsing and overrides (e.g. model_name_or_path or model_config required,
 * lora_alpha default from lora_rank). */
int tn_train_config_finish(tn_train_config *c);

/* Learning-rate schedule as HF transformers defines them (get_*_schedule_with_warmup):
 * warmup: lr * step / max(1, warmup); linear: lr * max(0, (total - step) / max(1, total - warmup));
 * cosine: lr * max(0, 0.5 * (1 + cos(pi * progress))) ; constant (with warmup). step counts from 0
 * (the lr used for the first optimizer step is lr_at(0)). */
double tn_lr_at(tn_sched_type type, double base_lr, int step, int warmup_steps, int total_steps);
/* HF: warmup_steps if > 0 else ceil(warmup_ratio * total_steps); 0 when c->no_warmup ('constant'). */
int tn_warmup_steps(const tn_train_config *c, int total_steps);
const char *tn_sched_name(tn_sched_type t); /* TN_SCHED_CONSTANT -> "constant_with_warmup" */
/* The HF name of c's schedule: "constant" when c->no_warmup, else tn_sched_name(). */
const char *tn_train_config_sched_name(const tn_train_config *c);

#endif
