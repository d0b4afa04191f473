/* test_unit_decode_kernels -- the CPU backend's decode product linear_rows (y[M, N] = alpha x W^T + beta y, the
 * weight-streaming kernel of every generated token) against a double-precision loop written here.
 *
 * Bound, per output element: an fp32 dot product of length K summed in any order (and with or without FMA) is
 * within gamma_K sum_k |w_k x_k| of the exact one (Higham, Accuracy and Stability, 3.1; gamma_n = n u / (1 - n u),
 * u = 2^-24); scaling by alpha, and adding beta y, round three more times, so
 *   |y - y_exact| <= gamma_(K+3) (|alpha| sum_k |w_k x_k| + |beta y0|).
 * Nothing in it depends on the machine's vector width, OpenBLAS kernel or thread count. A wrong row, a skipped
 * tail element, a row read with the wrong stride or a missing beta term each miss it by orders of magnitude (the
 * data are O(1) with mixed signs, so one term of sum |w x| is ~1/K of the bound's scale but ~K u^-1 times it).
 *
 * Shapes: M = 1 (four accumulator chains along each weight row), 2..8 (two weight rows a pass against all M where
 * the registers allow, then an odd row alone), 9 (sgemm);
 * K below, at and past one and four vector widths, with tails; odd N, and N large enough to split across threads;
 * ldx > K and ldy > N, whose padding must stay untouched; beta = 0 must not read y (NaN there). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/core.h"
#include "testlib.h"

static tn_rng rng;

static double urand(double lo, double hi) { return lo + (hi - lo) * tn_rng_uniform(&rng); }

static double gamma_n(int n) {
    const double u = ldexp(1.0, -24);
    return n * u / (1.0 - n * u);
}

enum { PAD = 3 };
#define SENTINEL 12345.0f

static void check_shape(const tn_backend *be, int M, int N, int K, float alpha, float beta) {
    int ldx = K + PAD, ldy = N + PAD;
    float *x = be->alloc((size_t)M * ldx), *W = be->alloc((size_t)N * K), *y = be->alloc((size_t)M * ldy);
    float *y0 = tn_xmalloc((size_t)M * ldy * sizeof *y0);
    for (size_t i = 0; i < (size_t)M * ldx; i++) x[i] = (float)urand(-1, 1);
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = (float)urand(-1, 1);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < ldy; n++)
            y0[(size_t)m * ldy + n] = n >= N ? SENTINEL : beta == 0.0f ? NAN : (float)urand(-2, 2);
    memcpy(y, y0, (size_t)M * ldy * sizeof *y);
    be->linear_rows(y, ldy, x, ldx, W, N, K, M, alpha, beta);
    int bad = 0, pad_bad = 0;
    double worst = 0; /* largest error / bound seen */
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double dot = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)x[(size_t)m * ldx + k] * (double)W[(size_t)n * K + k];
                dot += p, mag += fabs(p);
            }
            double b0 = beta == 0.0f ? 0.0 : (double)beta * y0[(size_t)m * ldy + n];
            double want = (double)alpha * dot + b0;
            double bound = gamma_n(K + 3) * (fabs((double)alpha) * mag + fabs(b0));
            double err = fabs((double)y[(size_t)m * ldy + n] - want);
            if (!(err <= bound)) bad++;
            if (bound > 0 && err / bound > worst) worst = err / bound;
        }
        for (int n = N; n < ldy; n++) pad_bad += y[(size_t)m * ldy + n] != SENTINEL;
    }
    CHECKF(bad == 0, "linear_rows M=%d N=%d K=%d alpha=%g beta=%g: %d of %d outside gamma_(K+3) bound (worst %.3g x)", M,
           N, K, alpha, beta, bad, M * N, worst);
    CHECKF(pad_bad == 0, "linear_rows M=%d N=%d K=%d: %d padding elements of y written", M, N, K, pad_bad);
    be->free(x), be->free(W), be->free(y);
    free(y0);
}

int main(void) {
    const tn_backend *be = tn_backend_cpu();
    tn_rng_seed(&rng, 26);
    const int Ks[] = {1, 3, 7, 8, 15, 16, 17, 33, 100, 1029};
    const int Ns[] = {1, 3, 4, 5, 37};
    const float ab[][2] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.25f}};
    for (int M = 1; M <= 9; M++)
        for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++)
            for (size_t n = 0; n < sizeof Ns / sizeof *Ns; n++)
                for (int a = 0; a < 3; a++) check_shape(be, M, Ns[n], Ks[k], ab[a][0], ab[a][1]);
    /* large enough for the parallel split (N K > 32768), bands of odd length, for each path */
    for (int M = 1; M <= 9; M++) check_shape(be, M, 301, 257, 1.0f, 0.0f);
    check_shape(be, 1, 1027, 1024, 0.75f, 1.0f);
    return tl_done("test_unit_decode_kernels");
}
