/* vl_processor -- what LLaMA-Factory and transformers' Qwen2VLImageProcessor (the slow, PIL one; Qwen2-VL,
 * Qwen2.5-VL and Qwen3-VL all use it) do to an image before the vision tower:
 *
 *   1. LLaMA-Factory's mm_plugin _preprocess_image, in the file's own mode: more than image_max_pixels
 *      (default 768*768) or fewer than image_min_pixels (32*32) pixels -> Image.resize to
 *      (int(w * f), int(h * f)), f = sqrt(limit / (w * h)); then convert("RGB"); then the Qwen2-VL plugin's
 *      fixes: a side under 28 is stretched to 28, an aspect ratio over 200 is cut to 180.
 *   2. smart_resize(h, w, factor = patch_size * merge_size, min_pixels, max_pixels): both sides multiples of
 *      factor, Python's round() (half to even), floor / ceil by sqrt(area ratio) outside the pixel bounds;
 *      PIL BICUBIC resize of the uint8 RGB image to that size.
 *   3. rescale (x * rescale_factor in float64, stored float32), normalise ((x - mean) / std in float32),
 *      patchify: the frame repeated to temporal_patch_size, rows in merge windows (see data/mm_batch.h).
 *
 * Steps 1-2 give the uint8 image that the tokenized cache keeps (1/8 the bytes of its float32 patches);
 * step 3 runs when a batch is filled and gives the float32 values transformers gives, bit for bit.
 * preprocessor_config.json: patch_size, temporal_patch_size, merge_size, min_pixels / max_pixels (these win)
 * or size.shortest_edge / size.longest_edge, image_mean, image_std (three numbers or one), rescale_factor,
 * do_rescale, do_normalize; do_resize false and resample other than 3 (bicubic) are refused. */
#ifndef TN_VL_PROCESSOR_H
#define TN_VL_PROCESSOR_H

#include <stdint.h>

#include "data/image.h"

typedef struct {
    int patch_size, temporal_patch_size, merge_size;
    int64_t min_pixels, max_pixels;        /* smart_resize bounds */
    int do_rescale, do_normalize;
    double rescale_factor;
    float image_mean[3], image_std[3];     /* float32, as numpy casts them to the image's dtype */
    int64_t lf_max_pixels, lf_min_pixels;  /* LLaMA-Factory's image_max_pixels / image_min_pixels */
} tn_vl_proc;

#define TN_LF_IMAGE_MAX_PIXELS (768 * 768)
#define TN_LF_IMAGE_MIN_PIXELS (32 * 32)

/* Reads preprocessor_config.json (transformers' defaults for keys it lacks); lf_* get LLaMA-Factory's
 * defaults. 0, or -1 + tn_err naming the file and key. */
int tn_vl_proc_load(const char *path, tn_vl_proc *p);
/* LLaMA-Factory's image_max_pixels / image_min_pixels (<= 0: its default), checked as LF checks them. */
int tn_vl_proc_set_lf_limits(tn_vl_proc *p, int64_t image_max_pixels, int64_t image_min_pixels);

/* transformers' smart_resize. 0, or -1 + tn_err when the aspect ratio is over 200 (transformers raises). */
int tn_smart_resize(int64_t h, int64_t w, int64_t factor, int64_t min_pixels, int64_t max_pixels, int *out_h, int *out_w);

/* Steps 1-2 on a decoded image (consumed: freed, whatever the result): out = the RGB uint8 image that is
 * patchified, its sides multiples of patch_size * merge_size. name: for messages. 0 or -1 + tn_err. */
int tn_vl_prepare(const tn_vl_proc *p, tn_image *im, const char *name, tn_image *out);
/* Number of <|image_pad|> tokens of a prepared h x w image: (h / patch) * (w / patch) / merge^2. */
int tn_vl_image_tokens(const tn_vl_proc *p, int h, int w);
/* Values per pixel_values row: 3 * temporal_patch_size * patch_size^2. */
int tn_vl_patch_dim(const tn_vl_proc *p);
/* Step 3 for one prepared image (rgb: [h][w][3]): (h/patch) * (w/patch) rows of tn_vl_patch_dim values. */
void tn_vl_patchify(const tn_vl_proc *p, const uint8_t *rgb, int h, int w, float *out);

#endif
