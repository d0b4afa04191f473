/* test_unit_compress -- the wire codecs of comm_compression (src/comm/compress.h) against values derived by
 * hand from their definitions: bf16 = round-to-nearest-even of the upper 16 bits (8 significant bits: the
 * spacing just above 1.0 is 2^-7); int8 = per block of 256, scale max|y| / 127, q = round-half-even(y * 127 /
 * max|y|). Error feedback: a constant input repeated four times through bf16 carries its rounding error
 * forward until the four sends sum exactly to four times the input; over many random rounds the sum of
 * what was sent equals the sum of the inputs minus the final residual, whereas without feedback the
 * error grows with the number of rounds. Non-finite inputs decode non-finite (the step is skipped) and
 * leave no non-finite residual. int4 = per block of 64, scale max|y| / 7, q = round-half-even(y * 7 / max|y|)
 * in [-7, 7] as two's-complement nibbles, value 2k low in byte k; with feedback the sum sent over many rounds
 * stays within half a quantisation step (the last round's block scale / 2) of the sum of the inputs. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/compress.h"
#include "core/core.h"
#include "testlib.h"

static void test_sizes(void) {
    CHECK(tn_codec_bytes(TN_CODEC_FP32, 5) == 20);
    CHECK(tn_codec_bytes(TN_CODEC_BF16, 3) == 8);   /* 6 bytes, padded to a float */
    CHECK(tn_codec_bytes(TN_CODEC_BF16, 4) == 8);
    CHECK(tn_codec_bytes(TN_CODEC_INT8, 4) == 8);   /* one scale + 4 codes */
    CHECK(tn_codec_bytes(TN_CODEC_INT8, 300) == 308); /* two blocks: 2 scales + 300 codes */
    CHECK(tn_codec_bytes(TN_CODEC_INT8, 301) == 312);
    tn_codec c;
    CHECK(tn_codec_parse("none", &c) == 0 && c == TN_CODEC_FP32);
    CHECK(tn_codec_parse("bf16", &c) == 0 && c == TN_CODEC_BF16);
    CHECK(tn_codec_parse("int8", &c) == 0 && c == TN_CODEC_INT8);
    CHECK(tn_codec_parse("int4", &c) == 0 && c == TN_CODEC_INT4);
    CHECK(tn_codec_parse("int2", &c) == -1);
    CHECK(strcmp(tn_codec_name(TN_CODEC_INT8), "int8") == 0);
    CHECK(strcmp(tn_codec_name(TN_CODEC_INT4), "int4") == 0);
    CHECK(tn_codec_bytes(TN_CODEC_INT4, 4) == 8);    /* one scale + 2 bytes of codes, padded */
    CHECK(tn_codec_bytes(TN_CODEC_INT4, 64) == 36);  /* one scale + 32 bytes */
    CHECK(tn_codec_bytes(TN_CODEC_INT4, 67) == 44);  /* two scales + 34 bytes (67 nibbles), padded */
    CHECK(tn_codec_bytes(TN_CODEC_INT4, 128) == 72);
}

static void test_bf16_rounding(void) {
    /* 1 + 2^-9: nearer to 1; 1 + 2^-8: a tie, to the even 1.0; 1 + 3 2^-8: a tie between 1 + 2^-7 (odd)
     * and 1 + 2^-6 (even); -2.5 exact; FLT_MAX rounds up to infinity */
    float x[6] = {1.0f + 0x1p-9f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 1.0f, FLT_MAX};
    float want[6] = {1.0f, 1.0f, 1.0f + 0x1p-6f, -2.5f, 1.0f, INFINITY};
    float res[6] = {0}, out[6];
    uint16_t enc[6];
    tn_codec_encode(TN_CODEC_BF16, x, res, 6, enc);
    CHECK(enc[4] == 0x3F80 && enc[3] == 0xC020);
    tn_codec_decode(TN_CODEC_BF16, enc, 6, out, 0);
    for (int i = 0; i < 6; i++) CHECKF(out[i] == want[i], "bf16 of %a: %a, expected %a", x[i], out[i], want[i]);
    float want_res[6] = {0x1p-9f, 0x1p-8f, -0x1p-8f, 0, 0, 0}; /* overflow: residual 0, never infinite */
    for (int i = 0; i < 6; i++) CHECKF(res[i] == want_res[i], "residual of %a: %a, expected %a", x[i], res[i], want_res[i]);
}

static void test_int8_blocks(void) {
    /* block 0 (256 values): max 127, scale 1: codes 127, -64 (-63.5 to even), 0 (0.25), 1; the rest 0.
     * block 1 (44 values): max 63.5, scale 0.5, 127/63.5 = 2: 63.5 -> 127, 1.25 -> 2.5 -> 2 -> 1.0,
     * -0.75 -> -1.5 -> -2 -> -1.0. */
    enum { N = 300 };
    float x[N] = {0}, res[N] = {0}, out[N];
    x[0] = 127, x[1] = -63.5f, x[2] = 0.25f, x[3] = 1.0f;
    x[256] = 63.5f, x[257] = 1.25f, x[258] = -0.75f;
    unsigned char enc[308];
    tn_codec_encode(TN_CODEC_INT8, x, res, N, enc);
    float s0, s1;
    memcpy(&s0, enc, 4), memcpy(&s1, enc + 4, 4);
    CHECKF(s0 == 1.0f && s1 == 0.5f, "scales %g %g, expected 1 and 0.5", s0, s1);
    const int8_t *q = (const int8_t *)(enc + 8);
    CHECK(q[0] == 127 && q[1] == -64 && q[2] == 0 && q[3] == 1 && q[4] == 0);
    CHECK(q[256] == 127 && q[257] == 2 && q[258] == -2);
    tn_codec_decode(TN_CODEC_INT8, enc, N, out, 0);
    float want[N] = {0}, want_res[N] = {0};
    want[0] = 127, want[1] = -64, want[2] = 0, want[3] = 1, want[256] = 63.5f, want[257] = 1.0f, want[258] = -1.0f;
    want_res[1] = 0.5f, want_res[2] = 0.25f, want_res[257] = 0.25f, want_res[258] = 0.25f;
    int bad = 0;
    for (int i = 0; i < N; i++) bad += out[i] != want[i] || res[i] != want_res[i];
    CHECKF(bad == 0, "int8: %d values or residuals differ from the hand-derived ones", bad);
    /* decode with add accumulates onto what is there */
    for (int i = 0; i < N; i++) out[i] = 1.0f;
    tn_codec_decode(TN_CODEC_INT8, enc, N, out, 1);
    CHECK(out[0] == 128 && out[1] == -63 && out[257] == 2.0f && out[5] == 1.0f);
    /* a block of subnormals goes as zeros and stays whole in the residual */
    float tiny[4] = {1e-40f, -2e-40f, 0, 0}, r4[4] = {0}, o4[4];
    tn_codec_encode(TN_CODEC_INT8, tiny, r4, 4, enc);
    tn_codec_decode(TN_CODEC_INT8, enc, 4, o4, 0);
    CHECK(o4[0] == 0 && o4[1] == 0 && r4[0] == 1e-40f && r4[1] == -2e-40f);
}

static void test_int4_blocks(void) {
    /* block 0 (64 values): max 7, scale 1: 7 -> 7, -3.5 -> -4 (to even), 2.5 -> 2, 0.4 -> 0, -7 -> -7,
     * 1.5 -> 2, -0.5 -> -0 -> 0; the rest 0. block 1 (3 values): max 14, scale 2, 7/14 = 0.5: 14 -> 7,
     * 3 -> 1.5 -> 2 (decodes 4), -1 -> -0.5 -> 0. Nibbles: byte 0 = 7 | -4 << 4 = 0xC7, byte 1 = 2 | 0 << 4,
     * byte 2 = -7 (0x9) | 2 << 4 = 0x29, byte 3 = 0; byte 32 = 7 | 2 << 4 = 0x27, byte 33 = 0 (and padding). */
    enum { N = 67 };
    float x[N] = {0}, res[N] = {0}, out[N];
    x[0] = 7, x[1] = -3.5f, x[2] = 2.5f, x[3] = 0.4f, x[4] = -7, x[5] = 1.5f, x[6] = -0.5f;
    x[64] = 14, x[65] = 3, x[66] = -1;
    unsigned char enc[44];
    memset(enc, 0xAB, sizeof enc);
    tn_codec_encode(TN_CODEC_INT4, x, res, N, enc);
    float s0, s1;
    memcpy(&s0, enc, 4), memcpy(&s1, enc + 4, 4);
    CHECKF(s0 == 1.0f && s1 == 2.0f, "int4 scales %g %g, expected 1 and 2", s0, s1);
    const unsigned char *q = enc + 8;
    CHECKF(q[0] == 0xC7 && q[1] == 0x02 && q[2] == 0x29 && q[3] == 0 && q[31] == 0, "int4 codes %02x %02x %02x %02x",
           q[0], q[1], q[2], q[3]);
    CHECKF(q[32] == 0x27 && q[33] == 0 && q[34] == 0 && q[35] == 0, "int4 block 1 codes %02x %02x, padding %02x %02x",
           q[32], q[33], q[34], q[35]);
    tn_codec_decode(TN_CODEC_INT4, enc, N, out, 0);
    float want[N] = {0}, want_res[N] = {0};
    want[0] = 7, want[1] = -4, want[2] = 2, want[4] = -7, want[5] = 2, want[64] = 14, want[65] = 4;
    want_res[1] = 0.5f, want_res[2] = 0.5f, want_res[3] = 0.4f, want_res[5] = -0.5f, want_res[6] = -0.5f;
    want_res[65] = -1, want_res[66] = -1;
    int bad = 0;
    for (int i = 0; i < N; i++) bad += out[i] != want[i] || res[i] != want_res[i];
    CHECKF(bad == 0, "int4: %d values or residuals differ from the hand-derived ones", bad);
    for (int i = 0; i < N; i++) out[i] = 1.0f;
    tn_codec_decode(TN_CODEC_INT4, enc, N, out, 1);
    CHECK(out[0] == 8 && out[1] == -3 && out[4] == -6 && out[65] == 5 && out[66] == 1);
    /* every code survives its nibble: y = k for k in -7..7 over one block of max 7 */
    float k15[16], r15[16] = {0}, o15[16];
    for (int i = 0; i < 15; i++) k15[i] = (float)(i - 7);
    k15[15] = 0;
    tn_codec_encode(TN_CODEC_INT4, k15, r15, 16, enc);
    tn_codec_decode(TN_CODEC_INT4, enc, 16, o15, 0);
    bad = 0;
    for (int i = 0; i < 16; i++) bad += o15[i] != k15[i] || r15[i] != 0;
    CHECKF(bad == 0, "int4: %d of the codes -7..7 do not come back exactly", bad);
}

/* With feedback, what K rounds sent differs from what they were given by the last residual, and that is at
 * most half a step of its block: |y - q s| <= s / 2 (codes reach max|y|, so none is clipped), s = max|y| / 7. */
static void test_int4_half_step(void) {
    enum { N = 1000, K = 200 };
    tn_rng rng;
    tn_rng_seed(&rng, 11);
    float *x = tn_xmalloc(N * sizeof *x), *e = tn_xcalloc(N, sizeof *e), *d = tn_xmalloc(N * sizeof *d);
    double *sx = tn_xcalloc(N, sizeof *sx), *sd = tn_xcalloc(N, sizeof *sd);
    unsigned char *enc = tn_xmalloc(tn_codec_bytes(TN_CODEC_INT4, N));
    double ymax = 0;
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) x[i] = (float)(tn_rng_normal(&rng) * (1 + i % 5)), sx[i] += x[i];
        for (int i = 0; i < N; i++) ymax = fmax(ymax, fabs((double)x[i] + e[i]));
        tn_codec_encode(TN_CODEC_INT4, x, e, N, enc);
        tn_codec_decode(TN_CODEC_INT4, enc, N, d, 0);
        for (int i = 0; i < N; i++) sd[i] += d[i];
    }
    /* the float roundings of y and e per round (test_feedback_random), and of the last e against s / 2 */
    double worst = 0, slack = (2.0 * K + 4) * ymax * FLT_EPSILON;
    for (int i = 0; i < N; i++) {
        float s;
        memcpy(&s, enc + 4 * (i / TN_INT4_BLOCK), 4);
        double over = fabs(sx[i] - sd[i]) - (0.5 * s + slack);
        worst = fmax(worst, over);
    }
    CHECKF(worst <= 0, "int4 with feedback: the sum sent strays %g past half a step from the sum of the inputs", worst);
    free(x), free(e), free(d), free(sx), free(sd), free(enc);
}

static void test_feedback_hand(void) {
    /* x = 1 + 2^-9 four times through bf16 (see test_bf16_rounding): sends 1, 1 (tie to even, residual
     * 2^-8), 1 + 2^-7 (y = 1 + 3 2^-9 is nearer to it), 1 (y = 1 exactly): 4 + 2^-7 = 4x, residual 0 */
    float x = 1.0f + 0x1p-9f, e = 0, d;
    float want[4] = {1.0f, 1.0f, 1.0f + 0x1p-7f, 1.0f}, want_e[4] = {0x1p-9f, 0x1p-8f, -0x1p-9f, 0};
    double sent = 0;
    for (int k = 0; k < 4; k++) {
        uint16_t enc[2];
        tn_codec_encode(TN_CODEC_BF16, &x, &e, 1, enc);
        tn_codec_decode(TN_CODEC_BF16, enc, 1, &d, 0);
        CHECKF(d == want[k] && e == want_e[k], "round %d: sent %a residual %a, expected %a %a", k, d, e, want[k],
               want_e[k]);
        sent += d;
    }
    CHECK(sent == 4.0 * (double)x);
}

/* Over K rounds of random inputs: with feedback, sum(sent) = sum(x) - e_K up to the float rounding of
 * y = x + e and of e itself (a few ulps of |y| per round); without it the error is the sum of K independent
 * quantisation errors. */
static void test_feedback_random(tn_codec c) {
    enum { N = 1000, K = 64 };
    tn_rng rng;
    tn_rng_seed(&rng, 7);
    float *x = tn_xmalloc(N * sizeof *x), *e = tn_xcalloc(N, sizeof *e), *d = tn_xmalloc(N * sizeof *d);
    double *sx = tn_xcalloc(N, sizeof *sx), *sd = tn_xcalloc(N, sizeof *sd), *sd0 = tn_xcalloc(N, sizeof *sd0);
    void *enc = tn_xmalloc(tn_codec_bytes(c, N));
    double ymax = 0;
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) x[i] = (float)(tn_rng_normal(&rng) * (1 + i % 7)), sx[i] += x[i];
        tn_codec_encode(c, x, e, N, enc);
        tn_codec_decode(c, enc, N, d, 0);
        for (int i = 0; i < N; i++) sd[i] += d[i], ymax = fmax(ymax, fabs((double)x[i] + e[i]));
        tn_codec_encode(c, x, NULL, N, enc); /* the same inputs without feedback */
        tn_codec_decode(c, enc, N, d, 0);
        for (int i = 0; i < N; i++) sd0[i] += d[i];
    }
    double worst = 0, drift = 0;
    for (int i = 0; i < N; i++) {
        worst = fmax(worst, fabs(sx[i] - sd[i] - e[i]));
        drift += fabs(sx[i] - sd0[i]) / N;
    }
    double bound = 2.0 * K * ymax * FLT_EPSILON; /* two roundings per round */
    CHECKF(worst <= bound, "%s: |sum x - sum sent - e| = %g > %g", tn_codec_name(c), worst, bound);
    double mean_e = 0;
    for (int i = 0; i < N; i++) mean_e += fabs(e[i]) / N;
    CHECKF(drift > 3 * mean_e, "%s: without feedback the mean drift %g should exceed the final residual %g",
           tn_codec_name(c), drift, mean_e);
    free(x), free(e), free(d), free(sx), free(sd), free(sd0), free(enc);
}

static void test_nonfinite(void) {
    enum { N = 512 };
    float x[N], res[N], out[N];
    for (int i = 0; i < N; i++) x[i] = (float)(i % 13) - 6.0f, res[i] = 0.125f;
    x[10] = NAN;
    unsigned char enc[4 * 2 + N];
    tn_codec_encode(TN_CODEC_INT8, x, res, N, enc);
    tn_codec_decode(TN_CODEC_INT8, enc, N, out, 0);
    int nan0 = 0, fin1 = 0, res0 = 0, fres1 = 0;
    for (int i = 0; i < 256; i++) nan0 += isnan(out[i]) != 0, res0 += res[i] == 0;
    for (int i = 256; i < N; i++) fin1 += isfinite(out[i]) != 0, fres1 += isfinite(res[i]) != 0;
    CHECKF(nan0 == 256 && res0 == 256, "a NaN makes its block NaN (%d of 256) and zeroes its residual (%d)", nan0, res0);
    CHECKF(fin1 == 256 && fres1 == 256, "the other block is untouched (%d, %d of 256 finite)", fin1, fres1);
    float y[2] = {INFINITY, 2.0f}, r2[2] = {0, 0}, o2[2];
    uint16_t h[2];
    tn_codec_encode(TN_CODEC_BF16, y, r2, 2, h);
    tn_codec_decode(TN_CODEC_BF16, h, 2, o2, 0);
    CHECK(isinf(o2[0]) && o2[1] == 2.0f && r2[0] == 0 && r2[1] == 0);
    float nanv = NAN, rn = 0, on;
    tn_codec_encode(TN_CODEC_BF16, &nanv, &rn, 1, h);
    tn_codec_decode(TN_CODEC_BF16, h, 1, &on, 0);
    CHECK(isnan(on) && rn == 0);
    /* int4: a NaN in block 1 of 2 makes that block NaN and zeroes its residual; block 0 is untouched */
    float x4[128], r4[128], o4[128];
    unsigned char e4[72];
    for (int i = 0; i < 128; i++) x4[i] = (float)(i % 9) - 4.0f, r4[i] = 0.125f;
    x4[100] = NAN;
    tn_codec_encode(TN_CODEC_INT4, x4, r4, 128, e4);
    tn_codec_decode(TN_CODEC_INT4, e4, 128, o4, 0);
    int n0 = 0, f0 = 0;
    for (int i = 64; i < 128; i++) n0 += isnan(o4[i]) && r4[i] == 0;
    for (int i = 0; i < 64; i++) f0 += isfinite(o4[i]) && isfinite(r4[i]);
    CHECKF(n0 == 64 && f0 == 64, "int4 NaN block: %d of 64 NaN with zero residual, %d of 64 finite elsewhere", n0, f0);
}

int main(void) {
    test_sizes();
    test_bf16_rounding();
    test_int8_blocks();
    test_feedback_hand();
    test_feedback_random(TN_CODEC_BF16);
    test_feedback_random(TN_CODEC_INT8);
    test_int4_blocks();
    test_int4_half_step();
    test_feedback_random(TN_CODEC_INT4);
    test_nonfinite();
    return tl_done("test_unit_compress");
}
