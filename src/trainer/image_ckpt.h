/* image_ckpt -- checkpoint-N/ folders of the image-classifier job: model, optimizer state, global step (image_ckpt.c
 * says what each file holds and why resuming is exact). */
#ifndef TN_IMAGE_CKPT_H
#define TN_IMAGE_CKPT_H

#include <stddef.h>

#include "backend/backend.h"
#include "model/resnet.h"

/* output_dir/checkpoint-<step>/ from the model and the optimizer's two state slabs (backend memory, n_params each). */
int tn_image_ckpt_save(const char *output_dir, int step, tn_resnet *m, const float *opt_a, const float *opt_b,
                       const tn_backend *be);
/* Loads a checkpoint folder into the model and the optimizer slabs; returns its global step, or -1 with tn_err. */
int tn_image_ckpt_load(const char *dir, tn_resnet *m, float *opt_a, float *opt_b, const tn_backend *be);
/* The complete checkpoint-N of output_dir with the largest N, into out; N, or -1 when there is none. */
int tn_image_ckpt_latest(const char *output_dir, char *out, size_t n);
/* save_total_limit as HF's Trainer: keeps the newest `limit` complete checkpoint-N folders of output_dir and removes
 * the older ones (and incomplete ones older than a kept one); nothing is removed before one complete checkpoint is
 * kept. limit <= 0: keeps all. 0, or -1 with tn_err naming the folder that could not be removed. */
int tn_image_ckpt_prune(const char *output_dir, int limit);

#endif
