/* vmath -- vectorisable elementwise math for the CPU kernels (no libm calls in hot loops, so GCC
 * turns the loops into AVX2 without -ffast-math). Accuracy: tn_expf within 2 ulp of expf over the
 * range used (inputs <= 0 in softmax; silu's full range, clamped). */
#ifndef TN_VMATH_H
#define TN_VMATH_H

#include <stdint.h>
#include <string.h>

static inline float tn_expf(float x) {
    /* e^x = 2^n * e^r, r = x - n ln2 in [-ln2/2, ln2/2]; degree-6 Taylor/minimax for e^r. */
    if (x < -87.3f) x = -87.3f; /* exp underflows to ~0; keeps 2^n a normal number */
    if (x > 88.3f) x = 88.3f;
    float n = __builtin_roundevenf(x * 1.44269504088896341f);
    float r = x - n * 0.693145751953125f;  /* ln2 split in two for accuracy (Cody-Waite) */
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

static inline float tn_sigmoidf(float x) { return 1.0f / (1.0f + tn_expf(-x)); }

#endif
