/* test_gpu_kernels -- every function of backend.h on the CUDA backend against the CPU backend (itself checked
 * against double-precision formulas by tests/unit/test_unit_kernels.c), on random inputs and odd sizes, forward
 * and backward. Outputs are poisoned with NaN before each call, so an element a kernel never writes fails.
 * TANDEM_TEST_PRECISION=fp32 (default) or bf16 picks the CUDA backend's mode. Skipped (77) without a GPU.
 *
 * Bounds (u32 = 2^-24, u16 = 2^-8 the unit roundoffs of fp32 and bf16):
 *  - same fp32 operations in the same order (AdamW, RoPE, dropout masks, copies, scale, add, embedding rows and
 *    their gradient sums in token order): bit-identical;
 *  - reductions in another order (norms, softmax, losses, sums of squares): relative 1e-5, twice the CPU test's
 *    bound against double (each backend errs by at most that);
 *  - matmul, per element: |gpu - cpu| <= (2 u16 [bf16 only: both operands rounded] + 3 K u32) (|alpha| |A||B|)_ij
 *    + 2 u32 |beta C_ij|: first-order error of a length-K dot product on each side;
 *  - attention, relative L2 per output: fp32 5e-5 (dot products of length hd <= 256 and softmax sums of length
 *    S <= 300: (256 + 300) u32 worst case, both sides); bf16 8 u16 forward (q, k, P, v rounded; the score error
 *    carried through exp at |score| <= 3) and 16 u16 backward (dO, V, Q, K and dS rounded as well);
 *  - frozen (bf16-only) weights: read back exactly as the bf16 rounding of what was uploaded, and every kernel
 *    reading them equals the CPU on the rounded values;
 *  - kept bf16 copies of trainable weights (bf16 mode): after each way the slab is written (upload, AdamW, copy,
 *    scale, add, zero) the products use the new weights: the matmul bound above (a stale copy errs by O(1)). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/core.h"
#include "model/safetensors.h"
#include "testlib.h"

static const tn_backend *cpu, *gpu;
static int bf16;
static tn_rng rng;
static const double U32 = 5.9604644775390625e-8, U16 = 0.00390625;

static void fill(float *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * tn_rng_uniform(&rng));
}
static float *hrand(size_t n, double lo, double hi) {
    float *x = tn_xmalloc((n ? n : 1) * sizeof *x);
    fill(x, n, lo, hi);
    return x;
}
static float *put(const tn_backend *b, const float *h, size_t n) {
    float *d = b->alloc(n ? n : 1);
    b->upload(d, h, n);
    return d;
}
static float *get(const tn_backend *b, const float *d, size_t n) {
    float *h = tn_xmalloc((n ? n : 1) * sizeof *h);
    b->download(h, d, n);
    return h;
}
static void poison(const tn_backend *b, float *d, size_t n) {
    float *h = tn_xmalloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    b->upload(d, h, n);
    free(h);
}
static int32_t *put_i32(const tn_backend *b, const int32_t *h, size_t n) {
    int32_t *d = b->alloc_i32(n);
    b->upload_i32(d, h, n);
    return d;
}
static float bf(float x) { return st_bf16_to_f32(st_f32_to_bf16(x)); }

/* Both backends' copies of one tensor. */
typedef struct {
    float *c, *g;
    size_t n;
} pair;
static pair mk(const float *h, size_t n) { return (pair){put(cpu, h, n), put(gpu, h, n), n}; }
static pair mk_rand(size_t n, double lo, double hi) {
    float *h = hrand(n, lo, hi);
    pair p = mk(h, n);
    free(h);
    return p;
}
static pair mk_poison(size_t n) {
    pair p = {cpu->alloc(n ? n : 1), gpu->alloc(n ? n : 1), n};
    poison(cpu, p.c, n), poison(gpu, p.g, n);
    return p;
}
static void drop(pair p) { cpu->free(p.c), gpu->free(p.g); }

/* max |g - c| / max(max |c|, floor); NaN anywhere -> inf */
static double rel_max(pair p, double floor) {
    float *c = get(cpu, p.c, p.n), *g = get(gpu, p.g, p.n);
    double num = 0, den = floor;
    for (size_t i = 0; i < p.n; i++) {
        if (!isfinite(g[i]) || !isfinite(c[i])) num = INFINITY;
        num = fmax(num, fabs((double)g[i] - c[i]));
        den = fmax(den, fabs(c[i]));
    }
    free(c), free(g);
    return num / den;
}
static double rel_l2(pair p) {
    float *c = get(cpu, p.c, p.n), *g = get(gpu, p.g, p.n);
    double num = 0, den = 0;
    for (size_t i = 0; i < p.n; i++) {
        double d = (double)g[i] - c[i];
        num += isfinite(d) ? d * d : INFINITY;
        den += (double)c[i] * c[i];
    }
    free(c), free(g);
    return sqrt(num) / fmax(sqrt(den), 1e-300);
}
static int same_bits(pair p) {
    float *c = get(cpu, p.c, p.n), *g = get(gpu, p.g, p.n);
    int same = memcmp(c, g, p.n * sizeof *c) == 0;
    free(c), free(g);
    return same;
}

/* ------------------------------------------------------------------ matmul */

/* c holds both backends' C = alpha op(A) op(B) + beta C0 (A, B, C0: the host values both computed from) */
static void check_matmul(const char *what, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                         const float *B, int ldb, float beta, const float *C0, int ldc, pair c, double rounded) {
    float *rc = get(cpu, c.c, c.n), *rg = get(gpu, c.g, c.n);
    double worst = 0;
    int untouched_ok = 1;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double abs_ab = 0;
            for (int k = 0; k < K; k++) {
                double x = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double y = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                abs_ab += fabs(x * y);
            }
            double bound = (rounded * U16 + 3.0 * K * U32) * fabs(alpha) * abs_ab +
                           (beta == 0 ? 0 : 2 * U32 * fabs(beta * C0[(size_t)i * ldc + j])) + 1e-30;
            double d = fabs((double)rg[(size_t)i * ldc + j] - rc[(size_t)i * ldc + j]);
            worst = fmax(worst, isfinite(d) ? d / bound : INFINITY);
        }
        for (int j = N; j < ldc && (size_t)i * ldc + j < c.n; j++)
            untouched_ok &= memcmp(&rg[(size_t)i * ldc + j], &C0[(size_t)i * ldc + j], sizeof *rg) == 0;
    }
    CHECKF(worst <= 1.0, "%s %c%c %dx%dx%d (alpha %g, beta %g): error %.3g x its bound", what, ta ? 'T' : 'N',
           tb ? 'T' : 'N', M, N, K, alpha, beta, worst);
    CHECKF(untouched_ok, "%s %dx%dx%d wrote outside its columns", what, M, N, K);
    free(rc), free(rg);
}

static void test_matmul_case(int ta, int tb, int M, int N, int K, int pad, float alpha, float beta) {
    int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int lda = ac + pad, ldb = bc + 2 * pad, ldc = N + pad;
    float *A = hrand((size_t)ar * lda, -1, 1), *B = hrand((size_t)br * ldb, -1, 1), *C = hrand((size_t)M * ldc, -1, 1);
    pair a = mk(A, (size_t)ar * lda), b = mk(B, (size_t)br * ldb), c = mk(C, (size_t)M * ldc);
    cpu->matmul(ta, tb, M, N, K, alpha, a.c, lda, b.c, ldb, beta, c.c, ldc);
    gpu->matmul(ta, tb, M, N, K, alpha, a.g, lda, b.g, ldb, beta, c.g, ldc);
    check_matmul("matmul", ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, c, bf16 ? 2 : 0);
    free(A), free(B), free(C);
    drop(a), drop(b), drop(c);
}

static void test_matmul(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            test_matmul_case(ta, tb, 37, 53, 29, 0, 1.0f, 0.0f);
            test_matmul_case(ta, tb, 64, 128, 256, 0, 0.5f, 1.0f);
            test_matmul_case(ta, tb, 3, 200, 17, 5, 1.0f, 1.0f); /* odd leading dimensions: unaligned rows */
        }
    test_matmul_case(0, 1, 130, 96, 1000, 3, -1.5f, 0.25f);
    test_matmul_case(0, 0, 7, 9, 0, 0, 1.0f, 0.5f); /* K = 0: C = beta C */
}

/* ------------------------------------------------------------------ elementwise and reductions */

static void test_copies_bias_embedding(void) {
    enum { T = 45, n = 70, ld = 83, V = 31, D = 77 };
    pair y = mk_rand((size_t)T * ld, -1, 1), bias = mk_rand(n, -1, 1);
    cpu->add_bias(y.c, bias.c, T, n, ld), gpu->add_bias(y.g, bias.g, T, n, ld);
    CHECKF(same_bits(y), "add_bias");
    pair db = mk_rand(n, -1, 1);
    cpu->bias_backward(db.c, y.c, T, n, ld), gpu->bias_backward(db.g, y.g, T, n, ld);
    CHECKF(rel_max(db, 1e-30) < 1e-5, "bias_backward %.3g", rel_max(db, 1e-30));
    pair cr = mk_poison((size_t)T * 90);
    cpu->copy_rows(cr.c, 90, y.c, ld, T, 60), gpu->copy_rows(cr.g, 90, y.g, ld, T, 60);
    float *h = get(gpu, cr.g, cr.n), *hc = get(cpu, cr.c, cr.n);
    int ok = 1;
    for (int t = 0; t < T; t++) {
        ok &= memcmp(h + (size_t)t * 90, hc + (size_t)t * 90, 60 * sizeof *h) == 0;
        for (int j = 60; j < 90; j++) ok &= isnan(h[(size_t)t * 90 + j]); /* beyond cols: untouched */
    }
    CHECKF(ok, "copy_rows");
    free(h), free(hc);
    pair cp = mk_poison((size_t)T * ld);
    cpu->copy(cp.c, y.c, cp.n), gpu->copy(cp.g, y.g, cp.n);
    CHECKF(same_bits(cp), "copy");
    cpu->add(cp.c, y.c, cp.n), gpu->add(cp.g, y.g, cp.n);
    CHECKF(same_bits(cp), "add");
    cpu->scale(cp.c, cp.n, 0.37f), gpu->scale(cp.g, cp.n, 0.37f);
    CHECKF(same_bits(cp), "scale");
    cpu->zero(cp.c, 100), gpu->zero(cp.g, 100);
    CHECKF(same_bits(cp), "zero");

    /* embedding: repeated ids, out of order; the gradient adds rows in token order on both backends */
    int32_t ids[T];
    for (int t = 0; t < T; t++) ids[t] = (int32_t)(tn_rng_next(&rng) % 9) * 3 % V;
    ids[5] = V - 1;
    int32_t *ic = put_i32(cpu, ids, T), *ig = put_i32(gpu, ids, T);
    pair table = mk_rand((size_t)V * D, -1, 1), emb = mk_poison((size_t)T * D);
    cpu->embedding_forward(emb.c, table.c, ic, T, D), gpu->embedding_forward(emb.g, table.g, ig, T, D);
    CHECKF(same_bits(emb), "embedding_forward");
    pair dt = mk_rand((size_t)V * D, -1, 1), dout = mk_rand((size_t)T * D, -1, 1);
    cpu->embedding_backward(dt.c, dout.c, ic, T, D), gpu->embedding_backward(dt.g, dout.g, ig, T, D);
    CHECKF(same_bits(dt), "embedding_backward (repeated ids): not the CPU's sums in token order");
    cpu->free(ic), gpu->free(ig);
    drop(y), drop(bias), drop(db), drop(cr), drop(cp), drop(table), drop(emb), drop(dt), drop(dout);
}

static void test_norms(void) {
    enum { T = 37, D = 300, NH = 3, HD = 24, LDX = 90, LDY = 100 };
    const float eps = 1e-6f;
    pair x = mk_rand((size_t)T * D, -2, 2), w = mk_rand(D, 0.5, 1.5), y = mk_poison((size_t)T * D), r = mk_poison(T);
    cpu->rmsnorm_forward(y.c, r.c, x.c, w.c, T, D, eps), gpu->rmsnorm_forward(y.g, r.g, x.g, w.g, T, D, eps);
    CHECKF(rel_max(y, 1e-30) < 1e-5 && rel_max(r, 1e-30) < 1e-5, "rmsnorm_forward %.3g %.3g", rel_max(y, 1e-30),
           rel_max(r, 1e-30));
    pair dy = mk_rand((size_t)T * D, -1, 1), dx = mk_rand((size_t)T * D, -1, 1), dw = mk_rand(D, -1, 1);
    cpu->rmsnorm_backward(dx.c, dw.c, dy.c, x.c, w.c, r.c, T, D);
    gpu->rmsnorm_backward(dx.g, dw.g, dy.g, x.g, w.g, r.g, T, D); /* dx accumulates, dw too */
    CHECKF(rel_max(dx, 1e-30) < 1e-5 && rel_max(dw, 1e-30) < 1e-5, "rmsnorm_backward dx %.3g dw %.3g",
           rel_max(dx, 1e-30), rel_max(dw, 1e-30));
    /* per-head, strided, backward in place (dx = dy) */
    pair hx = mk_rand((size_t)T * LDX, -2, 2), hw = mk_rand(HD, 0.5, 1.5), hy = mk_poison((size_t)T * LDY);
    pair hr = mk_poison((size_t)T * NH);
    cpu->head_rmsnorm_forward(hy.c, LDY, hr.c, hx.c, LDX, hw.c, T, NH, HD, eps);
    gpu->head_rmsnorm_forward(hy.g, LDY, hr.g, hx.g, LDX, hw.g, T, NH, HD, eps);
    float *yg = get(gpu, hy.g, hy.n), *yc = get(cpu, hy.c, hy.n);
    double e = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < NH * HD; j++) {
            double d = fabs((double)yg[t * LDY + j] - yc[t * LDY + j]) / fmax(1e-3, fabs(yc[t * LDY + j]));
            e = fmax(e, isfinite(d) ? d : INFINITY);
        }
    CHECKF(e < 1e-5 && rel_max(hr, 1e-30) < 1e-5, "head_rmsnorm_forward %.3g", e);
    free(yg), free(yc);
    pair g = mk_rand((size_t)T * LDY, -1, 1), hdw = mk_rand(HD, -1, 1);
    cpu->head_rmsnorm_backward(g.c, LDY, hdw.c, g.c, LDY, hx.c, LDX, hw.c, hr.c, T, NH, HD);
    gpu->head_rmsnorm_backward(g.g, LDY, hdw.g, g.g, LDY, hx.g, LDX, hw.g, hr.g, T, NH, HD);
    CHECKF(rel_max(g, 1e-30) < 1e-5 && rel_max(hdw, 1e-30) < 1e-5, "head_rmsnorm_backward %.3g %.3g",
           rel_max(g, 1e-30), rel_max(hdw, 1e-30));
    drop(x), drop(w), drop(y), drop(r), drop(dy), drop(dx), drop(dw), drop(hx), drop(hw), drop(hy), drop(hr), drop(g);
    drop(hdw);
}

static void test_rope_swiglu(void) {
    enum { T = 50, S = 25, NH = 3, HD = 18, LD = 70, I = 123 };
    pair cs = mk_rand((size_t)S * HD / 2, -1, 1), sn = mk_rand((size_t)S * HD / 2, -1, 1);
    pair x = mk_rand((size_t)T * LD, -1, 1);
    cpu->rope(x.c, T, S, NH, HD, LD, cs.c, sn.c, 0), gpu->rope(x.g, T, S, NH, HD, LD, cs.g, sn.g, 0);
    CHECKF(same_bits(x), "rope");
    cpu->rope(x.c, T, S, NH, HD, LD, cs.c, sn.c, 1), gpu->rope(x.g, T, S, NH, HD, LD, cs.g, sn.g, 1);
    CHECKF(same_bits(x), "rope (inverse)");
    pair gu = mk_rand((size_t)T * 2 * I, -4, 4), act = mk_poison((size_t)T * I), dact = mk_rand((size_t)T * I, -1, 1);
    pair dgu = mk_poison((size_t)T * 2 * I);
    cpu->swiglu_forward(act.c, gu.c, T, I), gpu->swiglu_forward(act.g, gu.g, T, I);
    cpu->swiglu_backward(dgu.c, dact.c, gu.c, T, I), gpu->swiglu_backward(dgu.g, dact.g, gu.g, T, I);
    CHECKF(rel_max(act, 1e-30) < 1e-5 && rel_max(dgu, 1e-30) < 1e-5, "swiglu %.3g %.3g", rel_max(act, 1e-30),
           rel_max(dgu, 1e-30));
    drop(cs), drop(sn), drop(x), drop(gu), drop(act), drop(dact), drop(dgu);
}

static void test_cross_entropy_dropout(void) {
    enum { T = 9, V = 5003 };
    float *h = hrand((size_t)T * V, -3, 3);
    for (int j = 0; j < V; j++) h[4 * V + j] += 60.0f;
    pair lg = mk(h, (size_t)T * V);
    int32_t tg[T] = {3, 0, -100, V - 1, 11, 7, 4000, -100, 2};
    int32_t *tc = put_i32(cpu, tg, T), *tgp = put_i32(gpu, tg, T);
    int64_t nc = 3, ng = 3;
    double lc = cpu->cross_entropy(lg.c, tc, T, V, 0.37f, &nc), lgp = gpu->cross_entropy(lg.g, tgp, T, V, 0.37f, &ng);
    CHECKF(fabs(lc - lgp) <= 1e-5 * fabs(lc) && nc == ng && nc == 10, "cross_entropy loss %.9g vs %.9g, %lld vs %lld",
           lgp, lc, (long long)ng, (long long)nc);
    CHECKF(rel_max(lg, 1e-30) < 1e-5, "cross_entropy dlogits %.3g", rel_max(lg, 1e-30));
    cpu->free(tc), gpu->free(tgp), drop(lg);

    /* the running total (one read-back per forward): chunks of 4, 4, 1 rows add to what the GPU's own
     * cross_entropy returns for each, to the bit (same kernels, same order of additions), and reading clears it */
    pair l1 = mk(h, (size_t)T * V), l2 = mk(h, (size_t)T * V);
    int32_t *tg1 = put_i32(gpu, tg, T);
    double sum = 0.0;
    int64_t n1 = 0, n2 = 0, n3 = 0;
    for (int t0 = 0; t0 < T; t0 += 4) {
        int n = t0 + 4 < T ? 4 : T - t0;
        sum += gpu->cross_entropy(l1.g + (size_t)t0 * V, tg1 + t0, n, V, 0.37f, &n1);
        gpu->cross_entropy_add(l2.g + (size_t)t0 * V, tg1 + t0, n, V, 0.37f);
    }
    double total = gpu->cross_entropy_total(&n2);
    CHECKF(total == sum && n1 == n2 && n2 == 7, "cross_entropy_total %.17g vs the chunks' %.17g, %lld vs %lld rows",
           total, sum, (long long)n2, (long long)n1);
    CHECKF(gpu->cross_entropy_total(&n3) == 0.0 && n3 == 0, "cross_entropy_total not cleared by reading it");
    float *d1 = get(gpu, l1.g, (size_t)T * V), *d2 = get(gpu, l2.g, (size_t)T * V);
    CHECKF(memcmp(d1, d2, sizeof(float) * T * V) == 0, "cross_entropy_add: dlogits differ from cross_entropy's");
    free(d1), free(d2), gpu->free(tg1), drop(l1), drop(l2), free(h);

    size_t n = 100003;
    pair x = mk_rand(n, -1, 1), y = mk_poison(n);
    cpu->dropout(y.c, x.c, n, 0.3f, 77), gpu->dropout(y.g, x.g, n, 0.3f, 77);
    CHECKF(same_bits(y), "dropout: masks differ from the CPU's");
    cpu->dropout(x.c, x.c, n, 0.1f, 5), gpu->dropout(x.g, x.g, n, 0.1f, 5); /* in place */
    CHECKF(same_bits(x), "dropout in place");
    drop(x), drop(y);
}

static void test_optimizer_support(void) {
    size_t n = ((size_t)1 << 24) + 12345; /* more than 65536 blocks of 256: the grid-stride loops wrap */
    float *hp = hrand(n, -1, 1), *hg = hrand(n, -1e-2, 1e-2), *hm = hrand(n, -1e-3, 1e-3), *hv = hrand(n, 0, 1e-5);
    pair p = mk(hp, n), g = mk(hg, n), m = mk(hm, n), v = mk(hv, n);
    for (int step = 1; step <= 2; step++) {
        double bc1 = 1 - pow(0.9, step), bc2 = 1 - pow(0.95, step);
        cpu->adamw(p.c, g.c, m.c, v.c, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, bc1, bc2);
        gpu->adamw(p.g, g.g, m.g, v.g, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, bc1, bc2);
    }
    CHECKF(same_bits(p) && same_bits(m) && same_bits(v), "adamw: not bit-identical to the CPU's torch arithmetic");
    double sc = cpu->sumsq(g.c, n), sg = gpu->sumsq(g.g, n);
    CHECKF(fabs(sc - sg) <= 1e-6 * sc, "sumsq %.12g vs %.12g", sg, sc);
    CHECK(gpu->all_finite(g.g, n));
    float inf = INFINITY;
    gpu->upload(g.g + n - 3, &inf, 1);
    CHECK(!gpu->all_finite(g.g, n) && gpu->all_finite(g.g, n - 3));
    CHECK(gpu->sumsq(g.g, 0) == 0.0 && gpu->all_finite(g.g, 0));
    free(hp), free(hg), free(hm), free(hv);
    drop(p), drop(g), drop(m), drop(v);
}

/* ------------------------------------------------------------------ attention */

static void test_attention(int B, int S, int H, int KV, int hd, int extra_ld) {
    const int ld = (H + 2 * KV) * hd + extra_ld, T = B * S;
    const size_t nq = (size_t)T * ld, no = (size_t)T * H * hd, nl = (size_t)B * H * S;
    pair qkv = mk_rand(nq, -1.5, 1.5), out = mk_poison(no), lse = mk_poison(nl), dout = mk_rand(no, -1, 1);
    cpu->attention_forward(out.c, lse.c, qkv.c, B, S, H, KV, hd, ld);
    gpu->attention_forward(out.g, lse.g, qkv.g, B, S, H, KV, hd, ld);
    double tol_f = bf16 ? 8 * U16 : 5e-5, tol_b = bf16 ? 16 * U16 : 5e-5;
    double eo = rel_l2(out), el = rel_max(lse, 1.0);
    CHECKF(eo <= tol_f && el <= tol_f, "attention B%d S%d H%d KV%d hd%d: out rel L2 %.3g, lse %.3g (bound %.3g)", B, S,
           H, KV, hd, eo, el, tol_f);
    pair dqkv = mk_poison(nq);
    /* the GPU's backward gets the CPU's forward, so only the backward's own error is measured */
    float *o = get(cpu, out.c, no), *l = get(cpu, lse.c, nl);
    gpu->upload(out.g, o, no), gpu->upload(lse.g, l, nl);
    free(o), free(l);
    cpu->attention_backward(dqkv.c, dout.c, out.c, lse.c, qkv.c, B, S, H, KV, hd, ld);
    gpu->attention_backward(dqkv.g, dout.g, out.g, lse.g, qkv.g, B, S, H, KV, hd, ld);
    float *dc = get(cpu, dqkv.c, nq), *dg = get(gpu, dqkv.g, nq);
    double num[3] = {0}, den[3] = {0};
    for (int t = 0; t < T; t++)
        for (int c = 0; c < (H + 2 * KV) * hd; c++) { /* columns beyond q|k|v are not the kernel's */
            int part = c < H * hd ? 0 : c < (H + KV) * hd ? 1 : 2;
            double d = (double)dg[(size_t)t * ld + c] - dc[(size_t)t * ld + c];
            num[part] += isfinite(d) ? d * d : INFINITY;
            den[part] += (double)dc[(size_t)t * ld + c] * dc[(size_t)t * ld + c];
        }
    for (int k = 0; k < 3; k++) {
        double e = sqrt(num[k]) / fmax(sqrt(den[k]), 1e-300);
        CHECKF(e <= tol_b, "attention backward B%d S%d H%d KV%d hd%d: d%c rel L2 %.3g (bound %.3g)", B, S, H, KV, hd,
               "qkv"[k], e, tol_b);
    }
    /* deterministic: the same bits again */
    pair again = mk_poison(nq);
    gpu->attention_backward(again.g, dout.g, out.g, lse.g, qkv.g, B, S, H, KV, hd, ld);
    float *dg2 = get(gpu, again.g, nq);
    int same = 1;
    for (int t = 0; t < T; t++) same &= memcmp(dg + (size_t)t * ld, dg2 + (size_t)t * ld, (size_t)(H + 2 * KV) * hd * 4) == 0;
    CHECKF(same, "attention backward hd%d is not deterministic", hd);
    free(dc), free(dg), free(dg2);
    drop(qkv), drop(out), drop(lse), drop(dout), drop(dqkv), drop(again);
}

/* ------------------------------------------------------------------ frozen (bf16-only) weights */

static void test_frozen(void) {
    enum { NT = 1000, NF = 5000, D = 64, O = 48, T = 33, V = 20 };
    size_t n = NT + NF;
    float *h = hrand(n, -1, 1), *hb = tn_xmalloc(n * sizeof *hb);
    for (size_t i = 0; i < n; i++) hb[i] = i < NT || !bf16 ? h[i] : bf(h[i]);
    float *gp = gpu->alloc_params(n, NT), *cp = cpu->alloc_params(n, NT);
    gpu->upload(gp, h, n);
    cpu->upload(cp, hb, n); /* the CPU gets the values the GPU holds */
    float *back = get(gpu, gp, n);
    CHECKF(memcmp(back, hb, n * sizeof *back) == 0, "frozen weights read back as their bf16 rounding");
    CHECKF(gpu->resident(gp + NT, NF) == (size_t)NF * (bf16 ? 2 : 4), "resident bytes of the frozen part: %zu",
           gpu->resident(gp + NT, NF));
    /* products, norms, biases and embeddings reading frozen weights (W at an odd offset: unaligned rows) */
    size_t wo = NT + 7, bo = NT + 4000, to = NT + 3000;
    float *hx = hrand((size_t)T * D, -1, 1), *hy = hrand((size_t)T * O, -1, 1);
    pair x = mk(hx, (size_t)T * D), y = mk(hy, (size_t)T * O);
    cpu->matmul(0, 1, T, O, D, 1.0f, x.c, D, cp + wo, D, 1.0f, y.c, O);
    gpu->matmul(0, 1, T, O, D, 1.0f, x.g, D, gp + wo, D, 1.0f, y.g, O);
    /* W is the same (rounded) on both sides: only x is rounded by the GPU's bf16 product */
    check_matmul("matmul with a frozen W", 0, 1, T, O, D, 1.0f, hx, D, hb + wo, D, 1.0f, hy, O, y, bf16 ? 1 : 0);
    float *y1 = get(cpu, y.c, y.n);
    gpu->upload(y.g, y1, y.n);
    pair dx = mk_poison((size_t)T * D); /* dx = dy W: W as the second operand, not transposed */
    float *nanv = get(cpu, dx.c, dx.n);
    cpu->matmul(0, 0, T, D, O, 1.0f, y.c, O, cp + wo, D, 0.0f, dx.c, D);
    gpu->matmul(0, 0, T, D, O, 1.0f, y.g, O, gp + wo, D, 0.0f, dx.g, D);
    check_matmul("dx through a frozen W", 0, 0, T, D, O, 1.0f, y1, O, hb + wo, D, 0.0f, nanv, D, dx, bf16 ? 1 : 0);
    free(y1), free(nanv), free(hx), free(hy);
    pair yn = mk_poison((size_t)T * D), r = mk_poison(T);
    cpu->rmsnorm_forward(yn.c, r.c, x.c, cp + bo, T, D, 1e-6f), gpu->rmsnorm_forward(yn.g, r.g, x.g, gp + bo, T, D, 1e-6f);
    CHECKF(rel_max(yn, 1e-30) < 1e-5, "rmsnorm with frozen weights %.3g", rel_max(yn, 1e-30));
    cpu->add_bias(x.c, cp + bo, T, D, D), gpu->add_bias(x.g, gp + bo, T, D, D);
    CHECKF(same_bits(x), "add_bias with a frozen bias");
    int32_t ids[T];
    for (int t = 0; t < T; t++) ids[t] = (int32_t)(tn_rng_next(&rng) % V);
    int32_t *ic = put_i32(cpu, ids, T), *ig = put_i32(gpu, ids, T);
    pair emb = mk_poison((size_t)T * D);
    cpu->embedding_forward(emb.c, cp + to, ic, T, D), gpu->embedding_forward(emb.g, gp + to, ig, T, D);
    CHECKF(same_bits(emb), "embedding from a frozen table");
    /* the trainable prefix is ordinary fp32 memory: the optimizer and the comm layer use it */
    pair g = mk_rand(NT, -1, 1), m = mk_rand(NT, -1, 1), v = mk_rand(NT, 0, 1);
    cpu->adamw(cp, g.c, m.c, v.c, NT, 1e-3, 0.9, 0.95, 1e-8, 0.0, 0.1, 0.05);
    gpu->adamw(gp, g.g, m.g, v.g, NT, 1e-3, 0.9, 0.95, 1e-8, 0.0, 0.1, 0.05);
    float *pc = get(cpu, cp, n), *pg = get(gpu, gp, n);
    CHECKF(memcmp(pc, pg, n * sizeof *pc) == 0, "adamw on the trainable prefix of a parameter slab");
    free(pc), free(pg), free(back), free(h), free(hb);
    cpu->free(ic), gpu->free(ig), cpu->free(cp), gpu->free(gp);
    drop(x), drop(y), drop(dx), drop(yn), drop(r), drop(emb), drop(g), drop(m), drop(v);
}

/* Products reading a trainable weight of the parameter slab, after each writer of the slab: W changes on both
 * backends alike, and the GPU's product must follow it (its kept bf16 copy of W rounded again). */
static void weight_product(const char *what, float *cw, float *gw, int O, int D, int T) {
    float *W = get(cpu, cw, (size_t)O * D), *X = hrand((size_t)T * D, -1, 1), *Y = hrand((size_t)T * O, -1, 1);
    pair x = mk(X, (size_t)T * D), y = mk(Y, (size_t)T * O);
    cpu->matmul(0, 1, T, O, D, 1.0f, x.c, D, cw, D, 0.0f, y.c, O);
    gpu->matmul(0, 1, T, O, D, 1.0f, x.g, D, gw, D, 0.0f, y.g, O);
    check_matmul(what, 0, 1, T, O, D, 1.0f, X, D, W, D, 0.0f, Y, O, y, bf16 ? 2 : 0);
    free(W), free(X), free(Y);
    drop(x), drop(y);
}

static void test_weight_copies(void) {
    enum { O = 40, D = 72, T = 19, NW = O * D + 100 };
    float *h = hrand(NW, -1, 1);
    float *cw = cpu->alloc_params(NW, NW), *gw = gpu->alloc_params(NW, NW);
    cpu->upload(cw, h, NW), gpu->upload(gw, h, NW);
    weight_product("weight after upload", cw + 100, gw + 100, O, D, T);
    weight_product("weight again (its kept copy)", cw + 100, gw + 100, O, D, T);
    fill(h, NW, -2, 2);
    cpu->upload(cw, h, NW), gpu->upload(gw, h, NW);
    weight_product("weight after a second upload", cw + 100, gw + 100, O, D, T);
    pair g = mk_rand(NW, -1, 1), m = mk_rand(NW, -1, 1), v = mk_rand(NW, 0, 1);
    cpu->adamw(cw, g.c, m.c, v.c, NW, 0.5, 0.9, 0.95, 1e-8, 0.1, 0.1, 0.05);
    gpu->adamw(gw, g.g, m.g, v.g, NW, 0.5, 0.9, 0.95, 1e-8, 0.1, 0.1, 0.05);
    weight_product("weight after an AdamW step", cw + 100, gw + 100, O, D, T);
    cpu->copy(cw + 100, g.c, NW - 100), gpu->copy(gw + 100, g.g, NW - 100);
    weight_product("weight after copy", cw + 100, gw + 100, O, D, T);
    cpu->scale(cw, NW, -3.0f), gpu->scale(gw, NW, -3.0f);
    weight_product("weight after scale", cw + 100, gw + 100, O, D, T);
    cpu->add(cw, m.c, NW), gpu->add(gw, m.g, NW);
    weight_product("weight after add", cw + 100, gw + 100, O, D, T);
    cpu->zero(cw + 100 + D, D), gpu->zero(gw + 100 + D, D); /* one row */
    weight_product("weight after zero of a row", cw + 100, gw + 100, O, D, T);
    cpu->free(cw), gpu->free(gw);
    drop(g), drop(m), drop(v);
    free(h);
}

int main(void) {
    const char *prec = getenv("TANDEM_TEST_PRECISION");
    bf16 = prec && strcmp(prec, "bf16") == 0;
    cpu = tn_backend_cpu();
    gpu = tn_backend_select("cuda", bf16, 0);
    if (!gpu) {
        printf("test_gpu_kernels: skipped: %s\n", tn_errmsg());
        return 77;
    }
    printf("test_gpu_kernels: %s\n", gpu->describe());
    tn_rng_seed(&rng, 20260101);
    test_matmul();
    test_copies_bias_embedding();
    test_norms();
    test_rope_swiglu();
    test_cross_entropy_dropout();
    test_optimizer_support();
    test_attention(2, 70, 4, 2, 8, 0);
    test_attention(1, 131, 3, 1, 24, 6);   /* hd 24 (Qwen3 fixture), ld wider than q|k|v */
    test_attention(2, 257, 4, 4, 64, 0);   /* MHA, S not a multiple of any tile */
    test_attention(1, 300, 8, 2, 128, 0);  /* Qwen3's head_dim */
    test_attention(1, 100, 2, 1, 256, 0);  /* the widest head: the largest shared-memory tiles */
    test_frozen();
    test_weight_copies();
    printf("test_gpu_kernels: peak device memory %.1f MiB\n", gpu->peak_bytes() / 1048576.0);
    return tl_done(bf16 ? "test_gpu_kernels (bf16)" : "test_gpu_kernels (fp32)");
}
