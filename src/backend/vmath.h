/* vmath -- vectorisable elementwise math and reductions for the CPU kernels.
 *
 * GCC vectorises a loop only when its body has no calls and no branches, and it never reorders a
 * float reduction without -ffast-math. So exp is a branch-free polynomial (within 2 ulp of expf over
 * the ranges used), and reductions keep TN_LANES partial sums that the compiler maps onto vector
 * registers; the result is exact up to summation order, which the parity tests cover. */
#ifndef TN_VMATH_H
#define TN_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define TN_LANES 16

static inline float tn_expf(float x) {
    /* e^x = 2^n e^r, n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2] (Cody-Waite split of ln2).
     * Non-finite inputs are defined (selects, which vectorise like the clamps): NaN gives NaN, x above
     * ln(FLT_MAX) gives +inf as expf does; the polynomial itself only ever sees a finite, clamped x, so the
     * float-to-int conversion and the exponent shift below stay in range. */
    float c = x == x ? x : 0.0f;
    c = c < -87.3f ? -87.3f : c; /* keeps 2^n normal; exp underflows to ~1e-38 here, never to 0 */
    c = c > 88.3f ? 88.3f : c;
    float t = c * 1.44269504088896341f;
    float n = (t + 12582912.0f) - 12582912.0f; /* round to nearest even: 1.5 * 2^23 trick, |t| < 2^22 */
    float r = c - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* n in [-126, 127]: a normal exponent */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float e = x > 88.72284f ? (float)INFINITY : p * scale; /* ln(FLT_MAX) = 88.7228391 */
    return x == x ? e : x;
}

static inline float tn_sigmoidf(float x) { return 1.0f / (1.0f + tn_expf(-x)); }

static inline float tn_dot(const float *a, const float *b, int n) {
    double acc[TN_LANES] = {0}, s = 0.0; /* double lanes: norms and attention rows feed AdamW's sign-sensitive updates */
    int j = 0;
    for (; j + TN_LANES <= n; j += TN_LANES)
        for (int k = 0; k < TN_LANES; k++) acc[k] += (double)(a[j + k] * b[j + k]);
    for (; j < n; j++) s += (double)(a[j] * b[j]);
    for (int k = 0; k < TN_LANES; k++) s += acc[k];
    return (float)s;
}

static inline float tn_max(const float *a, int n) {
    float acc[TN_LANES], m = a[0];
    for (int k = 0; k < TN_LANES; k++) acc[k] = a[0];
    int j = 0;
    for (; j + TN_LANES <= n; j += TN_LANES)
        for (int k = 0; k < TN_LANES; k++) acc[k] = a[j + k] > acc[k] ? a[j + k] : acc[k];
    for (; j < n; j++) m = a[j] > m ? a[j] : m;
    for (int k = 0; k < TN_LANES; k++) m = acc[k] > m ? acc[k] : m;
    return m;
}

/* x[j] = exp(x[j] - shift) for j < n; returns the sum. */
static inline float tn_exp_shift_sum(float *x, int n, float shift) {
    float acc[TN_LANES] = {0}, s = 0.0f;
    int j = 0;
    for (; j + TN_LANES <= n; j += TN_LANES)
        for (int k = 0; k < TN_LANES; k++) {
            float e = tn_expf(x[j + k] - shift);
            x[j + k] = e;
            acc[k] += e;
        }
    for (; j < n; j++) {
        x[j] = tn_expf(x[j] - shift);
        s += x[j];
    }
    for (int k = 0; k < TN_LANES; k++) s += acc[k];
    return s;
}

#endif
