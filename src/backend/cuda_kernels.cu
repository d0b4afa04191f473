/* cuda_kernels.cu -- the CUDA backend's elementwise, normalisation and reduction kernels (everything of backend.h
 * but memory, matrix products and attention). Each mirrors cpu_backend.c's arithmetic: the same formula in the
 * same precision (fp32, with fp64 where the CPU sums in fp64), so the two backends agree to rounding, and AdamW and
 * the dropout masks agree bit for bit. Sums over rows (bias and norm-weight gradients) are two-pass column
 * reductions, and the embedding gradient adds rows in token order after a stable sort: no floating-point atomics,
 * the same bits on every run. */
#include <cub/device/device_radix_sort.cuh>
#include <math.h>
#include <stdio.h>

#include "backend/cuda_internal.cuh"

#define THREADS 256

/* ------------------------------------------------------------------ column sums (deterministic) */

/* Partial sums of f(r, j) over row partitions: block (32, 8) covers 32 columns of one partition of rows. */
#define COL_TILE 32
#define COL_ROWS 8
#define MAX_PARTS 256

template <typename F>
__global__ void k_col_partial(float *partial, int n, int rows, int rows_per_part, F f) {
    __shared__ float sh[COL_ROWS][COL_TILE + 1];
    int j = blockIdx.x * COL_TILE + threadIdx.x, part = blockIdx.y;
    int r0 = part * rows_per_part, r1 = min(rows, r0 + rows_per_part);
    float acc = 0.0f;
    if (j < n)
        for (int r = r0 + threadIdx.y; r < r1; r += COL_ROWS) acc += f(r, j);
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < n) {
        float s = 0.0f;
        for (int k = 0; k < COL_ROWS; k++) s += sh[k][threadIdx.x];
        partial[(size_t)part * n + j] = s;
    }
}

__global__ void k_col_finish(float *out, const float *partial, int n, int parts) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    float s = 0.0f;
    for (int p = 0; p < parts; p++) s += partial[(size_t)p * n + j];
    out[j] += s;
}

/* out[j] += sum over r < rows of f(r, j), j < n */
template <typename F>
static void col_sum(float *out, int n, int rows, F f, const char *what) {
    if (n <= 0 || rows <= 0) return;
    int parts = (rows + 63) / 64;
    parts = parts > MAX_PARTS ? MAX_PARTS : parts;
    int per = (rows + parts - 1) / parts;
    parts = (rows + per - 1) / per;
    float *partial = (float *)cu_scratch(SCR_PARTIAL, (size_t)parts * n * sizeof(float));
    dim3 grid((n + COL_TILE - 1) / COL_TILE, parts), block(COL_TILE, COL_ROWS);
    k_col_partial<<<grid, block, 0, g_cu.stream>>>(partial, n, rows, per, f);
    cu_launched(what);
    k_col_finish<<<cu_blocks(n, THREADS), THREADS, 0, g_cu.stream>>>(out, partial, n, parts);
    cu_launched(what);
}

/* ------------------------------------------------------------------ copies, biases */

void cu_copy_rows(float *dst, int ldd, const float *src, int lds, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    CU_CHECK(cudaMemcpy2DAsync(dst, (size_t)ldd * sizeof(float), src, (size_t)lds * sizeof(float),
                               (size_t)cols * sizeof(float), (size_t)rows, cudaMemcpyDeviceToDevice, g_cu.stream));
}

__global__ void k_add_bias(float *y, const float *bias, int T, int n, int ld) {
    size_t total = (size_t)T * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / (size_t)n;
        int j = (int)(i % (size_t)n);
        y[t * ld + j] += bias[j];
    }
}

void cu_add_bias(float *y, const float *bias, int T, int n, int ld) {
    if (T <= 0 || n <= 0) return;
    const float *b = cu_weight_f32(bias, (size_t)n);
    unsigned g = cu_blocks((size_t)T * n, THREADS);
    k_add_bias<<<g < 65536 ? g : 65536, THREADS, 0, g_cu.stream>>>(y, b, T, n, ld);
    cu_launched("add_bias");
}

struct bias_term {
    const float *dy;
    int ld;
    __device__ float operator()(int r, int j) const { return dy[(size_t)r * ld + j]; }
};

void cu_bias_backward(float *dbias, const float *dy, int T, int n, int ld) {
    col_sum(dbias, n, T, bias_term{dy, ld}, "bias_backward");
}

/* ------------------------------------------------------------------ embedding */

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __bfloat162float(v); }

template <typename W>
__global__ void k_embedding_forward(float *out, const W *table, const int32_t *ids, int D) {
    int t = blockIdx.x;
    const W *src = table + (size_t)ids[t] * D;
    float *dst = out + (size_t)t * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) dst[j] = to_f32(src[j]);
}

void cu_embedding_forward(float *out, const float *table, const int32_t *ids, int T, int D) {
    if (T <= 0 || D <= 0) return;
    const bf16 *f = cu_frozen(table);
    if (f) k_embedding_forward<bf16><<<T, THREADS, 0, g_cu.stream>>>(out, f, ids, D);
    else k_embedding_forward<float><<<T, THREADS, 0, g_cu.stream>>>(out, table, ids, D);
    cu_launched("embedding_forward");
}

__global__ void k_iota(int32_t *v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = i;
}

/* Block per sorted position; the first position of each run of equal ids adds the run's rows into that table
 * row in token order (the stable sort keeps it), exactly as the CPU loop does. */
__global__ void k_embedding_backward(float *dtable, const float *dout, const int32_t *keys, const int32_t *pos, int T,
                                     int D) {
    int i = blockIdx.x;
    if (i > 0 && keys[i] == keys[i - 1]) return;
    int end = i + 1;
    while (end < T && keys[end] == keys[i]) end++;
    float *dst = dtable + (size_t)keys[i] * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float acc = dst[j];
        for (int k = i; k < end; k++) acc += dout[(size_t)pos[k] * D + j];
        dst[j] = acc;
    }
}

void cu_embedding_backward(float *dtable, const float *dout, const int32_t *ids, int T, int D) {
    if (T <= 0 || D <= 0) return;
    size_t temp = 0;
    CU_CHECK(cub::DeviceRadixSort::SortPairs(NULL, temp, (const int32_t *)NULL, (int32_t *)NULL,
                                             (const int32_t *)NULL, (int32_t *)NULL, T, 0, 31, g_cu.stream));
    size_t arr = ((size_t)T * sizeof(int32_t) + 255) & ~(size_t)255;
    char *base = (char *)cu_scratch(SCR_SORT, 3 * arr + temp);
    int32_t *pos_in = (int32_t *)base, *keys_out = (int32_t *)(base + arr), *pos_out = (int32_t *)(base + 2 * arr);
    k_iota<<<cu_blocks(T, THREADS), THREADS, 0, g_cu.stream>>>(pos_in, T);
    cu_launched("embedding_backward (iota)");
    /* ids are >= 0 (the model checks them): 31 key bits */
    CU_CHECK(cub::DeviceRadixSort::SortPairs(base + 3 * arr, temp, ids, keys_out, pos_in, pos_out, T, 0, 31,
                                             g_cu.stream));
    k_embedding_backward<<<T, THREADS, 0, g_cu.stream>>>(dtable, dout, keys_out, pos_out, T, D);
    cu_launched("embedding_backward");
}

/* ------------------------------------------------------------------ RMSNorm */

/* Block per row. As the CPU: sum of fp32 squares in fp64, r = 1 / sqrtf(float(sum) / D + eps). */
__global__ void k_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int D, float eps) {
    __shared__ double sh[32];
    int t = blockIdx.x;
    const float *xr = x + (size_t)t * D;
    double acc = 0.0;
    for (int j = threadIdx.x; j < D; j += blockDim.x) acc += (double)__fmul_rn(xr[j], xr[j]);
    float dot = (float)block_sum_d(acc, sh);
    float r = 1.0f / sqrtf(dot / (float)D + eps);
    if (threadIdx.x == 0) rstd[t] = r;
    float *yr = y + (size_t)t * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) yr[j] = w[j] * (xr[j] * r);
}

void cu_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int T, int D, float eps) {
    if (T <= 0) return;
    const float *wf = cu_weight_f32(w, (size_t)D);
    k_rmsnorm_forward<<<T, THREADS, 0, g_cu.stream>>>(y, rstd, x, wf, D, eps);
    cu_launched("rmsnorm_forward");
}

/* dx += r (dy w - x c), c = dot(dy w x) r^2 / D */
__global__ void k_rmsnorm_backward(float *dx, const float *dy, const float *x, const float *w, const float *rstd,
                                   int D) {
    __shared__ float sh[32];
    int t = blockIdx.x;
    const float *xr = x + (size_t)t * D, *dyr = dy + (size_t)t * D;
    float acc = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) acc += dyr[j] * w[j] * xr[j];
    float dot = block_sum(acc, sh), r = rstd[t];
    float c = dot * r * r / (float)D;
    float *dxr = dx + (size_t)t * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) dxr[j] += r * (dyr[j] * w[j] - xr[j] * c);
}

struct norm_w_term { /* dy * (x * rstd) of row r */
    const float *dy, *x, *rstd;
    int D;
    __device__ float operator()(int r, int j) const {
        return dy[(size_t)r * D + j] * (x[(size_t)r * D + j] * rstd[r]);
    }
};

void cu_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, const float *rstd,
                         int T, int D) {
    if (T <= 0) return;
    const float *wf = cu_weight_f32(w, (size_t)D);
    k_rmsnorm_backward<<<T, THREADS, 0, g_cu.stream>>>(dx, dy, x, wf, rstd, D);
    cu_launched("rmsnorm_backward");
    if (dw) col_sum(dw, D, T, norm_w_term{dy, x, rstd, D}, "rmsnorm_backward (dw)");
}

/* Per-head RMSNorm: a warp per (row, head). */
__global__ void k_head_rmsnorm_forward(float *y, int ldy, float *rstd, const float *x, int ldx, const float *w, int T,
                                       int nheads, int hd, float eps) {
    int item = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (item >= T * nheads) return;
    int t = item / nheads, h = item % nheads;
    const float *xr = x + (size_t)t * ldx + (size_t)h * hd;
    double acc = 0.0;
    for (int j = lane; j < hd; j += 32) acc += (double)__fmul_rn(xr[j], xr[j]);
    float dot = (float)warp_sum_d(acc);
    float r = 1.0f / sqrtf(dot / (float)hd + eps);
    if (lane == 0) rstd[item] = r;
    float *yr = y + (size_t)t * ldy + (size_t)h * hd;
    for (int j = lane; j < hd; j += 32) yr[j] = w[j] * (xr[j] * r);
}

void cu_head_rmsnorm_forward(float *y, int ldy, float *rstd, const float *x, int ldx, const float *w, int T, int nheads,
                             int hd, float eps) {
    if (T <= 0 || nheads <= 0) return;
    const float *wf = cu_weight_f32(w, (size_t)hd);
    size_t items = (size_t)T * nheads;
    k_head_rmsnorm_forward<<<cu_blocks(items, THREADS / 32), THREADS, 0, g_cu.stream>>>(y, ldy, rstd, x, ldx, wf, T,
                                                                                         nheads, hd, eps);
    cu_launched("head_rmsnorm_forward");
}

/* dx may be dy: each lane reads its elements of dy for the dot, the shuffle completes every lane's reads, then
 * each lane rewrites only its own elements. */
__global__ void k_head_rmsnorm_backward(float *dx, int lddx, const float *dy, int lddy, const float *x, int ldx,
                                        const float *w, const float *rstd, int T, int nheads, int hd) {
    int item = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (item >= T * nheads) return;
    int t = item / nheads, h = item % nheads;
    const float *xr = x + (size_t)t * ldx + (size_t)h * hd, *dyr = dy + (size_t)t * lddy + (size_t)h * hd;
    float acc = 0.0f;
    for (int j = lane; j < hd; j += 32) acc += dyr[j] * w[j] * xr[j];
    float dot = warp_sum(acc), r = rstd[item];
    float c = dot * r * r / (float)hd;
    float *dxr = dx + (size_t)t * lddx + (size_t)h * hd;
    for (int j = lane; j < hd; j += 32) dxr[j] = r * (dyr[j] * w[j] - xr[j] * c);
}

struct head_w_term { /* row r = (t, h) */
    const float *dy, *x, *rstd;
    int lddy, ldx, nheads, hd;
    __device__ float operator()(int r, int j) const {
        int t = r / nheads, h = r % nheads;
        return dy[(size_t)t * lddy + (size_t)h * hd + j] * (x[(size_t)t * ldx + (size_t)h * hd + j] * rstd[r]);
    }
};

void cu_head_rmsnorm_backward(float *dx, int lddx, float *dw, const float *dy, int lddy, const float *x, int ldx,
                              const float *w, const float *rstd, int T, int nheads, int hd) {
    if (T <= 0 || nheads <= 0) return;
    /* dw first: dx may overwrite dy */
    if (dw) col_sum(dw, hd, T * nheads, head_w_term{dy, x, rstd, lddy, ldx, nheads, hd}, "head_rmsnorm_backward (dw)");
    const float *wf = cu_weight_f32(w, (size_t)hd);
    size_t items = (size_t)T * nheads;
    k_head_rmsnorm_backward<<<cu_blocks(items, THREADS / 32), THREADS, 0, g_cu.stream>>>(dx, lddx, dy, lddy, x, ldx,
                                                                                          wf, rstd, T, nheads, hd);
    cu_launched("head_rmsnorm_backward");
}

/* ------------------------------------------------------------------ RoPE, SwiGLU */

__global__ void k_rope(float *x, int T, int S, int nheads, int hd, int ld, const float *cos, const float *sin,
                       float sgn) {
    int half = hd / 2;
    size_t total = (size_t)T * nheads * half;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int k = (int)(i % (size_t)half);
        size_t th = i / (size_t)half;
        int h = (int)(th % (size_t)nheads), t = (int)(th / (size_t)nheads);
        float *a = x + (size_t)t * ld + (size_t)h * hd, *b = a + half;
        size_t cs = (size_t)(t % S) * half + k;
        float c = cos[cs], s = sgn * sin[cs], ai = a[k], bi = b[k];
        a[k] = __fsub_rn(__fmul_rn(ai, c), __fmul_rn(bi, s));
        b[k] = __fadd_rn(__fmul_rn(bi, c), __fmul_rn(ai, s));
    }
}

void cu_rope(float *x, int T, int S, int nheads, int hd, int ld, const float *cos, const float *sin, int inverse) {
    if (T <= 0 || nheads <= 0 || hd < 2) return;
    unsigned g = cu_blocks((size_t)T * nheads * (hd / 2), THREADS);
    k_rope<<<g < 65536 ? g : 65536, THREADS, 0, g_cu.stream>>>(x, T, S, nheads, hd, ld, cos, sin,
                                                                 inverse ? -1.0f : 1.0f);
    cu_launched("rope");
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void k_swiglu_forward(float *act, const float *gu, int T, int I) {
    size_t total = (size_t)T * I;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / (size_t)I, j = i % (size_t)I;
        float g = gu[t * 2 * I + j], u = gu[t * 2 * I + I + j];
        act[i] = g * sigmoidf_(g) * u;
    }
}

__global__ void k_swiglu_backward(float *dgu, const float *dact, const float *gu, int T, int I) {
    size_t total = (size_t)T * I;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / (size_t)I, j = i % (size_t)I;
        float g = gu[t * 2 * I + j], u = gu[t * 2 * I + I + j], da = dact[i];
        float sg = sigmoidf_(g), silu = g * sg;
        dgu[t * 2 * I + I + j] = da * silu;
        dgu[t * 2 * I + j] = da * u * sg * (1.0f + g * (1.0f - sg));
    }
}

void cu_swiglu_forward(float *act, const float *gu, int T, int I) {
    if (T <= 0 || I <= 0) return;
    unsigned g = cu_blocks((size_t)T * I, THREADS);
    k_swiglu_forward<<<g < 65536 ? g : 65536, THREADS, 0, g_cu.stream>>>(act, gu, T, I);
    cu_launched("swiglu_forward");
}

void cu_swiglu_backward(float *dgu, const float *dact, const float *gu, int T, int I) {
    if (T <= 0 || I <= 0) return;
    unsigned g = cu_blocks((size_t)T * I, THREADS);
    k_swiglu_backward<<<g < 65536 ? g : 65536, THREADS, 0, g_cu.stream>>>(dgu, dact, gu, T, I);
    cu_launched("swiglu_backward");
}

/* ------------------------------------------------------------------ cross-entropy */

/* The 1024-thread kernels declare it (__launch_bounds__): the compiler then keeps them within 64 registers a thread,
 * else a debug (-G) or register-hungry build fails to launch them ("too many resources requested"). Checked by
 * tests/cli/test_cuda_launch_bounds.sh on a -G build. */
#define CE_THREADS 1024
#define SUM_THREADS 1024

/* Block per row: max and sum of exp in fp32, the row loss in fp64 (as the CPU), then dlogits in place. */
__global__ void __launch_bounds__(CE_THREADS) k_cross_entropy(float *logits, const int32_t *targets, int V,
                                                              float grad_scale, double *row_loss) {
    __shared__ float sh[32];
    int t = blockIdx.x, y = targets[t];
    float *row = logits + (size_t)t * V;
    if (y < 0) {
        for (int j = threadIdx.x; j < V; j += blockDim.x) row[j] = 0.0f;
        if (threadIdx.x == 0) row_loss[t] = 0.0;
        return;
    }
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, row[j]);
    m = warp_max(m);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    __syncthreads();
    m = (threadIdx.x & 31) < (blockDim.x >> 5) ? sh[threadIdx.x & 31] : -INFINITY;
    m = warp_max(m);
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(row[j] - m);
    float sum = block_sum(s, sh);
    float zy = row[y] - m; /* read before any thread rewrites the row */
    __syncthreads();
    if (threadIdx.x == 0) row_loss[t] = (double)logf(sum) - (double)zy;
    float inv = grad_scale / sum;
    for (int j = threadIdx.x; j < V; j += blockDim.x) row[j] = expf(row[j] - m) * inv;
    __syncthreads();
    if (threadIdx.x == 0) row[y] -= grad_scale;
}

/* One block: the row losses summed in order of rows (fixed tree), and the rows counted; stored in out[0..1], or added
 * to them (accumulate: cross_entropy_add's running total, the same additions as the host summing the returns). */
__global__ void __launch_bounds__(SUM_THREADS) k_sum_losses(const double *row_loss, const int32_t *targets, int T,
                                                             double *out, int accumulate) {
    __shared__ double sh[32];
    double acc = 0.0, cnt = 0.0;
    for (int t = threadIdx.x; t < T; t += blockDim.x) {
        acc += row_loss[t];
        cnt += targets[t] >= 0;
    }
    double total = block_sum_d(acc, sh), count = block_sum_d(cnt, sh);
    if (threadIdx.x == 0) {
        if (accumulate) out[0] += total, out[1] += count;
        else out[0] = total, out[1] = count;
    }
}

/* dlogits in place, and the rows' loss sum and count stored in (or added to) out[0..1] on the device */
static void ce_rows(float *logits, const int32_t *targets, int T, int V, float grad_scale, double *out, int add) {
    double *row_loss = (double *)cu_scratch(SCR_REDUCE, (size_t)T * sizeof(double) + 2 * sizeof(double));
    k_cross_entropy<<<T, CE_THREADS, 0, g_cu.stream>>>(logits, targets, V, grad_scale, row_loss);
    cu_launched("cross_entropy");
    k_sum_losses<<<1, SUM_THREADS, 0, g_cu.stream>>>(row_loss, targets, T, out ? out : row_loss + T, add);
    cu_launched("cross_entropy (sum)");
}

/* out[0..1] read back (the stream drained first) */
static void read_pair(const double *dev, double *loss, int64_t *n_valid) {
    double *host = (double *)cu_host_scratch();
    CU_CHECK(cudaMemcpyAsync(host, dev, 2 * sizeof(double), cudaMemcpyDeviceToHost, g_cu.stream));
    CU_CHECK(cudaStreamSynchronize(g_cu.stream));
    *loss = host[0];
    *n_valid += (int64_t)host[1];
}

double cu_cross_entropy(float *logits, const int32_t *targets, int T, int V, float grad_scale, int64_t *n_valid) {
    if (T <= 0) return 0.0;
    ce_rows(logits, targets, T, V, grad_scale, NULL, 0);
    double loss;
    read_pair((const double *)cu_scratch(SCR_REDUCE, 0) + T, &loss, n_valid);
    return loss;
}

/* The running total, zeroed when first allocated and after every read (queued on the stream: in order) */
static double *loss_total(void) {
    static int zeroed;
    double *acc = (double *)cu_scratch(SCR_LOSS, 2 * sizeof(double));
    if (!zeroed) CU_CHECK(cudaMemsetAsync(acc, 0, 2 * sizeof(double), g_cu.stream));
    zeroed = 1;
    return acc;
}

void cu_cross_entropy_add(float *logits, const int32_t *targets, int T, int V, float grad_scale) {
    if (T > 0) ce_rows(logits, targets, T, V, grad_scale, loss_total(), 1);
}

double cu_cross_entropy_total(int64_t *n_valid) {
    double *acc = loss_total(), loss;
    read_pair(acc, &loss, n_valid);
    CU_CHECK(cudaMemsetAsync(acc, 0, 2 * sizeof(double), g_cu.stream));
    return loss;
}

/* ------------------------------------------------------------------ dropout (core.c's tn_hash_uniform) */

__device__ __forceinline__ float hash_uniform(uint64_t seed, uint64_t counter) {
    uint64_t z = seed ^ (counter * 0xD1B54A32D192ED03ull);
    z += 0x9E3779B97F4A7C15ull; /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z = z ^ (z >> 31);
    return (float)(z >> 40) * 0x1.0p-24f;
}

__global__ void k_dropout(float *y, const float *x, size_t n, float p, float keep_scale, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = x[i] * (hash_uniform(seed, i) >= p ? keep_scale : 0.0f); /* as the CPU: a dropped NaN stays NaN */
}

void cu_dropout(float *y, const float *x, size_t n, float p, uint64_t seed) {
    if (!n) return;
    float keep_scale = 1.0f / (1.0f - p);
    unsigned g = cu_blocks(n, THREADS);
    k_dropout<<<g < 65536 ? g : 65536, THREADS, 0, g_cu.stream>>>(y, x, n, p, keep_scale, seed);
    cu_launched("dropout");
}

/* ------------------------------------------------------------------ optimizer support */

#define RED_BLOCKS 1024

/* Squares in fp32 (as the CPU), summed in fp64: fixed per-thread strides, fixed trees. */
__global__ void k_sumsq_partial(const float *x, size_t n, double *partial) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc += (double)__fmul_rn(x[i], x[i]);
    double s = block_sum_d(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void __launch_bounds__(SUM_THREADS) k_sum_partials(const double *partial, int n, double *out) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
    double s = block_sum_d(acc, sh);
    if (threadIdx.x == 0) *out = s;
}

double cu_sumsq(const float *x, size_t n) {
    if (!n) return 0.0;
    double *partial = (double *)cu_scratch(SCR_REDUCE, (RED_BLOCKS + 1) * sizeof(double));
    k_sumsq_partial<<<RED_BLOCKS, THREADS, 0, g_cu.stream>>>(x, n, partial);
    cu_launched("sumsq");
    k_sum_partials<<<1, SUM_THREADS, 0, g_cu.stream>>>(partial, RED_BLOCKS, partial + RED_BLOCKS);
    cu_launched("sumsq (finish)");
    double *host = (double *)cu_host_scratch();
    CU_CHECK(cudaMemcpyAsync(host, partial + RED_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, g_cu.stream));
    CU_CHECK(cudaStreamSynchronize(g_cu.stream));
    return host[0];
}

__global__ void k_scale(float *x, size_t n, float s) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

void cu_scale(float *x, size_t n, float s) {
    if (!n) return;
    unsigned g = cu_blocks(n, THREADS);
    k_scale<<<g < 65536 ? g : 65536, THREADS, 0, g_cu.stream>>>(x, n, s);
    cu_launched("scale");
}

__global__ void k_add(float *y, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

void cu_add(float *y, const float *x, size_t n) {
    if (!n) return;
    unsigned g = cu_blocks(n, THREADS);
    k_add<<<g < 65536 ? g : 65536, THREADS, 0, g_cu.stream>>>(y, x, n);
    cu_launched("add");
}

__global__ void k_fill(float *p, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

void cu_fill(float *p, size_t n, float value) {
    if (!n) return;
    unsigned g = cu_blocks(n, THREADS);
    k_fill<<<g < 65536 ? g : 65536, THREADS, 0, g_cu.stream>>>(p, n, value);
    cu_launched("fill");
}

/* torch's _single_tensor_adamw op by op in fp32, as cpu_adamw: the _rn intrinsics keep nvcc from fusing a
 * multiply and an add into one FMA (one rounding instead of two), so every value matches the CPU's bit for bit. */
__global__ void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float decay, float b1, float one_m_b1,
                        float b2, float one_m_b2, float bc2_sqrt, float epsf, float neg_step) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float pi = __fmul_rn(p[i], decay);
        float mi = __fadd_rn(__fmul_rn(m[i], b1), __fmul_rn(one_m_b1, gi));
        float vi = __fadd_rn(__fmul_rn(v[i], b2), __fmul_rn(__fmul_rn(one_m_b2, gi), gi));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), epsf);
        p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(neg_step, mi), denom));
        m[i] = mi;
        v[i] = vi;
    }
}

void cu_adamw(float *p, const float *g, float *m, float *v, size_t n, double lr, double beta1, double beta2, double eps,
              double weight_decay, double bias_corr1, double bias_corr2) {
    if (!n) return;
    /* the scalars exactly as cpu_adamw forms them */
    const float decay = (float)(1.0 - lr * weight_decay);
    const float neg_step = (float)(-(lr / bias_corr1));
    const float bc2_sqrt = (float)sqrt(bias_corr2);
    unsigned gr = cu_blocks(n, THREADS);
    k_adamw<<<gr < 65536 ? gr : 65536, THREADS, 0, g_cu.stream>>>(p, g, m, v, n, decay, (float)beta1,
                                                                   (float)(1.0 - beta1), (float)beta2,
                                                                   (float)(1.0 - beta2), bc2_sqrt, (float)eps, neg_step);
    cu_launched("adamw");
}

__global__ void k_all_finite(const float *x, size_t n, int *bad) {
    int local = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        local |= !isfinite(x[i]);
    if (__syncthreads_or(local) && threadIdx.x == 0) atomicOr(bad, 1);
}

int cu_all_finite(const float *x, size_t n) {
    if (!n) return 1;
    int *bad = (int *)cu_scratch(SCR_REDUCE, 256);
    CU_CHECK(cudaMemsetAsync(bad, 0, sizeof *bad, g_cu.stream));
    unsigned g = cu_blocks(n, THREADS);
    k_all_finite<<<g < 4096 ? g : 4096, THREADS, 0, g_cu.stream>>>(x, n, bad);
    cu_launched("all_finite");
    int *host = (int *)cu_host_scratch();
    CU_CHECK(cudaMemcpyAsync(host, bad, sizeof *bad, cudaMemcpyDeviceToHost, g_cu.stream));
    CU_CHECK(cudaStreamSynchronize(g_cu.stream));
    return !host[0];
}
