/* test_unit_nonfinite -- every CPU kernel (and vmath's scalar functions) on NaN, +inf and -inf inputs.
 *
 * A property test, not a list of cases: for each kernel, random inputs are run once clean, then many times with
 * one element of one input replaced by NaN, +inf or -inf at a random place. Each poisoned run must
 *   - be defined behaviour (the sanitizer build runs this test under UBSan, which aborts on any report);
 *   - leave every output that does not depend on the poisoned element bit-identical to the clean run (a non-finite
 *     value stays in the rows the mathematics routes it to: one bad token cannot spoil another sequence);
 *   - never absorb a NaN: some output that depends on it is non-finite, so the trainer's all_finite check sees it
 *     (a NaN that turns into a finite number would train on garbage silently).
 * The dependencies ("row t of x feeds row t of y") are read off each kernel's formula in backend.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/vmath.h"
#include "core/core.h"
#include "testlib.h"

static const tn_backend *be;
static tn_rng rng;

#define MAX_IN 5
enum { T = 6, D = 21, NH = 3, HD = 8, V = 19, KVH = 1, S = 3, BATCH = 2 };

typedef struct {
    const char *name;
    int n_in;
    size_t in_len[MAX_IN];
    size_t out_len;
    void (*run)(float **in, float *out); /* out: every output of the kernel, concatenated */
    int (*row_of)(size_t j);             /* the row of output element j */
    int (*dep)(int i, size_t e, int row); /* does output row `row` depend on element e of input i? */
} kcase;

static float *fresh(size_t n) { return be->alloc(n ? n : 1); }

/* ------------------------------------------------------------------ kernels and their dependencies */

/* row T of an output is "global": a value every row feeds (dw, dbias, the loss) */
static int out_row_d(size_t j) { return (int)(j / D); }
static int out_elem(size_t j) { return (int)j; }
static int dep_elem(int i, size_t e, int row) { (void)i; return row == (int)e; }

static void run_matmul(float **in, float *out) { /* out[T, D] = in0[T, 7] in1[D, 7]^T */
    be->matmul(0, 1, T, D, 7, 1.0f, in[0], 7, in[1], 7, 0.0f, out, D);
}
static int dep_matmul(int i, size_t e, int row) { return i == 1 || row == (int)(e / 7); }

static void run_add_bias(float **in, float *out) {
    memcpy(out, in[0], sizeof(float) * T * D);
    be->add_bias(out, in[1], T, D, D);
}
static int dep_bias(int i, size_t e, int row) { return i == 1 || row == (int)(e / D); }

static void run_bias_backward(float **in, float *out) { /* dbias[D] += column sums of dy */
    memset(out, 0, sizeof(float) * D);
    be->bias_backward(out, in[0], T, D, D);
}
static int dep_col(int i, size_t e, int row) { (void)i; return row == (int)(e % D); }

static const int32_t IDS[T] = {3, 0, 5, 1, 3, 2}; /* token 3 twice: its gradient rows add up */
static void run_embedding(float **in, float *out) { be->embedding_forward(out, in[0], IDS, T, D); }
static int dep_embedding(int i, size_t e, int row) { (void)i; return row < T && IDS[row] == (int)(e / D); }
static void run_embedding_backward(float **in, float *out) {
    memset(out, 0, sizeof(float) * T * D);
    be->embedding_backward(out, in[0], IDS, T, D);
}
static int dep_embedding_backward(int i, size_t e, int row) { (void)i; return row == IDS[e / D]; }

/* rmsnorm: out = y [T, D], rstd [T], dx [T, D], dw [D] (row T) */
static void run_rmsnorm(float **in, float *out) {
    float *y = out, *rstd = y + T * D, *dx = rstd + T, *dw = dx + T * D;
    be->rmsnorm_forward(y, rstd, in[0], in[1], T, D, 1e-5f);
    memset(dx, 0, sizeof(float) * (T * D + D));
    be->rmsnorm_backward(dx, dw, in[2], in[0], in[1], rstd, T, D);
}
static int out_row_rms(size_t j) {
    if (j < T * D) return (int)(j / D);
    if (j < T * D + T) return (int)(j - T * D);
    if (j < 2 * T * D + T) return (int)((j - T * D - T) / D);
    return T;
}
static int dep_rms(int i, size_t e, int row) { return row == T || i == 1 || row == (int)(e / D); }

static void run_head_rmsnorm(float **in, float *out) { /* [T, NH*HD] heads, q_norm style */
    float *y = out, *rstd = y + T * NH * HD, *dx = rstd + T * NH, *dw = dx + T * NH * HD;
    be->head_rmsnorm_forward(y, NH * HD, rstd, in[0], NH * HD, in[1], T, NH, HD, 1e-6f);
    memset(dw, 0, sizeof(float) * HD);
    be->head_rmsnorm_backward(dx, NH * HD, dw, in[2], NH * HD, in[0], NH * HD, in[1], rstd, T, NH, HD);
}
static int out_row_head(size_t j) {
    const size_t W = NH * HD;
    if (j < T * W) return (int)(j / W);
    if (j < T * W + T * NH) return (int)((j - T * W) / NH);
    if (j < 2 * T * W + T * NH) return (int)((j - T * W - T * NH) / W);
    return T;
}
static int dep_head(int i, size_t e, int row) { return row == T || i == 1 || row == (int)(e / (NH * HD)); }

static float COS[S * HD / 2], SIN[S * HD / 2];
static void run_rope(float **in, float *out) {
    memcpy(out, in[0], sizeof(float) * T * NH * HD);
    be->rope(out, T, S, NH, HD, NH * HD, COS, SIN, 0);
}
static int out_row_w(size_t j) { return (int)(j / (NH * HD)); }
static int dep_row_w(int i, size_t e, int row) { (void)i; return row == (int)(e / (NH * HD)); }

static const int32_t POS[T] = {0, 1, 2, 3, 4, 5};
static float COS_T[T * HD / 2], SIN_T[T * HD / 2];
static void run_rope_at(float **in, float *out) {
    memcpy(out, in[0], sizeof(float) * T * NH * HD);
    be->rope_at(out, T, NH, HD, NH * HD, POS, COS_T, SIN_T);
}

/* attention: BATCH sequences of S rows, AH = 2 query heads, one kv head; qkv [BATCH*S, (2+2) HD]. Rows are
 * sequences here: everything of a sequence may depend on everything of it (masked products 0 * V still read V, as
 * in eager PyTorch); other sequences must not. */
enum { AH = 2, LDQKV = (AH + 2) * HD };
static void run_attention(float **in, float *out) {
    float *o = out, *lse = o + BATCH * S * AH * HD, *dqkv = lse + BATCH * AH * S;
    be->attention_forward(o, lse, in[0], BATCH, S, AH, KVH, HD, LDQKV);
    be->attention_backward(dqkv, in[1], o, lse, in[0], BATCH, S, AH, KVH, HD, LDQKV);
}
static int out_seq_att(size_t j) {
    const size_t no = BATCH * S * AH * HD, nl = BATCH * AH * S;
    if (j < no) return (int)(j / (S * AH * HD));
    if (j < no + nl) return (int)((j - no) / (AH * S));
    return (int)((j - no - nl) / (S * LDQKV));
}
static int dep_seq_att(int i, size_t e, int row) { return row == (int)(e / (S * (i == 0 ? LDQKV : AH * HD))); }

/* cached attention: one sequence of T rows at positions 0..T-1 (a prefill) reading its own keys */
static void run_attention_cached(float **in, float *out) {
    const float *k[T], *v[T];
    for (int t = 0; t < T; t++) k[t] = in[1], v[t] = in[2];
    be->attention_cached(out, in[0], AH * HD, k, v, POS, T, AH, KVH, HD);
}
static int out_row_ah(size_t j) { return (int)(j / (AH * HD)); }
static int dep_cached(int i, size_t e, int row) { return i != 0 || row == (int)(e / (AH * HD)); }

static void run_linear_rows(float **in, float *out) { be->linear_rows(out, D, in[0], 7, in[1], D, 7, 3, 1.0f, 0.0f); }
static int dep_linear_rows(int i, size_t e, int row) { return i == 1 || row == (int)(e / 7); }

static void run_swiglu(float **in, float *out) { /* act [T, D], dgu [T, 2D] */
    be->swiglu_forward(out, in[0], T, D);
    be->swiglu_backward(out + T * D, in[1], in[0], T, D);
}
static int out_row_swiglu(size_t j) { return j < T * D ? (int)(j / D) : (int)((j - T * D) / (2 * D)); }
static int dep_swiglu(int i, size_t e, int row) { return row == (int)(e / (i == 0 ? 2 * D : D)); }

/* cross-entropy: dlogits [T, V] then the loss (row T); row 2's target is ignored (-100): its output is 0 whatever
 * its logits hold, as PyTorch's ignore_index leaves it out */
static const int32_t TARGETS[T] = {4, 0, -100, 18, 7, 4};
static void run_cross_entropy(float **in, float *out) {
    memcpy(out, in[0], sizeof(float) * T * V);
    int64_t n = 0;
    out[T * V] = (float)be->cross_entropy(out, TARGETS, T, V, 0.25f, &n);
}
static int out_row_ce(size_t j) { return (int)(j / V); }
static int dep_ce(int i, size_t e, int row) {
    (void)i;
    int t = (int)(e / V);
    return TARGETS[t] >= 0 && (row == t || row == T);
}

static void run_dropout(float **in, float *out) { be->dropout(out, in[0], T * D, 0.3f, 1234); }

static void run_elementwise(float **in, float *out) { /* adamw, add, scale: each element on its own */
    float *p = out, *m = p + T * D, *v = m + T * D, *y = v + T * D;
    memcpy(p, in[0], sizeof(float) * T * D);
    memcpy(m, in[2], sizeof(float) * T * D);
    memcpy(v, in[3], sizeof(float) * T * D);
    for (int j = 0; j < T * D; j++) v[j] = fabsf(v[j]); /* second moments are >= 0 (unless poisoned) */
    be->adamw(p, in[1], m, v, T * D, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.1, 0.001);
    memcpy(y, in[4], sizeof(float) * T * D);
    be->add(y, in[1], T * D);
    be->scale(y, T * D, 0.5f);
}
static int out_elem_mod(size_t j) { return (int)(j % (T * D)); }
static int dep_elem_mod(int i, size_t e, int row) { (void)i; return row == (int)e; }

static void run_sumsq(float **in, float *out) { out[0] = (float)be->sumsq(in[0], T * D); }
static int out_zero(size_t j) { (void)j; return 0; }
static int dep_all(int i, size_t e, int row) { (void)i, (void)e, (void)row; return 1; }

/* ------------------------------------------------------------------ the property */

static const float POISON[3] = {NAN, INFINITY, -INFINITY};

static void run_case(const kcase *k, int trials) {
    float *in[MAX_IN], *work[MAX_IN];
    for (int i = 0; i < k->n_in; i++) {
        in[i] = fresh(k->in_len[i]);
        work[i] = fresh(k->in_len[i]);
        for (size_t j = 0; j < k->in_len[i]; j++) in[i][j] = (float)(4.0 * tn_rng_uniform(&rng) - 2.0);
    }
    float *clean = fresh(k->out_len), *out = fresh(k->out_len);
    for (int i = 0; i < k->n_in; i++) memcpy(work[i], in[i], sizeof(float) * k->in_len[i]);
    k->run(work, clean);
    int bad_clean = 0;
    for (size_t j = 0; j < k->out_len; j++) bad_clean += !isfinite(clean[j]);
    CHECKF(bad_clean == 0, "%s: %d outputs of the clean run are not finite", k->name, bad_clean);
    int leaks = 0, absorbed = 0;
    for (int trial = 0; trial < trials; trial++) {
        int i = (int)(tn_rng_uniform(&rng) * k->n_in);
        size_t e = (size_t)(tn_rng_uniform(&rng) * (double)k->in_len[i]);
        float val = POISON[trial % 3];
        for (int q = 0; q < k->n_in; q++) memcpy(work[q], in[q], sizeof(float) * k->in_len[q]);
        work[i][e] = val;
        k->run(work, out);
        int dep_nonfinite = 0, any_dep = 0;
        for (size_t j = 0; j < k->out_len; j++) {
            int d = k->dep(i, e, k->row_of(j));
            any_dep |= d;
            if (d) dep_nonfinite |= !isfinite(out[j]);
            else if (memcmp(&out[j], &clean[j], sizeof(float)) != 0 && leaks++ < 3)
                CHECKF(0, "%s: %g in input %d element %zu changed independent output %zu (row %d): %g -> %g", k->name,
                       val, i, e, j, k->row_of(j), clean[j], out[j]);
        }
        if (val != val && any_dep && !dep_nonfinite && absorbed++ < 3)
            CHECKF(0, "%s: NaN in input %d element %zu absorbed: every output depending on it is finite", k->name, i, e);
    }
    CHECKF(leaks == 0, "%s: %d poisoned runs changed outputs that do not depend on the poison", k->name, leaks);
    CHECKF(absorbed == 0, "%s: %d NaNs absorbed", k->name, absorbed);
    for (int i = 0; i < k->n_in; i++) be->free(in[i]), be->free(work[i]);
    be->free(clean), be->free(out);
}

/* ------------------------------------------------------------------ vmath's scalar functions */

static void test_vmath(void) {
    CHECK(isnan(tn_expf(NAN)));
    CHECK(tn_expf(INFINITY) == INFINITY);
    CHECK(tn_expf(-INFINITY) >= 0.0f && tn_expf(-INFINITY) < 1e-37f);
    CHECK(tn_expf(89.0f) == INFINITY); /* e^89 > FLT_MAX: overflows as expf does */
    CHECK_NEAR(tn_expf(88.0f) / expf(88.0f), 1.0, 1e-6);
    CHECK(isnan(tn_sigmoidf(NAN)));
    CHECK(tn_sigmoidf(INFINITY) == 1.0f);
    CHECK(tn_sigmoidf(-INFINITY) >= 0.0f && tn_sigmoidf(-INFINITY) < 1e-37f);
    float row[37];
    for (int pos = 0; pos < 37; pos += 5)
        for (int p = 0; p < 3; p++) {
            for (int j = 0; j < 37; j++) row[j] = (float)j / 37.0f;
            row[pos] = POISON[p];
            float m = tn_max(row, 37);
            if (p == 1) CHECK(m == INFINITY);
            float s = tn_exp_shift_sum(row, 37, p == 0 ? 1.0f : m);
            CHECKF(!isfinite(s) || p == 2, "exp_shift_sum with %g at %d gave %g", POISON[p], pos, s);
            CHECKF(!isfinite(tn_dot(row, row, 37)) || p == 2, "dot with %g at %d finite", POISON[p], pos);
        }
    /* all_finite finds one non-finite value anywhere */
    float *x = fresh(1000);
    for (int p = 0; p < 3; p++)
        for (int pos = 0; pos < 1000; pos += 111) {
            memset(x, 0, 1000 * sizeof *x);
            CHECK(be->all_finite(x, 1000));
            x[pos] = POISON[p];
            CHECKF(!be->all_finite(x, 1000), "all_finite missed %g at %d", POISON[p], pos);
        }
    be->free(x);
}

int main(void) {
    be = tn_backend_cpu();
    tn_rng_seed(&rng, 20261127);
    for (int j = 0; j < S * HD / 2; j++) COS[j] = cosf(0.3f * (float)j), SIN[j] = sinf(0.3f * (float)j);
    for (int j = 0; j < T * HD / 2; j++) COS_T[j] = cosf(0.2f * (float)j), SIN_T[j] = sinf(0.2f * (float)j);
    test_vmath();
    const kcase cases[] = {
        {"matmul", 2, {T * 7, D * 7}, T * D, run_matmul, out_row_d, dep_matmul},
        {"add_bias", 2, {T * D, D}, T * D, run_add_bias, out_row_d, dep_bias},
        {"bias_backward", 1, {T * D}, D, run_bias_backward, out_elem, dep_col},
        {"embedding_forward", 1, {6 * D}, T * D, run_embedding, out_row_d, dep_embedding},
        {"embedding_backward", 1, {T * D}, 6 * D, run_embedding_backward, out_row_d, dep_embedding_backward},
        {"rmsnorm", 3, {T * D, D, T * D}, 2 * T * D + T + D, run_rmsnorm, out_row_rms, dep_rms},
        {"head_rmsnorm", 3, {T * NH * HD, HD, T * NH * HD}, 2 * T * NH * HD + T * NH + HD, run_head_rmsnorm,
         out_row_head, dep_head},
        {"rope", 1, {T * NH * HD}, T * NH * HD, run_rope, out_row_w, dep_row_w},
        {"rope_at", 1, {T * NH * HD}, T * NH * HD, run_rope_at, out_row_w, dep_row_w},
        {"attention", 2, {BATCH * S * LDQKV, BATCH * S * AH * HD},
         BATCH * S * AH * HD + BATCH * AH * S + BATCH * S * LDQKV, run_attention, out_seq_att, dep_seq_att},
        {"attention_cached", 3, {T * AH * HD, T * KVH * HD, T * KVH * HD}, T * AH * HD, run_attention_cached,
         out_row_ah, dep_cached},
        {"linear_rows", 2, {3 * 7, D * 7}, 3 * D, run_linear_rows, out_row_d, dep_linear_rows},
        {"swiglu", 2, {T * 2 * D, T * D}, T * D + T * 2 * D, run_swiglu, out_row_swiglu, dep_swiglu},
        {"cross_entropy", 1, {T * V}, T * V + 1, run_cross_entropy, out_row_ce, dep_ce},
        {"dropout", 1, {T * D}, T * D, run_dropout, out_elem, dep_elem},
        {"adamw_add_scale", 5, {T * D, T * D, T * D, T * D, T * D}, 4 * T * D, run_elementwise, out_elem_mod,
         dep_elem_mod},
        {"sumsq", 1, {T * D}, 1, run_sumsq, out_zero, dep_all},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) run_case(&cases[c], 300);
    return tl_done("test_unit_nonfinite");
}
