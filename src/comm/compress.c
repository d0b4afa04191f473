/* compress.c -- see compress.h. */
#include "comm/compress.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

const char *tn_codec_name(tn_codec c) {
    return c == TN_CODEC_BF16 ? "bf16" : c == TN_CODEC_INT8 ? "int8" : c == TN_CODEC_INT4 ? "int4" : "fp32";
}

int tn_codec_parse(const char *s, tn_codec *out) {
    if (!strcmp(s, "none") || !strcmp(s, "fp32")) *out = TN_CODEC_FP32;
    else if (!strcmp(s, "bf16")) *out = TN_CODEC_BF16;
    else if (!strcmp(s, "int8")) *out = TN_CODEC_INT8;
    else if (!strcmp(s, "int4")) *out = TN_CODEC_INT4;
    else return -1;
    return 0;
}

static size_t int8_blocks(size_t n) { return (n + TN_INT8_BLOCK - 1) / TN_INT8_BLOCK; }
static size_t int4_blocks(size_t n) { return (n + TN_INT4_BLOCK - 1) / TN_INT4_BLOCK; }

size_t tn_codec_bytes(tn_codec c, size_t n) {
    size_t b = c == TN_CODEC_FP32   ? 4 * n
               : c == TN_CODEC_BF16 ? 2 * n
               : c == TN_CODEC_INT8 ? 4 * int8_blocks(n) + n
                                    : 4 * int4_blocks(n) + (n + 1) / 2;
    return (b + 3) / 4 * 4;
}

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even on the upper 16 bits; NaN stays a (quiet) NaN, overflow becomes infinity. */
static inline uint16_t to_bf16(float f) {
    uint32_t u = bits_of(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static inline float from_bf16(uint16_t h) { return float_of((uint32_t)h << 16); }

static void encode_bf16(const float *x, float *e, size_t n, uint16_t *out) {
    for (size_t i = 0; i < n; i++) {
        float y = e ? x[i] + e[i] : x[i];
        out[i] = to_bf16(y);
        float d = from_bf16(out[i]);
        if (e) e[i] = isfinite(d) ? y - d : 0.0f; /* exact: the dropped low bits; 0 past overflow or NaN */
    }
}

/* One block of len values y (x + e) quantised to codes in [-L, L] with scale max|y| / L: the codes into q, the
 * scale returned (NaN for a non-finite block, whose codes are 0), e = y - decoded (0 where not finite). */
static float quantise_block(const float *x, float *e, size_t len, float L, int8_t *q) {
    float y[TN_INT8_BLOCK];
    float amax = 0.0f;
    int finite = 1;
    for (size_t i = 0; i < len; i++) {
        y[i] = e ? x[i] + e[i] : x[i];
        finite &= isfinite(y[i]) != 0;
        float a = fabsf(y[i]);
        amax = a > amax ? a : amax;
    }
    if (!finite) { /* the block decodes to NaN: the receiving step is skipped */
        memset(q, 0, len);
        if (e) memset(e, 0, len * sizeof *e);
        return NAN;
    }
    float scale = amax / L, inv = amax > 0 ? L / amax : 0.0f;
    if (!isfinite(inv)) inv = 0.0f; /* a block of subnormals: sent as zeros, kept whole in the residual */
    for (size_t i = 0; i < len; i++) {
        float r = nearbyintf(y[i] * inv); /* round half to even (the default rounding mode) */
        r = r > L ? L : r < -L ? -L : r;
        q[i] = (int8_t)r;
        float d = r * scale;
        if (e) e[i] = isfinite(d) ? y[i] - d : 0.0f;
    }
    return scale;
}

static void encode_int8(const float *x, float *e, size_t n, float *scales, int8_t *q) {
    for (size_t b = 0, lo = 0; lo < n; b++, lo += TN_INT8_BLOCK) {
        size_t len = n - lo < TN_INT8_BLOCK ? n - lo : TN_INT8_BLOCK;
        scales[b] = quantise_block(x + lo, e ? e + lo : NULL, len, 127.0f, q + lo);
    }
}

/* Codes in [-7, 7] as two's-complement nibbles, value 2k low in byte k, 2k + 1 high; a last odd nibble 0. */
static void encode_int4(const float *x, float *e, size_t n, float *scales, uint8_t *packed) {
    int8_t q[TN_INT4_BLOCK];
    for (size_t b = 0, lo = 0; lo < n; b++, lo += TN_INT4_BLOCK) {
        size_t len = n - lo < TN_INT4_BLOCK ? n - lo : TN_INT4_BLOCK;
        scales[b] = quantise_block(x + lo, e ? e + lo : NULL, len, 7.0f, q);
        for (size_t i = 0; i < len; i += 2) /* lo and TN_INT4_BLOCK are even: a block starts a byte */
            packed[(lo + i) / 2] = (uint8_t)(((uint8_t)q[i] & 0xFu) | (i + 1 < len ? ((uint8_t)q[i + 1] & 0xFu) << 4 : 0u));
    }
}

/* The nibble of value i, sign-extended. */
static inline float int4_at(const uint8_t *packed, size_t i) {
    uint8_t v = (uint8_t)((packed[i / 2] >> (4 * (i % 2))) & 0xFu);
    return (float)(v >= 8 ? (int)v - 16 : (int)v);
}

static void decode_int4(const void *in, size_t n, float *out, int add) {
    const float *scales = in;
    const uint8_t *packed = (const uint8_t *)(scales + int4_blocks(n));
    for (size_t b = 0, lo = 0; lo < n; b++, lo += TN_INT4_BLOCK) {
        size_t len = n - lo < TN_INT4_BLOCK ? n - lo : TN_INT4_BLOCK;
        float s = scales[b];
        if (add)
            for (size_t i = lo; i < lo + len; i++) out[i] += int4_at(packed, i) * s;
        else
            for (size_t i = lo; i < lo + len; i++) out[i] = int4_at(packed, i) * s;
    }
}

void tn_codec_encode(tn_codec c, const float *x, float *e, size_t n, void *out) {
    size_t bytes = tn_codec_bytes(c, n);
    if (c == TN_CODEC_FP32) {
        float *o = out;
        for (size_t i = 0; i < n; i++) {
            o[i] = e ? x[i] + e[i] : x[i];
            if (e) e[i] = 0.0f;
        }
        return;
    }
    if (c == TN_CODEC_BF16) {
        encode_bf16(x, e, n, out);
        if (n % 2) memset((uint16_t *)out + n, 0, 2); /* padding: deterministic bytes on the wire */
        return;
    }
    if (c == TN_CODEC_INT4) {
        size_t nb = int4_blocks(n);
        encode_int4(x, e, n, out, (uint8_t *)((float *)out + nb));
        memset((char *)out + 4 * nb + (n + 1) / 2, 0, bytes - 4 * nb - (n + 1) / 2);
        return;
    }
    size_t nb = int8_blocks(n);
    encode_int8(x, e, n, out, (int8_t *)((float *)out + nb));
    memset((char *)out + 4 * nb + n, 0, bytes - 4 * nb - n);
}

void tn_codec_decode(tn_codec c, const void *in, size_t n, float *out, int add) {
    if (c == TN_CODEC_FP32) {
        const float *v = in;
        if (add)
            for (size_t i = 0; i < n; i++) out[i] += v[i];
        else
            memcpy(out, v, n * sizeof *out);
    } else if (c == TN_CODEC_BF16) {
        const uint16_t *h = in;
        if (add)
            for (size_t i = 0; i < n; i++) out[i] += from_bf16(h[i]);
        else
            for (size_t i = 0; i < n; i++) out[i] = from_bf16(h[i]);
    } else if (c == TN_CODEC_INT4) {
        decode_int4(in, n, out, add);
    } else {
        const float *scales = in;
        const int8_t *q = (const int8_t *)(scales + int8_blocks(n));
        for (size_t b = 0, lo = 0; lo < n; b++, lo += TN_INT8_BLOCK) {
            size_t len = n - lo < TN_INT8_BLOCK ? n - lo : TN_INT8_BLOCK;
            float s = scales[b];
            if (add)
                for (size_t i = 0; i < len; i++) out[lo + i] += (float)q[lo + i] * s;
            else
                for (size_t i = 0; i < len; i++) out[lo + i] = (float)q[lo + i] * s;
        }
    }
}
