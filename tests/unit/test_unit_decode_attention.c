/* test_unit_decode_attention -- the CPU backend's cached attention (attention_cached) for decode rows, which it
 * splits into chunks of cached positions and merges per head (cpu_decode_attention.c), against a softmax attention
 * in double precision written here; one step mixes decode rows of several sequences with a prefill run.
 *
 * Bound, per output element o[h, d] = sum_j p_j v[j, d] (p = softmax of s_j = q_h . k_j / sqrt(hd)):
 *   - each fp32 score is within D_j = gamma_(hd+2) scale sum_d |q_d k_jd| of the exact one (Higham 3.1, plus the
 *     scaling), and the shift by the max rounds once more: |ds_j| <= D = max_j D_j + 2u max_j |s_j|;
 *   - scores all moved by at most D move every p_j by a factor within exp(+-2D), so the weighted sum moves by at
 *     most (exp(2D) - 1) sum_j p_j |v_jd|;
 *   - exp itself (vmath.h: within 2 ulp), the fp32 sums of p v and of p over n terms, a chunk's rescaling by
 *     exp(m_c - M) and the final division add at most gamma_(n+16) sum_j p_j |v_jd| each to the numerator and
 *     the denominator.
 * So |o - o_exact| <= (exp(2D) - 1 + 2 gamma_(n+16)) sum_j p_j |v_jd|. Nothing in it depends on the thread count
 * or the vector width. A chunk left out or read twice, a partial merged without its exp(m_c - M) weight, a wrong
 * group for a query head or a prefill row's output overwritten by the merge each miss it by orders of magnitude. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/core.h"
#include "testlib.h"

static tn_rng rng;

static double gamma_n(int n) {
    const double u = ldexp(1.0, -24);
    return n * u / (1.0 - n * u);
}

typedef struct {
    int H, KV, hd, ldq;
} shape;

/* row t (query q_t) against cached rows 0..n-1 of K, V ([pos][KV hd]): checks every element of out_t */
static int check_row(const shape *s, const float *q, const float *K, const float *V, int n, const float *out,
                     const char *what, double *worst) {
    const int rep = s->H / s->KV, ldk = s->KV * s->hd;
    const double u = ldexp(1.0, -24), scale = 1.0 / sqrt((double)s->hd);
    double *sc = tn_xmalloc((size_t)n * sizeof *sc);
    int bad = 0;
    for (int h = 0; h < s->H; h++) {
        const float *qh = q + (size_t)h * s->hd;
        double mx = -INFINITY, D = 0, smax = 0, sum = 0;
        for (int j = 0; j < n; j++) {
            const float *kj = K + (size_t)j * ldk + (size_t)(h / rep) * s->hd;
            double dot = 0, mag = 0;
            for (int d = 0; d < s->hd; d++) dot += (double)qh[d] * kj[d], mag += fabs((double)qh[d] * kj[d]);
            sc[j] = scale * dot;
            D = fmax(D, gamma_n(s->hd + 2) * scale * mag), smax = fmax(smax, fabs(sc[j])), mx = fmax(mx, sc[j]);
        }
        D += 2 * u * smax;
        for (int j = 0; j < n; j++) sum += exp(sc[j] - mx);
        for (int d = 0; d < s->hd; d++) {
            double want = 0, mag = 0;
            for (int j = 0; j < n; j++) {
                double p = exp(sc[j] - mx) / sum, vj = V[(size_t)j * ldk + (size_t)(h / rep) * s->hd + d];
                want += p * vj, mag += p * fabs(vj);
            }
            double bound = (expm1(2 * D) + 2 * gamma_n(n + 16)) * mag, err = fabs(out[(size_t)h * s->hd + d] - want);
            if (!(err <= bound)) bad++;
            if (bound > 0 && err / bound > *worst) *worst = err / bound;
        }
    }
    free(sc);
    CHECKF(bad == 0, "%s (H=%d KV=%d hd=%d, %d cached rows): %d elements outside the bound (worst %.3g x)", what, s->H,
           s->KV, s->hd, n, bad, *worst);
    return bad;
}

static float *randoms(size_t n, double a) {
    float *x = tn_xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(a * (2 * tn_rng_uniform(&rng) - 1));
    return x;
}

/* one step: sequence i < NSEQ decodes one row at position lens[i] - 1 (its n = lens[i] cached rows), and, if
 * prefill > 0, one more sequence adds rows 0..prefill-1 as a run; qa scales q (large: peaked softmax) */
static void check_step(const tn_backend *be, int H, int KV, int hd, const int *lens, int nseq, int prefill, double qa) {
    shape s = {H, KV, hd, H * hd + 5};
    int ctx = 1, T = nseq + prefill, ldk = KV * hd;
    for (int i = 0; i < nseq; i++) ctx = lens[i] > ctx ? lens[i] : ctx;
    ctx = prefill > ctx ? prefill : ctx;
    float **K = tn_xmalloc((size_t)(nseq + 1) * sizeof *K), **V = tn_xmalloc((size_t)(nseq + 1) * sizeof *V);
    for (int i = 0; i <= nseq; i++) K[i] = randoms((size_t)ctx * ldk, 1.0), V[i] = randoms((size_t)ctx * ldk, 1.0);
    float *q = randoms((size_t)T * s.ldq, qa), *out = tn_xmalloc((size_t)T * H * hd * sizeof *out);
    const float **kr = tn_xmalloc((size_t)T * sizeof *kr), **vr = tn_xmalloc((size_t)T * sizeof *vr);
    int32_t *pos = tn_xmalloc((size_t)T * sizeof *pos);
    /* the prefill run between decode rows: runs are told apart by their cache and position */
    for (int t = 0, i = 0, p = 0; t < T; t++) {
        int dec = i < nseq && !(t >= nseq / 2 && p < prefill);
        kr[t] = dec ? K[i] : K[nseq], vr[t] = dec ? V[i] : V[nseq], pos[t] = dec ? lens[i] - 1 : p;
        dec ? i++ : p++;
    }
    for (size_t i = 0; i < (size_t)T * H * hd; i++) out[i] = NAN;
    be->attention_cached(out, q, s.ldq, kr, vr, pos, T, H, KV, hd);
    double worst = 0;
    char what[96];
    for (int t = 0; t < T; t++) {
        snprintf(what, sizeof what, "row %d of %d (%s, position %d)", t, T, kr[t] == K[nseq] ? "prefill" : "decode",
                 pos[t]);
        check_row(&s, q + (size_t)t * s.ldq, kr[t], vr[t], pos[t] + 1, out + (size_t)t * H * hd, what, &worst);
    }
    for (int i = 0; i <= nseq; i++) free(K[i]), free(V[i]);
    free(K), free(V), free(q), free(out), free(kr), free(vr), free(pos);
}

int main(void) {
    const tn_backend *be = tn_backend_cpu();
    tn_rng_seed(&rng, 2626);
    /* lengths around the chunk of 64 cached rows: one row, a chunk and a tail, several chunks */
    const int lens[] = {1, 2, 63, 64, 65, 127, 128, 129, 300};
    const int nl = (int)(sizeof lens / sizeof *lens);
    for (int i = 0; i < nl; i++) {
        check_step(be, 16, 8, 128, &lens[i], 1, 0, 1.0); /* Qwen3-0.6B's heads, batch 1 */
        check_step(be, 6, 1, 12, &lens[i], 1, 0, 1.0);   /* head size not a vector width, six heads a group */
    }
    check_step(be, 4, 2, 16, lens, nl, 0, 1.0);  /* batched decode, different lengths */
    check_step(be, 4, 2, 16, lens, nl, 0, 30.0); /* peaked softmax: chunks' maxima far apart */
    check_step(be, 4, 4, 8, lens, nl, 7, 1.0);   /* decode rows with a prefill run among them */
    return tl_done("test_unit_decode_attention");
}
