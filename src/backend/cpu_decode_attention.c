/* cpu_decode_attention -- the attention of one decode row (one new token of a sequence) against its cached keys and
 * values, split over positions: a chunk of consecutive cached rows gives each query head a partial result (its
 * running max, the sum of exp and the unnormalised P.V), and the partials of a row's chunks are merged as flash
 * decoding does. tn_cpu_attention_cached (cpu_attention.c) hands the chunks to the threads.
 *
 * Why by position: the cache holds a layer's keys as [pos][KV hd] (4 KiB a row for Qwen3-0.6B). Splitting a row's
 * heads between the threads had each read half of every 4 KiB page, stride-skipping the other half: the hardware
 * prefetcher restarts at every page, and perf put the time on those loads (about half the streaming rate). A chunk
 * is whole consecutive rows: one sequential stream of K, then one of V. The chunk length is fixed (not derived
 * from the thread count), so the result does not depend on how many threads run it.
 *
 * Each row also prefetches the row two ahead (the hardware prefetcher stops at every 4 KiB page, a row here): at a
 * 1100-token context this took the attention from ~16% to ~14% of the decode step's perf samples (two runs each).
 *
 * Generic vector types of cpu_vec.h, as in cpu_decode.c (built with FMA contraction, CMakeLists.txt). */
#include "backend/cpu_kernels.h"
#include "backend/cpu_vec.h"
#include "backend/vmath.h"

#include <string.h>

static inline float dot(const float *a, const float *b, int n) {
    vf acc = {0};
    int d = 0;
    for (; d + VL <= n; d += VL) acc += vload(a + d) * vload(b + d);
    float s = vsum(acc);
    for (; d < n; d++) s += a[d] * b[d];
    return s;
}

static inline void axpy(float *o, float w, const float *v, int n) { /* o += w v */
    vf wv = (vf){0} + w;
    int d = 0;
    for (; d + VL <= n; d += VL) vstore(o + d, vload(o + d) + wv * vload(v + d));
    for (; d < n; d++) o[d] += w * v[d];
}

void tn_cpu_attend_chunk(float *part, float *S, const float *q, const float *K, const float *V, int j0, int j1, int ldk,
                         int H, int KV, int hd) {
    const int rep = H / KV, n = j1 - j0, lp = hd + 2;
    const float scale = 1.0f / sqrtf((float)hd);
    /* S[h, j - j0] = scale q_h . K[j, g(h)] */
    for (int j = 0; j < n; j++) {
        const float *kr = K + (size_t)(j0 + j) * ldk;
        for (int c = 0; c < ldk; c += 16) __builtin_prefetch(kr + 2 * (size_t)ldk + c, 0, 3); /* two rows ahead */
        for (int h = 0; h < H; h++) S[(size_t)h * n + j] = scale * dot(q + (size_t)h * hd, kr + (size_t)(h / rep) * hd, hd);
    }
    for (int h = 0; h < H; h++) {
        float *s = S + (size_t)h * n, *p = part + (size_t)h * lp, m = tn_max(s, n);
        p[hd] = m, p[hd + 1] = tn_exp_shift_sum(s, n, m);
        memset(p, 0, (size_t)hd * sizeof *p);
    }
    for (int j = 0; j < n; j++) { /* o_h += exp(S[h, j] - m_h) V[j, g(h)] */
        const float *vr = V + (size_t)(j0 + j) * ldk;
        for (int c = 0; c < ldk; c += 16) __builtin_prefetch(vr + 2 * (size_t)ldk + c, 0, 3);
        for (int h = 0; h < H; h++) axpy(part + (size_t)h * lp, S[(size_t)h * n + j], vr + (size_t)(h / rep) * hd, hd);
    }
}

void tn_cpu_attend_merge(float *out, const float *parts, int n_chunks, int h, int H, int hd) {
    const int lp = hd + 2;
    float M = parts[(size_t)h * lp + hd], L = 0.0f;
    for (int c = 1; c < n_chunks; c++) {
        float m = parts[((size_t)c * H + h) * lp + hd];
        M = m > M ? m : M;
    }
    float *o = out + (size_t)h * hd;
    memset(o, 0, (size_t)hd * sizeof *o);
    for (int c = 0; c < n_chunks; c++) {
        const float *p = parts + ((size_t)c * H + h) * lp;
        float w = tn_expf(p[hd] - M);
        L += w * p[hd + 1];
        axpy(o, w, p, hd);
    }
    float inv = 1.0f / L;
    for (int d = 0; d < hd; d++) o[d] *= inv;
}
