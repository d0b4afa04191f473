/* cpu_attention -- causal grouped-query attention on the CPU, built from sgemm calls on row blocks.
 *
 * For each (sequence, kv group) and each query head of the group, rows are processed in blocks of
 * ATT_BLOCK: scores only against keys 0..block_end (causality skips ~half the work), softmax in place,
 * then P.V. Only the log-sum-exp per row is saved; backward recomputes P (flash-attention style), which
 * costs one extra QK^T but keeps no [S, S] matrix per head (the memory PyTorch's eager attention holds).
 * A (sequence, kv group) pair is one parallel task, so dK/dV of a group are accumulated by one thread. */
#include "backend/cpu_kernels.h"
#include "backend/vmath.h"
#include "core/core.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define ATT_BLOCK 64
#define DEC_CHUNK 64 /* cached rows a decode task reads (256 KiB of K and of V for Qwen3-0.6B) */
#define MAX_THREADS 256

static struct {
    float *p;
    size_t cap;
} g_scratch[MAX_THREADS][2];

float *tn_cpu_thread_scratch(int slot, size_t n) {
    int t = omp_get_thread_num();
    if (t >= MAX_THREADS) tn_die("more than %d OpenMP threads", MAX_THREADS);
    if (g_scratch[t][slot].cap < n) {
        tn_free_aligned(g_scratch[t][slot].p);
        g_scratch[t][slot].p = tn_xalloc_floats(n);
        g_scratch[t][slot].cap = n;
    }
    return g_scratch[t][slot].p;
}

/* Row i of P (valid columns 0..i): P = exp(P - m), zero beyond i. Returns the row sum. */
static float causal_exp_row(float *p, int i, int ncols, float m) {
    float sum = tn_exp_shift_sum(p, i + 1, m);
    for (int j = i + 1; j < ncols; j++) p[j] = 0.0f;
    return sum;
}

void tn_cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int S, int H, int KV, int hd,
                              int ld) {
    const int rep = H / KV, ldo = H * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1)
    for (int task = 0; task < B * KV; task++) {
        int b = task / KV, g = task % KV;
        float *P = tn_cpu_thread_scratch(0, (size_t)ATT_BLOCK * S);
        const float *base = qkv + (size_t)b * S * ld;
        const float *K = base + (size_t)H * hd + (size_t)g * hd, *V = K + (size_t)KV * hd;
        for (int h = g * rep; h < (g + 1) * rep; h++) {
            const float *Q = base + (size_t)h * hd;
            float *O = out + (size_t)b * S * ldo + (size_t)h * hd;
            float *L = lse + ((size_t)b * H + h) * S;
            for (int r0 = 0; r0 < S; r0 += ATT_BLOCK) {
                int r1 = r0 + ATT_BLOCK < S ? r0 + ATT_BLOCK : S, nr = r1 - r0, nc = r1;
                /* P[nr, nc] = scale * Q[r0:r1] K[0:nc]^T */
                tn_cpu_matmul(0, 1, nr, nc, hd, scale, Q + (size_t)r0 * ld, ld, K, ld, 0.0f, P, S);
                for (int ii = 0; ii < nr; ii++) {
                    int i = r0 + ii;
                    float *p = P + (size_t)ii * S, m = tn_max(p, i + 1);
                    float sum = causal_exp_row(p, i, nc, m), inv = 1.0f / sum;
                    for (int j = 0; j <= i; j++) p[j] *= inv;
                    L[i] = m + logf(sum);
                }
                /* O[r0:r1] = P V[0:nc] */
                tn_cpu_matmul(0, 0, nr, hd, nc, 1.0f, P, S, V, ld, 0.0f, O + (size_t)r0 * ldo, ldo);
            }
        }
    }
}

void tn_cpu_attention_backward(float *dqkv, const float *dout, const float *out, const float *lse,
                               const float *qkv, int B, int S, int H, int KV, int hd, int ld) {
    const int rep = H / KV, ldo = H * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1)
    for (int task = 0; task < B * KV; task++) {
        int b = task / KV, g = task % KV;
        float *P = tn_cpu_thread_scratch(0, (size_t)ATT_BLOCK * S);
        float *dP = tn_cpu_thread_scratch(1, (size_t)ATT_BLOCK * S);
        const float *base = qkv + (size_t)b * S * ld;
        const float *K = base + (size_t)H * hd + (size_t)g * hd, *V = K + (size_t)KV * hd;
        float *dbase = dqkv + (size_t)b * S * ld;
        float *dK = dbase + (size_t)H * hd + (size_t)g * hd, *dV = dK + (size_t)KV * hd;
        for (int s = 0; s < S; s++) {
            memset(dK + (size_t)s * ld, 0, (size_t)hd * sizeof(float));
            memset(dV + (size_t)s * ld, 0, (size_t)hd * sizeof(float));
        }
        for (int h = g * rep; h < (g + 1) * rep; h++) {
            const float *Q = base + (size_t)h * hd;
            const float *O = out + (size_t)b * S * ldo + (size_t)h * hd;
            const float *dO = dout + (size_t)b * S * ldo + (size_t)h * hd;
            const float *L = lse + ((size_t)b * H + h) * S;
            float *dQ = dbase + (size_t)h * hd;
            for (int r0 = 0; r0 < S; r0 += ATT_BLOCK) {
                int r1 = r0 + ATT_BLOCK < S ? r0 + ATT_BLOCK : S, nr = r1 - r0, nc = r1;
                const float *Qb = Q + (size_t)r0 * ld, *dOb = dO + (size_t)r0 * ldo;
                tn_cpu_matmul(0, 1, nr, nc, hd, scale, Qb, ld, K, ld, 0.0f, P, S);
                for (int ii = 0; ii < nr; ii++) causal_exp_row(P + (size_t)ii * S, r0 + ii, nc, L[r0 + ii]);
                /* dV[0:nc] += P^T dO_b ;  dP = dO_b V^T */
                tn_cpu_matmul(1, 0, nc, hd, nr, 1.0f, P, S, dOb, ldo, 1.0f, dV, ld);
                tn_cpu_matmul(0, 1, nr, nc, hd, 1.0f, dOb, ldo, V, ld, 0.0f, dP, S);
                /* dS = scale * P (dP - rowsum(dO * O)) */
                for (int ii = 0; ii < nr; ii++) {
                    const float *o = O + (size_t)(r0 + ii) * ldo, *dor = dOb + (size_t)ii * ldo;
                    float di = tn_dot(dor, o, hd);
                    float *p = P + (size_t)ii * S, *dp = dP + (size_t)ii * S;
                    for (int j = 0; j < nc; j++) dp[j] = scale * p[j] * (dp[j] - di);
                }
                /* dQ_b = dS K[0:nc] ;  dK[0:nc] += dS^T Q_b */
                tn_cpu_matmul(0, 0, nr, hd, nc, 1.0f, dP, S, K, ld, 0.0f, dQ + (size_t)r0 * ld, ld);
                tn_cpu_matmul(1, 0, nc, hd, nr, 1.0f, dP, S, Qb, ld, 1.0f, dK, ld);
            }
        }
    }
}

/* Rows [starts[i], starts[i+1]) form run i: consecutive rows of one sequence at consecutive positions (a prefill),
 * computed as blocks of sgemm like training; a decode step has one row per run. Returns the number of runs. */
static int cached_runs(const float *const *k, const int32_t *pos, int T, int *starts) {
    int n = 0;
    for (int t = 0; t < T; t++)
        if (t == 0 || k[t] != k[t - 1] || pos[t] != pos[t - 1] + 1) starts[n++] = t;
    starts[n] = T;
    return n;
}

/* Kv group g of a prefill run (rows t0..t1 of one sequence, q and out [T, H hd]) against its cached keys: blocks of
 * ATT_BLOCK rows, each a Q K^T and a P V sgemm, causal by position */
static void prefill_group(float *out, const float *q, int ldq, const float *k, const float *v, const int32_t *pos,
                          int t0, int t1, int g, int H, int KV, int hd) {
    const int rep = H / KV, ldo = H * hd, ldk = KV * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *K = k + (size_t)g * hd, *V = v + (size_t)g * hd;
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        for (int b0 = t0; b0 < t1; b0 += ATT_BLOCK) {
            int b1 = b0 + ATT_BLOCK < t1 ? b0 + ATT_BLOCK : t1, nr = b1 - b0, nc = pos[b1 - 1] + 1;
            float *P = tn_cpu_thread_scratch(0, (size_t)ATT_BLOCK * nc);
            /* P[nr, nc] = scale * Q[b0:b1] K[0:nc]^T ; row ii sees keys 0..pos[b0 + ii] */
            tn_cpu_matmul(0, 1, nr, nc, hd, scale, q + (size_t)b0 * ldq + (size_t)h * hd, ldq, K, ldk, 0.0f, P, nc);
            for (int ii = 0; ii < nr; ii++) {
                int i = pos[b0 + ii];
                float *p = P + (size_t)ii * nc, m = tn_max(p, i + 1);
                float inv = 1.0f / causal_exp_row(p, i, nc, m);
                for (int j = 0; j <= i; j++) p[j] *= inv;
            }
            tn_cpu_matmul(0, 0, nr, hd, nc, 1.0f, P, nc, V, ldk, 0.0f, out + (size_t)b0 * ldo + (size_t)h * hd, ldo);
        }
    }
}

void tn_cpu_attention_cached(float *out, const float *q, int ldq, const float *const *k, const float *const *v,
                             const int32_t *pos, int T, int H, int KV, int hd) {
    if (T <= 0) return;
    const int ldo = H * hd, ldk = KV * hd, lp = hd + 2;
    /* tasks: a prefill run is KV tasks (one kv group each); a decode row (a run of one) is its chunks of DEC_CHUNK
     * cached rows (cpu_decode_attention.c), whose partials are merged per head after */
    int *starts = tn_xmalloc(((size_t)T + 1) * sizeof *starts), n_runs = cached_runs(k, pos, T, starts);
    int n_tasks = 0, n_parts = 0;
    for (int r = 0; r < n_runs; r++)
        n_tasks += starts[r + 1] - starts[r] == 1 ? (pos[starts[r]] + DEC_CHUNK) / DEC_CHUNK : KV;
    int *task_run = tn_xmalloc((size_t)n_tasks * 2 * sizeof *task_run), *task_sub = task_run + n_tasks;
    int *part0 = tn_xmalloc(((size_t)n_runs + 1) * sizeof *part0); /* a decode run's first chunk partial */
    for (int r = 0, i = 0; r < n_runs; r++) {
        int dec = starts[r + 1] - starts[r] == 1, n = dec ? (pos[starts[r]] + DEC_CHUNK) / DEC_CHUNK : KV;
        part0[r] = n_parts, n_parts += dec ? n : 0;
        for (int c = 0; c < n; c++, i++) task_run[i] = r, task_sub[i] = c;
    }
    part0[n_runs] = n_parts;
    float *parts = tn_cpu_thread_scratch(1, (size_t)n_parts * H * lp); /* this thread's: slot 0 is the tasks' */
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1)
        for (int task = 0; task < n_tasks; task++) {
            int run = task_run[task], g = task_sub[task], t0 = starts[run], t1 = starts[run + 1];
            if (t1 - t0 == 1) { /* chunk g of the keys 0..pos[t0] */
                int j0 = g * DEC_CHUNK, j1 = j0 + DEC_CHUNK < pos[t0] + 1 ? j0 + DEC_CHUNK : pos[t0] + 1;
                float *part = parts + (size_t)(part0[run] + g) * H * lp;
                float *scores = tn_cpu_thread_scratch(0, (size_t)H * (j1 - j0));
                tn_cpu_attend_chunk(part, scores, q + (size_t)t0 * ldq, k[t0], v[t0], j0, j1, ldk, H, KV, hd);
                continue;
            }
            prefill_group(out, q, ldq, k[t0], v[t0], pos, t0, t1, g, H, KV, hd);
        }
#pragma omp for schedule(static)
        for (int i = 0; i < n_runs * H; i++) {
            int run = i / H;
            if (part0[run + 1] > part0[run])
                tn_cpu_attend_merge(out + (size_t)starts[run] * ldo, parts + (size_t)part0[run] * H * lp,
                                    part0[run + 1] - part0[run], i % H, H, hd);
        }
    }
    free(starts), free(task_run), free(part0);
}
