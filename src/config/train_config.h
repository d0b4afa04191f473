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

#include <stdio.h>

typedef enum { TN_FT_LORA, TN_FT_FULL } tn_finetuning_type;
typedef enum { TN_STAGE_SFT, TN_STAGE_PT } tn_stage;
typedef enum { TN_EVAL_NO, TN_EVAL_STEPS, TN_EVAL_EPOCH } tn_eval_strategy;
typedef enum { TN_SCHED_CONSTANT, TN_SCHED_LINEAR, TN_SCHED_COSINE, TN_SCHED_STEP } tn_sched_type;
typedef enum { TN_SAVE_STEPS, TN_SAVE_NO, TN_SAVE_EPOCH } tn_save_strategy;
typedef enum { TN_SYNC_DDP, TN_SYNC_DILOCO } tn_sync_mode;

#define TN_PATH_MAX 1024

typedef struct {
    /* model */
    char model_name_or_path[TN_PATH_MAX]; /* HF model folder (config.json + safetensors) */
    char model_config[TN_PATH_MAX];       /* tandem: config.json for a fresh random model (no weights) */
    char adapter_name_or_path[TN_PATH_MAX]; /* a PEFT adapter to continue training (or to merge on export) */
    /* export (`tandem export`, LLaMA-Factory's export keys) */
    char export_dir[TN_PATH_MAX];
    int export_size;                      /* GB per safetensors shard, default 5 (LF) */
    /* method */
    tn_finetuning_type finetuning_type;   /* default lora (LLaMA-Factory) */
    int lora_rank;                        /* default 8 */
    double lora_alpha;                    /* default 2 * lora_rank (LLaMA-Factory); 0 = not given until
                                           * tn_train_config_finish fills it in */
    double lora_dropout;                  /* default 0 */
    char lora_target[256];                /* "all" (default) or comma list of q_proj,...,down_proj */
    tn_stage stage;                       /* default sft (LF); pt = pre-training on raw text */
    int do_train;                         /* default: true, or false (LF's default) when do_predict is set */
    /* data */
    char dataset[256];                    /* comma list of dataset_info.json names, or the demo "demo_addition" */
    char dataset_dir[TN_PATH_MAX];        /* default "data" (LF) */
    char template_name[64];               /* key "template": default, qwen, qwen3, qwen3_nothink, llama3 */
    int cutoff_len;                       /* default 2048 */
    int max_samples;                      /* default 0 = all (first N of each dataset) */
    int packing;                          /* default -1: on for pt, off for sft (LF) */
    int train_on_prompt, mask_history;    /* default false */
    int enable_thinking;                  /* default true (LF) */
    char default_system[1024];            /* override of the template's system prompt ("" = template's) */
    double val_size;                      /* default 0; < 1 fraction, >= 1 count */
    /* images (vision-language models; LF's defaults) */
    int image_max_pixels, image_min_pixels; /* default 768*768 and 32*32: LF's pre-resize bounds */
    char media_dir[TN_PATH_MAX];          /* default "" = dataset_dir: where the images column's paths start */
    int freeze_vision_tower;              /* default true */
    int freeze_multi_modal_projector;     /* default true */
    int freeze_language_model;            /* default false */
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
    int lr_step_size;                     /* 'step' schedule (torch StepLR): lr_scheduler_kwargs step_size= (steps) */
    double lr_step_gamma;                 /* and gamma= (default 0.1, as StepLR) */
    double max_grad_norm;                 /* default 1.0; <= 0 disables clipping */
    double weight_decay;                  /* default 0 (HF) */
    double adam_beta1, adam_beta2, adam_epsilon; /* 0.9, 0.999, 1e-8 (HF) */
    int optim_sgd;                        /* optim: sgd (image classifiers; else AdamW) */
    char optim_args[256];                 /* HF optim_args "k=v,...": sgd's momentum, dampening, nesterov */
    double label_smoothing_factor;        /* HF, default 0 (image classifiers) */
    int sync_bn;                          /* image classifiers: batch statistics over all ranks (SyncBatchNorm) */
    int gradient_checkpointing;           /* default: on, as LF (off with disable_gradient_checkpointing) */
    int disable_gradient_checkpointing;
    int seed;                             /* default 42 */
    /* distributed */
    char deepspeed[TN_PATH_MAX];          /* a DeepSpeed JSON (LLaMA-Factory's key), read by deepspeed_config.h */
    int zero_stage;                       /* tandem: ZeRO stage 0-3 (zero.h); -1 = not given (then deepspeed's
                                           * zero_optimization.stage, or fsdp's strategy, or 0) */
    int zero_contiguous;                  /* tandem zero_shard_layout: 0 balanced (default: FSDP's chunk of every
                                           * unit per rank), 1 contiguous ranges (shard_layout.h) */
    int zero_shared_params;               /* tandem: ZeRO-3 with every rank on one machine maps one shared copy of the
                                           * parameters instead of gathering them (default true; zero.c) */
    int fsdp_stage;                       /* HF TrainingArguments' fsdp: full_shard 3, shard_grad_op 2,
                                           * no_shard 0; -1 = not given */
    double ddp_bucket_cap_mb;
    char device[16];                      /* tandem: auto (default; $TANDEM_DEVICE), cpu or cuda (backend.h) */
    int bf16;                             /* HF: the CUDA backend computes in bf16 (default false: fp32) */
    int max_bad_steps;                    /* tandem: consecutive non-finite steps (skipped) before the run stops;
                                           * default 10 */
    double peer_timeout;                  /* tandem: seconds before a silent or hung rank is named and the
                                           * job stopped; default 60, 0 = never */
    /* low-communication training and unequal ranks (tandem keys; README "Slow links and unequal machines") */
    tn_sync_mode sync_mode;               /* ddp (default): gradients every step; diloco: outer steps per round */
    int comm_compression;                 /* 0 none, 1 bf16, 2 int8, 3 int4 (tn_codec): what crosses between machines */
    int diloco_inner_steps;               /* H, default 8 */
    double diloco_outer_lr, diloco_outer_momentum; /* 1.0, 0.0: averaging (the DiLoCo paper: 0.7, 0.9) */
    int diloco_nesterov, diloco_overlap;  /* true, true */
    int diloco_sync_steps;                /* 0: the first N steps synchronous (as ddp), then the rounds */
    int balance_ranks;                    /* default false: each rank's share of the global batch follows its speed */             /* default 4 (HF key; DDP uses 25): gradient all-reduce bucket size */
    /* output */
    char output_dir[TN_PATH_MAX];         /* default "saves/tandem" */
    int logging_steps;                    /* default 10 (LLaMA-Factory examples) */
    int save_steps;                       /* default 0: only at the end */
    int save_total_limit;                 /* default 0: keep every checkpoint */
    int save_only_model;                  /* default false: checkpoints hold optimizer + RNG state (resumable) */
    int overwrite_output_dir;             /* default 0: an output_dir with checkpoints auto-resumes (LF) */
    int plot_loss;                        /* default false (LF) */
    tn_save_strategy save_strategy;       /* default steps (HF): every save_steps; no: never; epoch: each epoch's end */
    int logging_first_step;               /* default false (HF): also log step 1 */
    char report_to[256];                  /* HF's integrations, comma list ("" or none: none) */
    int report_tensorboard;               /* report_to has tensorboard or all (set by finish) */
    char logging_dir[TN_PATH_MAX];        /* TensorBoard files; "" = output_dir/runs/<time>_<host> (HF) */
    char resume_from_checkpoint[TN_PATH_MAX]; /* "" = none (LF auto-resume rule still applies) */
    int dashboard;                        /* tandem: rank 0 serves the run's live page (serve/dashboard.h) */
    char dashboard_host[256];             /* "" = 127.0.0.1 (another address needs TANDEM_DASHBOARD_TOKEN) */
    int dashboard_port;                   /* 0 = a free port */
    /* evaluation */
    tn_eval_strategy eval_strategy;       /* default no (HF); steps when val_size > 0 and eval_steps given */
    int eval_steps;                       /* default 0 = logging_steps (HF) */
    int per_device_eval_batch_size;       /* default 8 (HF) */
    int do_eval;
    int do_predict, predict_with_generate; /* LF predict: generate for eval_dataset (infer/predict.h) */
    char eval_dataset[256];               /* comma list of dataset names to predict */
    int eval_on_start;                    /* default false (HF): evaluate once before the first step */
    /* generation (`tandem chat` / `tandem generate`; LLaMA-Factory's GeneratingArguments) */
    int do_sample;                        /* default true (LF) */
    double temperature, top_p;            /* 0.95, 0.7 (LF) */
    int top_k, max_new_tokens;            /* 50, 1024 (LF) */
    double repetition_penalty;            /* 1.0 (LF) */
    /* keys of the Python world that change nothing here: one line each, printed at start-up */
    char notices[4096];
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
/* model_name_or_path and adapter_name_or_path, when set, must be local folders: a Hub id
 * ("Qwen/Qwen3-4B-Instruct-2507") gets one line saying that tandem does not download and what to pass. */
int tn_train_config_check_model_paths(const tn_train_config *c);
/* c->notices as "tandem: note: KEY: what tandem does" lines into f (the keys tandem notes, not obeys). */
void tn_train_config_print_notices(const tn_train_config *c, FILE *f);
/* Removes the note about key. */
void tn_train_config_drop_note(tn_train_config *c, const char *key);
/* The note about key, when there is one, says text instead (a command for which the general note is wrong:
 * `tandem export` on export_size, which it does read). */
void tn_train_config_reword_note(tn_train_config *c, const char *key, const char *text);

/* Learning-rate schedule as HF transformers defines them (get_*_schedule_with_warmup):
 * warmup: lr * step / max(1, warmup); linear: lr * max(0, (total - step) / max(1, total - warmup));
 * cosine: lr * max(0, 0.5 * (1 + cos(pi * progress))) ; constant (with warmup). step counts from 0
 * (the lr used for the first optimizer step is lr_at(0)). */
double tn_lr_at(tn_sched_type type, double base_lr, int step, int warmup_steps, int total_steps);
/* torch's StepLR stepped once per optimizer step (as HF's Trainer steps its scheduler), after HF's linear warmup:
 * base_lr gamma^floor((step - warmup) / step_size). */
double tn_lr_step_at(double base_lr, int step, int warmup_steps, int step_size, double gamma);
/* c's schedule at step: tn_lr_at, or tn_lr_step_at with c's step_size and gamma for 'step' */
double tn_lr_for(const tn_train_config *c, int step, int warmup_steps, int total_steps);
/* HF: warmup_steps if > 0 else ceil(warmup_ratio * total_steps); 0 when c->no_warmup ('constant'). */
int tn_warmup_steps(const tn_train_config *c, int total_steps);
const char *tn_sched_name(tn_sched_type t); /* TN_SCHED_CONSTANT -> "constant_with_warmup" */
/* The HF name of c's schedule: "constant" when c->no_warmup, else tn_sched_name(). */
const char *tn_train_config_sched_name(const tn_train_config *c);

#endif
