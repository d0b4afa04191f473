/* backend -- the compute interface the model and trainer are written against.
 *
 * Owns: where tensors live (device memory), and every kernel the forward/backward/optimizer needs.
 * The model and trainer only hold pointers returned by alloc() and call these functions, so a CUDA
 * backend (bf16 compute, fp32 master weights) can replace the CPU one without touching them.
 * Conventions: row-major; "T" = tokens (batch x seq); float tensors are fp32 as the model sees them (the CUDA
 * backend's bf16 mode rounds matrix-product operands to bf16 inside the kernels; cuda_backend.h).
 * Pointers from alloc() are the backend's memory: only backend functions (and the comm layer, for a backend
 * that attaches its memory to it: comm.h tn_comm_device) may touch what they point to.
 * Kernels named *_backward ACCUMULATE into parameter gradients (+=) so micro-batches add up; input
 * gradients are written (=) unless the argument is documented as accumulated. */
#ifndef TN_BACKEND_H
#define TN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct tn_backend tn_backend;

struct tn_backend {
    const char *name;
    int (*num_threads)(void);
    const char *(*kernel_name)(void); /* the math library's kernel in use, e.g. OpenBLAS's core type */

    /* memory */
    float *(*alloc)(size_t n);                       /* zeroed; fatal on failure */
    int32_t *(*alloc_i32)(size_t n);
    void (*free)(void *p);
    void (*upload)(float *dst, const float *host, size_t n);
    void (*download)(float *host, const float *src, size_t n);
    void (*upload_i32)(int32_t *dst, const int32_t *host, size_t n);
    void (*zero)(float *p, size_t n);
    /* [p, p+n) becomes zero and gives its memory back to the system (sharded state this rank does not own:
     * it costs nothing until written again); resident: the bytes of [p, p+n) the system really holds */
    void (*release)(float *p, size_t n);
    size_t (*resident)(const float *p, size_t n);
    /* The bytes of the page mapping that starts at p, made by alloc for p alone (comm.h's tn_comm_share_machine
     * may map shared pages over it); 0 when p is not one (a small or device buffer). NULL: none ever is. */
    size_t (*own_mapping)(const float *p);
    void (*copy)(float *dst, const float *src, size_t n);
    /* dst[r, 0:cols) = src[r, 0:cols) for r < rows (row strides ldd, lds) */
    void (*copy_rows)(float *dst, int ldd, const float *src, int lds, int rows, int cols);

    /* C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C  (row-major, leading dimensions given) */
    void (*matmul)(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);
    /* y[T, ld] columns [0, n): += bias[n] (row stride ld) */
    void (*add_bias)(float *y, const float *bias, int T, int n, int ld);
    /* dbias[n] += sum over rows of dy[T, ld] columns [0, n) */
    void (*bias_backward)(float *dbias, const float *dy, int T, int n, int ld);

    /* out[t, :] = table[ids[t], :] */
    void (*embedding_forward)(float *out, const float *table, const int32_t *ids, int T, int D);
    /* dtable[ids[t], :] += dout[t, :] */
    void (*embedding_backward)(float *dtable, const float *dout, const int32_t *ids, int T, int D);

    /* y = w * (x * rstd), rstd[t] = 1/sqrt(mean(x^2) + eps) (saved for backward) */
    void (*rmsnorm_forward)(float *y, float *rstd, const float *x, const float *w, int T, int D, float eps);
    /* dx += d/dx (accumulated: dx holds the residual stream gradient), dw += (if dw) */
    void (*rmsnorm_backward)(float *dx, float *dw, const float *dy, const float *x, const float *w,
                             const float *rstd, int T, int D);

    /* RMSNorm of each head, as Qwen3's q_norm / k_norm: head h of row t is the hd values at column h*hd of
     * x [T, ldx] (and of y [T, ldy]); y = w * (x * rstd), rstd[t * nheads + h] saved for backward. */
    void (*head_rmsnorm_forward)(float *y, int ldy, float *rstd, const float *x, int ldx, const float *w, int T,
                                 int nheads, int hd, float eps);
    /* dx [T, lddx] WRITTEN (not accumulated; dx may be dy itself), dw += (if dw) */
    void (*head_rmsnorm_backward)(float *dx, int lddx, float *dw, const float *dy, int lddy, const float *x,
                                  int ldx, const float *w, const float *rstd, int T, int nheads, int hd);

    /* rotary embedding in place on heads [T, ld], columns [0, nheads*hd), position of row t = t % S;
     * cos/sin tables [S, hd/2]; inverse=1 applies the transpose (backward). HF rotate_half layout. */
    void (*rope)(float *x, int T, int S, int nheads, int hd, int ld, const float *cos, const float *sin,
                 int inverse);

    /* causal grouped-query attention. qkv [B*S, ld]: q heads at column 0, k at q_cols, v at q_cols +
     * kv_cols. out [B*S, H*hd]; lse [B, H, S] saved for backward. */
    void (*attention_forward)(float *out, float *lse, const float *qkv, int B, int S, int H, int KV, int hd,
                              int ld);
    /* dqkv [B*S, ld] written (all q, k, v columns) */
    void (*attention_backward)(float *dqkv, const float *dout, const float *out, const float *lse,
                               const float *qkv, int B, int S, int H, int KV, int hd, int ld);

    /* gu [T, 2I] = [gate | up];  act[T, I] = silu(gate) * up */
    void (*swiglu_forward)(float *act, const float *gu, int T, int I);
    /* dgu [T, 2I] from dact [T, I] */
    void (*swiglu_backward)(float *dgu, const float *dact, const float *gu, int T, int I);

    /* Cross-entropy over rows of logits [T, V] against targets (-100 = ignored). Returns the sum of
     * the per-row losses (double); *n_valid += counted rows. Overwrites logits with dlogits scaled
     * by grad_scale (rows with ignored targets become 0). */
    double (*cross_entropy)(float *logits, const int32_t *targets, int T, int V, float grad_scale,
                            int64_t *n_valid);
    /* The same without reading the result back: the rows' loss sum and count are added to the backend's running
     * total (queued behind the kernels, no wait), which cross_entropy_total returns (count added to *n_valid) and
     * clears. The lm_head's chunks of one forward then wait for the device once, not once per chunk; the sum is
     * formed in the same order as adding cross_entropy's returns, so the loss is the same to the bit. One running
     * total per process: one forward's chunks at a time. */
    void (*cross_entropy_add)(float *logits, const int32_t *targets, int T, int V, float grad_scale);
    double (*cross_entropy_total)(int64_t *n_valid);

    /* dropout for LoRA inputs: y = x * keep / (1 - p), keep drawn from (seed, index) so backward can
     * regenerate the mask; backward applies the same mask to dy in place. */
    void (*dropout)(float *y, const float *x, size_t n, float p, uint64_t seed);

    /* optimizer support */
    double (*sumsq)(const float *x, size_t n);
    void (*scale)(float *x, size_t n, float s);
    /* torch AdamW: p *= 1 - lr*wd; m,v update; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) */
    /* hyper-parameters in double: torch forms 1 - beta, lr * wd, lr / bc1 from Python floats, then
     * rounds each to fp32 once */
    void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, double bias_corr1, double bias_corr2);
    int (*all_finite)(const float *x, size_t n);

    /* The parameter slab of n floats: [0, trainable) the weights the optimizer updates, fp32; [trainable, n) frozen
     * weights, written only by upload: a backend may hold these in its compute precision alone (the CUDA backend
     * in bf16 mode: 2 bytes each; every read, download included, sees that precision). Zeroed. */
    float *(*alloc_params)(size_t n, size_t trainable);
    void (*add)(float *y, const float *x, size_t n); /* y += x */
    size_t logits_floats;                            /* logits the lm_head may hold at once (one chunk of rows) */
    const char *(*describe)(void);                   /* one line for the start-up banner: device, precision */
    size_t (*peak_bytes)(void);                      /* high-water mark of the backend's memory; 0: not tracked */
    void (*sync)(void);                              /* returns once every queued kernel has finished (timing) */

    /* ---- generation with a KV cache (model/kv_forward.c). NULL in a backend without them: generation refuses
     * there in one line. */
    /* y[M, N] (row stride ldy) = alpha x[M, K] W[N, K]^T + beta y (beta 0: y is not read). Meant for few rows (one
     * per sequence being decoded): an implementation reads W once for all M rows. */
    void (*linear_rows)(float *y, int ldy, const float *x, int ldx, const float *W, int N, int K, int M, float alpha,
                        float beta);
    /* rotary embedding in place as rope, but row t of x [T, ld] is at position pos[t] (backend memory);
     * cos/sin [> max pos, hd/2] */
    void (*rope_at)(float *x, int T, int nheads, int hd, int ld, const int32_t *pos, const float *cos,
                    const float *sin);
    /* Causal grouped-query attention of T new rows against cached keys and values: row t's query heads are q +
     * t ldq (H heads of hd); its sequence's keys and values are rows of KV*hd floats from k[t] and v[t] (pointer
     * arrays in host memory, each pointing into backend memory), and it attends to rows 0..pos[t] of them, its
     * own included (the caller stored them first). out [T, H*hd]. */
    void (*attention_cached)(float *out, const float *q, int ldq, const float *const *k, const float *const *v,
                             const int32_t *pos, int T, int H, int KV, int hd);

    /* ---- image classification (backend/image_kernels.h). NULL in a backend without them: model/resnet.c refuses
     * there in one line. */
    const struct tn_image_kernels *image;
};

const tn_backend *tn_backend_cpu(void);

/* The backend a run uses. device: "auto" (CUDA when this build has it and a GPU is visible, else the CPU), "cpu" or
 * "cuda"; bf16: the CUDA backend computes matrix products in bf16 (else fp32); local_rank picks the GPU (local_rank
 * modulo the visible devices: one GPU per rank, CUDA_VISIBLE_DEVICES honoured). NULL + tn_err when "cuda" cannot
 * be had (no GPU, or a build without CUDA) or device is none of these. */
const tn_backend *tn_backend_select(const char *device, int bf16, int local_rank);
/* One line for the notes: which backend tn_backend_select(device, bf16, ...) picks on this machine and the precision
 * it computes in (what bf16 means there). */
void tn_backend_precision(const char *device, int bf16, char *out, size_t n);
/* 1 when this build has the CUDA backend (CMake found nvcc). */
int tn_backend_have_cuda(void);
/* GPUs this process could use (0 without the CUDA backend, a driver or a visible device); opens nothing. */
int tn_backend_gpu_count(void);
/* PCI bus id of the GPU that CUDA device `ordinal` is (tn_backend_select's local_rank mod count); -1 when none. */
int tn_backend_gpu_bus_id(int ordinal, char *buf, int len);
/* Bytes of memory of CUDA device `ordinal`; 0 when none. */
double tn_backend_gpu_memory(int ordinal);
/* Collective over c's ranks: attaches be's device memory to the comm layer (comm.h tn_comm_attach_device; a CPU
 * backend attaches none) so gradients and parameters can be exchanged from it. note: which path carries them. */
struct tn_comm;
int tn_backend_attach_comm(const tn_backend *be, struct tn_comm *c, char *note, size_t note_size);

#endif
