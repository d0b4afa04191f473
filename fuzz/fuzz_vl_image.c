/* fuzz_vl_image -- the image decoders and the processor entry (src/data/image_decode.c, image_resize.c,
 * vl_processor.c): the input is decoded as an image file (PNG, JPEG or WebP, by content) with a pixel limit of
 * 2^20 (PIL's 1.8 x 10^8 would let one input take seconds); a decoded image goes through LLaMA-Factory's
 * pre-resize (image_max_pixels 64 x 64, so large images are shrunk in their own mode: NEAREST for "1"/"P",
 * premultiplied for "LA"/"RGBA", 32-bit for "I"), RGB conversion, the Qwen2-VL fixes, smart_resize and BICUBIC,
 * then patchify. What comes out must be a well-formed prepared image (sides multiples of 28, tokens =
 * area / 28^2, finite pixel values); a refusal must be one line naming the file.
 *
 * Seeds: fuzz/corpus/fuzz_vl_image/ holds small PNG (1/2/4/8/16-bit grey, palette, grey+alpha, RGB(A), Adam7),
 * JPEG (grey, RGB 4:2:0, progressive, CMYK) and WebP (lossy, lossless, alpha) files written by PIL and by
 * tests/tools/pil_image_cases.py's PNG writer. */
#include <math.h>

#include "data/image.h"
#include "data/vl_processor.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char name[] = "fuzz.img";
    tn_image im, prep;
    fz_err_reset();
    if (tn_image_decode_max(data, size, name, (int64_t)1 << 20, &im) != 0) {
        fz_check_error(name);
        return 0;
    }
    FZ_ASSERT(im.w >= 1 && im.h >= 1 && (int64_t)im.w * im.h <= ((int64_t)1 << 20));
    FZ_ASSERT(im.mode == TN_IMG_I ? im.ipx != NULL : im.px != NULL);
    tn_vl_proc p = {.patch_size = 14, .temporal_patch_size = 2, .merge_size = 2, .min_pixels = 3136, .max_pixels = 12845056,
                    .do_rescale = 1, .do_normalize = 1, .rescale_factor = 1.0 / 255, .image_mean = {0.5f, 0.5f, 0.5f},
                    .image_std = {0.5f, 0.5f, 0.5f}};
    FZ_ASSERT(tn_vl_proc_set_lf_limits(&p, 64 * 64, 32 * 32) == 0);
    fz_err_reset();
    if (tn_vl_prepare(&p, &im, name, &prep) != 0) {  /* consumes im */
        fz_check_error(name);
        return 0;
    }
    FZ_ASSERT(prep.mode == TN_IMG_RGB && prep.nch == 3 && prep.w % 28 == 0 && prep.h % 28 == 0);
    int tokens = tn_vl_image_tokens(&p, prep.h, prep.w);
    FZ_ASSERT((int64_t)tokens * 28 * 28 == (int64_t)prep.w * prep.h);
    size_t n = (size_t)(prep.h / 14) * (prep.w / 14) * (size_t)tn_vl_patch_dim(&p);
    float *pv = malloc(n * sizeof *pv);
    FZ_ASSERT(pv != NULL);
    tn_vl_patchify(&p, prep.px, prep.h, prep.w, pv);
    for (size_t i = 0; i < n; i++) FZ_ASSERT(pv[i] >= -1.0f && pv[i] <= 1.0f);  /* (v / 255 - 0.5) / 0.5 */
    free(pv);
    tn_image_free(&prep);
    return 0;
}
