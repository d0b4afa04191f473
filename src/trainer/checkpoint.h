/* checkpoint -- resumable training state in output_dir/checkpoint-N/, crash-safe.
 *
 * Owns the checkpoint folder: the weights as LLaMA-Factory writes them (PEFT adapter for LoRA, HF model
 * folder for full fine-tuning), tandem's optimizer state (optimizer.safetensors: AdamW moments as whole
 * slabs, step count and the data stream position, so any number of ranks can resume it), whatever extra
 * files the caller writes into the folder (trainer_state.json), and, written last, tandem_manifest.json
 * (step, config fingerprint, the run's recipe, each file's size and hash). A checkpoint is built in checkpoint-N.partial/
 * and renamed into place only when complete, so a crash leaves either the whole checkpoint or none;
 * resume takes the newest checkpoint whose manifest verifies and names each one it skips. */
#ifndef TN_CHECKPOINT_H
#define TN_CHECKPOINT_H

#include <stdint.h>

#include "model/model.h"
#include "trainer/optimizer.h"

typedef struct {
    int step;                 /* optimizer steps done */
    int64_t samples_seen;     /* position in the sampler's stream (global) */
    int adam_step;            /* AdamW's own count (steps skipped for non-finite gradients do not count) */
    uint64_t config_fingerprint;
    const char *recipe;       /* saving: the run's recipe ("key=value" lines, recipe.h) or NULL */
} tn_ckpt_state;

/* Writes into the folder before the manifest (e.g. trainer_state.json); 0 or -1 + tn_err. */
typedef int (*tn_ckpt_extra_fn)(void *ctx, const char *dir);

/* Saves output_dir/checkpoint-<step>/ (replacing one of the same step). Returns 0 or -1 + tn_err; on failure
 * nothing of the new checkpoint remains and every earlier checkpoint is untouched. */
int tn_checkpoint_save(const char *output_dir, const tn_model *m, const tn_adamw *opt, const tn_ckpt_state *st,
                       int with_optimizer, tn_ckpt_extra_fn extra, void *ctx);
/* Verifies dir's manifest (sizes and hashes). 0 ok, -1 + tn_err saying what is wrong. */
int tn_checkpoint_verify(const char *dir);
/* Newest verified checkpoint-N in output_dir into out (size n). 1 found, 0 none; every skipped one is
 * reported on stderr with its reason. */
int tn_checkpoint_latest(const char *output_dir, char *out, size_t n);
/* Loads weights, optimizer state and position. The model must have the checkpoint's layout. */
int tn_checkpoint_load(const char *dir, tn_model *m, tn_adamw *opt, tn_ckpt_state *st);
/* The recipe dir's manifest records, as "key=value" lines, into out (size n); "" when it records none or
 * there is no readable manifest (verify and load say why). Returns 0. */
int tn_checkpoint_recipe(const char *dir, char *out, size_t n);
/* Keeps the newest `limit` verified checkpoints (never removes the newest verified one). */
int tn_checkpoint_prune(const char *output_dir, int limit);
/* 1 when output_dir holds checkpoint-* folders. */
int tn_checkpoint_any(const char *output_dir);

#endif
