/* decode_stream -- the weight stream of one batch-1 decode token of a Qwen3 config (every layer's fused qkv, o,
 * fused gate/up and down products, then the tied lm_head: 2.62 GB fp32 for Qwen3-0.6B, on transparent huge pages as
 * the model's slab), read by variants of the product kernel alternated inside one process, so that a shared
 * machine's load falls on all of them alike. Built and run by bench/decode_stream.sh (docs/performance.md, "The
 * ceiling of a decode step").
 *
 *   kernel:   tn_cpu_linear_rows as decode calls it (one omp parallel region a product, one contiguous band of rows
 *             a thread, one row at a time);
 *   adj2/4:   2 or 4 adjacent rows a pass (4 KiB apart at K = 1024: several hardware-prefetch streams a core);
 *   far2:     2 rows half a band apart (two distant streams a core);
 *   persist:  one parallel region for the whole token, a barrier after each product (no fork a product);
 *   readonly: a vector sum over the same bands, no product: what reading the bytes costs.
 *
 * Output: per variant the best of the rounds, ms a token, GB/s of wall time and per CPU second of the threads. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backend/cpu_kernels.h"
#include "backend/cpu_vec.h"

enum { KERNEL, ADJ2, ADJ4, FAR2, PERSIST, READONLY, N_VARIANTS };
static const char *const NAMES[N_VARIANTS] = {"kernel", "adj2", "adj4", "far2", "persist", "readonly"};

typedef struct {
    int N, K;
    const float *W;
} mat;

static mat g_mats[4 * 64 + 1];
static int g_n;
static float *g_x, *g_y;
static volatile float g_sink;

static double wall_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* y[n] = x . W[n] for rows n[0..R), read together, two accumulator chains a row (K a multiple of 2 VL) */
static void rows_together(const int *n, int R, const float *W, int K) {
    vf a[8] = {0};
    for (int j = 0; j < K; j += 2 * VL) {
        vf x0 = vload(g_x + j), x1 = vload(g_x + j + VL);
        for (int r = 0; r < R; r++) {
            const float *w = W + (size_t)n[r] * K + j;
            a[2 * r] += vload(w) * x0, a[2 * r + 1] += vload(w + VL) * x1;
        }
    }
    for (int r = 0; r < R; r++) g_y[n[r]] = vsum(a[2 * r] + a[2 * r + 1]);
}

/* rows [n0, n1) of product i, R at a time: adjacent (far = 0) or R sub-bands apart (far = 1) */
static void band_rows(const mat *m, int n0, int n1, int R, int far) {
    int len = n1 - n0, sub = (len + R - 1) / R, n[4];
    for (int i = 0; i < (far ? sub : len); i += far ? 1 : R) {
        int c = 0;
        for (int r = 0; r < R; r++) {
            int row = far ? n0 + r * sub + i : n0 + i + r;
            if (row < n1) n[c++] = row;
        }
        if (c == R) rows_together(n, R, m->W, m->K);
        else
            for (int r = 0; r < c; r++) rows_together(n + r, 1, m->W, m->K);
    }
}

static void band_sum(const mat *m, int n0, int n1) {
    const float *w = m->W + (size_t)n0 * m->K;
    size_t n = (size_t)(n1 - n0) * m->K;
    vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (size_t j = 0; j < n; j += 4 * VL)
        a0 += vload(w + j), a1 += vload(w + j + VL), a2 += vload(w + j + 2 * VL), a3 += vload(w + j + 3 * VL);
    g_y[n0] = vsum((a0 + a1) + (a2 + a3));
}

/* thread t of nt: its band of product i under variant v */
static void band(int v, int i, int t, int nt) {
    const mat *m = &g_mats[i];
    int n0 = (int)((int64_t)m->N * t / nt), n1 = (int)((int64_t)m->N * (t + 1) / nt);
    switch (v) {
    case ADJ2: band_rows(m, n0, n1, 2, 0); break;
    case ADJ4: band_rows(m, n0, n1, 4, 0); break;
    case FAR2: band_rows(m, n0, n1, 2, 1); break;
    case READONLY: band_sum(m, n0, n1); break;
    default: band_rows(m, n0, n1, 1, 0); break; /* PERSIST */
    }
}

static void token(int v) {
    if (v == KERNEL) {
        for (int i = 0; i < g_n; i++) tn_cpu_linear_rows(g_y, 0, g_x, 0, g_mats[i].W, g_mats[i].N, g_mats[i].K, 1, 1, 0);
    } else if (v == PERSIST) {
#pragma omp parallel
        for (int i = 0; i < g_n; i++) {
            band(v, i, omp_get_thread_num(), omp_get_num_threads());
#pragma omp barrier
        }
    } else {
        for (int i = 0; i < g_n; i++) {
#pragma omp parallel
            band(v, i, omp_get_thread_num(), omp_get_num_threads());
        }
    }
    g_sink = g_y[0];
}

int main(int argc, char **argv) {
    /* Qwen3-0.6B: D 1024, 28 layers, 16 q + 8 kv heads of 128, I 3072, vocab 151936 (tied lm_head) */
    int D = 1024, L = 28, HD = 2048, KVD = 1024, I = 3072, V = 151936, rounds = argc > 1 ? atoi(argv[1]) : 10;
    int shapes[4][2] = {{HD + 2 * KVD, D}, {D, HD}, {2 * I, D}, {D, I}};
    size_t total = 0;
    for (int l = 0; l < L; l++)
        for (int s = 0; s < 4; s++) g_mats[g_n++] = (mat){shapes[s][0], shapes[s][1], NULL};
    g_mats[g_n++] = (mat){V, D, NULL};
    for (int i = 0; i < g_n; i++) total += (size_t)g_mats[i].N * g_mats[i].K;
    size_t bytes = (total * sizeof(float) + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
    float *slab = aligned_alloc((size_t)2 << 20, bytes), *x = malloc(sizeof(float) * 4096), *y = malloc(sizeof(float) * V);
    if (!slab || !x || !y || rounds < 1) {
        fprintf(stderr, "decode_stream: out of memory for %zu bytes of weights (or rounds < 1)\n", bytes);
        return 1;
    }
    (void)madvise(slab, bytes, MADV_HUGEPAGE); /* as the CPU backend's weight slab (a hint) */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < total; i++) slab[i] = 0.001f * (float)(i % 97);
    for (int i = 0; i < 4096; i++) x[i] = 1.0f;
    g_x = x, g_y = y;
    for (size_t i = 0, off = 0; i < (size_t)g_n; off += (size_t)g_mats[i].N * g_mats[i].K, i++) g_mats[i].W = slab + off;
    double best[N_VARIANTS], best_cpu[N_VARIANTS];
    for (int v = 0; v < N_VARIANTS; v++) best[v] = best_cpu[v] = 1e30;
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < N_VARIANTS; v++) {
            double t0 = wall_now(), c0 = cpu_now();
            token(v);
            double dt = wall_now() - t0, dc = (cpu_now() - c0) / omp_get_max_threads();
            best[v] = dt < best[v] ? dt : best[v];
            best_cpu[v] = dc < best_cpu[v] ? dc : best_cpu[v];
        }
    printf("decode_stream: %.3f GB a token, %d threads, best of %d rounds\n", total * 4e-9, omp_get_max_threads(), rounds);
    for (int v = 0; v < N_VARIANTS; v++)
        printf("  %-9s %8.2f ms a token %7.2f GB/s wall %7.2f GB/s per CPU second\n", NAMES[v], 1e3 * best[v],
               total * 4e-9 / best[v], total * 4e-9 / best_cpu[v]);
    free(slab), free(x), free(y);
    return 0;
}
