/* image_resize.c -- PIL's Image.resize((w, h)) with its default filter, and Image.convert("RGB"), on tn_image.
 * See image.h. Written from the algorithm of Pillow 9.4's ImagingResample / ImagingScaleAffine / Convert.c, to
 * give the same bytes.
 *
 * BICUBIC (every mode but "1" and "P"): separable, the horizontal pass first into an intermediate image of the
 * same mode holding only the rows the vertical pass reads. Per output pixel, along one axis: scale = in/out,
 * filter a = -0.5 stretched by max(1, scale) (support 2 * max(1, scale)), window
 * [(int)(center - support + 0.5), (int)(center + support + 0.5)) clamped to the image, center = (i + 0.5) *
 * scale, taps at (j - center + 0.5) / max(1, scale), normalised to sum 1 in double. 8-bit modes then use the
 * taps in 22-bit fixed point (each rounded half away from zero), accumulate from 2^21 and clip the arithmetic
 * shift >> 22 to 0..255 -- so the intermediate is rounded and clipped to 8 bits too. Mode "I" keeps double taps
 * and stores (int)(s + 0.5) (s - 0.5 below zero).
 * NEAREST ("1", "P", which PIL never filters): source index (int) of x0 = in/out / 2 advanced by in/out per
 * output pixel, in double. "LA" and "RGBA" are resized premultiplied: PIL converts to "La"/"RGBa"
 * (c * a / 255 rounded as (t + (t >> 8)) >> 8, t = c * a + 128), resizes, and divides back (255 * c / a,
 * truncated and clipped; a = 0 or 255 leaves c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/image.h"

#define PREC_BITS 22

typedef struct {
    int ksize;    /* taps per output pixel (room; each uses bounds[2i+1] of them) */
    int *bounds;  /* [out][2]: first input index, number of taps */
    double *k;    /* [out][ksize] */
} taps;

static double bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static void taps_make(int in_size, int out_size, taps *t) {
    double scale = (double)(float)in_size / out_size;  /* PIL's box is float */
    double fscale = scale < 1.0 ? 1.0 : scale, support = 2.0 * fscale;
    t->ksize = (int)ceil(support) * 2 + 1;
    t->k = tn_xcalloc((size_t)out_size * t->ksize, sizeof *t->k);
    t->bounds = tn_xmalloc((size_t)out_size * 2 * sizeof *t->bounds);
    for (int i = 0; i < out_size; i++) {
        double center = (i + 0.5) * scale, sum = 0.0, inv = 1.0 / fscale;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in_size) hi = in_size;
        double *k = t->k + (size_t)i * t->ksize;
        for (int j = 0; j < hi - lo; j++) {
            k[j] = bicubic((j + lo - center + 0.5) * inv);
            sum += k[j];
        }
        for (int j = 0; j < hi - lo; j++)
            if (sum != 0.0) k[j] /= sum;
        t->bounds[2 * i] = lo, t->bounds[2 * i + 1] = hi - lo;
    }
}

static void taps_free(taps *t) {
    free(t->k), free(t->bounds);
}

/* The taps in 22-bit fixed point, each rounded half away from zero. */
static int32_t *taps_fixed(const taps *t, int out_size) {
    size_t n = (size_t)out_size * t->ksize;
    int32_t *q = tn_xmalloc(n * sizeof *q);
    for (size_t i = 0; i < n; i++) {
        double v = t->k[i] * (1 << PREC_BITS);
        q[i] = (int32_t)(t->k[i] < 0 ? -0.5 + v : 0.5 + v);
    }
    return q;
}

static uint8_t clip8(int64_t acc) {
    if (acc < 0) return 0;
    int64_t v = acc >> PREC_BITS;
    return v > 255 ? 255 : (uint8_t)v;
}

/* The horizontal pass of an 8-bit resample: `rows` rows of the input from row0, each resampled to out_w pixels
 * of nch channels. Integer sums: the order of accumulation does not change them. */
static void hpass8(const uint8_t *in, int in_w, int nch, const taps *t, const int32_t *q, int row0, int rows, int out_w,
                   uint8_t *out) {
    for (int y = 0; y < rows; y++) {
        const uint8_t *src = in + (size_t)(y + row0) * in_w * nch;
        uint8_t *dst = out + (size_t)y * out_w * nch;
        for (int x = 0; x < out_w; x++) {
            int lo = t->bounds[2 * x], cnt = t->bounds[2 * x + 1];
            const int32_t *k = q + (size_t)x * t->ksize;
            const uint8_t *s = src + (size_t)lo * nch;
            int64_t acc[4] = {1 << (PREC_BITS - 1), 1 << (PREC_BITS - 1), 1 << (PREC_BITS - 1), 1 << (PREC_BITS - 1)};
            for (int j = 0; j < cnt; j++)
                for (int c = 0; c < nch; c++) acc[c] += (int64_t)s[(size_t)j * nch + c] * k[j];
            for (int c = 0; c < nch; c++) dst[(size_t)x * nch + c] = clip8(acc[c]);
        }
    }
}

/* The vertical pass: out_h rows of w pixels, each a tap-weighted sum of input rows, accumulated row by row
 * (contiguous reads) in acc, which holds w * nch sums. */
static void vpass8(const uint8_t *in, int w, int nch, const taps *t, const int32_t *q, int out_h, uint8_t *out) {
    size_t row = (size_t)w * nch;
    int64_t *acc = tn_xmalloc(row * sizeof *acc);
    for (int y = 0; y < out_h; y++) {
        int lo = t->bounds[2 * y], cnt = t->bounds[2 * y + 1];
        const int32_t *k = q + (size_t)y * t->ksize;
        for (size_t i = 0; i < row; i++) acc[i] = 1 << (PREC_BITS - 1);
        for (int j = 0; j < cnt; j++) {
            const uint8_t *s = in + (size_t)(lo + j) * row;
            for (size_t i = 0; i < row; i++) acc[i] += (int64_t)s[i] * k[j];
        }
        for (size_t i = 0; i < row; i++) out[(size_t)y * row + i] = clip8(acc[i]);
    }
    free(acc);
}

static int32_t round_half_out(double s) { return (int32_t)(s >= 0.0 ? s + 0.5 : s - 0.5); }

/* The same for mode "I" (one int32 channel, double taps). */
static void pass32(const int32_t *in, int in_w, const taps *t, int horizontal, int row0, int rows, int out_n, int32_t *out) {
    int out_w = horizontal ? out_n : in_w;
    for (int y = 0; y < (horizontal ? rows : out_n); y++) {
        for (int x = 0; x < (horizontal ? out_n : in_w); x++) {
            int i = horizontal ? x : y, lo = t->bounds[2 * i], cnt = t->bounds[2 * i + 1];
            const double *k = t->k + (size_t)i * t->ksize;
            double s = 0.0;
            if (horizontal)
                for (int j = 0; j < cnt; j++) s += in[(size_t)(y + row0) * in_w + lo + j] * k[j];
            else
                for (int j = 0; j < cnt; j++) s += in[(size_t)(lo + j) * in_w + x] * k[j];
            out[(size_t)y * out_w + x] = round_half_out(s);
        }
    }
}

/* ImagingResampleInner: horizontal pass over the rows the vertical pass needs, then the vertical pass. */
static void bicubic_resample(const tn_image *in, int ow, int oh, tn_image *out) {
    taps th, tv;
    taps_make(in->w, ow, &th);
    taps_make(in->h, oh, &tv);
    int need_h = ow != in->w, need_v = oh != in->h, nch = in->nch, wide = in->mode == TN_IMG_I;
    int first = tv.bounds[0], last = tv.bounds[2 * oh - 2] + tv.bounds[2 * oh - 1];
    const uint8_t *src = in->px;
    const int32_t *isrc = in->ipx;
    uint8_t *tmp = NULL;
    int32_t *itmp = NULL;
    if (need_h) {
        for (int i = 0; i < oh; i++) tv.bounds[2 * i] -= first;
        size_t n = (size_t)ow * (last - first);
        if (wide) {
            itmp = tn_xmalloc(n * sizeof *itmp);
            pass32(in->ipx, in->w, &th, 1, first, last - first, ow, itmp);
        } else {
            int32_t *q = taps_fixed(&th, ow);
            tmp = tn_xmalloc(n * nch);
            hpass8(in->px, in->w, nch, &th, q, first, last - first, ow, tmp);
            free(q);
        }
        src = tmp, isrc = itmp;
    }
    size_t n_out = (size_t)ow * oh;
    if (need_v && wide) {
        pass32(isrc, ow, &tv, 0, 0, 0, oh, out->ipx);
    } else if (need_v) {
        int32_t *q = taps_fixed(&tv, oh);
        vpass8(src, ow, nch, &tv, q, oh, out->px);
        free(q);
    } else if (wide) {
        memcpy(out->ipx, isrc, n_out * sizeof *out->ipx);
    } else {
        memcpy(out->px, src, n_out * nch);
    }
    free(tmp), free(itmp);
    taps_free(&th), taps_free(&tv);
}

/* ImagingScaleAffine (NEAREST), used by PIL for "1" and "P". */
static void nearest_resample(const tn_image *in, int ow, int oh, tn_image *out) {
    double ax = (double)(float)in->w / ow, ay = (double)(float)in->h / oh, xo = ax * 0.5, yo = ay * 0.5;
    int *xin = tn_xmalloc((size_t)ow * sizeof *xin);
    for (int x = 0; x < ow; x++, xo += ax) {
        int v = xo < 0.0 ? -1 : (int)xo;
        xin[x] = v < in->w ? v : -1;
    }
    int nch = in->nch;
    memset(out->px, 0, (size_t)ow * oh * nch);  /* PIL fills what maps outside the source with 0 */
    for (int y = 0; y < oh; y++, yo += ay) {
        int yi = yo < 0.0 ? -1 : (int)yo;
        if (yi < 0 || yi >= in->h) continue;
        for (int x = 0; x < ow; x++)
            if (xin[x] >= 0)
                memcpy(out->px + ((size_t)y * ow + x) * nch, in->px + ((size_t)yi * in->w + xin[x]) * nch, (size_t)nch);
    }
    free(xin);
}

static uint8_t muldiv255(unsigned a, unsigned b) {
    unsigned t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

/* "LA"/"RGBA" <-> "La"/"RGBa": colour channels times alpha / 255, or back. */
static void premultiply(uint8_t *px, size_t n, int nch, int back) {
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = px + i * nch;
        unsigned a = p[nch - 1];
        for (int c = 0; c < nch - 1; c++) {
            if (!back) p[c] = muldiv255(p[c], a);
            else if (a != 0 && a != 255) {
                unsigned v = 255u * p[c] / a;
                p[c] = (uint8_t)(v > 255 ? 255 : v);
            }
        }
    }
}

int tn_image_resize(const tn_image *in, int w, int h, tn_image *out) {
    memset(out, 0, sizeof *out);
    if (w < 1 || h < 1) return tn_err("resize of a %d x %d image to %d x %d: height and width must be > 0", in->w, in->h, w, h);
    if ((int64_t)w * h > TN_IMAGE_MAX_PIXELS)
        return tn_err("resize of a %d x %d image to %d x %d: more than PIL's limit of %lld pixels", in->w, in->h, w, h,
                      TN_IMAGE_MAX_PIXELS);
    *out = *in;
    out->w = w, out->h = h, out->px = NULL, out->ipx = NULL;
    size_t n = (size_t)w * h;
    if (in->mode == TN_IMG_I) out->ipx = tn_xmalloc(n * sizeof *out->ipx);
    else out->px = tn_xmalloc(n * in->nch);
    if (w == in->w && h == in->h) { /* PIL returns a copy */
        if (in->mode == TN_IMG_I) memcpy(out->ipx, in->ipx, n * sizeof *out->ipx);
        else memcpy(out->px, in->px, n * in->nch);
        return 0;
    }
    if (in->mode == TN_IMG_1 || in->mode == TN_IMG_P) {
        nearest_resample(in, w, h, out);
    } else if (in->mode == TN_IMG_LA || in->mode == TN_IMG_RGBA) {
        tn_image pre = *in;
        size_t n_in = (size_t)in->w * in->h;
        pre.px = tn_xmalloc(n_in * in->nch);
        memcpy(pre.px, in->px, n_in * in->nch);
        premultiply(pre.px, n_in, in->nch, 0);
        bicubic_resample(&pre, w, h, out);
        premultiply(out->px, n, in->nch, 1);
        free(pre.px);
    } else {
        bicubic_resample(in, w, h, out);
    }
    return 0;
}

void tn_image_to_rgb(tn_image *im) {
    if (im->mode == TN_IMG_RGB) return;
    size_t n = (size_t)im->w * im->h;
    uint8_t *rgb = tn_xmalloc(n * 3);
    for (size_t i = 0; i < n; i++) {
        uint8_t *d = rgb + 3 * i;
        const uint8_t *s = im->px ? im->px + i * im->nch : NULL;
        switch (im->mode) {
        case TN_IMG_P: memcpy(d, im->pal[s[0]], 3); break;
        case TN_IMG_RGBA: memcpy(d, s, 3); break;  /* alpha dropped, not composited */
        case TN_IMG_CMYK: {
            unsigned nk = 255u - s[3];
            for (int c = 0; c < 3; c++) d[c] = (uint8_t)(nk - muldiv255(s[c], nk));
            break;
        }
        case TN_IMG_I: {
            int32_t v = im->ipx[i];
            d[0] = d[1] = d[2] = (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : v);
            break;
        }
        default: d[0] = d[1] = d[2] = s[0]; break;  /* "1" (0/255), "L", "LA" (alpha dropped) */
        }
    }
    free(im->px), free(im->ipx);
    im->px = rgb, im->ipx = NULL;
    im->mode = TN_IMG_RGB, im->nch = 3;
}
