/* cuda_internal -- what the CUDA backend's files share (not part of any interface): the process-wide state,
 * error checks, launch helpers, the bf16 region table and per-purpose scratch buffers. See cuda_backend.h. */
#ifndef TN_CUDA_INTERNAL_CUH
#define TN_CUDA_INTERNAL_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda_backend.h"

/* core.h is C11 (its prototypes use `static` array sizes); the few functions the CUDA files need: */
extern "C" {
int tn_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *tn_errmsg(void);
[[noreturn]] void tn_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double tn_now(void);
}

typedef __nv_bfloat16 bf16;

/* A failed CUDA call inside a kernel wrapper is a broken invariant (or a dead GPU): one line naming the call,
 * then exit. Launches are checked with cu_launched() right after the <<<>>>. */
#define CU_CHECK(call)                                                                                            \
    do {                                                                                                          \
        cudaError_t e_ = (call);                                                                                  \
        if (e_ != cudaSuccess) tn_cuda_fail(#call, e_, __FILE__, __LINE__);                                       \
    } while (0)
[[noreturn]] void tn_cuda_fail(const char *what, cudaError_t e, const char *file, int line);
/* After a launch: the launch error, and with TANDEM_CUDA_SYNC=1 the kernel's own (synchronising: debugging). */
void cu_launched(const char *kernel);

/* Scratch buffers by purpose, grown on demand and kept; reused in stream order (a later kernel on the one
 * stream may overwrite what an earlier one read). */
enum {
    SCR_GEMM_A,   /* bf16 copy of a matrix product's first operand */
    SCR_GEMM_B,   /* ... second operand */
    SCR_PARTIAL,  /* partial sums of the two-pass reductions */
    SCR_REDUCE,   /* final values of a reduction, read back by the host */
    SCR_WEIGHT,   /* fp32 copy of a short frozen weight vector (norm weights, biases) */
    SCR_ATT,      /* attention backward: rowsum(dO * O) per row */
    SCR_SORT,     /* embedding backward: sorted ids/positions and the sort's temporary storage */
    SCR_ATT_Q,    /* attention forward (bf16 mode): bf16 q, k, v copies */
    SCR_LOSS,     /* cross_entropy_add's running total: loss sum and rows counted (2 doubles) */
    SCR_COUNT
};
void *cu_scratch(int slot, size_t bytes);
/* Pinned host memory for small read-backs (16 KB). */
void *cu_host_scratch(void);

struct cu_state {
    int open, device, bf16, sms, sync_each;
    cudaStream_t stream;
    cudaDeviceProp prop;
    char describe[320];
};
extern cu_state g_cu;

static inline unsigned cu_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 1u << 30 ? 1u << 30 : b);
}

/* bf16 storage of frozen weights (cuda_backend.cu): the bf16 value of the fp32 address p, or NULL when p is
 * ordinary fp32 memory. */
const bf16 *cu_frozen(const float *p);
/* A weight vector of n floats as fp32 device memory: p itself, or (frozen) a widened copy in SCR_WEIGHT, valid
 * for the next kernel launched. */
const float *cu_weight_f32(const float *p, size_t n);

/* bf16 copies of the trainable weights (cuda_backend.cu), bf16 mode: a matrix product's operand that lies in the
 * parameter slab's fp32 part is rounded to bf16 once and kept until something writes the slab (the optimizer
 * step, an upload, a collective), instead of once per product. cu_weight_bf16: the packed copy (ld = cols) of
 * rows x cols at ld, or NULL when X is not a weight. cu_params_written: [p, p + bytes) was or will be written. */
const bf16 *cu_weight_bf16(const float *X, int rows, int cols, int ld);
void cu_params_written(const void *p, size_t bytes);

/* A kernel's dynamic shared memory raised to `bytes` (over the 48 KB default): cudaFuncSetAttribute once per kernel
 * and size, not on every launch. */
void cu_allow_smem(const void *kernel, size_t bytes);

/* Row-major 2-D conversions (rows x cols, leading dimensions given) */
void cu_f32_to_bf16(bf16 *dst, int ldd, const float *src, int lds, int rows, int cols);
void cu_bf16_to_f32(float *dst, int ldd, const bf16 *src, int lds, int rows, int cols);

/* The matrix product of backend.h (cuda_gemm.cu) and attention (cuda_attention.cu) */
void cu_matmul(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc);
void cu_gemm_shutdown(void);
void cu_attention_forward(float *out, float *lse, const float *qkv, int B, int S, int H, int KV, int hd, int ld);
void cu_attention_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                           int B, int S, int H, int KV, int hd, int ld);

/* Kernels of cuda_kernels.cu, with backend.h's signatures */
void cu_copy_rows(float *dst, int ldd, const float *src, int lds, int rows, int cols);
void cu_add_bias(float *y, const float *bias, int T, int n, int ld);
void cu_bias_backward(float *dbias, const float *dy, int T, int n, int ld);
void cu_embedding_forward(float *out, const float *table, const int32_t *ids, int T, int D);
void cu_embedding_backward(float *dtable, const float *dout, const int32_t *ids, int T, int D);
void cu_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int T, int D, float eps);
void cu_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, const float *rstd,
                         int T, int D);
void cu_head_rmsnorm_forward(float *y, int ldy, float *rstd, const float *x, int ldx, const float *w, int T,
                             int nheads, int hd, float eps);
void cu_head_rmsnorm_backward(float *dx, int lddx, float *dw, const float *dy, int lddy, const float *x, int ldx,
                              const float *w, const float *rstd, int T, int nheads, int hd);
void cu_rope(float *x, int T, int S, int nheads, int hd, int ld, const float *cos, const float *sin, int inverse);
void cu_swiglu_forward(float *act, const float *gu, int T, int I);
void cu_swiglu_backward(float *dgu, const float *dact, const float *gu, int T, int I);
double cu_cross_entropy(float *logits, const int32_t *targets, int T, int V, float grad_scale, int64_t *n_valid);
void cu_cross_entropy_add(float *logits, const int32_t *targets, int T, int V, float grad_scale);
double cu_cross_entropy_total(int64_t *n_valid);
void cu_dropout(float *y, const float *x, size_t n, float p, uint64_t seed);
double cu_sumsq(const float *x, size_t n);
void cu_scale(float *x, size_t n, float s);
void cu_add(float *y, const float *x, size_t n);
void cu_adamw(float *p, const float *g, float *m, float *v, size_t n, double lr, double beta1, double beta2, double eps,
              double weight_decay, double bias_corr1, double bias_corr2);
int cu_all_finite(const float *x, size_t n);
void cu_fill(float *p, size_t n, float value);

/* Warp and block reductions (blockDim.x a multiple of 32, at most 1024) */
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Sum over the block, returned to every thread; sh holds 32 floats. The order of additions is fixed. */
__device__ __forceinline__ float block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read by an earlier call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ double block_sum_d(double v, double *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return warp_sum_d(v);
}

#endif
