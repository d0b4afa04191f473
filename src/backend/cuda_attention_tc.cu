/* cuda_attention_tc.cu -- causal GQA attention on bf16 tensor cores (the bf16 mode's path; see cuda_attention.cu
 * for the layouts and the fp32 path it falls back to for head_dim > 128 or too little shared memory).
 *
 * Flash-attention 2 structure with wmma 16x16x16 bf16 fragments and fp32 accumulation. A block is 4 warps; each warp
 * owns 16 rows (queries in forward and dQ, keys in dK/dV) and walks tiles of 32 keys (or queries) staged in shared
 * memory as bf16 (converted from the fp32 tensors while loading; head_dim is zero-padded to a multiple of 16).
 * Scores go from the accumulator fragments to a per-warp fp32 tile, where two lanes per row apply the causal mask,
 * the online softmax (forward) or P and dS (backward), and write the bf16 operand of the second product. The
 * forward's output accumulates in shared memory, because each new running maximum rescales its rows; dQ, dK and dV
 * accumulate in registers. Backward is two kernels without atomics (dQ by query rows; dK and dV by key rows over
 * every query head of the group), so results are deterministic. */
#include <math.h>
#include <mma.h>

#include "backend/cuda_internal.cuh"

using namespace nvcuda;

#define TC_WARPS 4
#define TC_ROWS 64 /* rows per block: 16 per warp */
#define TC_TILE 32 /* keys (queries) per shared-memory tile */
#define LDS (TC_TILE + 4) /* fp32 score tile row stride */
#define LDP (TC_TILE + 8) /* bf16 probability tile row stride */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> frag_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;

float *cu_attention_rowdot(const float *dout, const float *out, int B, int S, int H, int hd);

/* rows [r0, r0 + rows) of an fp32 matrix (row stride ld, columns [0, hd)) into bf16 dst [rows][ldb], zero-padded to
 * hdp columns and beyond row n */
__device__ __forceinline__ void load_tile(bf16 *dst, int ldb, const float *src, size_t ld, int r0, int rows, int n,
                                          int hd, int hdp) {
    for (int idx = threadIdx.x; idx < rows * hdp; idx += blockDim.x) {
        int r = idx / hdp, d = idx % hdp, i = r0 + r;
        float v = i < n && d < hd ? src[(size_t)i * ld + d] : 0.0f;
        dst[r * ldb + d] = __float2bfloat16_rn(v);
    }
}

/* C[16 x 32] (fp32, row stride LDS) = A[16 x HDP] B^T where B is [32][ldb] row-major (so B^T is col-major) */
template <int HDP>
__device__ __forceinline__ void scores(float *C, const bf16 *A, int lda, const bf16 *B, int ldb) {
#pragma unroll
    for (int n = 0; n < TC_TILE / 16; n++) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int k = 0; k < HDP / 16; k++) {
            frag_a a;
            frag_b_col b;
            wmma::load_matrix_sync(a, A + k * 16, lda);
            wmma::load_matrix_sync(b, B + n * 16 * ldb + k * 16, ldb);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(C + n * 16, acc, LDS, wmma::mem_row_major);
    }
}

/* acc[n] += P[16 x 32] (bf16, row stride LDP) V[32 x HDP] (bf16 [32][ldb] row-major), n over HDP / 16 */
template <int HDP>
__device__ __forceinline__ void accumulate(frag_acc *acc, const bf16 *P, const bf16 *V, int ldb) {
#pragma unroll
    for (int k = 0; k < TC_TILE / 16; k++) {
        frag_a a;
        wmma::load_matrix_sync(a, P + k * 16, LDP);
#pragma unroll
        for (int n = 0; n < HDP / 16; n++) {
            frag_b_row b;
            wmma::load_matrix_sync(b, V + k * 16 * ldb + n * 16, ldb);
            wmma::mma_sync(acc[n], a, b, acc[n]);
        }
    }
}

/* Writes 16 rows x HDP of accumulators to global (row stride ld, columns [0, hd)), rows below n, through the warp's
 * score tile. */
template <int HDP>
__device__ __forceinline__ void store_rows(float *dst, size_t ld, const frag_acc *acc, float *tile, int row0, int n,
                                           int hd) {
    const int lane = threadIdx.x & 31, rr = lane >> 1, half = lane & 1;
#pragma unroll
    for (int f = 0; f < HDP / 16; f++) {
        wmma::store_matrix_sync(tile, acc[f], LDS, wmma::mem_row_major);
        __syncwarp();
        int r = row0 + rr;
        for (int c = half * 8; c < half * 8 + 8; c++) {
            int d = f * 16 + c;
            if (r < n && d < hd) dst[(size_t)r * ld + d] = tile[rr * LDS + c];
        }
        __syncwarp();
    }
}

/* ------------------------------------------------------------------ forward */

template <int HDP>
__global__ void __launch_bounds__(TC_WARPS * 32) k_tc_fwd(float *out, float *lse, const float *qkv, int S, int H, int KV,
                                                           int hd, int ld, float scale) {
    constexpr int LDB = HDP + 8, LDO = HDP + 4;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + TC_ROWS * LDB, *Vs = Ks + TC_TILE * LDB;
    float *Ow = (float *)(Vs + TC_TILE * LDB), *Sw = Ow + TC_WARPS * 16 * LDO;
    bf16 *Pw = (bf16 *)(Sw + TC_WARPS * 16 * LDS);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rr = lane >> 1, half = lane & 1;
    const int b = blockIdx.z, h = blockIdx.y, g = h / (H / KV), i0 = blockIdx.x * TC_ROWS;
    const float *base = qkv + (size_t)b * S * ld;
    const float *Kg = base + (size_t)H * hd + (size_t)g * hd, *Vg = Kg + (size_t)KV * hd;
    load_tile(Qs, LDB, base + (size_t)h * hd, ld, i0, TC_ROWS, S, hd, HDP);
    float *O = Ow + warp * 16 * LDO, *Sm = Sw + warp * 16 * LDS;
    bf16 *P = Pw + warp * 16 * LDP;
    for (int idx = lane; idx < 16 * LDO; idx += 32) O[idx] = 0.0f;
    const int w0 = i0 + warp * 16, qi = w0 + rr, last = min(S, i0 + TC_ROWS) - 1;
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 <= last; j0 += TC_TILE) {
        __syncthreads();
        load_tile(Ks, LDB, Kg, ld, j0, TC_TILE, S, hd, HDP);
        load_tile(Vs, LDB, Vg, ld, j0, TC_TILE, S, hd, HDP);
        __syncthreads();
        if (j0 > w0 + 15) continue; /* no key of this tile is visible to the warp's rows */
        scores<HDP>(Sm, Qs + warp * 16 * LDB, LDB, Ks, LDB);
        __syncwarp();
        /* two lanes per row, 16 keys each; key j0 <= every row of the warp, so the new maximum is finite */
        float s[16], mt = -INFINITY;
#pragma unroll
        for (int c = 0; c < 16; c++) {
            int col = half * 16 + c, j = j0 + col;
            s[c] = j <= qi ? Sm[rr * LDS + col] * scale : -INFINITY;
            mt = fmaxf(mt, s[c]);
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        float m_new = fmaxf(m, mt), alpha = expf(m - m_new), psum = 0.0f;
#pragma unroll
        for (int c = 0; c < 16; c++) {
            float p = expf(s[c] - m_new);
            psum += p;
            P[rr * LDP + half * 16 + c] = __float2bfloat16_rn(p);
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        l = l * alpha + psum;
        m = m_new;
        for (int d = half * (HDP / 2); d < (half + 1) * (HDP / 2); d++) O[rr * LDO + d] *= alpha;
        __syncwarp();
#pragma unroll
        for (int n = 0; n < HDP / 16; n++) {
            frag_acc acc;
            wmma::load_matrix_sync(acc, O + n * 16, LDO, wmma::mem_row_major);
#pragma unroll
            for (int k = 0; k < TC_TILE / 16; k++) {
                frag_a a;
                frag_b_row v;
                wmma::load_matrix_sync(a, P + k * 16, LDP);
                wmma::load_matrix_sync(v, Vs + k * 16 * LDB + n * 16, LDB);
                wmma::mma_sync(acc, a, v, acc);
            }
            wmma::store_matrix_sync(O + n * 16, acc, LDO, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (qi >= S) return;
    float inv = 1.0f / l;
    float *orow = out + ((size_t)b * S + qi) * ((size_t)H * hd) + (size_t)h * hd;
    for (int d = half * (HDP / 2); d < (half + 1) * (HDP / 2); d++)
        if (d < hd) orow[d] = O[rr * LDO + d] * inv;
    if (half == 0) lse[((size_t)b * H + h) * S + qi] = m + logf(l);
}

/* ------------------------------------------------------------------ backward: dQ by query rows */

template <int HDP>
__global__ void __launch_bounds__(TC_WARPS * 32) k_tc_dq(float *dqkv, const float *dout, const float *lse,
                                                          const float *Drow, const float *qkv, int S, int H, int KV,
                                                          int hd, int ld, float scale) {
    constexpr int LDB = HDP + 8;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *dOs = Qs + TC_ROWS * LDB, *Ks = dOs + TC_ROWS * LDB, *Vs = Ks + TC_TILE * LDB;
    float *Sw = (float *)(Vs + TC_TILE * LDB), *dPw = Sw + TC_WARPS * 16 * LDS;
    bf16 *Pw = (bf16 *)(dPw + TC_WARPS * 16 * LDS);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rr = lane >> 1, half = lane & 1;
    const int b = blockIdx.z, h = blockIdx.y, g = h / (H / KV), i0 = blockIdx.x * TC_ROWS, HD = H * hd;
    const float *base = qkv + (size_t)b * S * ld;
    const float *Kg = base + (size_t)HD + (size_t)g * hd, *Vg = Kg + (size_t)KV * hd;
    load_tile(Qs, LDB, base + (size_t)h * hd, ld, i0, TC_ROWS, S, hd, HDP);
    load_tile(dOs, LDB, dout + (size_t)b * S * HD + (size_t)h * hd, (size_t)HD, i0, TC_ROWS, S, hd, HDP);
    float *Sm = Sw + warp * 16 * LDS, *dP = dPw + warp * 16 * LDS;
    bf16 *dS = Pw + warp * 16 * LDP;
    const int w0 = i0 + warp * 16, qi = w0 + rr, last = min(S, i0 + TC_ROWS) - 1;
    const float L = qi < S ? lse[((size_t)b * H + h) * S + qi] : 0.0f, Dq = qi < S ? Drow[((size_t)b * H + h) * S + qi] : 0.0f;
    frag_acc dq[HDP / 16];
#pragma unroll
    for (int n = 0; n < HDP / 16; n++) wmma::fill_fragment(dq[n], 0.0f);
    for (int j0 = 0; j0 <= last; j0 += TC_TILE) {
        __syncthreads();
        load_tile(Ks, LDB, Kg, ld, j0, TC_TILE, S, hd, HDP);
        load_tile(Vs, LDB, Vg, ld, j0, TC_TILE, S, hd, HDP);
        __syncthreads();
        if (j0 > w0 + 15) continue;
        scores<HDP>(Sm, Qs + warp * 16 * LDB, LDB, Ks, LDB);  /* S = Q K^T */
        scores<HDP>(dP, dOs + warp * 16 * LDB, LDB, Vs, LDB); /* dP = dO V^T */
        __syncwarp();
#pragma unroll
        for (int c = 0; c < 16; c++) {
            int col = half * 16 + c, j = j0 + col;
            float p = j <= qi ? expf(Sm[rr * LDS + col] * scale - L) : 0.0f;
            dS[rr * LDP + col] = __float2bfloat16_rn(scale * p * (dP[rr * LDS + col] - Dq));
        }
        __syncwarp();
        accumulate<HDP>(dq, dS, Ks, LDB); /* dQ += dS K */
    }
    store_rows<HDP>(dqkv + (size_t)b * S * ld + (size_t)h * hd, (size_t)ld, dq, Sm, w0, S, hd);
}

/* ------------------------------------------------------------------ backward: dK, dV by key rows */

template <int HDP>
__global__ void __launch_bounds__(TC_WARPS * 32) k_tc_dkv(float *dqkv, const float *dout, const float *lse,
                                                           const float *Drow, const float *qkv, int S, int H, int KV,
                                                           int hd, int ld, float scale) {
    constexpr int LDB = HDP + 8;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + TC_ROWS * LDB, *Qt = Vs + TC_ROWS * LDB, *dOt = Qt + TC_TILE * LDB;
    float *Ls = (float *)(dOt + TC_TILE * LDB), *Ds = Ls + TC_TILE, *Sw = Ds + TC_TILE, *dPw = Sw + TC_WARPS * 16 * LDS;
    bf16 *Pw = (bf16 *)(dPw + TC_WARPS * 16 * LDS), *dSw = Pw + TC_WARPS * 16 * LDP;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rr = lane >> 1, half = lane & 1;
    const int b = blockIdx.z, g = blockIdx.y, rep = H / KV, j0b = blockIdx.x * TC_ROWS, HD = H * hd;
    const float *base = qkv + (size_t)b * S * ld;
    const float *Kg = base + (size_t)HD + (size_t)g * hd, *Vg = Kg + (size_t)KV * hd;
    load_tile(Ks, LDB, Kg, ld, j0b, TC_ROWS, S, hd, HDP);
    load_tile(Vs, LDB, Vg, ld, j0b, TC_ROWS, S, hd, HDP);
    float *Sm = Sw + warp * 16 * LDS, *dP = dPw + warp * 16 * LDS;
    bf16 *P = Pw + warp * 16 * LDP, *dS = dSw + warp * 16 * LDP;
    const int w0 = j0b + warp * 16, kj = w0 + rr;
    frag_acc dk[HDP / 16], dv[HDP / 16];
#pragma unroll
    for (int n = 0; n < HDP / 16; n++) wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dv[n], 0.0f);
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        const float *Lh = lse + ((size_t)b * H + h) * S, *Dh = Drow + ((size_t)b * H + h) * S;
        for (int q0 = j0b / TC_TILE * TC_TILE; q0 < S; q0 += TC_TILE) {
            __syncthreads();
            load_tile(Qt, LDB, base + (size_t)h * hd, ld, q0, TC_TILE, S, hd, HDP);
            load_tile(dOt, LDB, dout + (size_t)b * S * HD + (size_t)h * hd, (size_t)HD, q0, TC_TILE, S, hd, HDP);
            if (threadIdx.x < TC_TILE) {
                int q = q0 + threadIdx.x;
                Ls[threadIdx.x] = q < S ? Lh[q] : 0.0f;
                Ds[threadIdx.x] = q < S ? Dh[q] : 0.0f;
            }
            __syncthreads();
            if (q0 + TC_TILE - 1 < w0) continue; /* every query of the tile precedes the warp's keys */
            scores<HDP>(Sm, Ks + warp * 16 * LDB, LDB, Qt, LDB);  /* S^T = K Q^T */
            scores<HDP>(dP, Vs + warp * 16 * LDB, LDB, dOt, LDB); /* dP^T = V dO^T */
            __syncwarp();
#pragma unroll
            for (int c = 0; c < 16; c++) {
                int col = half * 16 + c, q = q0 + col;
                float p = q < S && q >= kj ? expf(Sm[rr * LDS + col] * scale - Ls[col]) : 0.0f;
                P[rr * LDP + col] = __float2bfloat16_rn(p);
                dS[rr * LDP + col] = __float2bfloat16_rn(scale * p * (dP[rr * LDS + col] - Ds[col]));
            }
            __syncwarp();
            accumulate<HDP>(dv, P, dOt, LDB); /* dV += P^T dO */
            accumulate<HDP>(dk, dS, Qt, LDB); /* dK += dS^T Q */
        }
    }
    float *kbase = dqkv + (size_t)b * S * ld + (size_t)HD + (size_t)g * hd;
    store_rows<HDP>(kbase, (size_t)ld, dk, Sm, w0, S, hd);
    store_rows<HDP>(kbase + (size_t)KV * hd, (size_t)ld, dv, Sm, w0, S, hd);
}

/* ------------------------------------------------------------------ launch */

static size_t fwd_bytes(int hdp) {
    return (size_t)(TC_ROWS + 2 * TC_TILE) * (hdp + 8) * 2 + (size_t)TC_WARPS * 16 * (hdp + 4) * 4 +
           (size_t)TC_WARPS * 16 * LDS * 4 + (size_t)TC_WARPS * 16 * LDP * 2;
}
static size_t dq_bytes(int hdp) {
    return (size_t)(2 * TC_ROWS + 2 * TC_TILE) * (hdp + 8) * 2 + (size_t)2 * TC_WARPS * 16 * LDS * 4 +
           (size_t)TC_WARPS * 16 * LDP * 2;
}
static size_t dkv_bytes(int hdp) {
    return (size_t)(2 * TC_ROWS + 2 * TC_TILE) * (hdp + 8) * 2 + (size_t)2 * TC_TILE * 4 +
           (size_t)2 * TC_WARPS * 16 * LDS * 4 + (size_t)2 * TC_WARPS * 16 * LDP * 2;
}

/* Raises a kernel's dynamic shared-memory limit once; 0 when the device cannot give that much. */
static int smem_ok(const void *kernel, size_t bytes) {
    if (bytes > (size_t)g_cu.prop.sharedMemPerBlockOptin) return 0;
    cu_allow_smem(kernel, bytes);
    return 1;
}

template <int HDP>
static int fwd(float *out, float *lse, const float *qkv, int B, int S, int H, int KV, int hd, int ld) {
    size_t bytes = fwd_bytes(HDP);
    if (!smem_ok((const void *)k_tc_fwd<HDP>, bytes)) return 0;
    dim3 grid((S + TC_ROWS - 1) / TC_ROWS, H, B);
    k_tc_fwd<HDP><<<grid, TC_WARPS * 32, bytes, g_cu.stream>>>(out, lse, qkv, S, H, KV, hd, ld, 1.0f / sqrtf((float)hd));
    cu_launched("attention_forward (tensor cores)");
    return 1;
}

template <int HDP>
static int bwd(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv, int B, int S, int H,
               int KV, int hd, int ld) {
    size_t b1 = dq_bytes(HDP), b2 = dkv_bytes(HDP);
    if (!smem_ok((const void *)k_tc_dq<HDP>, b1) || !smem_ok((const void *)k_tc_dkv<HDP>, b2)) return 0;
    float scale = 1.0f / sqrtf((float)hd), *Drow = cu_attention_rowdot(dout, out, B, S, H, hd);
    k_tc_dq<HDP><<<dim3((S + TC_ROWS - 1) / TC_ROWS, H, B), TC_WARPS * 32, b1, g_cu.stream>>>(dqkv, dout, lse, Drow, qkv,
                                                                                           S, H, KV, hd, ld, scale);
    cu_launched("attention_backward (tensor cores, dq)");
    k_tc_dkv<HDP><<<dim3((S + TC_ROWS - 1) / TC_ROWS, KV, B), TC_WARPS * 32, b2, g_cu.stream>>>(dqkv, dout, lse, Drow,
                                                                                             qkv, S, H, KV, hd, ld, scale);
    cu_launched("attention_backward (tensor cores, dk, dv)");
    return 1;
}

#define DISPATCH(F, ...)                                                                                          \
    switch ((hd + 15) / 16 * 16) {                                                                                \
    case 16: return F<16>(__VA_ARGS__);                                                                           \
    case 32: return F<32>(__VA_ARGS__);                                                                           \
    case 48: return F<48>(__VA_ARGS__);                                                                           \
    case 64: return F<64>(__VA_ARGS__);                                                                           \
    case 80: return F<80>(__VA_ARGS__);                                                                           \
    case 96: return F<96>(__VA_ARGS__);                                                                           \
    case 112: return F<112>(__VA_ARGS__);                                                                         \
    case 128: return F<128>(__VA_ARGS__);                                                                         \
    default: return 0;                                                                                            \
    }

int cu_attention_tc_forward(float *out, float *lse, const float *qkv, int B, int S, int H, int KV, int hd, int ld) {
    DISPATCH(fwd, out, lse, qkv, B, S, H, KV, hd, ld)
}

int cu_attention_tc_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                             int B, int S, int H, int KV, int hd, int ld) {
    DISPATCH(bwd, dqkv, dout, out, lse, qkv, B, S, H, KV, hd, ld)
}
