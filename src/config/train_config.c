/* train_config.c -- the training YAML: key table, libyaml event parsing, overrides, finish. See
 * train_config.h.
 *
 * To add a key: add the field to tn_train_config, its default to tn_train_config_defaults, and one row
 * to KEYS below (kind, bounds, the phrase used in "expects ..." errors, or a setter for anything that
 * is not a plain string/int/number/bool). */
#include "config/train_config.h"

#include "core/core.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

/* ------------------------------------------------------------------------------------------------ */
/* Key table                                                                                          */

typedef enum { K_STR, K_PATH, K_INT, K_NUM, K_BOOL, K_CUSTOM, K_NOTICE } key_kind;

#define MSG_MAX 512 /* one error line, before the "file:line: " prefix */

struct key_def;
/* A custom setter validates val completely before writing c; on failure it writes the whole message
 * ("key 'x' ...") into msg and returns -1. */
typedef int (*key_setter)(tn_train_config *c, const struct key_def *k, const char *val, char *msg);

typedef struct key_def {
    const char *name;
    key_kind kind;
    size_t off, size;       /* field offset and size in tn_train_config */
    double lo, hi;          /* K_INT / K_NUM bounds */
    unsigned char lo_open, hi_open; /* 1: bound excluded */
    unsigned char list;     /* accepts a YAML sequence of scalars, joined with commas */
    unsigned path_bit;      /* K_PATH: bit in c->cli_paths */
    const char *expect;     /* "expects <expect>, got '...'" */
    key_setter set;         /* K_CUSTOM */
} key_def;

#define FIELD(f) offsetof(tn_train_config, f), sizeof(((tn_train_config *)0)->f)
#define NOLIM -HUGE_VAL, HUGE_VAL
#define STR(f) K_STR, FIELD(f), NOLIM, 0, 0
#define PATH(f) K_PATH, FIELD(f), NOLIM, 0, 0
#define INT(f, lo, hi) K_INT, FIELD(f), lo, hi, 0, 0
#define NUM(f, lo, hi, lo_open, hi_open) K_NUM, FIELD(f), lo, hi, lo_open, hi_open
#define BOOL(f) K_BOOL, FIELD(f), NOLIM, 0, 0
#define CUSTOM(f) K_CUSTOM, FIELD(f), NOLIM, 0, 0
#define NOFIELD K_CUSTOM, 0, 0, NOLIM, 0, 0 /* a setter that only validates (no field of its own) */
#define NOTICE K_NOTICE, 0, 0, NOLIM, 0, 0 /* accepted, changes nothing; `expect` says what tandem does */

enum { PATH_MODEL = 1u, PATH_MODEL_CONFIG = 2u, PATH_OUTPUT = 4u, PATH_DATASET_DIR = 8u, PATH_ADAPTER = 16u,
       PATH_EXPORT = 32u, PATH_DEEPSPEED = 64u, PATH_MEDIA_DIR = 128u };

static int set_finetuning_type(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_lora_target(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_max_steps(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_scheduler(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_scheduler_kwargs(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_stage(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_eval_strategy(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_optim(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_unsupported(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_resume(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_fsdp(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_report_to(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_save_strategy(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_export_size(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_sync_mode(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_compression(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_shard_layout(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_bf16(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_device(tn_train_config *c, const key_def *k, const char *v, char *msg);
static int set_dashboard(tn_train_config *c, const key_def *k, const char *v, char *msg);

#define VIDEO_MISSING "videos and audio are not supported yet (images are): a dataset with a videos or audios column is refused"
#define LORA_MODULES "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, embed_tokens"

static const key_def KEYS[] = {
    /* model */
    {"model_name_or_path", PATH(model_name_or_path), 0, PATH_MODEL, "a path", NULL},
    {"model_config", PATH(model_config), 0, PATH_MODEL_CONFIG, "a path", NULL},
    {"adapter_name_or_path", PATH(adapter_name_or_path), 0, PATH_ADAPTER, "a PEFT adapter folder", NULL},
    /* export */
    {"export_dir", PATH(export_dir), 0, PATH_EXPORT, "a path", NULL},
    {"export_size", CUSTOM(export_size), 0, 0, "an integer number of GB >= 1", set_export_size},
    {"export_device", NOTICE, 0, 0, "the merge runs on the CPU", NULL},
    /* generation */
    {"do_sample", BOOL(do_sample), 0, 0, "true or false", NULL},
    {"temperature", NUM(temperature, 0, HUGE_VAL, 1, 0), 0, 0, "a positive number", NULL},
    {"top_p", NUM(top_p, 0, 1, 1, 0), 0, 0, "a number in (0, 1]", NULL},
    {"top_k", INT(top_k, 0, INT_MAX), 0, 0, "an integer >= 0 (0: no top-k cut)", NULL},
    {"max_new_tokens", INT(max_new_tokens, 1, INT_MAX), 0, 0, "an integer >= 1", NULL},
    {"infer_backend", NOTICE, 0, 0, "tandem generates with its own forward pass", NULL},
    {"repetition_penalty", NUM(repetition_penalty, 0, HUGE_VAL, 1, 0), 0, 0, "a positive number (1.0: off)", NULL},
    {"export_legacy_format", NOTICE, 0, 0, "exports are always safetensors", NULL},
    /* method */
    {"finetuning_type", CUSTOM(finetuning_type), 0, 0, "one of lora, full", set_finetuning_type},
    {"lora_rank", INT(lora_rank, 1, INT_MAX), 0, 0, "an integer >= 1", NULL},
    {"lora_alpha", NUM(lora_alpha, 0, HUGE_VAL, 1, 0), 0, 0, "a positive number", NULL},
    {"lora_dropout", NUM(lora_dropout, 0, 1, 0, 1), 0, 0, "a number in [0, 1)", NULL},
    {"lora_target", CUSTOM(lora_target), 1, 0, "'all' or a comma list of " LORA_MODULES, set_lora_target},
    {"stage", CUSTOM(stage), 0, 0, "sft or pt", set_stage},
    {"do_train", BOOL(do_train), 0, 0, "true or false", NULL},
    {"additional_target", NOFIELD, 1, 0, "not supported yet: only the LoRA adapters train", set_unsupported},
    {"quantization_bit", NOFIELD, 0, 0, "not supported: tandem trains the base in fp32",
     set_unsupported},
    {"use_dora", NOFIELD, 0, 0, "not supported yet (plain LoRA only)", set_unsupported},
    {"use_rslora", NOFIELD, 0, 0, "not supported yet (scale is lora_alpha / lora_rank)", set_unsupported},
    {"pissa_init", NOFIELD, 0, 0, "not supported yet (LoRA starts as PEFT's default: A random, B zero)",
     set_unsupported},
    /* multimodal: LLaMA-Factory's Qwen3-VL / LLaVA examples */
    {"image_max_pixels", INT(image_max_pixels, 1, INT_MAX), 0, 0, "a number of pixels >= 1", NULL},
    {"image_min_pixels", INT(image_min_pixels, 1, INT_MAX), 0, 0, "a number of pixels >= 1", NULL},
    {"media_dir", PATH(media_dir), 0, PATH_MEDIA_DIR, "a path", NULL},
    {"freeze_vision_tower", BOOL(freeze_vision_tower), 0, 0, "true or false", NULL},
    {"freeze_multi_modal_projector", BOOL(freeze_multi_modal_projector), 0, 0, "true or false", NULL},
    {"freeze_language_model", BOOL(freeze_language_model), 0, 0, "true or false", NULL},
    /* videos and audio: settings LF's VL examples carry even for image-only data (qwen3vl_full_sft.yaml sets
     * video_max_pixels), so they are accepted with one note; a dataset with a videos or audios column is
     * refused by the data loader */
    {"video_max_pixels", NOTICE, 0, 0, VIDEO_MISSING, NULL},
    {"video_min_pixels", NOTICE, 0, 0, VIDEO_MISSING, NULL},
    {"video_fps", NOTICE, 0, 0, VIDEO_MISSING, NULL},
    {"video_maxlen", NOTICE, 0, 0, VIDEO_MISSING, NULL},
    {"audio_sampling_rate", NOTICE, 0, 0, VIDEO_MISSING, NULL},
    {"use_audio_in_video", NOFIELD, 0, 0, "not supported yet: videos and audio are not supported", set_unsupported},
    /* data */
    {"dataset", STR(dataset), 1, 0, "a comma list of dataset names from dataset_info.json", NULL},
    {"dataset_dir", PATH(dataset_dir), 0, PATH_DATASET_DIR, "a path", NULL},
    {"eval_dataset", STR(eval_dataset), 1, 0, "a comma list of dataset names from dataset_info.json", NULL},
    {"template", STR(template_name), 0, 0, "a template name", NULL},
    {"cutoff_len", INT(cutoff_len, 2, INT_MAX), 0, 0, "an integer >= 2", NULL},
    {"max_samples", INT(max_samples, 1, INT_MAX), 0, 0, "an integer >= 1", NULL},
    {"packing", BOOL(packing), 0, 0, "true or false", NULL},
    {"neat_packing", NOFIELD, 0, 0, "not supported yet (packing without attention isolation: packing: true)",
     set_unsupported},
    {"train_on_prompt", BOOL(train_on_prompt), 0, 0, "true or false", NULL},
    {"mask_history", BOOL(mask_history), 0, 0, "true or false", NULL},
    {"enable_thinking", BOOL(enable_thinking), 0, 0, "true or false", NULL},
    {"default_system", STR(default_system), 0, 0, "a string", NULL},
    {"val_size", NUM(val_size, 0, HUGE_VAL, 0, 0), 0, 0, "a fraction in [0, 1) or a count >= 1", NULL},
    {"streaming", NOFIELD, 0, 0, "not supported: tandem tokenizes once and caches", set_unsupported},
    {"tokenized_path", NOTICE, 0, 0, "tandem tokenizes once per job and caches the result in TANDEM_CACHE_DIR "
     "(default ~/.cache/tandem/data), keyed by data, template, tokenizer and cutoff_len; this folder is not read or "
     "written", NULL},
    {"mix_strategy", NOFIELD, 0, 0, "not supported yet: datasets are concatenated in order (concat)",
     set_unsupported},
    /* training */
    {"learning_rate", NUM(learning_rate, 0, HUGE_VAL, 1, 0), 0, 0, "a positive number", NULL},
    {"max_steps", CUSTOM(max_steps), 0, 0, "-1 or an integer >= 1", set_max_steps},
    {"num_train_epochs", NUM(num_train_epochs, 0, HUGE_VAL, 1, 0), 0, 0, "a positive number", NULL},
    {"per_device_train_batch_size", INT(per_device_train_batch_size, 1, INT_MAX), 0, 0, "an integer >= 1", NULL},
    {"gradient_accumulation_steps", INT(gradient_accumulation_steps, 1, INT_MAX), 0, 0, "an integer >= 1", NULL},
    {"lr_scheduler_type", CUSTOM(lr_scheduler_type), 0, 0,
     "one of constant, constant_with_warmup, linear, cosine, step", set_scheduler},
    {"lr_scheduler_kwargs", NOFIELD, 0, 0, "a comma list of step_size=N (optimizer steps, >= 1), gamma=G (> 0)",
     set_scheduler_kwargs},
    {"warmup_ratio", NUM(warmup_ratio, 0, 1, 0, 0), 0, 0, "a number in [0, 1]", NULL},
    {"warmup_steps", INT(warmup_steps, 0, INT_MAX), 0, 0, "an integer >= 0", NULL},
    {"max_grad_norm", NUM(max_grad_norm, -HUGE_VAL, HUGE_VAL, 0, 0), 0, 0, "a number (<= 0 disables clipping)", NULL},
    {"weight_decay", NUM(weight_decay, 0, HUGE_VAL, 0, 0), 0, 0, "a number >= 0", NULL},
    {"adam_beta1", NUM(adam_beta1, 0, 1, 0, 1), 0, 0, "a number in [0, 1)", NULL},
    {"adam_beta2", NUM(adam_beta2, 0, 1, 0, 1), 0, 0, "a number in [0, 1)", NULL},
    {"adam_epsilon", NUM(adam_epsilon, 0, HUGE_VAL, 1, 0), 0, 0, "a positive number", NULL},
    {"gradient_checkpointing", BOOL(gradient_checkpointing), 0, 0, "true or false", NULL},
    {"disable_gradient_checkpointing", BOOL(disable_gradient_checkpointing), 0, 0, "true or false", NULL},
    {"optim", NOFIELD, 0, 0, "adamw_torch (or adamw_torch_fused, adamw_hf: the same AdamW here), or sgd", set_optim},
    {"optim_args", STR(optim_args), 0, 0, "comma list of key=value (sgd: momentum, dampening, nesterov)", NULL},
    {"label_smoothing_factor", NUM(label_smoothing_factor, 0, 1, 0, 1), 0, 0, "a number in [0, 1)", NULL},
    {"sync_bn", BOOL(sync_bn), 0, 0, "true or false", NULL},
    {"seed", INT(seed, INT_MIN, INT_MAX), 0, 0, "an integer", NULL},
    /* distributed */
    {"max_bad_steps", INT(max_bad_steps, 1, INT_MAX), 0, 0, "an integer >= 1", NULL},
    {"peer_timeout", NUM(peer_timeout, 0, HUGE_VAL, 0, 0), 0, 0, "a number of seconds >= 0 (0: never)", NULL},
    {"ddp_bucket_cap_mb", NUM(ddp_bucket_cap_mb, 0.004, 4096, 0, 0), 0, 0, "a number of MB in [0.004, 4096]", NULL},
    {"zero_stage", INT(zero_stage, 0, 3), 0, 0, "0, 1, 2 or 3 (ZeRO: 1 shards AdamW state, 2 also gradients, 3 also "
     "parameters)", NULL},
    {"zero_shard_layout", CUSTOM(zero_contiguous), 0, 0, "balanced or contiguous", set_shard_layout},
    {"zero_shared_params", BOOL(zero_shared_params), 0, 0, "true or false", NULL},
    {"fsdp", CUSTOM(fsdp_stage), 0, 0, "full_shard, shard_grad_op, hybrid_shard or no_shard (optionally with "
     "auto_wrap, offload)", set_fsdp},
    {"sync_mode", CUSTOM(sync_mode), 0, 0, "ddp or diloco", set_sync_mode},
    {"comm_compression", CUSTOM(comm_compression), 0, 0, "none, bf16, int8 or int4", set_compression},
    {"diloco_inner_steps", INT(diloco_inner_steps, 1, 1000000), 0, 0, "an integer in [1, 1000000]", NULL},
    {"diloco_outer_lr", NUM(diloco_outer_lr, 0, HUGE_VAL, 1, 0), 0, 0, "a positive number", NULL},
    {"diloco_outer_momentum", NUM(diloco_outer_momentum, 0, 1, 0, 1), 0, 0, "a number in [0, 1)", NULL},
    {"diloco_nesterov", BOOL(diloco_nesterov), 0, 0, "true or false", NULL},
    {"diloco_overlap", BOOL(diloco_overlap), 0, 0, "true or false", NULL},
    {"diloco_sync_steps", INT(diloco_sync_steps, 0, INT_MAX), 0, 0, "an integer >= 0 (optimizer steps)", NULL},
    {"balance_ranks", BOOL(balance_ranks), 0, 0, "true or false", NULL},
    {"fsdp_config", NOTICE, 0, 0, "tandem shards per decoder layer (fsdp's strategy picks the ZeRO stage); the "
     "file's other settings have no counterpart here", NULL},
    /* output */
    {"output_dir", PATH(output_dir), 0, PATH_OUTPUT, "a path", NULL},
    {"logging_steps", INT(logging_steps, 1, INT_MAX), 0, 0, "an integer >= 1", NULL},
    {"save_steps", INT(save_steps, 0, INT_MAX), 0, 0, "an integer >= 0", NULL},
    {"save_strategy", CUSTOM(save_strategy), 0, 0, "steps, epoch or no", set_save_strategy},
    {"logging_first_step", BOOL(logging_first_step), 0, 0, "true or false", NULL},
    {"save_total_limit", INT(save_total_limit, 1, INT_MAX), 0, 0, "an integer >= 1", NULL},
    {"save_only_model", BOOL(save_only_model), 0, 0, "true or false", NULL},
    {"overwrite_output_dir", BOOL(overwrite_output_dir), 0, 0, "true or false", NULL},
    {"plot_loss", BOOL(plot_loss), 0, 0, "true or false", NULL},
    {"resume_from_checkpoint", CUSTOM(resume_from_checkpoint), 0, 0, "a checkpoint folder, true or null", set_resume},
    {"dashboard", CUSTOM(dashboard), 0, 0, "true, false, PORT or HOST:PORT (port 0: a free one)", set_dashboard},
    /* evaluation */
    {"eval_strategy", CUSTOM(eval_strategy), 0, 0, "no, steps or epoch", set_eval_strategy},
    {"evaluation_strategy", CUSTOM(eval_strategy), 0, 0, "no, steps or epoch", set_eval_strategy},
    {"eval_steps", INT(eval_steps, 1, INT_MAX), 0, 0, "an integer >= 1", NULL},
    {"per_device_eval_batch_size", INT(per_device_eval_batch_size, 1, INT_MAX), 0, 0, "an integer >= 1", NULL},
    {"do_eval", BOOL(do_eval), 0, 0, "true or false", NULL},
    {"do_predict", BOOL(do_predict), 0, 0, "true or false", NULL},
    {"predict_with_generate", BOOL(predict_with_generate), 0, 0, "true or false", NULL},
    {"eval_on_start", BOOL(eval_on_start), 0, 0, "true or false", NULL},
    /* the Python world's keys: accepted, with what tandem does instead */
    {"trust_remote_code", NOTICE, 0, 0, "tandem runs no model code: the architecture is read from config.json", NULL},
    {"preprocessing_num_workers", NOTICE, 0, 0, "tandem tokenizes once per job (all demo data in well under a second) and caches it", NULL},
    {"preprocessing_batch_size", NOTICE, 0, 0, "tandem tokenizes once per job and caches it", NULL},
    {"dataloader_num_workers", NOTICE, 0, 0, "batches are read from the tokenized cache in the training process", NULL},
    {"overwrite_cache", NOTICE, 0, 0, "the tokenized cache is keyed by the data, template, tokenizer and cutoff_len, so it is rebuilt whenever they change", NULL},
    {"report_to", CUSTOM(report_to), 1, 0, "none, tensorboard, all, or services (wandb, swanlab, mlflow, ...)",
     set_report_to},
    {"deepspeed", PATH(deepspeed), 0, PATH_DEEPSPEED, "a path to a DeepSpeed JSON config", NULL},
    {"bf16", CUSTOM(bf16), 0, 0, "true or false", set_bf16},
    {"fp16", NOTICE, 0, 0, "tandem computes in fp32, or on a GPU with bf16: true in bf16 (fp16's narrow range would "
     "need loss scaling)", NULL},
    {"pure_bf16", NOTICE, 0, 0, "trainable weights and optimizer state stay fp32", NULL},
    {"ddp_timeout", NOTICE, 0, 0, "tandem detects a dead or stalled rank itself and names it", NULL},
    {"ddp_backend", NOTICE, 0, 0, "MPI carries the collectives", NULL},
    {"ddp_find_unused_parameters", NOTICE, 0, 0, "only trainable tensors are exchanged; nothing to find", NULL},
    {"flash_attn", NOTICE, 0, 0, "tandem's attention (CPU and CUDA) is flash-attention style and never stores the "
     "score matrix", NULL},
    {"device", CUSTOM(device), 0, 0, "auto, cpu or cuda", set_device},
    {"enable_liger_kernel", NOTICE, 0, 0, "tandem's kernels are already fused where it pays", NULL},
    {"use_unsloth", NOTICE, 0, 0, "tandem's kernels are already fused where it pays", NULL},
    {"save_on_each_node", NOTICE, 0, 0, "rank 0 writes every output; keep output_dir on rank 0's machine", NULL},
    {"include_num_input_tokens_seen", NOTICE, 0, 0, "tokens/s is always printed", NULL},
    {"logging_dir", STR(logging_dir), 0, 0, "a folder for TensorBoard event files", NULL},
};
#define NKEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

void tn_train_config_defaults(tn_train_config *c) {
    memset(c, 0, sizeof *c);
    c->finetuning_type = TN_FT_LORA;
    c->lora_rank = 8;
    c->lora_alpha = 0; /* 2 * lora_rank, filled in by finish */
    c->lora_dropout = 0;
    snprintf(c->lora_target, sizeof c->lora_target, "all");
    c->cutoff_len = 2048;
    c->learning_rate = 5e-5;
    c->max_steps = -1;
    c->num_train_epochs = 3.0;
    c->per_device_train_batch_size = 8;
    c->gradient_accumulation_steps = 1;
    c->lr_scheduler_type = TN_SCHED_LINEAR;
    c->no_warmup = 0;
    c->warmup_ratio = 0;
    c->warmup_steps = 0;
    c->lr_step_gamma = 0.1;
    c->max_grad_norm = 1.0;
    c->weight_decay = 0;
    c->adam_beta1 = 0.9;
    c->adam_beta2 = 0.999;
    c->adam_epsilon = 1e-8;
    c->stage = TN_STAGE_SFT;
    c->do_train = -1; /* finish: LF's default (false) when do_predict asks for prediction alone, else true */
    snprintf(c->dataset_dir, sizeof c->dataset_dir, "data");
    c->packing = -1;
    c->enable_thinking = 1;
    c->image_max_pixels = 768 * 768, c->image_min_pixels = 32 * 32; /* LF's ProcessorArguments */
    c->freeze_vision_tower = 1, c->freeze_multi_modal_projector = 1; /* LF's FinetuningArguments */
    c->gradient_checkpointing = -1; /* finish: LF turns it on unless disable_gradient_checkpointing */
    c->per_device_eval_batch_size = 8;
    c->seed = 42;
    c->export_size = 5;
    c->do_sample = 1, c->temperature = 0.95, c->top_p = 0.7, c->top_k = 50, c->max_new_tokens = 1024;
    c->repetition_penalty = 1.0;
    c->ddp_bucket_cap_mb = 4; /* small enough that the first bucket leaves early and overlaps backward */
    c->peer_timeout = 60;
    c->zero_stage = -1;
    c->zero_shared_params = 1;
    c->fsdp_stage = -1;
    c->max_bad_steps = 10;
    c->sync_mode = TN_SYNC_DDP;
    c->diloco_inner_steps = 8;
    /* the DiLoCo paper's 0.7 / 0.9 lost 8% of eval loss against plain DP on a short fine-tuning run, averaging
     * matched it within 1% (docs/performance.md, "Low-communication training") */
    c->diloco_outer_lr = 1.0, c->diloco_outer_momentum = 0.0;
    c->diloco_nesterov = 1, c->diloco_overlap = 1;
    /* the device: $TANDEM_DEVICE when set (a key in the YAML or on the command line wins), else auto */
    const char *dev = getenv("TANDEM_DEVICE");
    snprintf(c->device, sizeof c->device, "%s", dev && *dev ? dev : "auto"); /* checked where it is used */
    snprintf(c->output_dir, sizeof c->output_dir, "saves/tandem");
    c->logging_steps = 10;
    c->save_steps = 0;
    c->overwrite_output_dir = 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Scalars                                                                                            */

/* A value as shown in messages: quoted, cut at 80 characters, control characters (a quoted YAML
 * scalar or an override may hold a newline) shown as '?' so the message stays one line. */
static const char *shown(const char *v, char *buf, size_t n) {
    snprintf(buf, n, "'%.80s%s'", v, strlen(v) > 80 ? "..." : "");
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20) *p = '?';
    return buf;
}

/* One "KEY: text" line in c->notices; a line noted earlier for the same key (YAML, then an override) is replaced. */
static void add_note(tn_train_config *c, const char *key, const char *fmt, ...) TN_PRINTF(3, 4);
void tn_train_config_drop_note(tn_train_config *c, const char *key) {
    size_t klen = strlen(key);
    for (char *line = c->notices; *line;) {
        char *nl = strchr(line, '\n');
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            memmove(line, nl + 1, strlen(nl + 1) + 1);
            continue;
        }
        line = nl + 1;
    }
}

void tn_train_config_reword_note(tn_train_config *c, const char *key, const char *text) {
    size_t klen = strlen(key);
    int had = 0;
    for (const char *line = c->notices; *line && !had; line = strchr(line, '\n') + 1)
        had = strncmp(line, key, klen) == 0 && line[klen] == ':';
    if (had) add_note(c, key, "%s", text);
}

static void add_note(tn_train_config *c, const char *key, const char *fmt, ...) {
    tn_train_config_drop_note(c, key); /* one note per key: the latest */
    size_t used = strlen(c->notices);
    char text[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    snprintf(c->notices + used, sizeof c->notices - used, "%s: %s\n", key, text);
}

static int expects(const key_def *k, const char *v, char *msg) {
    char b[96];
    snprintf(msg, MSG_MAX, "key '%s' expects %s, got %s", k->name, k->expect, v[0] ? shown(v, b, sizeof b) : "no value");
    return -1;
}

/* Copy v without surrounding blanks into out (size n); 0 when it does not fit. */
static int trimmed(const char *v, char *out, size_t n) {
    while (*v == ' ' || *v == '\t') v++;
    size_t len = strlen(v);
    while (len && (v[len - 1] == ' ' || v[len - 1] == '\t')) len--;
    if (len >= n) return 0;
    memcpy(out, v, len);
    out[len] = 0;
    return 1;
}

/* YAML-style decimal number: [+-] digits [. digits] [e [+-] digits], or .5 / 5. forms. */
static int parse_number(const char *v, double *out) {
    char s[128];
    if (!trimmed(v, s, sizeof s)) return 0;
    const char *p = s;
    int digits = 0;
    if (*p == '+' || *p == '-') p++;
    while (isdigit((unsigned char)*p)) p++, digits++;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) p++, digits++;
    }
    if (!digits) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!isdigit((unsigned char)*p)) return 0;
        while (isdigit((unsigned char)*p)) p++;
    }
    if (*p) return 0;
    double d = strtod(s, NULL);
    if (!isfinite(d)) return 0;
    *out = d;
    return 1;
}

/* An integer: a number whose value is integral (so "8", "+8", "1e3", "8.0"; not "3.5"). */
static int parse_integer(const char *v, long long *out) {
    double d;
    if (!parse_number(v, &d) || d != floor(d) || fabs(d) > 9.0e15) return 0;
    *out = (long long)d;
    return 1;
}

static int parse_bool(const char *v, int *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
    char s[16];
    if (!trimmed(v, s, sizeof s)) return 0;
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) return *out = 1, 1;
        if (strcasecmp(s, no[i]) == 0) return *out = 0, 1;
    }
    return 0;
}

static int in_bounds(const key_def *k, double d) {
    if (k->lo_open ? !(d > k->lo) : !(d >= k->lo)) return 0;
    if (k->hi_open ? !(d < k->hi) : !(d <= k->hi)) return 0;
    return 1;
}

/* Apply one value (the text of a scalar, or list items joined with commas). */
static int apply_value(tn_train_config *c, const key_def *k, const char *v, int from_cli, char *msg) {
    char *field = (char *)c + k->off;
    switch (k->kind) {
    case K_STR:
    case K_PATH: {
        size_t len = strlen(v);
        if (len >= k->size) {
            snprintf(msg, MSG_MAX, "key '%s' value is too long (%zu characters, at most %zu)", k->name, len,
                     k->size - 1);
            return -1;
        }
        memcpy(field, v, len + 1);
        if (k->kind == K_PATH) {
            if (from_cli) c->cli_paths |= k->path_bit;
            else c->cli_paths &= ~k->path_bit;
        }
        return 0;
    }
    case K_INT: {
        long long x;
        if (!parse_integer(v, &x) || !in_bounds(k, (double)x)) return expects(k, v, msg);
        memcpy(field, &(int){(int)x}, sizeof(int));
        return 0;
    }
    case K_NUM: {
        double d;
        if (!parse_number(v, &d) || !in_bounds(k, d)) return expects(k, v, msg);
        memcpy(field, &d, sizeof d);
        return 0;
    }
    case K_BOOL: {
        int b;
        if (!parse_bool(v, &b)) return expects(k, v, msg);
        memcpy(field, &b, sizeof b);
        return 0;
    }
    case K_CUSTOM:
        return k->set(c, k, v, msg);
    case K_NOTICE:
        add_note(c, k->name, "%s", k->expect);
        return 0;
    }
    return expects(k, v, msg);
}

/* ------------------------------------------------------------------------------------------------ */
/* Custom keys                                                                                        */

static int set_finetuning_type(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[32];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    if (strcmp(s, "lora") == 0) c->finetuning_type = TN_FT_LORA;
    else if (strcmp(s, "full") == 0) c->finetuning_type = TN_FT_FULL;
    else if (strcmp(s, "freeze") == 0 || strcmp(s, "oft") == 0) {
        snprintf(msg, MSG_MAX, "key '%s': '%s' is not supported yet (use lora or full)", k->name, s);
        return -1;
    } else return expects(k, v, msg);
    return 0;
}

static int set_max_steps(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    long long x;
    if (!parse_integer(v, &x) || (x != -1 && (x < 1 || x > INT_MAX))) return expects(k, v, msg);
    c->max_steps = (int)x;
    return 0;
}

static int set_scheduler(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    /* HF SchedulerType values tandem does not implement get a clearer message than "expects". */
    static const char *const later[] = {"cosine_with_restarts", "polynomial", "inverse_sqrt", "reduce_lr_on_plateau",
                                        "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay"};
    char s[64];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    if (strcmp(s, "constant") == 0) c->lr_scheduler_type = TN_SCHED_CONSTANT, c->no_warmup = 1;
    else if (strcmp(s, "constant_with_warmup") == 0) c->lr_scheduler_type = TN_SCHED_CONSTANT, c->no_warmup = 0;
    else if (strcmp(s, "linear") == 0) c->lr_scheduler_type = TN_SCHED_LINEAR, c->no_warmup = 0;
    else if (strcmp(s, "cosine") == 0) c->lr_scheduler_type = TN_SCHED_COSINE, c->no_warmup = 0;
    else if (strcmp(s, "step") == 0) c->lr_scheduler_type = TN_SCHED_STEP, c->no_warmup = 0;
    else {
        for (size_t i = 0; i < sizeof later / sizeof later[0]; i++)
            if (strcmp(s, later[i]) == 0) {
                snprintf(msg, MSG_MAX, "key '%s': '%s' is not supported yet (use constant, constant_with_warmup, linear, cosine or step)",
                         k->name, s);
                return -1;
            }
        return expects(k, v, msg);
    }
    return 0;
}

/* lr_scheduler_kwargs for 'step': "step_size=N,gamma=G" (HF passes such kwargs to the scheduler's constructor) */
static int set_scheduler_kwargs(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[256], b[96];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    for (char *save = NULL, *item = strtok_r(s, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '='), *end = NULL;
        while (*item == ' ') item++;
        if (!eq) return expects(k, v, msg);
        *eq = 0;
        for (char *t = eq - 1; t >= item && *t == ' '; t--) *t = 0;
        if (strcmp(item, "step_size") == 0) {
            long n = strtol(eq + 1, &end, 10);
            if (end == eq + 1 || n < 1 || n > INT_MAX) return expects(k, v, msg);
            c->lr_step_size = (int)n;
        } else if (strcmp(item, "gamma") == 0) {
            double g = strtod(eq + 1, &end);
            if (end == eq + 1 || !(g > 0) || !isfinite(g)) return expects(k, v, msg);
            c->lr_step_gamma = g;
        } else {
            snprintf(msg, MSG_MAX, "key '%s': %s is not a kwarg tandem's schedules take (step_size, gamma)", k->name,
                     shown(item, b, sizeof b));
            return -1;
        }
        while (end && *end == ' ') end++;
        if (end && *end) return expects(k, v, msg);
    }
    return 0;
}

static int set_stage(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[32];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    if (strcmp(s, "sft") == 0) c->stage = TN_STAGE_SFT;
    else if (strcmp(s, "pt") == 0) c->stage = TN_STAGE_PT;
    else if (!strcmp(s, "rm") || !strcmp(s, "ppo") || !strcmp(s, "dpo") || !strcmp(s, "kto")) {
        snprintf(msg, MSG_MAX, "key '%s': '%s' is not supported yet (tandem trains sft and pt)", k->name, s);
        return -1;
    } else return expects(k, v, msg);
    return 0;
}

static int set_eval_strategy(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[32];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    if (strcmp(s, "no") == 0) c->eval_strategy = TN_EVAL_NO;
    else if (strcmp(s, "steps") == 0) c->eval_strategy = TN_EVAL_STEPS;
    else if (strcmp(s, "epoch") == 0) c->eval_strategy = TN_EVAL_EPOCH;
    else return expects(k, v, msg);
    return 0;
}

/* HF TrainingArguments' fsdp: space-separated options; the sharding strategy picks the ZeRO stage. */
static int set_fsdp(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[128], b[160];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    c->fsdp_stage = -1;
    char *save = NULL;
    for (char *w = strtok_r(s, " ,", &save); w; w = strtok_r(NULL, " ,", &save)) {
        if (!strcmp(w, "full_shard") || !strcmp(w, "hybrid_shard") || !strcmp(w, "hybrid_shard_zero2"))
            c->fsdp_stage = !strcmp(w, "hybrid_shard_zero2") ? 2 : 3;
        else if (!strcmp(w, "shard_grad_op")) c->fsdp_stage = 2;
        else if (!strcmp(w, "no_shard")) c->fsdp_stage = 0;
        else if (strcmp(w, "auto_wrap") && strcmp(w, "offload") && strcmp(w, "false") && strcmp(w, "")) {
            snprintf(msg, MSG_MAX, "key '%s': %s is not an FSDP option (expected %s)", k->name, shown(w, b, sizeof b),
                     k->expect);
            return -1;
        }
    }
    return 0;
}

/* HF's bf16 flag: the CUDA backend's bf16 mode (cuda_backend.h); the CPU computes in fp32 either way. */
static int set_bf16(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    int b;
    if (!parse_bool(v, &b)) return expects(k, v, msg);
    c->bf16 = b;
    add_note(c, k->name, "%s", b ? "on a GPU, matrix products and attention in bf16 (fp32 accumulation, fp32 master "
                                   "weights and AdamW state); the CPU backend computes in fp32"
                                 : "fp32 throughout");
    return 0;
}

static int set_device(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[16];
    if (!trimmed(v, s, sizeof s) || (strcmp(s, "auto") && strcmp(s, "cpu") && strcmp(s, "cuda")))
        return expects(k, v, msg);
    snprintf(c->device, sizeof c->device, "%s", s);
    return 0;
}

/* dashboard: true / false, or where to listen: PORT, HOST:PORT, [IPV6]:PORT (turns it on). */
static int set_dashboard(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[300];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off", "null", ""};
    for (int i = 0; i < 5; i++) {
        if (i < 3 && strcasecmp(s, yes[i]) == 0) return c->dashboard = 1, 0;
        if (strcasecmp(s, no[i]) == 0) return c->dashboard = 0, 0;
    }
    char *colon = strrchr(s, ':'), *port = colon ? colon + 1 : s, *end;
    long p = strtol(port, &end, 10);
    if (!*port || *end || p < 0 || p > 65535) return expects(k, v, msg);
    char host[256] = "";
    if (colon) {
        size_t n = (size_t)(colon - s);
        const char *h = s;
        if (n >= 2 && s[0] == '[' && s[n - 1] == ']') h++, n -= 2; /* [::1]:8080 */
        if (n == 0 || n >= sizeof host || strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:%") < n)
            return expects(k, v, msg); /* a name or an address, nothing else */
        memcpy(host, h, n);
        host[n] = 0;
    }
    c->dashboard = 1, c->dashboard_port = (int)p;
    snprintf(c->dashboard_host, sizeof c->dashboard_host, "%s", host);
    return 0;
}

static int set_optim(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[64], b[96];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    c->optim_sgd = strcmp(s, "sgd") == 0; /* torch.optim.SGD: image classifiers (trainer/image_job.c) */
    if (!c->optim_sgd && strcmp(s, "adamw_torch") && strcmp(s, "adamw_torch_fused") && strcmp(s, "adamw_hf")) {
        snprintf(msg, MSG_MAX, "key '%s': %s is not supported (tandem's optimizer is torch's AdamW: adamw_torch; "
                 "sgd for image classifiers)", k->name, shown(s, b, sizeof b));
        return -1;
    }
    return 0;
}

/* Keys LLaMA-Factory knows whose features tandem does not have: an error unless the value is off. */
static int set_unsupported(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    (void)c;
    char s[64];
    if (!trimmed(v, s, sizeof s) || !s[0] || !strcmp(s, "false") || !strcmp(s, "none") || !strcmp(s, "concat"))
        return 0;
    snprintf(msg, MSG_MAX, "key '%s': %s", k->name, k->expect);
    return -1;
}

/* HF's report_to integrations: all are accepted; TensorBoard files are written, the services get nothing. */
static const char *const REPORT_TO[] = {"none", "all", "tensorboard", "wandb", "swanlab", "mlflow", "comet_ml",
                                        "neptune", "clearml", "azure_ml", "codecarbon", "dagshub", "dvclive",
                                        "flyte", "trackio"};
#define N_REPORT_TO ((int)(sizeof REPORT_TO / sizeof REPORT_TO[0]))

static int set_report_to(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[sizeof c->report_to], b[96];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    for (char *save = NULL, *t = strtok_r(s, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        int known = 0;
        for (int i = 0; i < N_REPORT_TO && !known; i++) known = strcmp(t, REPORT_TO[i]) == 0;
        if (!known) {
            snprintf(msg, MSG_MAX, "key '%s': %s is not an integration HF knows (expected none, tensorboard, all, "
                     "wandb, swanlab, mlflow, comet_ml, neptune, clearml, ...)", k->name, shown(t, b, sizeof b));
            return -1;
        }
    }
    trimmed(v, c->report_to, sizeof c->report_to);
    return 0;
}

static int set_save_strategy(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[32];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    if (strcmp(s, "steps") == 0) c->save_strategy = TN_SAVE_STEPS;
    else if (strcmp(s, "no") == 0) c->save_strategy = TN_SAVE_NO;
    else if (strcmp(s, "epoch") == 0) c->save_strategy = TN_SAVE_EPOCH;
    else if (strcmp(s, "best") == 0) {
        snprintf(msg, MSG_MAX, "key '%s': 'best' is not supported yet (no metric_for_best_model): use steps or epoch",
                 k->name);
        return -1;
    } else return expects(k, v, msg);
    return 0;
}

static int set_export_size(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    long long x;
    if (!parse_integer(v, &x) || x < 1 || x > (1 << 20)) return expects(k, v, msg);
    c->export_size = (int)x;
    add_note(c, k->name, "only `tandem export` reads it (safetensors shards of at most %d GB)", c->export_size);
    return 0;
}

static int set_sync_mode(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[32];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    if (!strcmp(s, "ddp")) c->sync_mode = TN_SYNC_DDP;
    else if (!strcmp(s, "diloco")) c->sync_mode = TN_SYNC_DILOCO;
    else return expects(k, v, msg);
    return 0;
}

static int set_shard_layout(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[32];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    if (!strcmp(s, "balanced")) c->zero_contiguous = 0;
    else if (!strcmp(s, "contiguous")) c->zero_contiguous = 1;
    else return expects(k, v, msg);
    return 0;
}

static int set_compression(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[32];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    if (!strcmp(s, "none") || !strcmp(s, "fp32") || !strcmp(s, "false")) c->comm_compression = 0;
    else if (!strcmp(s, "bf16")) c->comm_compression = 1;
    else if (!strcmp(s, "int8")) c->comm_compression = 2;
    else if (!strcmp(s, "int4")) c->comm_compression = 3;
    else return expects(k, v, msg);
    return 0;
}

static int set_resume(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[TN_PATH_MAX];
    if (!trimmed(v, s, sizeof s)) return expects(k, v, msg);
    if (!strcmp(s, "false") || !strcmp(s, "False")) s[0] = 0;
    else if (!strcmp(s, "True")) snprintf(s, sizeof s, "true");
    memcpy(c->resume_from_checkpoint, s, strlen(s) + 1); /* "true": the newest checkpoint in output_dir */
    return 0;
}

/* the projections, then the embedding (PEFT's embedding adapter; 'all' = the linear layers only, as PEFT's all-linear) */
static const char *const LORA_MODULE_NAMES[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                                                "embed_tokens"};
#define NMODULES ((int)(sizeof LORA_MODULE_NAMES / sizeof LORA_MODULE_NAMES[0]))

static const char *closest(const char *name, const char *const *cands, int n, size_t stride);

static int set_lora_target(tn_train_config *c, const key_def *k, const char *v, char *msg) {
    char s[1024], b[96];
    if (!trimmed(v, s, sizeof s) || !s[0]) return expects(k, v, msg);
    if (strcmp(s, "all") == 0) {
        snprintf(c->lora_target, sizeof c->lora_target, "all");
        return 0;
    }
    int chosen[NMODULES] = {0};
    for (char *item = s, *next; item; item = next) {
        next = strchr(item, ',');
        if (next) *next++ = 0;
        char name[1024];
        trimmed(item, name, sizeof name);
        if (!name[0]) return expects(k, v, msg);
        if (strcmp(name, "all") == 0) {
            snprintf(msg, MSG_MAX, "key '%s': 'all' cannot be combined with module names, got %s", k->name,
                     shown(v, b, sizeof b));
            return -1;
        }
        int m = 0;
        while (m < NMODULES && strcmp(name, LORA_MODULE_NAMES[m]) != 0) m++;
        if (m == NMODULES) {
            const char *hint = closest(name, LORA_MODULE_NAMES, NMODULES, sizeof LORA_MODULE_NAMES[0]);
            snprintf(msg, MSG_MAX, "key '%s': module %s is not known%s%s%s; expected 'all' or a comma list of " LORA_MODULES,
                     k->name, shown(name, b, sizeof b), hint ? " (did you mean '" : "", hint ? hint : "", hint ? "'?)" : "");
            return -1;
        }
        chosen[m] = 1;
    }
    /* Canonical form: module order of the table, no blanks, no repeats. */
    char out[sizeof c->lora_target];
    size_t len = 0;
    out[0] = 0;
    for (int m = 0; m < NMODULES; m++)
        if (chosen[m]) len += (size_t)snprintf(out + len, sizeof out - len, "%s%s", len ? "," : "", LORA_MODULE_NAMES[m]);
    memcpy(c->lora_target, out, len + 1);
    return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Key lookup and suggestions                                                                         */

static size_t levenshtein(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 64 || m > 64) return (size_t)-1;
    size_t row[65];
    for (size_t j = 0; j <= m; j++) row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t up = row[j];
            size_t best = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[m];
}

/* The candidate closest to name when reasonably close (distance <= max(2, len/3), and less than
 * name's length), else NULL. cands: n strings, `stride` bytes apart (a table's name member). */
static const char *closest(const char *name, const char *const *cands, int n, size_t stride) {
    const char *best = NULL;
    size_t bestd = (size_t)-1, len = strlen(name);
    for (int i = 0; i < n; i++) {
        const char *cand = *(const char *const *)((const char *)cands + (size_t)i * stride);
        size_t d = levenshtein(name, cand);
        if (d < bestd) bestd = d, best = cand;
    }
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    return best && bestd <= limit && bestd < len ? best : NULL;
}

static int find_key(const char *name) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) return i;
    return -1;
}

static void unknown_key(const char *name, char *msg) {
    char b[96];
    const char *hint = closest(name, &KEYS[0].name, NKEYS, sizeof KEYS[0]);
    if (hint) snprintf(msg, MSG_MAX, "key %s is not known (did you mean '%s'?)", shown(name, b, sizeof b), hint);
    else snprintf(msg, MSG_MAX, "key %s is not known", shown(name, b, sizeof b));
}

/* ------------------------------------------------------------------------------------------------ */
/* YAML                                                                                               */

typedef struct {
    yaml_parser_t parser;
    const char *file;
    const char *text; /* for the line of a reader (encoding) error */
    tn_train_config *c;
    int first_line[NKEYS]; /* 0: not seen yet */
} parse_state;

static int line_of(yaml_mark_t m) { return (int)m.line + 1; }

static int next_event(parse_state *st, yaml_event_t *ev) {
    yaml_parser_t *p = &st->parser;
    if (yaml_parser_parse(p, ev)) return 0;
    if (p->error == YAML_MEMORY_ERROR) tn_die("out of memory parsing %s", st->file);
    if (p->error == YAML_READER_ERROR) {
        int line = 1;
        for (size_t i = 0; i < p->problem_offset && st->text[i]; i++) line += st->text[i] == '\n';
        return tn_err("%s:%d: YAML syntax error: %s (at byte %zu)", st->file, line,
                      p->problem ? p->problem : "unreadable text", p->problem_offset);
    }
    const char *problem = p->problem ? p->problem : "invalid YAML";
    if (p->context)
        return tn_err("%s:%d: YAML syntax error: %s (%s on line %d)", st->file, line_of(p->problem_mark), problem,
                      p->context, line_of(p->context_mark));
    return tn_err("%s:%d: YAML syntax error: %s", st->file, line_of(p->problem_mark), problem);
}

/* Plain ~, null, Null, NULL or nothing: YAML's null. */
static int is_null_scalar(const yaml_event_t *ev) {
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *v = (const char *)ev->data.scalar.value;
    return !v[0] || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

static const char *node_kind(yaml_event_type_t t) {
    return t == YAML_SEQUENCE_START_EVENT ? "a list" : t == YAML_MAPPING_START_EVENT ? "a mapping" : "an alias";
}

/* After the key's scalar: read its value (scalar or, for list keys, a sequence of scalars) and apply.
 * Errors about the value name the key's line. */
static int read_value(parse_state *st, const key_def *k, int line) {
    yaml_event_t ev;
    char msg[MSG_MAX];
    if (next_event(st, &ev)) return -1;
    int rc = 0;
    if (ev.type == YAML_SCALAR_EVENT) {
        const char *v = is_null_scalar(&ev) ? "" : (const char *)ev.data.scalar.value;
        rc = apply_value(st->c, k, v, 0, msg);
    } else if (ev.type == YAML_SEQUENCE_START_EVENT && k->list) {
        size_t cap = 64, len = 0;
        char *joined = tn_xmalloc(cap);
        joined[0] = 0;
        for (;;) {
            yaml_event_t item;
            if (next_event(st, &item)) {
                free(joined);
                yaml_event_delete(&ev);
                return -1;
            }
            if (item.type == YAML_SEQUENCE_END_EVENT) {
                yaml_event_delete(&item);
                break;
            }
            if (item.type != YAML_SCALAR_EVENT) {
                int l = line_of(item.start_mark);
                const char *what = node_kind(item.type);
                yaml_event_delete(&item);
                free(joined);
                yaml_event_delete(&ev);
                return tn_err("%s:%d: key '%s' list items must be single values, got %s", st->file, l, k->name, what);
            }
            size_t n = item.data.scalar.length;
            if (len + n + 2 > cap) {
                while (len + n + 2 > cap) cap *= 2;
                joined = tn_xrealloc(joined, cap);
            }
            if (len) joined[len++] = ',';
            memcpy(joined + len, item.data.scalar.value, n);
            len += n;
            joined[len] = 0;
            yaml_event_delete(&item);
        }
        rc = apply_value(st->c, k, joined, 0, msg);
        free(joined);
    } else if (ev.type == YAML_MAPPING_START_EVENT) {
        yaml_event_delete(&ev);
        return tn_err("%s:%d: key '%s' has a nested mapping as its value; expected a single value", st->file, line,
                      k->name);
    } else if (ev.type == YAML_SEQUENCE_START_EVENT) {
        yaml_event_delete(&ev);
        return tn_err("%s:%d: key '%s' expects %s, got a list", st->file, line, k->name, k->expect);
    } else {
        yaml_event_delete(&ev);
        return tn_err("%s:%d: key '%s': YAML aliases are not supported", st->file, line, k->name);
    }
    yaml_event_delete(&ev);
    return rc ? tn_err("%s:%d: %s", st->file, line, msg) : 0;
}

static int read_mapping(parse_state *st) {
    for (;;) {
        yaml_event_t ev;
        char msg[MSG_MAX];
        if (next_event(st, &ev)) return -1;
        int line = line_of(ev.start_mark);
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return 0;
        }
        if (ev.type != YAML_SCALAR_EVENT) {
            const char *what = node_kind(ev.type);
            yaml_event_delete(&ev);
            return tn_err("%s:%d: keys must be plain names, got %s", st->file, line, what);
        }
        int ki = find_key((const char *)ev.data.scalar.value);
        if (ki < 0) unknown_key((const char *)ev.data.scalar.value, msg);
        yaml_event_delete(&ev);
        if (ki < 0) return tn_err("%s:%d: %s", st->file, line, msg);
        if (st->first_line[ki])
            return tn_err("%s:%d: key '%s' is given twice (first on line %d)", st->file, line, KEYS[ki].name,
                          st->first_line[ki]);
        st->first_line[ki] = line;
        if (read_value(st, &KEYS[ki], line)) return -1;
    }
}

static int read_stream(parse_state *st) {
    yaml_event_t ev;
    if (next_event(st, &ev)) return -1; /* STREAM_START */
    yaml_event_delete(&ev);
    if (next_event(st, &ev)) return -1;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        return tn_err("%s:1: no settings found; expected a mapping of training keys (key: value lines)", st->file);
    }
    yaml_event_delete(&ev); /* DOCUMENT_START */
    if (next_event(st, &ev)) return -1;
    int line = line_of(ev.start_mark);
    if (ev.type != YAML_MAPPING_START_EVENT) {
        const char *what = ev.type != YAML_SCALAR_EVENT ? node_kind(ev.type)
                           : is_null_scalar(&ev)         ? "an empty document"
                                                         : "a single value";
        yaml_event_delete(&ev);
        return tn_err("%s:%d: the top level must be a mapping of training keys (key: value lines), got %s", st->file,
                      line, what);
    }
    yaml_event_delete(&ev);
    if (read_mapping(st)) return -1;
    if (next_event(st, &ev)) return -1; /* DOCUMENT_END */
    yaml_event_delete(&ev);
    if (next_event(st, &ev)) return -1;
    line = line_of(ev.start_mark);
    int more = ev.type != YAML_STREAM_END_EVENT;
    yaml_event_delete(&ev);
    if (more) return tn_err("%s:%d: only one YAML document is allowed (found a second one)", st->file, line);
    return 0;
}

int tn_train_config_parse(const char *yaml_text, const char *path_for_errors, tn_train_config *c) {
    tn_train_config_defaults(c);
    const char *file = path_for_errors && path_for_errors[0] ? path_for_errors : "<config>";
    if (path_for_errors) {
        if (strlen(path_for_errors) >= sizeof c->source_path)
            return tn_err("%.100s...: config path is too long (at most %zu characters)", path_for_errors,
                          sizeof c->source_path - 1);
        snprintf(c->source_path, sizeof c->source_path, "%s", path_for_errors);
    }
    parse_state *st = tn_xcalloc(1, sizeof *st);
    st->file = file;
    st->text = yaml_text;
    st->c = c;
    if (!yaml_parser_initialize(&st->parser)) tn_die("out of memory creating a YAML parser");
    yaml_parser_set_input_string(&st->parser, (const unsigned char *)yaml_text, strlen(yaml_text));
    int rc = read_stream(st);
    yaml_parser_delete(&st->parser);
    free(st);
    return rc;
}

int tn_train_config_load(const char *path, tn_train_config *c) {
    char *text = tn_read_file(path, NULL, 1 << 20);
    if (!text) {
        tn_train_config_defaults(c);
        return -1;
    }
    int rc = tn_train_config_parse(text, path, c);
    free(text);
    return rc;
}

/* ------------------------------------------------------------------------------------------------ */
/* Overrides and finish                                                                               */

int tn_train_config_override(tn_train_config *c, const char *key_eq_value) {
    char msg[MSG_MAX], b[96];
    const char *eq = strchr(key_eq_value, '=');
    if (!eq) return tn_err("command line: override %s is not key=value", shown(key_eq_value, b, sizeof b));
    char key[128];
    size_t klen = (size_t)(eq - key_eq_value);
    if (klen >= sizeof key) return tn_err("command line: override key is too long in %s", shown(key_eq_value, b, sizeof b));
    memcpy(key, key_eq_value, klen);
    key[klen] = 0;
    char name[128];
    trimmed(key, name, sizeof name);
    int ki = find_key(name);
    if (ki < 0) {
        unknown_key(name, msg);
        return tn_err("command line: %s", msg);
    }
    const key_def *k = &KEYS[ki];
    const char *v = eq + 1;
    char *copy = NULL;
    if (k->list) { /* "[a, b]" as well as "a,b" */
        char t[1024];
        size_t n;
        if (trimmed(v, t, sizeof t) && (n = strlen(t)) >= 2 && t[0] == '[' && t[n - 1] == ']') {
            t[n - 1] = 0;
            v = copy = tn_xstrdup(t + 1);
        }
    }
    int rc = apply_value(c, k, v, 1, msg);
    free(copy);
    return rc ? tn_err("command line: %s", msg) : 0;
}

/* Relative path p: relative to the working directory, as LLaMA-Factory reads it; only when it does not
 * exist there but YAML_DIR/p does, p becomes YAML_DIR/p (so a bundled example runs from anywhere). */
static int resolve_path(const tn_train_config *c, const char *key, char *p, size_t size) {
    if (!p[0] || p[0] == '/' || tn_file_exists(p)) return 0;
    const char *slash = strrchr(c->source_path, '/');
    if (!slash) return 0; /* the YAML is in the working directory: nothing to do */
    size_t dlen = (size_t)(slash - c->source_path);
    char dir[TN_PATH_MAX];
    if (dlen == 0) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)dlen, c->source_path);
    char *joined = tn_path_join(dir, p);
    int rc = 0;
    if (tn_file_exists(joined)) {
        if (strlen(joined) >= size)
            rc = tn_err("%s: key '%s': path %s is too long (at most %zu characters)", c->source_path, key, joined,
                        size - 1);
        else snprintf(p, size, "%s", joined);
    }
    free(joined);
    return rc;
}

/* report_to: TensorBoard files for tensorboard (and all); the services are named as sent nothing. */
static void note_report_to(tn_train_config *c) {
    char s[sizeof c->report_to], services[sizeof c->report_to] = "";
    snprintf(s, sizeof s, "%s", c->report_to);
    int all = 0;
    c->report_tensorboard = 0;
    for (char *save = NULL, *t = strtok_r(s, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        if (strcmp(t, "tensorboard") == 0 || strcmp(t, "all") == 0) c->report_tensorboard = 1;
        all |= strcmp(t, "all") == 0;
        if (strcmp(t, "tensorboard") && strcmp(t, "all") && strcmp(t, "none"))
            snprintf(services + strlen(services), sizeof services - strlen(services), "%s%s", services[0] ? ", " : "", t);
    }
    const char *where = c->report_tensorboard ? "trainer_log.jsonl and TensorBoard event files (logging_dir)"
                                              : "trainer_log.jsonl and the console";
    if (services[0])
        add_note(c, "report_to", "nothing is sent to %s (tandem has no client for it); metrics go to %s", services, where);
    else if (all)
        add_note(c, "report_to", "all: TensorBoard event files are written (logging_dir); no service is sent anything");
    if (c->logging_dir[0] && !c->report_tensorboard)
        add_note(c, "logging_dir", "TensorBoard files are written only with report_to: tensorboard");
}

void tn_train_config_print_notices(const tn_train_config *c, FILE *f) {
    for (const char *p = c->notices; *p;) {
        const char *nl = strchr(p, '\n');
        fprintf(f, "tandem: note: %.*s\n", (int)(nl - p), p);
        p = nl + 1;
    }
}

/* HF's repo_id shape: NAME or ORG/NAME of [A-Za-z0-9._-], not starting or ending with '.' or '-'. */
static int looks_like_hub_id(const char *p) {
    int slashes = 0;
    size_t n = strlen(p);
    if (!n || strchr(".-/", p[0]) || strchr(".-/", p[n - 1]) || strstr(p, "..")) return 0;
    for (const char *q = p; *q; q++) {
        if (*q == '/') slashes++;
        else if (!isalnum((unsigned char)*q) && !strchr("._-", *q)) return 0;
    }
    return slashes == 1;
}

static int check_folder(const tn_train_config *c, const char *key, const char *path, const char *what) {
    struct stat st;
    const char *file = c->source_path[0] ? c->source_path : "<config>";
    char b[96];
    if (!path[0] || (stat(path, &st) == 0 && S_ISDIR(st.st_mode))) return 0;
    if (stat(path, &st) == 0) return tn_err("%s: key '%s': '%s' is a file; expected %s", file, key, tn_shown(path, b), what);
    if (looks_like_hub_id(path)) {
        const char *name = strchr(path, '/') + 1;
        return tn_err("%s: key '%s': '%s' is not a local folder, and Hugging Face Hub ids are not downloaded: fetch it "
                      "first (huggingface-cli download %s --local-dir models/%s) and pass %s: models/%s",
                      file, key, tn_shown(path, b), path, name, key, name);
    }
    return tn_err("%s: key '%s': folder '%s' does not exist (expected %s)", file, key, tn_shown(path, b), what);
}

int tn_train_config_check_model_paths(const tn_train_config *c) {
    if (check_folder(c, "model_name_or_path", c->model_name_or_path,
                     "a local Hugging Face model folder: config.json, safetensors, tokenizer.json") != 0)
        return -1;
    return check_folder(c, "adapter_name_or_path", c->adapter_name_or_path,
                        "a PEFT adapter folder: adapter_config.json + adapter_model.safetensors");
}

int tn_train_config_finish(tn_train_config *c) {
    const char *file = c->source_path[0] ? c->source_path : "<config>";
    if (!c->model_name_or_path[0] && !c->model_config[0])
        return tn_err("%s: set 'model_name_or_path' (a Hugging Face model folder) or 'model_config' (a config.json "
                      "for a fresh random model)",
                      file);
    if (c->model_name_or_path[0] && c->model_config[0])
        return tn_err("%s: 'model_name_or_path' and 'model_config' are both set; set only one", file);
    if (!c->output_dir[0]) return tn_err("%s: key 'output_dir' must not be empty", file);
    if (c->lora_alpha <= 0) c->lora_alpha = 2.0 * c->lora_rank;
    if (c->do_train < 0) c->do_train = !c->do_predict;
    if (!c->do_train && !c->do_predict)
        return tn_err("%s: key 'do_train' is false and do_predict is not set: nothing to do (evaluation alone is not "
                      "supported yet)", file);
    if (c->do_predict && !c->predict_with_generate)
        return tn_err("%s: key 'do_predict' needs predict_with_generate: true (as LLaMA-Factory's sft stage: tandem "
                      "predicts by generating)", file);
    if (c->do_predict && !c->eval_dataset[0])
        return tn_err("%s: key 'do_predict' needs eval_dataset (the datasets to predict, from dataset_info.json)", file);
    if (c->gradient_checkpointing < 0) c->gradient_checkpointing = !c->disable_gradient_checkpointing;
    if (c->disable_gradient_checkpointing) c->gradient_checkpointing = 0;
    if (c->packing < 0) c->packing = c->stage == TN_STAGE_PT;
    if (c->val_size >= 1 && c->val_size != floor(c->val_size))
        return tn_err("%s: key 'val_size' %g: expected a fraction below 1 or a whole count", file, c->val_size);
    if (c->val_size > 0 && c->eval_strategy == TN_EVAL_NO && c->eval_steps > 0) c->eval_strategy = TN_EVAL_STEPS;
    if (c->eval_strategy != TN_EVAL_NO && c->val_size <= 0)
        return tn_err("%s: key 'eval_strategy' needs an evaluation set: set val_size", file);
    if (c->eval_steps <= 0) c->eval_steps = c->logging_steps;
    if (c->lr_scheduler_type == TN_SCHED_STEP && c->lr_step_size < 1)
        return tn_err("%s: key 'lr_scheduler_type' step needs lr_scheduler_kwargs: step_size=N (optimizer steps "
                      "between decays; gamma=G, default 0.1)", file);
    note_report_to(c);
    for (int i = 0; i < NKEYS; i++) {
        const key_def *k = &KEYS[i];
        if (k->kind != K_PATH || (c->cli_paths & k->path_bit) || k->path_bit == PATH_OUTPUT || k->path_bit == PATH_EXPORT)
            continue;
        if (resolve_path(c, k->name, (char *)c + k->off, k->size)) return -1;
    }
    return 0;
}
