/* checkpoint -- resumable training state in output_dir/checkpoint-N/, crash-safe.
 *
 * Owns the checkpoint folder: the weights as LLaMA-Factory writes them (PEFT adapter for LoRA, HF model
 * folder for full fine-tuning), tandem's optimizer state (AdamW moments: optimizer.safetensors for the whole
 * trainable slab, or, sharded (ZeRO), optimizer-<k>-of-<K>.safetensors per shard, each with its place in the
 * slab, so any number of ranks at any stage can resume it), whatever extra
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
/* The same in steps, for state that arrives from other ranks: begin makes the empty partial folder (its
 * malloc'd path, or NULL + tn_err); files go into it (tn_checkpoint_write_moments); commit adds the
 * weights, opt's moments when opt is not NULL, the extra files and the manifest, then renames it into
 * place, and frees tmp; abandon removes and frees it. */
char *tn_checkpoint_begin(const char *output_dir, int step);
int tn_checkpoint_commit(const char *output_dir, char *tmp, const tn_model *m, const tn_adamw *opt,
                         const tn_ckpt_state *st, tn_ckpt_extra_fn extra, void *ctx);
void tn_checkpoint_abandon(char *tmp);
/* Moments m, v of the trainable slab's k spans, packed in their order (total floats in the slab), as shard
 * `shard` of n_shards (n_shards 1: the whole slab). One span is stored as its range ("slab_range"), several
 * as a list ("slab_spans": a balanced ZeRO shard). 0 or -1 + tn_err. */
int tn_checkpoint_write_moments(const char *dir, int shard, int n_shards, size_t total, const tn_span *spans, int k,
                                const float *m, const float *v);
/* Moments of k spans (packed) from the checkpoint in dir, whichever shards (or whole file) it holds, written
 * at any world size and layout. */
int tn_checkpoint_read_moments(const char *dir, size_t total, const tn_span *spans, int k, float *m, float *v);
/* Verifies dir's manifest (sizes and hashes). 0 ok, -1 + tn_err saying what is wrong. */
int tn_checkpoint_verify(const char *dir);
/* Newest verified checkpoint-N in output_dir into out (size n). 1 found, 0 none; every skipped one is
 * reported on stderr with its reason. */
int tn_checkpoint_latest(const char *output_dir, char *out, size_t n);
/* Loads weights, the optimizer moments of opt's range and the position. The model must have the
 * checkpoint's layout. */
int tn_checkpoint_load(const char *dir, tn_model *m, tn_adamw *opt, tn_ckpt_state *st);
/* The recipe dir's manifest records, as "key=value" lines, into out (size n); "" when it records none or
 * there is no readable manifest (verify and load say why). Returns 0. */
int tn_checkpoint_recipe(const char *dir, char *out, size_t n);
/* Keeps the newest `limit` verified checkpoints (never removes the newest verified one). */
int tn_checkpoint_prune(const char *output_dir, int limit);
/* The steps N of output_dir's checkpoint-N folders, newest first, into *steps (caller frees; NULL when none); their
 * count (0 also when output_dir cannot be read). */
int tn_checkpoint_steps(const char *output_dir, int **steps);
/* 1 when output_dir holds checkpoint-* folders. */
int tn_checkpoint_any(const char *output_dir);

#endif
