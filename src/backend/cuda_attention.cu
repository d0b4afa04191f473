/* cuda_attention.cu -- causal grouped-query attention, flash-attention style: scores are formed tile by tile in
 * registers and shared memory, softmax is computed online, and only the log-sum-exp per row is saved; backward
 * recomputes the probabilities. Nothing of size S x S is ever stored. Layouts as backend.h: qkv [B*S, ld] with q
 * heads at column 0, k at H*hd, v at (H+KV)*hd; out [B*S, H*hd]; lse [B, H, S].
 *
 * Two implementations:
 *  - the tensor-core path (cuda_attention_tc.cu; bf16 mode): q, k, v and the probabilities rounded to bf16, the
 *    products on bf16 tensor cores (wmma) with fp32 accumulation;
 *  - the fp32 path here (fp32 mode, and TANDEM_CUDA_ATTENTION=fp32): fp32 CUDA-core arithmetic, a warp per row;
 *    for its two dot products the lanes take one key (or query) each, for the weighted sums one column block each.
 * Backward is two deterministic kernels (no atomics): dQ with a warp per query row over its keys, and dK, dV with a
 * warp per key row over the queries of every head of its group. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_internal.cuh"

#define ROWS 8    /* query (or key) rows per block: one warp each */
#define TILE 32   /* keys (or queries) per shared-memory tile: one lane each */
#define MAX_HD 256
#define PER_LANE (MAX_HD / 32)

/* Tensor-core path (cuda_attention_tc.cu): 1 when it took the call. */
int cu_attention_tc_forward(float *out, float *lse, const float *qkv, int B, int S, int H, int KV, int hd, int ld);
int cu_attention_tc_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                             int B, int S, int H, int KV, int hd, int ld);

static void check_shape(int H, int KV, int hd) {
    if (hd > MAX_HD || hd <= 0 || KV <= 0 || H % KV)
        tn_die("cuda attention: head_dim %d with %d query / %d key-value heads is not supported (head_dim <= %d, "
               "query heads a multiple of key-value heads)", hd, H, KV, MAX_HD);
}

static void allow_smem(const void *kernel, size_t bytes) {
    cu_allow_smem(kernel, bytes);
}

/* ------------------------------------------------------------------ forward */

__global__ void __launch_bounds__(ROWS * 32) k_att_fwd(float *out, float *lse, const float *qkv, int S, int H, int KV,
                                                        int hd, int ld, float scale) {
    extern __shared__ float sm[];
    const int hp = hd + 1; /* padded rows: lane l reading row l, column d hits bank (l + d) % 32 */
    float *Ks = sm, *Vs = Ks + TILE * hp, *Qs = Vs + TILE * hd;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.z, h = blockIdx.y, g = h / (H / KV);
    const int i0 = blockIdx.x * ROWS, i = i0 + warp;
    const float *base = qkv + (size_t)b * S * ld;
    const float *Kg = base + (size_t)H * hd + (size_t)g * hd, *Vg = Kg + (size_t)KV * hd;
    for (int idx = threadIdx.x; idx < ROWS * hd; idx += blockDim.x) {
        int r = idx / hd, d = idx % hd;
        Qs[idx] = i0 + r < S ? base[(size_t)(i0 + r) * ld + (size_t)h * hd + d] : 0.0f;
    }
    float o[PER_LANE];
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) o[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int last = min(S, i0 + ROWS) - 1;
    for (int j0 = 0; j0 <= last; j0 += TILE) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < TILE * hd; idx += blockDim.x) {
            int r = idx / hd, d = idx % hd, j = j0 + r;
            Ks[r * hp + d] = j < S ? Kg[(size_t)j * ld + d] : 0.0f;
            Vs[r * hd + d] = j < S ? Vg[(size_t)j * ld + d] : 0.0f;
        }
        __syncthreads();
        if (i >= S) continue;
        int j = j0 + lane;
        float s = -INFINITY;
        if (j <= i) {
            float dot = 0.0f;
            const float *q = Qs + warp * hd, *kr = Ks + lane * hp;
            for (int d = 0; d < hd; d++) dot += q[d] * kr[d];
            s = dot * scale;
        }
        float m_new = fmaxf(m, warp_max(s)); /* finite: key j0 <= i is in every tile this row reaches */
        float p = j <= i ? expf(s - m_new) : 0.0f, alpha = expf(m - m_new);
        l = l * alpha + warp_sum(p);
#pragma unroll
        for (int k = 0; k < PER_LANE; k++) o[k] *= alpha;
        int n_keys = min(TILE, i - j0 + 1);
        for (int jj = 0; jj < n_keys; jj++) {
            float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
            for (int k = 0; k < PER_LANE; k++) {
                int d = lane + 32 * k;
                if (d < hd) o[k] += pj * Vs[jj * hd + d];
            }
        }
        m = m_new;
    }
    if (i >= S) return;
    float inv = 1.0f / l;
    float *orow = out + ((size_t)b * S + i) * ((size_t)H * hd) + (size_t)h * hd;
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) {
        int d = lane + 32 * k;
        if (d < hd) orow[d] = o[k] * inv;
    }
    if (lane == 0) lse[((size_t)b * H + h) * S + i] = m + logf(l);
}

static size_t fwd_smem(int hd) { return ((size_t)TILE * (hd + 1) + (size_t)TILE * hd + (size_t)ROWS * hd) * sizeof(float); }

static void att_forward_fp32(float *out, float *lse, const float *qkv, int B, int S, int H, int KV, int hd, int ld) {
    size_t smem = fwd_smem(hd);
    allow_smem((const void *)k_att_fwd, smem);
    dim3 grid((S + ROWS - 1) / ROWS, H, B);
    k_att_fwd<<<grid, ROWS * 32, smem, g_cu.stream>>>(out, lse, qkv, S, H, KV, hd, ld, 1.0f / sqrtf((float)hd));
    cu_launched("attention_forward");
}

/* The fp32 path is forced by TANDEM_CUDA_ATTENTION=fp32 (a check on the tensor-core kernels). */
static int force_fp32(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("TANDEM_CUDA_ATTENTION");
        v = e && strcmp(e, "fp32") == 0;
    }
    return v;
}

void cu_attention_forward(float *out, float *lse, const float *qkv, int B, int S, int H, int KV, int hd, int ld) {
    if (B <= 0 || S <= 0 || H <= 0) return;
    check_shape(H, KV, hd);
    if (g_cu.bf16 && !force_fp32() && cu_attention_tc_forward(out, lse, qkv, B, S, H, KV, hd, ld)) return;
    att_forward_fp32(out, lse, qkv, B, S, H, KV, hd, ld);
}

/* ------------------------------------------------------------------ backward */

/* Drow[b, h, i] = sum_d dO * O (fp32 products summed in fp64, as the CPU's tn_dot): a warp per row. */
__global__ void k_att_rowdot(float *Drow, const float *dout, const float *out, int B, int S, int H, int hd) {
    size_t item = blockIdx.x * (size_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (item >= (size_t)B * H * S) return;
    int i = (int)(item % (size_t)S), h = (int)(item / (size_t)S % (size_t)H), b = (int)(item / ((size_t)S * H));
    size_t row = ((size_t)b * S + i) * ((size_t)H * hd) + (size_t)h * hd;
    double acc = 0.0;
    for (int d = lane; d < hd; d += 32) acc += (double)__fmul_rn(dout[row + d], out[row + d]);
    acc = warp_sum_d(acc);
    if (lane == 0) Drow[item] = (float)acc;
}

/* dQ[i] = scale * sum_{j <= i} P_ij (dP_ij - D_i) K_j, dP_ij = dO_i . V_j: a warp per query row. */
__global__ void __launch_bounds__(ROWS * 32) k_att_dq(float *dqkv, const float *dout, const float *lse,
                                                       const float *Drow, const float *qkv, int S, int H, int KV,
                                                       int hd, int ld, float scale) {
    extern __shared__ float sm[];
    const int hp = hd + 1;
    float *Ks = sm, *Vs = Ks + TILE * hp, *Qs = Vs + TILE * hp, *dOs = Qs + ROWS * hd;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.z, h = blockIdx.y, g = h / (H / KV);
    const int i0 = blockIdx.x * ROWS, i = i0 + warp, HD = H * hd;
    const float *base = qkv + (size_t)b * S * ld;
    const float *Kg = base + (size_t)HD + (size_t)g * hd, *Vg = Kg + (size_t)KV * hd;
    for (int idx = threadIdx.x; idx < ROWS * hd; idx += blockDim.x) {
        int r = idx / hd, d = idx % hd;
        int ok = i0 + r < S;
        Qs[idx] = ok ? base[(size_t)(i0 + r) * ld + (size_t)h * hd + d] : 0.0f;
        dOs[idx] = ok ? dout[((size_t)b * S + i0 + r) * HD + (size_t)h * hd + d] : 0.0f;
    }
    float L = 0.0f, Di = 0.0f;
    if (i < S) L = lse[((size_t)b * H + h) * S + i], Di = Drow[((size_t)b * H + h) * S + i];
    float dq[PER_LANE];
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) dq[k] = 0.0f;
    const int last = min(S, i0 + ROWS) - 1;
    for (int j0 = 0; j0 <= last; j0 += TILE) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < TILE * hd; idx += blockDim.x) {
            int r = idx / hd, d = idx % hd, j = j0 + r;
            Ks[r * hp + d] = j < S ? Kg[(size_t)j * ld + d] : 0.0f;
            Vs[r * hp + d] = j < S ? Vg[(size_t)j * ld + d] : 0.0f;
        }
        __syncthreads();
        if (i >= S) continue;
        int j = j0 + lane;
        float ds = 0.0f;
        if (j <= i) {
            const float *q = Qs + warp * hd, *o = dOs + warp * hd, *kr = Ks + lane * hp, *vr = Vs + lane * hp;
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < hd; d++) s += q[d] * kr[d], dp += o[d] * vr[d];
            float p = expf(s * scale - L);
            ds = scale * p * (dp - Di);
        }
        int n_keys = min(TILE, i - j0 + 1);
        for (int jj = 0; jj < n_keys; jj++) {
            float dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
            for (int k = 0; k < PER_LANE; k++) {
                int d = lane + 32 * k;
                if (d < hd) dq[k] += dsj * Ks[jj * hp + d];
            }
        }
    }
    if (i >= S) return;
    float *row = dqkv + ((size_t)b * S + i) * ld + (size_t)h * hd;
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) {
        int d = lane + 32 * k;
        if (d < hd) row[d] = dq[k];
    }
}

/* dV[j] = sum over the group's heads and i >= j of P_ij dO_i; dK[j] = scale * sum P_ij (dP_ij - D_i) Q_i: a warp per
 * key row, the lanes taking one query each. */
__global__ void __launch_bounds__(ROWS * 32) k_att_dkv(float *dqkv, const float *dout, const float *lse,
                                                        const float *Drow, const float *qkv, int S, int H, int KV,
                                                        int hd, int ld, float scale) {
    extern __shared__ float sm[];
    const int hp = hd + 1;
    float *Qs = sm, *dOs = Qs + TILE * hp, *Ks = dOs + TILE * hp, *Vs = Ks + ROWS * hd, *Ls = Vs + ROWS * hd,
          *Ds = Ls + TILE;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.z, g = blockIdx.y, rep = H / KV;
    const int j0 = blockIdx.x * ROWS, j = j0 + warp, HD = H * hd;
    const float *base = qkv + (size_t)b * S * ld;
    const float *Kg = base + (size_t)HD + (size_t)g * hd, *Vg = Kg + (size_t)KV * hd;
    for (int idx = threadIdx.x; idx < ROWS * hd; idx += blockDim.x) {
        int r = idx / hd, d = idx % hd;
        int ok = j0 + r < S;
        Ks[idx] = ok ? Kg[(size_t)(j0 + r) * ld + d] : 0.0f;
        Vs[idx] = ok ? Vg[(size_t)(j0 + r) * ld + d] : 0.0f;
    }
    float dk[PER_LANE], dv[PER_LANE];
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) dk[k] = dv[k] = 0.0f;
    const int first = j0 / TILE * TILE; /* queries before the block's first key see none of its keys */
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        for (int q0 = first; q0 < S; q0 += TILE) {
            __syncthreads();
            for (int idx = threadIdx.x; idx < TILE * hd; idx += blockDim.x) {
                int r = idx / hd, d = idx % hd, q = q0 + r;
                Qs[r * hp + d] = q < S ? base[(size_t)q * ld + (size_t)h * hd + d] : 0.0f;
                dOs[r * hp + d] = q < S ? dout[((size_t)b * S + q) * HD + (size_t)h * hd + d] : 0.0f;
            }
            if (threadIdx.x < TILE) {
                int q = q0 + threadIdx.x;
                Ls[threadIdx.x] = q < S ? lse[((size_t)b * H + h) * S + q] : 0.0f;
                Ds[threadIdx.x] = q < S ? Drow[((size_t)b * H + h) * S + q] : 0.0f;
            }
            __syncthreads();
            if (j >= S || q0 + TILE - 1 < j) continue; /* this tile holds no query that sees key j */
            int q = q0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (q < S && q >= j) {
                const float *qr = Qs + lane * hp, *orow = dOs + lane * hp, *kr = Ks + warp * hd, *vr = Vs + warp * hd;
                float s = 0.0f, dp = 0.0f;
                for (int d = 0; d < hd; d++) s += qr[d] * kr[d], dp += orow[d] * vr[d];
                p = expf(s * scale - Ls[lane]);
                ds = scale * p * (dp - Ds[lane]);
            }
            for (int ii = 0; ii < TILE; ii++) {
                float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
                for (int k = 0; k < PER_LANE; k++) {
                    int d = lane + 32 * k;
                    if (d < hd) {
                        dv[k] += pi * dOs[ii * hp + d];
                        dk[k] += dsi * Qs[ii * hp + d];
                    }
                }
            }
        }
    }
    if (j >= S) return;
    float *krow = dqkv + ((size_t)b * S + j) * ld + (size_t)HD + (size_t)g * hd, *vrow = krow + (size_t)KV * hd;
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) {
        int d = lane + 32 * k;
        if (d < hd) krow[d] = dk[k], vrow[d] = dv[k];
    }
}

static size_t dq_smem(int hd) { return ((size_t)2 * TILE * (hd + 1) + (size_t)2 * ROWS * hd) * sizeof(float); }
static size_t dkv_smem(int hd) {
    return ((size_t)2 * TILE * (hd + 1) + (size_t)2 * ROWS * hd + 2 * TILE) * sizeof(float);
}

/* D_i = rowsum(dO * O) for every (b, h, i): [B, H, S] in SCR_ATT. */
float *cu_attention_rowdot(const float *dout, const float *out, int B, int S, int H, int hd) {
    size_t rows = (size_t)B * H * S;
    float *Drow = (float *)cu_scratch(SCR_ATT, rows * sizeof(float));
    k_att_rowdot<<<cu_blocks(rows, 8), 256, 0, g_cu.stream>>>(Drow, dout, out, B, S, H, hd);
    cu_launched("attention_backward (rowdot)");
    return Drow;
}

static void att_backward_fp32(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                              int B, int S, int H, int KV, int hd, int ld) {
    float scale = 1.0f / sqrtf((float)hd);
    float *Drow = cu_attention_rowdot(dout, out, B, S, H, hd);
    size_t s1 = dq_smem(hd), s2 = dkv_smem(hd);
    allow_smem((const void *)k_att_dq, s1);
    allow_smem((const void *)k_att_dkv, s2);
    k_att_dq<<<dim3((S + ROWS - 1) / ROWS, H, B), ROWS * 32, s1, g_cu.stream>>>(dqkv, dout, lse, Drow, qkv, S, H, KV,
                                                                                 hd, ld, scale);
    cu_launched("attention_backward (dq)");
    k_att_dkv<<<dim3((S + ROWS - 1) / ROWS, KV, B), ROWS * 32, s2, g_cu.stream>>>(dqkv, dout, lse, Drow, qkv, S, H,
                                                                                   KV, hd, ld, scale);
    cu_launched("attention_backward (dk, dv)");
}

void cu_attention_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv, int B,
                           int S, int H, int KV, int hd, int ld) {
    if (B <= 0 || S <= 0 || H <= 0) return;
    check_shape(H, KV, hd);
    if (g_cu.bf16 && !force_fp32() && cu_attention_tc_backward(dqkv, dout, out, lse, qkv, B, S, H, KV, hd, ld)) return;
    att_backward_fp32(dqkv, dout, out, lse, qkv, B, S, H, KV, hd, ld);
}
