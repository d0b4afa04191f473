/* cpu_decode -- the CPU kernels of generation that training has no use for: products of a few rows (one per
 * sequence being decoded) with a weight matrix, read once, and rotary embedding at per-row positions. Cached
 * attention lives in cpu_attention.c beside the training kernels it shares code with.
 *
 * Decoding one token streams every weight through the core once, so its speed is the memory's: an sgemm of a
 * single row packs the weight matrix first (a second pass over it). linear_rows reads each weight row once and
 * takes its dot product with all M input rows while the row is in cache. */
#include "backend/cpu_kernels.h"
#include "backend/vmath.h"

#include <omp.h>

#define ROWS_MAX 8 /* beyond this many rows sgemm's blocking wins */

/* y[m, n] = alpha (x[m] . W[n]) + beta y[m, n] for n in [n0, n1), MM rows of x; MM is a compile-time constant so
 * that the MM x TN_LANES accumulators live in vector registers. */
#define DEFINE_ROWS(MM)                                                                                              \
    static void rows_##MM(float *y, int ldy, const float *x, int ldx, const float *W, int n0, int n1, int K,         \
                          float alpha, float beta) {                                                                \
        for (int n = n0; n < n1; n++) {                                                                              \
            const float *w = W + (size_t)n * K;                                                                      \
            float acc[MM][TN_LANES] = {{0}}, tail[MM] = {0};                                                         \
            int j = 0;                                                                                               \
            for (; j + TN_LANES <= K; j += TN_LANES)                                                                 \
                for (int m = 0; m < MM; m++)                                                                         \
                    for (int k = 0; k < TN_LANES; k++) acc[m][k] += w[j + k] * x[(size_t)m * ldx + j + k];           \
            for (; j < K; j++)                                                                                       \
                for (int m = 0; m < MM; m++) tail[m] += w[j] * x[(size_t)m * ldx + j];                               \
            for (int m = 0; m < MM; m++) {                                                                           \
                float s = tail[m];                                                                                   \
                for (int k = 0; k < TN_LANES; k++) s += acc[m][k];                                                   \
                float *out = y + (size_t)m * ldy + n;                                                                \
                *out = beta == 0.0f ? alpha * s : alpha * s + beta * *out;                                           \
            }                                                                                                        \
        }                                                                                                            \
    }
DEFINE_ROWS(1)
DEFINE_ROWS(2)
DEFINE_ROWS(3)
DEFINE_ROWS(4)
DEFINE_ROWS(5)
DEFINE_ROWS(6)
DEFINE_ROWS(7)
DEFINE_ROWS(8)

typedef void (*rows_fn)(float *, int, const float *, int, const float *, int, int, int, float, float);
static const rows_fn ROWS[ROWS_MAX + 1] = {NULL, rows_1, rows_2, rows_3, rows_4, rows_5, rows_6, rows_7, rows_8};

void tn_cpu_linear_rows(float *y, int ldy, const float *x, int ldx, const float *W, int N, int K, int M, float alpha,
                        float beta) {
    if (M <= 0 || N <= 0) return;
    if (M > ROWS_MAX) {
        tn_cpu_matmul(0, 1, M, N, K, alpha, x, ldx, W, K, beta, y, ldy);
        return;
    }
    rows_fn f = ROWS[M];
    /* one contiguous band of W per thread: each streams its own part of memory */
#pragma omp parallel if ((size_t)N * K > 32768)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int n0 = (int)((int64_t)N * t / nt), n1 = (int)((int64_t)N * (t + 1) / nt);
        f(y, ldy, x, ldx, W, n0, n1, K, alpha, beta);
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
