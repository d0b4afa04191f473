/* recipe -- what a checkpoint was trained with, and what a resume changes.
 *
 * Every checkpoint's manifest records the recipe: the training keys that decide what the run computes
 * (model, method, data, optimizer, schedule, batch, seed) and the number of ranks, each as text. At resume
 * the current values are compared with it: one note per changed key ("learning_rate changed since
 * checkpoint-100: 0.002 -> 0.001", the global batch too when it follows), so the user knows the run is no
 * longer the one that was checkpointed. A change to a key that defines what the checkpoint's tensors mean
 * (finetuning_type, lora_rank, lora_alpha, lora_target) makes resuming meaningless and is refused. A
 * checkpoint written before recipes were recorded has none: nothing to compare. */
#ifndef TN_RECIPE_H
#define TN_RECIPE_H

#include <stddef.h>

#include "config/train_config.h"

#define TN_RECIPE_MAX 8192

/* cfg on `world` ranks as "key=value\n" lines (the format tn_checkpoint_save stores in the manifest). */
void tn_recipe_of(const tn_train_config *cfg, int world, char *out, size_t n);
/* Compares the recipe of checkpoint `dir` with `now` (tn_recipe_of): prints one note per changed key to
 * stdout; 0, or -1 + tn_err naming the first key whose change makes resuming meaningless. */
int tn_recipe_check_resume(const char *dir, const char *now, const char *source_path);

#endif
