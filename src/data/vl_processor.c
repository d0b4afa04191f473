/* vl_processor.c -- preprocessor_config.json, LLaMA-Factory's image pre-resize, smart_resize, rescale +
 * normalise + patchify. See vl_processor.h.
 *
 * Python arithmetic reproduced: integer / integer is a correctly rounded double (so is C's division of two
 * integers below 2^53, which every operand here is), round() rounds half to even (nearbyint in the default
 * rounding mode), int() truncates. The float32 pipeline is per value, so a 256-entry table per channel holds
 * every value transformers can produce, computed exactly as it computes them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/lf_internal.h"
#include "data/vl_processor.h"

#define MAX_EXACT ((int64_t)1 << 53)

static const float k_clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
static const float k_clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};

/* An integer key (absent or null: left as is); bounds inclusive. */
static int int_key(const char *path, const lj_val *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const lj_val *v = lj_get(obj, key);
    if (!v || v->type == LJ_NULL) return 0;
    char buf[32] = {0};
    if (v->type == LJ_NUM && v->n < sizeof buf) memcpy(buf, v->s, v->n);
    if (!buf[0] || strpbrk(buf, ".eE")) return tn_err("%s: '%s' must be an integer", path, key);
    long long x = strtoll(buf, NULL, 10);
    if (x < lo || x > hi) return tn_err("%s: '%s' = %lld is out of range [%lld, %lld]", path, key, x, (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

static int num_val(const lj_val *v, double *out) {
    char buf[64];
    if (!v || v->type != LJ_NUM || v->n >= sizeof buf) return -1;
    memcpy(buf, v->s, v->n);
    buf[v->n] = '\0';
    *out = strtod(buf, NULL);  /* correctly rounded, as Python's float() */
    return 0;
}

/* image_mean / image_std: three numbers, or one for every channel. */
static int channels_key(const char *path, const lj_val *obj, const char *key, float out[3]) {
    const lj_val *v = lj_get(obj, key);
    if (!v || v->type == LJ_NULL) return 0;
    double d[3];
    if (v->type == LJ_NUM && num_val(v, &d[0]) == 0) {
        d[1] = d[2] = d[0];
    } else {
        int i = 0;
        for (const lj_val *x = v->type == LJ_ARR && v->n == 3 ? v->child : NULL; x; x = x->next, i++)
            if (num_val(x, &d[i]) != 0) break;
        if (i != 3) return tn_err("%s: '%s' must be a list of 3 numbers (one per RGB channel) or one number", path, key);
    }
    for (int c = 0; c < 3; c++) out[c] = (float)d[c];
    if (strcmp(key, "image_std") == 0 && (out[0] == 0 || out[1] == 0 || out[2] == 0))
        return tn_err("%s: 'image_std' must not hold 0", path);
    return 0;
}

static int bool_key(const char *path, const lj_val *obj, const char *key, int *out) {
    const lj_val *v = lj_get(obj, key);
    if (!v || v->type == LJ_NULL) return 0;
    if (v->type != LJ_TRUE && v->type != LJ_FALSE) return tn_err("%s: '%s' must be true or false", path, key);
    *out = v->type == LJ_TRUE;
    return 0;
}

static int parse_config(const char *path, const lj_val *o, tn_vl_proc *p) {
    int64_t patch = p->patch_size, tps = p->temporal_patch_size, merge = p->merge_size, resample = 3;
    int64_t minp = p->min_pixels, maxp = p->max_pixels;
    const lj_val *size = lj_get(o, "size");
    if (size && size->type != LJ_NULL) {  /* transformers: both keys or an error */
        if (size->type != LJ_OBJ || !lj_get(size, "shortest_edge") || !lj_get(size, "longest_edge"))
            return tn_err("%s: 'size' must hold 'shortest_edge' and 'longest_edge' (pixel counts)", path);
        if (int_key(path, size, "shortest_edge", 1, MAX_EXACT, &minp) || int_key(path, size, "longest_edge", 1, MAX_EXACT, &maxp))
            return -1;
    }
    if (int_key(path, o, "patch_size", 1, 1024, &patch) || int_key(path, o, "temporal_patch_size", 1, 16, &tps) ||
        int_key(path, o, "merge_size", 1, 16, &merge) || int_key(path, o, "min_pixels", 1, MAX_EXACT, &minp) ||
        int_key(path, o, "max_pixels", 1, MAX_EXACT, &maxp) || int_key(path, o, "resample", 0, 5, &resample))
        return -1;
    if (resample != 3)
        return tn_err("%s: 'resample' = %lld: tandem resizes with PIL's BICUBIC (3), which Qwen-VL processors use",
                      path, (long long)resample);
    int do_resize = 1;
    if (bool_key(path, o, "do_resize", &do_resize) || bool_key(path, o, "do_rescale", &p->do_rescale) ||
        bool_key(path, o, "do_normalize", &p->do_normalize))
        return -1;
    if (!do_resize) return tn_err("%s: 'do_resize' false is not supported (the patch grid needs smart_resize)", path);
    const lj_val *rf = lj_get(o, "rescale_factor");
    if (rf && rf->type != LJ_NULL && (num_val(rf, &p->rescale_factor) != 0 || !(p->rescale_factor > 0)))
        return tn_err("%s: 'rescale_factor' must be a positive number", path);
    if (channels_key(path, o, "image_mean", p->image_mean) || channels_key(path, o, "image_std", p->image_std)) return -1;
    if (minp > maxp) return tn_err("%s: min_pixels %lld is above max_pixels %lld", path, (long long)minp, (long long)maxp);
    p->patch_size = (int)patch, p->temporal_patch_size = (int)tps, p->merge_size = (int)merge;
    p->min_pixels = minp, p->max_pixels = maxp;
    return 0;
}

int tn_vl_proc_load(const char *path, tn_vl_proc *p) {
    memset(p, 0, sizeof *p);
    *p = (tn_vl_proc){.patch_size = 14, .temporal_patch_size = 2, .merge_size = 2, .min_pixels = 56 * 56,
                      .max_pixels = 28 * 28 * 1280, .do_rescale = 1, .do_normalize = 1, .rescale_factor = 1.0 / 255,
                      .lf_max_pixels = TN_LF_IMAGE_MAX_PIXELS, .lf_min_pixels = TN_LF_IMAGE_MIN_PIXELS};
    memcpy(p->image_mean, k_clip_mean, sizeof k_clip_mean);
    memcpy(p->image_std, k_clip_std, sizeof k_clip_std);
    size_t n;
    char *text = tn_read_file(path, &n, (size_t)1 << 20);
    if (!text) return -1;
    lf_arena a = {0};
    lj_error e;
    const lj_val *root = lj_parse(&a, text, n, &e);
    int rc = !root ? tn_err("%s: invalid JSON at byte %zu: %s", path, e.off, e.msg)
             : root->type != LJ_OBJ ? tn_err("%s: top level must be an object", path)
                                     : parse_config(path, root, p);
    lf_arena_free(&a);
    free(text);
    return rc;
}

int tn_vl_proc_set_lf_limits(tn_vl_proc *p, int64_t max_px, int64_t min_px) {
    p->lf_max_pixels = max_px > 0 ? max_px : TN_LF_IMAGE_MAX_PIXELS;
    p->lf_min_pixels = min_px > 0 ? min_px : TN_LF_IMAGE_MIN_PIXELS;
    if (p->lf_max_pixels >= MAX_EXACT) return tn_err("image_max_pixels: %lld is too large", (long long)max_px);
    if (p->lf_max_pixels < p->lf_min_pixels)
        return tn_err("image_max_pixels (%lld) cannot be smaller than image_min_pixels (%lld), as in LLaMA-Factory",
                      (long long)p->lf_max_pixels, (long long)p->lf_min_pixels);
    return 0;
}

int tn_smart_resize(int64_t h, int64_t w, int64_t f, int64_t minp, int64_t maxp, int *out_h, int *out_w) {
    double ratio = (double)(h > w ? h : w) / (double)(h < w ? h : w);
    if (ratio > 200) return tn_err("smart_resize: aspect ratio %.1f of a %lld x %lld image is over 200", ratio, (long long)w, (long long)h);
    int64_t hb = (int64_t)nearbyint((double)h / (double)f) * f, wb = (int64_t)nearbyint((double)w / (double)f) * f;
    if (hb * wb > maxp) {
        double beta = sqrt((double)(h * w) / (double)maxp);
        hb = (int64_t)floor((double)h / beta / (double)f) * f;
        wb = (int64_t)floor((double)w / beta / (double)f) * f;
        hb = hb > f ? hb : f, wb = wb > f ? wb : f;
    } else if (hb * wb < minp) {
        double beta = sqrt((double)minp / (double)(h * w));
        hb = (int64_t)ceil((double)h * beta / (double)f) * f;
        wb = (int64_t)ceil((double)w * beta / (double)f) * f;
    }
    *out_h = (int)hb, *out_w = (int)wb;
    return 0;
}

/* Image.resize((w, h)) replacing *im; errors name the image. */
static int resize_to(tn_image *im, int64_t w, int64_t h, const char *name, const char *why) {
    tn_image r;
    if (w > INT32_MAX || h > INT32_MAX || tn_image_resize(im, (int)(w > 0 ? w : 0), (int)(h > 0 ? h : 0), &r) != 0)
        return tn_err("%s: %s: cannot resize the %d x %d image to %lld x %lld (%s)", name, why, im->w, im->h, (long long)w,
                      (long long)h, w > INT32_MAX || h > INT32_MAX ? "too large" : tn_errmsg());
    tn_image_free(im);
    *im = r;
    return 0;
}

/* mm_plugin's _preprocess_image (MMPluginMixin, then Qwen2VLPlugin's additions). */
static int lf_preprocess(const tn_vl_proc *p, tn_image *im, const char *name) {
    int64_t area = (int64_t)im->w * im->h;
    if (area > p->lf_max_pixels) {
        double f = sqrt((double)p->lf_max_pixels / (double)area);
        if (resize_to(im, (int64_t)(im->w * f), (int64_t)(im->h * f), name, "image_max_pixels") != 0) return -1;
    }
    area = (int64_t)im->w * im->h;
    if (area < p->lf_min_pixels) {
        double f = sqrt((double)p->lf_min_pixels / (double)area);
        if (resize_to(im, (int64_t)(im->w * f), (int64_t)(im->h * f), name, "image_min_pixels") != 0) return -1;
    }
    tn_image_to_rgb(im);
    if (im->w < 28 || im->h < 28)
        if (resize_to(im, im->w > 28 ? im->w : 28, im->h > 28 ? im->h : 28, name, "LLaMA-Factory's 28-pixel minimum side") != 0)
            return -1;
    if ((double)im->w / im->h > 200 && resize_to(im, (int64_t)im->h * 180, im->h, name, "LLaMA-Factory's aspect-ratio cut") != 0)
        return -1;
    if ((double)im->h / im->w > 200 && resize_to(im, im->w, (int64_t)im->w * 180, name, "LLaMA-Factory's aspect-ratio cut") != 0)
        return -1;
    return 0;
}

int tn_vl_prepare(const tn_vl_proc *p, tn_image *im, const char *name, tn_image *out) {
    memset(out, 0, sizeof *out);
    int h, w, rc = lf_preprocess(p, im, name);
    if (rc == 0 &&
        tn_smart_resize(im->h, im->w, (int64_t)p->patch_size * p->merge_size, p->min_pixels, p->max_pixels, &h, &w) != 0)
        rc = tn_err("%s: %s", name, tn_errmsg());
    if (rc != 0) {
        tn_image_free(im);
        return -1;
    }
    rc = resize_to(im, w, h, name, "smart_resize");  /* transformers' resize: PIL BICUBIC on the uint8 image */
    if (rc == 0) *out = *im;
    else tn_image_free(im);
    memset(im, 0, sizeof *im);
    return rc;
}

int tn_vl_image_tokens(const tn_vl_proc *p, int h, int w) {
    int64_t patches = (int64_t)(h / p->patch_size) * (w / p->patch_size);
    return (int)(patches / ((int64_t)p->merge_size * p->merge_size));
}

int tn_vl_patch_dim(const tn_vl_proc *p) { return 3 * p->temporal_patch_size * p->patch_size * p->patch_size; }

void tn_vl_patchify(const tn_vl_proc *p, const uint8_t *rgb, int h, int w, float *out) {
    float lut[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) {
            float x = p->do_rescale ? (float)((double)v * p->rescale_factor) : (float)v;
            lut[c][v] = p->do_normalize ? (x - p->image_mean[c]) / p->image_std[c] : x;
        }
    const int P = p->patch_size, m = p->merge_size, T = p->temporal_patch_size;
    const int gh = h / P, gw = w / P, dim = tn_vl_patch_dim(p);
    float *row = out;
    /* rows: merge windows row-major, patches row-major inside a window; values: (channel, frame, y, x) */
    for (int bh = 0; bh < gh / m; bh++)
        for (int bw = 0; bw < gw / m; bw++)
            for (int ih = 0; ih < m; ih++)
                for (int iw = 0; iw < m; iw++, row += dim) {
                    int y0 = (bh * m + ih) * P, x0 = (bw * m + iw) * P;
                    float *o = row;
                    for (int c = 0; c < 3; c++)
                        for (int t = 0; t < T; t++)  /* a still image: its frame repeated */
                            for (int y = 0; y < P; y++)
                                for (int x = 0; x < P; x++) *o++ = lut[c][rgb[((size_t)(y0 + y) * w + x0 + x) * 3 + c]];
                }
}
