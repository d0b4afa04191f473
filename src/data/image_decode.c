/* image_decode.c -- JPEG (libjpeg-turbo), PNG (libpng) and WebP (libwebp) bytes -> tn_image in the mode PIL
 * opens the file in. See image.h.
 *
 * Each decoder is asked for the file's own samples (no gamma, no palette expansion, no 16-to-8 reduction by
 * the library) and maps them as PIL's PngImagePlugin / JpegImagePlugin / WebPImagePlugin do. Refused, as
 * PIL refuses them: a truncated file (PIL: "image file is truncated"), a PNG chunk with a bad CRC, a JPEG
 * that is not 8-bit or has other than 1, 3 or 4 components, zero or over-large sizes (checked from the
 * header, before any pixel memory is allocated). libpng and libjpeg report errors by longjmp; every
 * message becomes one tn_err line naming the file. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include "core/core.h"
#include "data/image.h"

#define MAX_IMAGE_FILE ((size_t)1 << 30)

const char *tn_image_mode_name(tn_img_mode m) {
    static const char *const names[] = {"1", "L", "P", "LA", "RGB", "RGBA", "CMYK", "I"};
    return (unsigned)m < sizeof names / sizeof *names ? names[m] : "?";
}

void tn_image_free(tn_image *im) {
    free(im->px);
    free(im->ipx);
    im->px = NULL, im->ipx = NULL;
    im->w = im->h = 0;
}

/* PIL refuses images over its bomb limit; checking first keeps a hostile header from allocating. */
static int check_size(const char *name, const char *fmt, int64_t w, int64_t h, int64_t max_pixels) {
    if (w <= 0 || h <= 0) return tn_err("%s: %s image has size %lld x %lld (expected at least 1 x 1)", name, fmt, (long long)w, (long long)h);
    if (w * h > max_pixels)
        return tn_err("%s: %s image of %lld x %lld pixels is over %s limit of %lld pixels (a decompression bomb)", name, fmt,
                      (long long)w, (long long)h, max_pixels == TN_IMAGE_MAX_PIXELS ? "PIL's" : "the", (long long)max_pixels);
    return 0;
}

/* Size, mode and PIL's grey-ramp palette; pixel memory only when alloc. */
static void set_layout(tn_image *im, int w, int h, tn_img_mode mode, int alloc) {
    static const int nch[] = {1, 1, 1, 2, 3, 4, 4, 0};
    memset(im, 0, sizeof *im);
    im->w = w, im->h = h, im->mode = mode, im->nch = nch[mode];
    if (alloc && mode == TN_IMG_I) im->ipx = tn_xmalloc((size_t)w * h * sizeof *im->ipx);
    else if (alloc) im->px = tn_xmalloc((size_t)w * h * im->nch);
    for (int i = 0; i < 256; i++) im->pal[i][0] = im->pal[i][1] = im->pal[i][2] = (uint8_t)i; /* PIL's ramp */
}

/* ---- PNG ---- */
typedef struct {
    const uint8_t *p;
    size_t n, at;
    char msg[160];
} png_src;

static void png_read_mem(png_structp png, png_bytep out, size_t len) {
    png_src *s = png_get_io_ptr(png);
    if (len > s->n - s->at) png_error(png, "image file is truncated");
    memcpy(out, s->p + s->at, len);
    s->at += len;
}

static void png_fail(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_quiet(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

/* The library's rows (depth >= 8 per sample, or one byte per sample after png_set_packing) -> PIL's mode. */
static void png_to_mode(const uint8_t *raw, size_t rowbytes, int w, int h, int depth, int ctype, tn_image *im) {
    int wide = depth == 16;
    tn_img_mode mode;
    switch (ctype) {
    case PNG_COLOR_TYPE_GRAY: mode = wide ? TN_IMG_I : depth == 1 ? TN_IMG_1 : TN_IMG_L; break;
    case PNG_COLOR_TYPE_GRAY_ALPHA: mode = wide ? TN_IMG_RGBA : TN_IMG_LA; break;  /* PIL: LA;16B -> RGBA */
    case PNG_COLOR_TYPE_RGB: mode = TN_IMG_RGB; break;
    case PNG_COLOR_TYPE_RGB_ALPHA: mode = TN_IMG_RGBA; break;
    default: mode = TN_IMG_P; break;
    }
    set_layout(im, w, h, mode, 1);
    int in_ch = ctype == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 : ctype == PNG_COLOR_TYPE_RGB ? 3 : ctype == PNG_COLOR_TYPE_RGB_ALPHA ? 4 : 1;
    int step = wide ? 2 : 1;  /* 16-bit samples are big-endian: the high byte first */
    int scale = depth == 1 && ctype == PNG_COLOR_TYPE_GRAY ? 255 : depth == 2 && ctype == PNG_COLOR_TYPE_GRAY ? 85
                : depth == 4 && ctype == PNG_COLOR_TYPE_GRAY ? 17 : 1;
    for (int y = 0; y < h; y++) {
        const uint8_t *r = raw + (size_t)y * rowbytes;
        for (int x = 0; x < w; x++) {
            const uint8_t *s = r + (size_t)x * in_ch * step;
            size_t o = (size_t)y * w + x;
            if (mode == TN_IMG_I) {
                im->ipx[o] = (int32_t)s[0] << 8 | s[1];
            } else if (ctype == PNG_COLOR_TYPE_GRAY_ALPHA && wide) {
                uint8_t *d = im->px + o * 4;
                d[0] = d[1] = d[2] = s[0], d[3] = s[2];
            } else {
                for (int c = 0; c < in_ch; c++) im->px[o * in_ch + c] = (uint8_t)(s[c * step] * scale);
            }
        }
    }
}

static int decode_png(const uint8_t *bytes, size_t n, const char *name, int64_t max_px, tn_image *out) {
    png_src src = {bytes, n, 0, ""};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_quiet);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return tn_err("%s: cannot decode PNG: out of memory", name);
    }
    uint8_t *volatile raw = NULL;
    png_bytep *volatile rows = NULL;
    if (setjmp(png_jmpbuf(png))) {
        free(raw), free(rows);
        png_destroy_read_struct(&png, &info, NULL);
        return tn_err("%s: cannot decode PNG: %s", name, src.msg);
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);  /* PIL has no per-side limit; the pixel count is checked */
    png_set_crc_action(png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
    png_set_benign_errors(png, 1);
    png_read_info(png, info);
    png_uint_32 w, h;
    int depth, ctype;
    png_get_IHDR(png, info, &w, &h, &depth, &ctype, NULL, NULL, NULL);
    if (check_size(name, "PNG", w, h, max_px) != 0) {
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    if (depth < 8) png_set_packing(png);  /* one byte per sample, values unscaled */
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    raw = tn_xmalloc(rowbytes * h);
    rows = tn_xmalloc(h * sizeof *rows);
    for (png_uint_32 y = 0; y < h; y++) rows[y] = raw + (size_t)y * rowbytes;
    png_read_image(png, rows);
    png_to_mode(raw, rowbytes, (int)w, (int)h, depth, ctype, out);
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        png_colorp pal;
        int np = 0;
        if (png_get_PLTE(png, info, &pal, &np) & PNG_INFO_PLTE)
            for (int i = 0; i < np && i < 256; i++) out->pal[i][0] = pal[i].red, out->pal[i][1] = pal[i].green, out->pal[i][2] = pal[i].blue;
    }
    free(raw), free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    return 0;
}

/* ---- JPEG ---- */
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpg_err;

static void jpg_fail(j_common_ptr c) {
    jpg_err *e = (jpg_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

static void jpg_quiet(j_common_ptr c) { (void)c; }  /* warnings (corrupt data PIL also accepts) stay silent */

static void jpg_truncated(j_decompress_ptr c) {
    jpg_err *e = (jpg_err *)c->err;
    snprintf(e->msg, sizeof e->msg, "image file is truncated");
    longjmp(e->jb, 1);
}

/* The whole file is in memory: asking for more means it ended early (libjpeg's memory source would invent an
 * end marker and decode grey; PIL stops with "image file is truncated"). */
static void src_init(j_decompress_ptr c) { (void)c; }
static void src_term(j_decompress_ptr c) { (void)c; }
static boolean src_fill(j_decompress_ptr c) {
    jpg_truncated(c);
    return FALSE;
}
static void src_skip(j_decompress_ptr c, long k) {
    if (k <= 0) return;
    if ((size_t)k > c->src->bytes_in_buffer) jpg_truncated(c);
    c->src->next_input_byte += k;
    c->src->bytes_in_buffer -= (size_t)k;
}

static int decode_jpeg(const uint8_t *bytes, size_t n, const char *name, int64_t max_px, tn_image *out) {
    struct jpeg_decompress_struct c;
    jpg_err err;
    struct jpeg_source_mgr src = {bytes, n, src_init, src_fill, src_skip, jpeg_resync_to_restart, src_term};
    memset(&c, 0, sizeof c);
    c.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = jpg_fail;
    err.pub.output_message = jpg_quiet;
    uint8_t *volatile px = NULL;
    if (setjmp(err.jb)) {
        free(px);
        jpeg_destroy_decompress(&c);
        return tn_err("%s: cannot decode JPEG: %s", name, err.msg);
    }
    jpeg_create_decompress(&c);
    c.src = &src;
    jpeg_read_header(&c, TRUE);
    int comps = c.num_components;
    tn_img_mode mode = comps == 1 ? TN_IMG_L : comps == 3 ? TN_IMG_RGB : TN_IMG_CMYK;
    int rc = 0;
    if (c.data_precision != 8) rc = tn_err("%s: cannot decode JPEG: %d-bit samples (PIL reads 8-bit JPEG only)", name, c.data_precision);
    else if (comps != 1 && comps != 3 && comps != 4) rc = tn_err("%s: cannot decode JPEG: %d components (PIL reads 1, 3 or 4)", name, comps);
    else rc = check_size(name, "JPEG", c.image_width, c.image_height, max_px);
    if (rc != 0) {
        jpeg_destroy_decompress(&c);
        return -1;
    }
    c.out_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_start_decompress(&c);
    int w = (int)c.output_width, h = (int)c.output_height;
    size_t row = (size_t)w * c.output_components;
    px = tn_xmalloc(row * h);
    while (c.output_scanline < c.output_height) {
        JSAMPROW r = px + (size_t)c.output_scanline * row;
        jpeg_read_scanlines(&c, &r, 1);
    }
    jpeg_finish_decompress(&c);  /* up to the end marker: PIL refuses a file without it as truncated */
    jpeg_destroy_decompress(&c);
    set_layout(out, w, h, mode, 0);
    out->px = px;
    if (mode == TN_IMG_CMYK) /* PIL's rawmode CMYK;I: Adobe's inverted samples */
        for (size_t i = 0; i < row * h; i++) out->px[i] = (uint8_t)(255 - out->px[i]);
    return 0;
}

/* ---- WebP ---- */
/* PIL decodes through WebPAnimDecoder (first frame on its canvas, RGBA); a file without alpha is RGB. */
static int decode_webp(const uint8_t *bytes, size_t n, const char *name, int64_t max_px, tn_image *out) {
    WebPBitstreamFeatures f;
    if (WebPGetFeatures(bytes, n, &f) != VP8_STATUS_OK) return tn_err("%s: cannot decode WebP: not a valid WebP bitstream", name);
    if (check_size(name, "WebP", f.width, f.height, max_px) != 0) return -1;
    WebPData data = {bytes, n};
    WebPAnimDecoderOptions opt;
    if (!WebPAnimDecoderOptionsInit(&opt)) return tn_err("%s: cannot decode WebP: library version mismatch", name);
    opt.color_mode = MODE_RGBA;
    opt.use_threads = 0;
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, &opt);
    if (!dec) return tn_err("%s: cannot decode WebP: invalid or truncated file", name);
    WebPAnimInfo info;
    uint8_t *frame = NULL;
    int ts = 0, rc = 0;
    if (!WebPAnimDecoderGetInfo(dec, &info)) rc = tn_err("%s: cannot decode WebP: no image information", name);
    else if (check_size(name, "WebP", info.canvas_width, info.canvas_height, max_px) != 0) rc = -1;
    else if (!WebPAnimDecoderGetNext(dec, &frame, &ts)) rc = tn_err("%s: cannot decode WebP: invalid or truncated image data", name);
    if (rc == 0) {
        int w = (int)info.canvas_width, h = (int)info.canvas_height;
        set_layout(out, w, h, f.has_alpha ? TN_IMG_RGBA : TN_IMG_RGB, 1);
        for (size_t i = 0; i < (size_t)w * h; i++) memcpy(out->px + i * out->nch, frame + i * 4, (size_t)out->nch);
    }
    WebPAnimDecoderDelete(dec);
    return rc;
}

/* What PIL's other plugins would open: named in the refusal. */
static const char *other_format(const uint8_t *b, size_t n) {
    if (n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0)) return "GIF";
    if (n >= 2 && memcmp(b, "BM", 2) == 0) return "BMP";
    if (n >= 4 && (memcmp(b, "II*\0", 4) == 0 || memcmp(b, "MM\0*", 4) == 0)) return "TIFF";
    if (n >= 12 && memcmp(b + 4, "ftyp", 4) == 0) return "HEIF/AVIF";
    return NULL;
}

int tn_image_decode_max(const uint8_t *b, size_t n, const char *name, int64_t max_px, tn_image *out) {
    memset(out, 0, sizeof *out);
    if (n == 0) return tn_err("%s: empty file (expected a JPEG, PNG or WebP image)", name);
    if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0) return decode_png(b, n, name, max_px, out);
    if (n >= 3 && memcmp(b, "\xff\xd8\xff", 3) == 0) return decode_jpeg(b, n, name, max_px, out);
    if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0) return decode_webp(b, n, name, max_px, out);
    const char *other = other_format(b, n);
    if (other) return tn_err("%s: %s images are not supported (tandem decodes JPEG, PNG and WebP)", name, other);
    return tn_err("%s: not an image tandem can decode (expected a JPEG, PNG or WebP file)", name);
}

int tn_image_decode(const uint8_t *b, size_t n, const char *name, tn_image *out) {
    return tn_image_decode_max(b, n, name, TN_IMAGE_MAX_PIXELS, out);
}

int tn_image_load(const char *path, tn_image *out) {
    memset(out, 0, sizeof *out);
    size_t n;
    char *bytes = tn_read_file(path, &n, MAX_IMAGE_FILE);
    if (!bytes) return -1;
    int rc = tn_image_decode((const uint8_t *)bytes, n, path, out);
    free(bytes);
    return rc;
}
