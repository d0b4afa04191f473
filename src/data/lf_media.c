/* lf_media.c -- the images of LLaMA-Factory examples: files read, decoded and prepared for the processor
 * (data/vl_processor.h), and the `<image>` placeholders expanded as LF's Qwen2-VL / Qwen3-VL mm_plugin
 * expands them (process_messages: each tag, left to right over the messages, becomes
 * <|vision_start|> + n <|image_pad|> + <|vision_end|> with n = t*h*w / merge^2 of the next image). */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/image.h"
#include "data/lf_internal.h"

#define IMAGE_TAG "<image>"

void lf_imgs_free(lf_img *img, int n) {
    for (int k = 0; img && k < n; k++) free(img[k].rgb), img[k].rgb = NULL;
}

static int prepare_one(const tn_vl_proc *vl, const lf_example *e, int k, lf_img *out, int *tokens) {
    const char *path = e->img[k];
    if (!tn_file_exists(path)) {
        if (strcmp(path, e->img_raw[k]) == 0)
            return tn_err("%s: dataset '%s': record %d: image %d '%s' not found (neither in media_dir nor from the "
                          "current folder)", e->file, e->dsname, e->rec, k, path);
        return tn_err("%s: dataset '%s': record %d: image %d '%s' not found", e->file, e->dsname, e->rec, k, path);
    }
    tn_image im, prep;
    if (tn_image_load(path, &im) != 0 || tn_vl_prepare(vl, &im, path, &prep) != 0)
        return tn_err("%s: dataset '%s': record %d: image %d: %s", e->file, e->dsname, e->rec, k, tn_errmsg());
    out->h = prep.h, out->w = prep.w, out->rgb = prep.px;
    *tokens = tn_vl_image_tokens(vl, prep.h, prep.w);
    return 0;
}

int lf_images_prepare(const tn_vl_proc *vl, const lf_example *e, lf_img *out, int *tokens) {
    for (int k = 0; k < e->n_img; k++) {
        out[k].rgb = NULL;
        if (prepare_one(vl, e, k, &out[k], &tokens[k]) != 0) {
            lf_imgs_free(out, k);
            return -1;
        }
    }
    return 0;
}

int lf_count_image_tags(const char *s, size_t n) {
    int c = 0;
    for (size_t i = 0; i + sizeof IMAGE_TAG - 1 <= n; i++)
        if (s[i] == '<' && memcmp(s + i, IMAGE_TAG, sizeof IMAGE_TAG - 1) == 0) c++, i += sizeof IMAGE_TAG - 2;
    return c;
}

void lf_expand_image_tags(const char *s, size_t n, const int *tokens, int *next, lf_buf *out) {
    static const char pad[] = "<|image_pad|>";
    out->n = 0;
    lf_buf_put(out, "", 0);
    for (size_t i = 0; i < n;) {
        if (i + sizeof IMAGE_TAG - 1 <= n && memcmp(s + i, IMAGE_TAG, sizeof IMAGE_TAG - 1) == 0) {
            lf_buf_puts(out, "<|vision_start|>");
            for (int t = 0; t < tokens[*next]; t++) lf_buf_put(out, pad, sizeof pad - 1);
            lf_buf_puts(out, "<|vision_end|>");
            (*next)++;
            i += sizeof IMAGE_TAG - 1;
        } else {
            lf_buf_putc(out, s[i++]);
        }
    }
}
