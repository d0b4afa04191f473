/* compress -- lossy encodings of float vectors for the exchanges between machines, with error feedback.
 *
 * Owns the wire formats of comm_compression (exchange.h sends them):
 *   fp32  the floats as they are (4 bytes each): nothing lost.
 *   bf16  the upper 16 bits of each float, rounded to nearest even (2 bytes each): 8 mantissa bits kept.
 *   int8  blocks of TN_INT8_BLOCK floats, each as one float scale s = max|y| / 127 and one int8
 *         q = round_half_even(y * 127 / max|y|) per value, decoded as q * s (1 + 4/256 bytes each).
 *   int4  the same with 4-bit two's-complement codes in [-7, 7] (s = max|y| / 7), two a byte (value 2k in the
 *         low nibble of byte k), in blocks of TN_INT4_BLOCK: 0.5 + 4/64 bytes each, 1/7.1 of fp32. With 15
 *         levels the step s is what the block's largest value sets, so blocks are 4x smaller than int8's: the
 *         largest of 64 normal values is ~2.4 sigma against ~2.9 for 256, a ~1.45x smaller error variance for
 *         0.047 bytes a value more (bitsandbytes' 4-bit blocks are 64 too).
 * Error feedback: the encoder is handed x and the residual e of this sender; it encodes y = x + e and leaves
 * e = y - decode(encoding), what this exchange did not carry, which the next exchange then carries. So
 * nothing is lost over time: the sum of what was sent over K exchanges is the sum of the x minus the last e.
 * Every decode is a pure function of the bytes (no division, fixed order), so every receiver of the same
 * bytes gets bit-identical floats. A non-finite y makes its block (its value in bf16 / fp32) decode to a
 * non-finite value, so the receiving step sees it and is skipped; its residual is set to 0 rather than
 * carry the non-finite value into every later exchange. */
#ifndef TN_COMPRESS_H
#define TN_COMPRESS_H

#include <stddef.h>

typedef enum { TN_CODEC_FP32, TN_CODEC_BF16, TN_CODEC_INT8, TN_CODEC_INT4, TN_CODEC_N } tn_codec;

#define TN_INT8_BLOCK 256
#define TN_INT4_BLOCK 64

const char *tn_codec_name(tn_codec c); /* "fp32", "bf16", "int8", "int4" */
/* "none"/"fp32", "bf16", "int8", "int4" -> 0; anything else -1 (no tn_err: the caller names the key). */
int tn_codec_parse(const char *s, tn_codec *out);
/* Bytes of the encoding of n floats, a multiple of 4. */
size_t tn_codec_bytes(tn_codec c, size_t n);
/* Encode x[0, n) (+ e, then e = the part not carried; e may be NULL: no feedback) into out. */
void tn_codec_encode(tn_codec c, const float *x, float *e, size_t n, void *out);
/* out[i] = decode(in)[i], or with add: out[i] += decode(in)[i]. */
void tn_codec_decode(tn_codec c, const void *in, size_t n, float *out, int add);

#endif
