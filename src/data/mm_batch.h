/* mm_batch -- the images of one micro-batch, as data/ hands them to a vision-language model.
 *
 * Owns: the contract between data/ (decodes, resizes and patchifies images, expands <image> placeholders into
 * <|vision_start|> <|image_pad|>* <|vision_end|>) and model/ (whose vision tower turns patches into the features
 * scattered at the <|image_pad|> positions). Data flows one way: model/ includes this header, data/ never
 * includes model/.
 *
 * Layout is transformers' (Qwen2VLImageProcessor, images only): image i has a patch grid (t, h, w) counted in
 * patches of patch_size pixels before the spatial merge, t = 1 for a still image (its frame repeated to
 * temporal_patch_size); its t*h*w patches are rows of pixel_values in transformers' order (merge windows of
 * merge x merge patches, row-major over windows, row-major inside a window), each row holding
 * in_channels * temporal_patch_size * patch_size^2 values ordered (channel, frame, y, x), rescaled and
 * normalised. Image i fills the i-th run of <|image_pad|> tokens in batch-row order, a run being
 * t*h*w / merge^2 tokens long. */
#ifndef TN_MM_BATCH_H
#define TN_MM_BATCH_H

#include <stdint.h>

typedef struct {
    int n_images;              /* 0: a text-only micro-batch (every other field may then be NULL / 0) */
    const int32_t *grid_thw;   /* [n_images][3] */
    const int32_t *row;        /* [n_images]: batch row whose image-pad run image i fills, ascending */
    const float *pixel_values; /* [sum_i t*h*w, patch_dim] (host memory) */
    int patch_dim;             /* in_channels * temporal_patch_size * patch_size^2 */
} tn_mm_batch;

#endif
