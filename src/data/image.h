/* image -- images as PIL (Pillow 9.4, Debian's python3-pil) opens, resizes and converts them, which is what
 * LLaMA-Factory's mm_plugin and transformers' Qwen2-VL image processor do before a vision-language model sees
 * a pixel.
 *
 * Owns: decoding JPEG, PNG and WebP bytes with Debian's libraries (libjpeg-turbo, libpng, libwebp) into PIL's
 * modes for that file (image_decode.c); Image.resize with its default filter (BICUBIC, NEAREST for "1"/"P",
 * premultiplied alpha for "LA"/"RGBA") reproduced in PIL's own fixed-point arithmetic, and Image.convert("RGB")
 * (image_resize.c). EXIF orientation is not applied (PIL's open/convert do not); ICC profiles, gamma and
 * transparency chunks are ignored as PIL's RGB conversion ignores them.
 *
 * Modes (PIL's name: where it comes from):
 *   "1"  1-bit grey PNG (stored 0 / 255)          "L"    grey JPEG, 2/4/8-bit grey PNG (scaled to 0..255)
 *   "P"  palette PNG (indices + palette)           "LA"   8-bit grey+alpha PNG
 *   "RGB" colour JPEG, 8/16-bit RGB PNG (16: high byte), WebP without alpha
 *   "RGBA" 8/16-bit RGBA PNG, 16-bit grey+alpha PNG (grey copied to R, G, B), WebP with alpha
 *   "CMYK" 4-component JPEG (Adobe's inverted polarity, as PIL assumes)
 *   "I"  16-bit grey PNG (int32 values 0..65535; its RGB conversion clips at 255, as PIL's does)
 * Other formats (GIF, BMP, TIFF, ...), 12-bit JPEG, and images over PIL's pixel limit are refused in one line. */
#ifndef TN_IMAGE_H
#define TN_IMAGE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { TN_IMG_1, TN_IMG_L, TN_IMG_P, TN_IMG_LA, TN_IMG_RGB, TN_IMG_RGBA, TN_IMG_CMYK, TN_IMG_I } tn_img_mode;

typedef struct {
    int w, h;
    tn_img_mode mode;
    int nch;              /* bytes per pixel of px: 1 ("1", "L", "P"), 2 ("LA"), 3 ("RGB"), 4 ("RGBA", "CMYK"); "I": 0 */
    uint8_t *px;          /* [h][w][nch] */
    int32_t *ipx;         /* mode "I": [h][w] */
    uint8_t pal[256][3];  /* mode "P": the file's palette, then PIL's grey ramp for entries the file does not give */
} tn_image;

/* PIL's DecompressionBombError threshold (2 x Image.MAX_IMAGE_PIXELS): larger images are refused before
 * anything is allocated, as PIL refuses them. */
#define TN_IMAGE_MAX_PIXELS 178956970LL

/* Decodes bytes[0..n) (format from the content, not the name). name: for messages. 0, or -1 + tn_err. */
int tn_image_decode(const uint8_t *bytes, size_t n, const char *name, tn_image *out);
/* The same with another pixel limit (the header's size is checked against it before pixels are allocated). */
int tn_image_decode_max(const uint8_t *bytes, size_t n, const char *name, int64_t max_pixels, tn_image *out);
/* Reads and decodes a file. */
int tn_image_load(const char *path, tn_image *out);
void tn_image_free(tn_image *im);
const char *tn_image_mode_name(tn_img_mode m);

/* PIL's Image.resize((w, h)) with the default filter for the mode: a new image in out (in unchanged). */
int tn_image_resize(const tn_image *in, int w, int h, tn_image *out);
/* PIL's Image.convert("RGB"), in place (a no-op for "RGB"). */
void tn_image_to_rgb(tn_image *im);

#endif
