/* cpu_backend -- the fp32 CPU implementation of backend.h: memory, OpenBLAS matmul, and the
 * elementwise/reduction kernels (OpenMP-parallel, loops written so GCC vectorises them). Attention
 * lives in cpu_attention.c. */
#include "backend/backend.h"
#include "backend/cpu_kernels.h"
#include "backend/vmath.h"
#include "core/core.h"

#include <cblas.h>
#undef I /* <complex.h> via cblas.h */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

/* Column chunk for reductions over rows: each thread owns whole columns, so no partial buffers. */
#define COL_CHUNK 64
/* Row-parallel kernels take `if (T > 1)`: a decode step at batch 1 is one row, whose work (~1 us) is less than
 * waking the team, and it passes through ~8 such kernels a layer. */

static int cpu_num_threads(void) { return omp_get_max_threads(); }
/* OpenBLAS picks its GEMM kernel per CPU (or OPENBLAS_CORETYPE); summation order, and so the last bits of
 * every result, depend on it, so runs name it. */
static const char *cpu_kernel_name(void) {
    static char name[64];
    if (!name[0]) snprintf(name, sizeof name, "OpenBLAS %s", openblas_get_corename());
    return name;
}
/* Large buffers come straight from mmap: zero pages are only mapped when first written, and release() can
 * hand whole pages back (sharded slabs keep only what a rank owns resident). The few such blocks are
 * remembered here so that cpu_free knows how to return them. */
#define BIG_FLOATS ((size_t)1 << 16)
#define MAX_BIG 256
#define HUGE_BYTES ((size_t)2 << 20)
static struct {
    void *p;
    size_t bytes;
} big[MAX_BIG];
static pthread_mutex_t big_mu = PTHREAD_MUTEX_INITIALIZER;

/* bytes (a multiple of 4 KB) of fresh zero pages starting on a 2 MB boundary: ZeRO's balanced layout cuts its
 * units at 2 MB multiples of the slabs (shard_layout.h), so a chunk released there is whole huge pages, which
 * come back 2 MB at a time instead of as 4 KB faults. The slack of the over-sized mapping goes back at once. */
static void *map_aligned(size_t bytes) {
    size_t extra = bytes >= HUGE_BYTES ? HUGE_BYTES : 0;
    char *raw = mmap(NULL, bytes + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uintptr_t a = (uintptr_t)raw;
    if (extra) a = (a + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1);
    char *p = (char *)a;
    size_t head = (size_t)(p - raw), tail = extra - head;
    if (head) munmap(raw, head); /* cannot fail on a range this process mapped; at worst the slack stays mapped */
    if (tail) munmap(p + bytes, tail);
    return p;
}

static float *cpu_alloc(size_t n) {
    if (n < BIG_FLOATS) return tn_xalloc_floats(n);
    if (n > SIZE_MAX / sizeof(float) - 2 * HUGE_BYTES) tn_die("slab of %zu floats is too large", n);
    size_t bytes = (n * sizeof(float) + 4095) & ~(size_t)4095;
    void *p = map_aligned(bytes);
    if (!p) tn_die("out of memory allocating %zu bytes", bytes);
    pthread_mutex_lock(&big_mu);
    int k = 0;
    while (k < MAX_BIG && big[k].p) k++;
    if (k < MAX_BIG) big[k].p = p, big[k].bytes = bytes;
    pthread_mutex_unlock(&big_mu);
    if (k == MAX_BIG) { /* more big blocks than expected: plain memory from here on */
        munmap(p, bytes);
        return tn_xalloc_floats(n);
    }
    return p;
}
static int32_t *cpu_alloc_i32(size_t n) { return tn_xcalloc(n ? n : 1, sizeof(int32_t)); }
static void cpu_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&big_mu);
    for (int k = 0; k < MAX_BIG; k++)
        if (big[k].p == p) {
            munmap(p, big[k].bytes);
            big[k].p = NULL;
            pthread_mutex_unlock(&big_mu);
            return;
        }
    pthread_mutex_unlock(&big_mu);
    free(p);
}

/* Whole pages inside [p, p+n) are dropped (they read back as zero), the partial pages at the edges zeroed.
 * A released range is written again soon (ZeRO frees gradients and gathered parameters every step): 4 KB
 * pages would fault back one by one (~0.4 ms per MB, measured: 90 ms per step for the small preset's
 * gradients), so a large one is marked for transparent huge pages, which fault back 2 MB at a time (~0.1 ms
 * per MB). Huge pages form only inside the marked range, so no page outside it becomes resident. */
static void cpu_release(float *p, size_t n) {
    if (!n) return;
    const uintptr_t page = 4096, a = (uintptr_t)p, b = (uintptr_t)(p + n);
    uintptr_t lo = (a + page - 1) & ~(page - 1), hi = b & ~(page - 1);
    if (hi <= lo || madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0) {
        memset(p, 0, n * sizeof *p);
        return;
    }
#ifdef MADV_HUGEPAGE
    if (hi - lo >= HUGE_BYTES) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* a hint: EINVAL without THP */
#endif
    memset(p, 0, lo - a);
    memset((void *)hi, 0, b - hi);
}

static size_t cpu_own_mapping(const float *p) {
    size_t bytes = 0;
    pthread_mutex_lock(&big_mu);
    for (int k = 0; k < MAX_BIG && p; k++)
        if (big[k].p == p) bytes = big[k].bytes;
    pthread_mutex_unlock(&big_mu);
    return bytes;
}

static size_t cpu_resident(const float *p, size_t n) {
    if (!n) return 0;
    const uintptr_t page = 4096, a = (uintptr_t)p, b = (uintptr_t)(p + n);
    uintptr_t lo = a & ~(page - 1), hi = (b + page - 1) & ~(page - 1);
    size_t pages = (hi - lo) / page, bytes = 0;
    unsigned char *vec = tn_xmalloc(pages);
    if (mincore((void *)lo, hi - lo, vec) != 0) {
        free(vec);
        return n * sizeof *p;
    }
    for (size_t i = 0; i < pages; i++) {
        if (!(vec[i] & 1)) continue;
        uintptr_t s = lo + i * page, e = s + page;
        bytes += (e < b ? e : b) - (s > a ? s : a);
    }
    free(vec);
    return bytes;
}
static void cpu_upload(float *dst, const float *host, size_t n) { memcpy(dst, host, n * sizeof *dst); }
static void cpu_download(float *host, const float *src, size_t n) { memcpy(host, src, n * sizeof *src); }
static void cpu_upload_i32(int32_t *dst, const int32_t *h, size_t n) { memcpy(dst, h, n * sizeof *dst); }
static void cpu_zero(float *p, size_t n) { memset(p, 0, n * sizeof *p); }
static void cpu_copy(float *dst, const float *src, size_t n) { memcpy(dst, src, n * sizeof *dst); }
static void cpu_copy_rows(float *dst, int ldd, const float *src, int lds, int rows, int cols) {
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++) memcpy(dst + (size_t)r * ldd, src + (size_t)r * lds, (size_t)cols * sizeof *dst);
}

void tn_cpu_matmul(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                   int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                lda, B, ldb, beta, C, ldc);
}

static void cpu_add_bias(float *y, const float *bias, int T, int n, int ld) {
#pragma omp parallel for schedule(static) if (T > 1)
    for (int t = 0; t < T; t++) {
        float *row = y + (size_t)t * ld;
        for (int j = 0; j < n; j++) row[j] += bias[j];
    }
}

static void cpu_bias_backward(float *dbias, const float *dy, int T, int n, int ld) {
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < n; c0 += COL_CHUNK) {
        int c1 = c0 + COL_CHUNK < n ? c0 + COL_CHUNK : n;
        float acc[COL_CHUNK] = {0};
        for (int t = 0; t < T; t++) {
            const float *row = dy + (size_t)t * ld;
            for (int j = c0; j < c1; j++) acc[j - c0] += row[j];
        }
        for (int j = c0; j < c1; j++) dbias[j] += acc[j - c0];
    }
}

static void cpu_embedding_forward(float *out, const float *table, const int32_t *ids, int T, int D) {
#pragma omp parallel for schedule(static) if (T > 1)
    for (int t = 0; t < T; t++) memcpy(out + (size_t)t * D, table + (size_t)ids[t] * D, (size_t)D * sizeof *out);
}

static void cpu_embedding_backward(float *dtable, const float *dout, const int32_t *ids, int T, int D) {
    /* columns split across threads: repeated ids never race */
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < D; c0 += COL_CHUNK) {
        int c1 = c0 + COL_CHUNK < D ? c0 + COL_CHUNK : D;
        for (int t = 0; t < T; t++) {
            float *dst = dtable + (size_t)ids[t] * D;
            const float *src = dout + (size_t)t * D;
            for (int j = c0; j < c1; j++) dst[j] += src[j];
        }
    }
}

static void cpu_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int T, int D, float eps) {
#pragma omp parallel for schedule(static) if (T > 1)
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * D;
        float *yr = y + (size_t)t * D;
        float r = 1.0f / sqrtf(tn_dot(xr, xr, D) / (float)D + eps);
        rstd[t] = r;
        for (int j = 0; j < D; j++) yr[j] = w[j] * (xr[j] * r);
    }
}

static void cpu_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                                 const float *rstd, int T, int D) {
    /* xhat = x r; dxhat = dy w; dx += r (dxhat - xhat mean(dxhat xhat)); dw += sum_t dy xhat */
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * D, *dyr = dy + (size_t)t * D;
        float *dxr = dx + (size_t)t * D;
        float r = rstd[t], dot = 0.0f, acc[TN_LANES] = {0};
        int j = 0;
        for (; j + TN_LANES <= D; j += TN_LANES)
            for (int k = 0; k < TN_LANES; k++) acc[k] += dyr[j + k] * w[j + k] * xr[j + k];
        for (; j < D; j++) dot += dyr[j] * w[j] * xr[j];
        for (int k = 0; k < TN_LANES; k++) dot += acc[k];
        float c = dot * r * r / (float)D;
        for (j = 0; j < D; j++) dxr[j] += r * (dyr[j] * w[j] - xr[j] * c);
    }
    if (!dw) return;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < D; c0 += COL_CHUNK) {
        int c1 = c0 + COL_CHUNK < D ? c0 + COL_CHUNK : D;
        float acc[COL_CHUNK] = {0};
        for (int t = 0; t < T; t++) {
            const float *xr = x + (size_t)t * D, *dyr = dy + (size_t)t * D;
            float r = rstd[t];
            for (int j = c0; j < c1; j++) acc[j - c0] += dyr[j] * (xr[j] * r);
        }
        for (int j = c0; j < c1; j++) dw[j] += acc[j - c0];
    }
}

static void cpu_head_rmsnorm_forward(float *y, int ldy, float *rstd, const float *x, int ldx, const float *w, int T,
                                     int nheads, int hd, float eps) {
#pragma omp parallel for schedule(static) if (T > 1)
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nheads; h++) {
            const float *xr = x + (size_t)t * ldx + (size_t)h * hd;
            float *yr = y + (size_t)t * ldy + (size_t)h * hd;
            float r = 1.0f / sqrtf(tn_dot(xr, xr, hd) / (float)hd + eps);
            rstd[(size_t)t * nheads + h] = r;
            for (int j = 0; j < hd; j++) yr[j] = w[j] * (xr[j] * r);
        }
}

/* Columns of dw per thread: dw[j] sums over every (row, head), so threads own columns, not rows. */
#define HEAD_COL_CHUNK 16

static void cpu_head_rmsnorm_backward(float *dx, int lddx, float *dw, const float *dy, int lddy, const float *x,
                                      int ldx, const float *w, const float *rstd, int T, int nheads, int hd) {
    /* dw first: dx may overwrite dy. dw[j] += sum dy[j] xhat[j] */
    if (dw) {
#pragma omp parallel for schedule(static)
        for (int c0 = 0; c0 < hd; c0 += HEAD_COL_CHUNK) {
            int c1 = c0 + HEAD_COL_CHUNK < hd ? c0 + HEAD_COL_CHUNK : hd;
            float acc[HEAD_COL_CHUNK] = {0};
            for (int t = 0; t < T; t++)
                for (int h = 0; h < nheads; h++) {
                    const float *xr = x + (size_t)t * ldx + (size_t)h * hd, *dyr = dy + (size_t)t * lddy + (size_t)h * hd;
                    float r = rstd[(size_t)t * nheads + h];
                    for (int j = c0; j < c1; j++) acc[j - c0] += dyr[j] * (xr[j] * r);
                }
            for (int j = c0; j < c1; j++) dw[j] += acc[j - c0];
        }
    }
    /* dx = r (dy w - xhat mean(dy w xhat)), the whole head's dot taken before any element is overwritten */
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nheads; h++) {
            const float *xr = x + (size_t)t * ldx + (size_t)h * hd, *dyr = dy + (size_t)t * lddy + (size_t)h * hd;
            float *dxr = dx + (size_t)t * lddx + (size_t)h * hd;
            float r = rstd[(size_t)t * nheads + h], dot = 0.0f;
            for (int j = 0; j < hd; j++) dot += dyr[j] * w[j] * xr[j];
            float c = dot * r * r / (float)hd;
            for (int j = 0; j < hd; j++) dxr[j] = r * (dyr[j] * w[j] - xr[j] * c);
        }
}

static void cpu_rope(float *x, int T, int S, int nheads, int hd, int ld, const float *cos, const float *sin,
                     int inverse) {
    int half = hd / 2;
    float sgn = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        const float *c = cos + (size_t)(t % S) * half, *s = sin + (size_t)(t % S) * half;
        for (int h = 0; h < nheads; h++) {
            float *a = x + (size_t)t * ld + (size_t)h * hd, *b = a + half;
            /* (a, b) -> (a cos - b sin, b cos + a sin); inverse uses -sin */
            for (int i = 0; i < half; i++) {
                float ai = a[i], bi = b[i], si = sgn * s[i];
                a[i] = ai * c[i] - bi * si;
                b[i] = bi * c[i] + ai * si;
            }
        }
    }
}

static void cpu_swiglu_forward(float *act, const float *gu, int T, int I) {
#pragma omp parallel for schedule(static) if (T > 1)
    for (int t = 0; t < T; t++) {
        const float *g = gu + (size_t)t * 2 * I, *u = g + I;
        float *a = act + (size_t)t * I;
        for (int j = 0; j < I; j++) a[j] = g[j] * tn_sigmoidf(g[j]) * u[j];
    }
}

static void cpu_swiglu_backward(float *dgu, const float *dact, const float *gu, int T, int I) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        const float *g = gu + (size_t)t * 2 * I, *u = g + I, *da = dact + (size_t)t * I;
        float *dg = dgu + (size_t)t * 2 * I, *du = dg + I;
        for (int j = 0; j < I; j++) {
            float sg = tn_sigmoidf(g[j]);
            float silu = g[j] * sg;
            du[j] = da[j] * silu;
            dg[j] = da[j] * u[j] * sg * (1.0f + g[j] * (1.0f - sg));
        }
    }
}

static double cpu_cross_entropy(float *logits, const int32_t *targets, int T, int V, float grad_scale,
                                int64_t *n_valid) {
    double loss = 0.0;
    int64_t count = 0;
#pragma omp parallel for schedule(static) reduction(+ : loss, count)
    for (int t = 0; t < T; t++) {
        float *row = logits + (size_t)t * V;
        int y = targets[t];
        if (y < 0) {
            memset(row, 0, (size_t)V * sizeof *row);
            continue;
        }
        float mx = tn_max(row, V);
        float sum = tn_exp_shift_sum(row, V, mx);
        /* loss = lse - logit[y] = log(sum) - (logit[y] - mx) = log(sum) - log(e[y]) */
        loss += (double)logf(sum) - (double)logf(row[y]);
        float inv = grad_scale / sum;
        for (int j = 0; j < V; j++) row[j] *= inv;
        row[y] -= grad_scale;
        count++;
    }
    *n_valid += count;
    return loss;
}

/* cross_entropy_add's running total: nothing to wait for on the CPU, but the model's one code path for both backends
 * goes through it (backend.h) */
static double g_ce_loss;
static int64_t g_ce_count;

static void cpu_cross_entropy_add(float *logits, const int32_t *targets, int T, int V, float grad_scale) {
    g_ce_loss += cpu_cross_entropy(logits, targets, T, V, grad_scale, &g_ce_count);
}

static double cpu_cross_entropy_total(int64_t *n_valid) {
    double loss = g_ce_loss;
    *n_valid += g_ce_count;
    g_ce_loss = 0.0, g_ce_count = 0;
    return loss;
}

static void cpu_dropout(float *y, const float *x, size_t n, float p, uint64_t seed) {
    float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
    /* x * mask, as torch computes it: a dropped NaN or inf stays visible (NaN), never becomes a silent 0 */
    for (size_t i = 0; i < n; i++) y[i] = x[i] * (tn_hash_uniform(seed, i) >= p ? keep_scale : 0.0f);
}

static double cpu_sumsq(const float *x, size_t n) {
    double total = 0.0;
    /* fp32 lanes per block, fp64 across blocks: vectorised and accurate for large n */
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (size_t b = 0; b < n; b += 4096) {
        size_t e = b + 4096 < n ? b + 4096 : n;
        float acc = 0.0f;
        for (size_t i = b; i < e; i++) acc += x[i] * x[i];
        total += acc;
    }
    return total;
}

static void cpu_scale(float *x, size_t n, float s) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

static void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, double lr, double beta1, double beta2,
                      double eps, double weight_decay, double bias_corr1, double bias_corr2) {
    /* torch 1.13 _single_tensor_adamw, op by op in fp32: every python-float scalar (1 - lr*wd, 1 - beta,
     * -lr/bc1) is formed in double and rounded once, as torch does; addcdiv is (value * m) / denom. */
    const float decay = (float)(1.0 - lr * weight_decay);
    const float neg_step = (float)(-(lr / bias_corr1));
    const float bc2_sqrt = (float)sqrt(bias_corr2);
    const float b1 = (float)beta1, b2 = (float)beta2, epsf = (float)eps;
    const float one_m_b1 = (float)(1.0 - beta1), one_m_b2 = (float)(1.0 - beta2);
#pragma omp parallel for schedule(static) if (n > 32768)
    for (size_t i = 0; i < n; i++) {
        float pi = p[i] * decay;
        float mi = m[i] * b1;
        mi = mi + one_m_b1 * g[i];
        float vi = v[i] * b2;
        vi = vi + one_m_b2 * g[i] * g[i];
        float denom = sqrtf(vi) / bc2_sqrt + epsf;
        p[i] = pi + neg_step * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

static int cpu_all_finite(const float *x, size_t n) {
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (size_t i = 0; i < n; i++) bad |= !isfinite(x[i]);
    return !bad;
}

/* The weights on transparent huge pages where the kernel allows it (THP "madvise" mode): a decode step streams
 * every weight once, and with 4 KiB pages that is a TLB miss (a two-level page walk under a hypervisor) every
 * 4 KiB, ~600k a token for a 0.6B model. Advice only: without THP the slab stays on small pages. */
static float *cpu_alloc_params(size_t n, size_t trainable) {
    (void)trainable; /* fp32 throughout: frozen weights are kept as they are */
    float *p = cpu_alloc(n);
    if (n >= BIG_FLOATS) (void)madvise(p, (n * sizeof(float) + 4095) & ~(size_t)4095, MADV_HUGEPAGE);
    return p;
}

static void cpu_add(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n > 32768)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

static const char *cpu_describe(void) {
    static char line[128];
    if (!line[0]) snprintf(line, sizeof line, "cpu (%s, %d threads), fp32", cpu_kernel_name(), cpu_num_threads());
    return line;
}

static size_t cpu_peak_bytes(void) { return 0; /* the process's peak RSS says it (getrusage) */ }
static void cpu_sync(void) {}

static const tn_backend cpu_backend = {
    .name = "cpu",
    .num_threads = cpu_num_threads,
    .kernel_name = cpu_kernel_name,
    .alloc = cpu_alloc,
    .alloc_i32 = cpu_alloc_i32,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .upload_i32 = cpu_upload_i32,
    .zero = cpu_zero,
    .release = cpu_release,
    .resident = cpu_resident,
    .own_mapping = cpu_own_mapping,
    .copy = cpu_copy,
    .copy_rows = cpu_copy_rows,
    .matmul = tn_cpu_matmul,
    .add_bias = cpu_add_bias,
    .bias_backward = cpu_bias_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .head_rmsnorm_forward = cpu_head_rmsnorm_forward,
    .head_rmsnorm_backward = cpu_head_rmsnorm_backward,
    .rope = cpu_rope,
    .attention_forward = tn_cpu_attention_forward,
    .attention_backward = tn_cpu_attention_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .cross_entropy = cpu_cross_entropy,
    .cross_entropy_add = cpu_cross_entropy_add,
    .cross_entropy_total = cpu_cross_entropy_total,
    .dropout = cpu_dropout,
    .sumsq = cpu_sumsq,
    .scale = cpu_scale,
    .adamw = cpu_adamw,
    .all_finite = cpu_all_finite,
    .alloc_params = cpu_alloc_params,
    .add = cpu_add,
    .logits_floats = (size_t)1 << 24, /* 64 MB of logits per chunk: cache-sized work for the CPU */
    .describe = cpu_describe,
    .peak_bytes = cpu_peak_bytes,
    .sync = cpu_sync,
    .linear_rows = tn_cpu_linear_rows,
    .rope_at = tn_cpu_rope_at,
    .attention_cached = tn_cpu_attention_cached,
    .image = &tn_cpu_image_table,
};

const tn_backend *tn_backend_cpu(void) { return &cpu_backend; }
