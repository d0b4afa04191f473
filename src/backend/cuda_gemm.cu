/* cuda_gemm.cu -- backend.h's matmul on cuBLASLt.
 *
 * Row-major C[M,N] = alpha op(A) op(B) + beta C is the column-major product C^T = op(B)^T op(A)^T, so cuBLASLt gets
 * (B, A) in that order with the transposes as given. bf16 mode: each operand becomes bf16 (frozen weights already
 * are: their bf16 storage is used in place; trainable weights are rounded once per optimizer step into a kept copy,
 * cu_weight_bf16; anything else is rounded into a packed scratch copy), the product
 * accumulates in fp32 (CUBLAS_COMPUTE_32F) and C stays fp32. fp32 mode: fp32 operands, CUBLAS_COMPUTE_32F, which
 * never uses TF32. A plan (descriptors + the heuristic's algorithm) is kept per shape, leading dimensions and
 * pointer alignment, so a training step asks the heuristic once per distinct product. */
#include <cublasLt.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda_internal.cuh"

static cublasLtHandle_t g_lt;
static void *g_ws;
static const size_t WS_BYTES = (size_t)32 << 20; /* the workspace NVIDIA recommends for Hopper */

static void lt_check(cublasStatus_t st, const char *what) {
    if (st != CUBLAS_STATUS_SUCCESS) tn_die("cuda: %s failed: cuBLAS status %d", what, (int)st);
}

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, bf16, beta0;
    int align_a, align_b, align_c;
} plan_key;

typedef struct {
    plan_key key;
    int used;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} plan;

#define N_PLANS 256
static plan g_plans[N_PLANS];
static int g_next_victim;

static int alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && a % (uintptr_t)al) al >>= 1;
    return al;
}

static void destroy_plan(plan *p) {
    if (!p->used) return;
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->desc);
    p->used = 0;
}

static void ensure_handle(void) {
    if (g_lt) return;
    lt_check(cublasLtCreate(&g_lt), "cublasLtCreate");
    CU_CHECK(cudaMalloc(&g_ws, WS_BYTES));
}

/* Column-major operands handed to cuBLASLt: "A" = our B (m = N rows of the result), "B" = our A (n = M). */
static plan *get_plan(const plan_key *k) {
    for (int i = 0; i < N_PLANS; i++)
        if (g_plans[i].used && memcmp(&g_plans[i].key, k, sizeof *k) == 0) return &g_plans[i];
    plan *p = &g_plans[g_next_victim];
    g_next_victim = (g_next_victim + 1) % N_PLANS;
    destroy_plan(p);
    memset(p, 0, sizeof *p);
    p->key = *k;
    cudaDataType_t ab = k->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    lt_check(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    cublasOperation_t opa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "TRANSA");
    lt_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "TRANSB");
    /* stored shapes (column-major rows x cols) before the op */
    uint64_t a_rows = k->tb ? (uint64_t)k->K : (uint64_t)k->N, a_cols = k->tb ? (uint64_t)k->N : (uint64_t)k->K;
    uint64_t b_rows = k->ta ? (uint64_t)k->M : (uint64_t)k->K, b_cols = k->ta ? (uint64_t)k->K : (uint64_t)k->M;
    lt_check(cublasLtMatrixLayoutCreate(&p->la, ab, a_rows, a_cols, k->ldb), "layout A");
    lt_check(cublasLtMatrixLayoutCreate(&p->lb, ab, b_rows, b_cols, k->lda), "layout B");
    lt_check(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, (uint64_t)k->N, (uint64_t)k->M, k->ldc), "layout C");
    cublasLtMatmulPreference_t pref;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    uint64_t ws = WS_BYTES;
    uint32_t aa = (uint32_t)k->align_b, bb = (uint32_t)k->align_a, cc = (uint32_t)k->align_c;
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
             "preference workspace");
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa),
             "preference alignment A");
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &bb, sizeof bb),
             "preference alignment B");
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &cc, sizeof cc),
             "preference alignment C");
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &cc, sizeof cc),
             "preference alignment D");
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
        tn_die("cuda: cuBLASLt has no algorithm for a %s product %dx%dx%d (op %c%c, ld %d/%d/%d, alignment %d/%d/%d): "
               "status %d", k->bf16 ? "bf16 x bf16 -> fp32" : "fp32", k->M, k->N, k->K, k->ta ? 'T' : 'N',
               k->tb ? 'T' : 'N', k->lda, k->ldb, k->ldc, k->align_a, k->align_b, k->align_c, (int)st);
    p->algo = res.algo;
    p->used = 1;
    return p;
}

/* The stored (row-major) block of an operand: rows x cols at ld. */
static const void *as_bf16(const float *X, int rows, int cols, int ld, int slot, int *ld_out) {
    const bf16 *f = cu_frozen(X);
    if (f) {
        *ld_out = ld;
        return f;
    }
    const bf16 *w = cu_weight_bf16(X, rows, cols, ld); /* a trainable weight: its copy of this optimizer step */
    if (w) {
        *ld_out = cols;
        return w;
    }
    bf16 *dst = (bf16 *)cu_scratch(slot, (size_t)rows * cols * sizeof(bf16));
    cu_f32_to_bf16(dst, cols, X, ld, rows, cols);
    *ld_out = cols;
    return dst;
}

__global__ void k_scale_rows(float *C, int M, int N, int ldc, float beta) {
    size_t total = (size_t)M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)N, c = i % (size_t)N;
        C[r * ldc + c] = beta == 0.0f ? 0.0f : C[r * ldc + c] * beta;
    }
}

void cu_matmul(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* an empty sum: C = beta C */
        unsigned g = cu_blocks((size_t)M * N, 256);
        k_scale_rows<<<g < 65536 ? g : 65536, 256, 0, g_cu.stream>>>(C, M, N, ldc, beta);
        cu_launched("matmul (K = 0)");
        return;
    }
    ensure_handle();
    const void *a = A, *b = B;
    int ld_a = lda, ld_b = ldb;
    int frozen_a = cu_frozen(A) != NULL, frozen_b = cu_frozen(B) != NULL;
    if (g_cu.bf16) {
        a = as_bf16(A, ta ? K : M, ta ? M : K, lda, SCR_GEMM_A, &ld_a);
        b = as_bf16(B, tb ? N : K, tb ? K : N, ldb, SCR_GEMM_B, &ld_b);
    } else if (frozen_a || frozen_b) {
        tn_die("cuda: an fp32 product read frozen bf16 weights (frozen weights are bf16 only in bf16 mode)");
    }
    plan_key k;
    memset(&k, 0, sizeof k);
    k.ta = ta, k.tb = tb, k.M = M, k.N = N, k.K = K, k.lda = ld_a, k.ldb = ld_b, k.ldc = ldc;
    k.bf16 = g_cu.bf16, k.beta0 = beta == 0.0f;
    k.align_a = alignment(a), k.align_b = alignment(b), k.align_c = alignment(C);
    plan *p = get_plan(&k);
    lt_check(cublasLtMatmul(g_lt, p->desc, &alpha, b, p->la, a, p->lb, &beta, C, p->lc, C, p->lc, &p->algo, g_ws,
                            WS_BYTES, g_cu.stream),
             "cublasLtMatmul");
    cu_launched("cublasLtMatmul");
}

void cu_gemm_shutdown(void) {
    for (int i = 0; i < N_PLANS; i++) destroy_plan(&g_plans[i]);
    if (g_lt) cublasLtDestroy(g_lt);
    if (g_ws) cudaFree(g_ws);
    g_lt = NULL, g_ws = NULL;
}
