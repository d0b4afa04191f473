/* cpu_decode -- the CPU kernels of generation that training has no use for: products of a few rows (one per
 * sequence being decoded) with a weight matrix, read once, and rotary embedding at per-row positions. Cached
 * attention lives in cpu_attention.c beside the training kernels it shares code with.
 *
 * Decoding one token streams every weight through the core once, so its speed is the memory's: an sgemm of a
 * single row packs the weight matrix first (a second pass over it), and a loop that keeps the core busy per byte
 * (one dependent add chain, an x load per weight load) lets the weight stream stall. linear_rows reads each
 * weight once and takes its dot products with all M input rows while it is in a register: with one input row,
 * each weight row front to back into four independent accumulator chains (a single sequential stream per thread
 * measured faster than four rows a pass, which reuses x but interleaves four streams); with M rows, one weight
 * row against all M.
 *
 * Written with GCC's generic vector types (also Clang's), not intrinsics: the width follows the ISA the file is
 * built for (16 floats with AVX-512, 8 with AVX, 4 on plain x86-64), so the same source is vectorised on every
 * x86-64; loops of scalar arrays left the choice of vectorisation to GCC, which spilled the accumulators of the
 * multi-row loops to the stack. Multiply-adds are contracted to FMA where the ISA has it (CMakeLists.txt). */
#include "backend/cpu_kernels.h"
#include "backend/cpu_vec.h"

#include <omp.h>
#include <string.h>

#define ROWS_MAX 8 /* beyond this many rows sgemm's blocking wins */

static inline void store(float *out, float s, float alpha, float beta) {
    *out = beta == 0.0f ? alpha * s : alpha * s + beta * *out;
}

/* y[n] = alpha (x . W[n]) + beta y[n] for n in [n0, n1), one input row: each weight row read front to back (one
 * sequential stream per thread) into four independent accumulator chains */
static void rows1(float *y, const float *x, const float *W, int n0, int n1, int K, float alpha, float beta) {
    const int K4 = K - K % (4 * VL), KV = K - K % VL;
    for (int n = n0; n < n1; n++) {
        const float *w = W + (size_t)n * K;
        vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        int j = 0;
        for (; j < K4; j += 4 * VL) {
            a0 += vload(w + j) * vload(x + j), a1 += vload(w + j + VL) * vload(x + j + VL);
            a2 += vload(w + j + 2 * VL) * vload(x + j + 2 * VL), a3 += vload(w + j + 3 * VL) * vload(x + j + 3 * VL);
        }
        for (; j < KV; j += VL) a0 += vload(w + j) * vload(x + j);
        float s = vsum((a0 + a1) + (a2 + a3));
        for (; j < K; j++) s += w[j] * x[j];
        store(y + n, s, alpha, beta);
    }
}

/* y[m, n] = alpha (x[m] . W[n]) + beta y[m, n] for n in [n0, n1), MM input rows (2..ROWS_MAX); MM is a
 * compile-time constant so that the MM accumulators live in vector registers. Two weight rows a pass where the
 * 2 MM accumulators fit the register file (AVX-512's 32): each x vector loaded then serves two weight rows, which
 * halves the x traffic that bounds the product once the M input rows (M K floats) no longer fit L1. Each (m, n)
 * sum is still one accumulator over j in order: the result does not depend on the pairing. */
#if VL == 16
#define PAIR_ROWS(MM) 1
#else
#define PAIR_ROWS(MM) ((MM) <= 3) /* 16 vector registers: kept to 6 accumulators; timed only with AVX-512 */
#endif

/* GCC otherwise folds the x load into both FMAs as a memory operand, loading it twice */
#define KEEP_IN_REGISTER(v) __asm__("" : "+x"(v))

#define ROW_SUMS(MM, ACC, WROW, N)                                                                                   \
    for (int m = 0; m < MM; m++) {                                                                                   \
        float s = vsum(ACC[m]);                                                                                      \
        for (int j = KV; j < K; j++) s += (WROW)[j] * x[(size_t)m * ldx + j];                                        \
        store(y + (size_t)m * ldy + (N), s, alpha, beta);                                                            \
    }

#define DEFINE_ROWS(MM)                                                                                              \
    static void rows_##MM(float *y, int ldy, const float *x, int ldx, const float *W, int n0, int n1, int K,         \
                          float alpha, float beta) {                                                                \
        const int KV = K - K % VL;                                                                                   \
        int n = n0;                                                                                                  \
        if (PAIR_ROWS(MM))                                                                                           \
            for (; n + 1 < n1; n += 2) {                                                                             \
                const float *w0 = W + (size_t)n * K, *w1 = w0 + K;                                                   \
                vf a0[MM], a1[MM];                                                                                   \
                for (int m = 0; m < MM; m++) a0[m] = a1[m] = (vf){0};                                                \
                for (int j = 0; j < KV; j += VL) {                                                                   \
                    vf v0 = vload(w0 + j), v1 = vload(w1 + j);                                                       \
                    for (int m = 0; m < MM; m++) {                                                                   \
                        vf xv = vload(x + (size_t)m * ldx + j);                                                      \
                        KEEP_IN_REGISTER(xv);                                                                        \
                        a0[m] += v0 * xv, a1[m] += v1 * xv;                                                          \
                    }                                                                                                \
                }                                                                                                    \
                ROW_SUMS(MM, a0, w0, n)                                                                              \
                ROW_SUMS(MM, a1, w1, n + 1)                                                                          \
            }                                                                                                        \
        for (; n < n1; n++) {                                                                                        \
            const float *w = W + (size_t)n * K;                                                                      \
            vf acc[MM];                                                                                              \
            for (int m = 0; m < MM; m++) acc[m] = (vf){0};                                                           \
            for (int j = 0; j < KV; j += VL) {                                                                       \
                vf wv = vload(w + j);                                                                                \
                for (int m = 0; m < MM; m++) acc[m] += wv * vload(x + (size_t)m * ldx + j);                          \
            }                                                                                                        \
            ROW_SUMS(MM, acc, w, n)                                                                                  \
        }                                                                                                            \
    }
DEFINE_ROWS(2)
DEFINE_ROWS(3)
DEFINE_ROWS(4)
DEFINE_ROWS(5)
DEFINE_ROWS(6)
DEFINE_ROWS(7)
DEFINE_ROWS(8)

typedef void (*rows_fn)(float *, int, const float *, int, const float *, int, int, int, float, float);
static const rows_fn ROWS[ROWS_MAX + 1] = {NULL, NULL, rows_2, rows_3, rows_4, rows_5, rows_6, rows_7, rows_8};

void tn_cpu_linear_rows(float *y, int ldy, const float *x, int ldx, const float *W, int N, int K, int M, float alpha,
                        float beta) {
    if (M <= 0 || N <= 0) return;
    if (M > ROWS_MAX) {
        tn_cpu_matmul(0, 1, M, N, K, alpha, x, ldx, W, K, beta, y, ldy);
        return;
    }
    /* one contiguous band of W per thread: each streams its own part of memory */
#pragma omp parallel if ((size_t)N * K > 32768)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int n0 = (int)((int64_t)N * t / nt), n1 = (int)((int64_t)N * (t + 1) / nt);
        if (M == 1) rows1(y, x, W, n0, n1, K, alpha, beta);
        else ROWS[M](y, ldy, x, ldx, W, n0, n1, K, alpha, beta);
    }
}

void tn_cpu_rope_at(float *x, int T, int nheads, int hd, int ld, const int32_t *pos, const float *cos,
                    const float *sin) {
    int half = hd / 2;
#pragma omp parallel for schedule(static) if (T > 1)
    for (int t = 0; t < T; t++) {
        const float *c = cos + (size_t)pos[t] * half, *s = sin + (size_t)pos[t] * half;
        for (int h = 0; h < nheads; h++) {
            float *a = x + (size_t)t * ld + (size_t)h * hd, *b = a + half;
            for (int i = 0; i < half; i++) { /* (a, b) -> (a cos - b sin, b cos + a sin), as rope */
                float ai = a[i], bi = b[i];
                a[i] = ai * c[i] - bi * s[i];
                b[i] = bi * c[i] + ai * s[i];
            }
        }
    }
}
