/* backend_profile.c -- TANDEM_PROFILE=1: every compute and copy entry of the backend timed, the device waited for
 * after each (backend_profile.h). */
#include "backend/backend_profile.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* The timed entries: X(name, return type, parameters, arguments); V: returns nothing. */
#define PROFILED_OPS(V, X)                                                                                           \
    V(upload, (float *d, const float *h, size_t n), (d, h, n))                                                     \
    V(download, (float *h, const float *d, size_t n), (h, d, n))                                                   \
    V(upload_i32, (int32_t *d, const int32_t *h, size_t n), (d, h, n))                                             \
    V(zero, (float *p, size_t n), (p, n))                                                                           \
    V(copy, (float *d, const float *s, size_t n), (d, s, n))                                                       \
    V(copy_rows, (float *d, int ldd, const float *s, int lds, int r, int c), (d, ldd, s, lds, r, c))               \
    V(add_bias, (float *y, const float *b, int T, int n, int ld), (y, b, T, n, ld))                                \
    V(bias_backward, (float *db, const float *dy, int T, int n, int ld), (db, dy, T, n, ld))                       \
    V(embedding_forward, (float *o, const float *t, const int32_t *i, int T, int D), (o, t, i, T, D))              \
    V(embedding_backward, (float *dt, const float *d, const int32_t *i, int T, int D), (dt, d, i, T, D))           \
    V(rmsnorm_forward, (float *y, float *r, const float *x, const float *w, int T, int D, float e),                \
      (y, r, x, w, T, D, e))                                                                                        \
    V(rmsnorm_backward,                                                                                             \
      (float *dx, float *dw, const float *dy, const float *x, const float *w, const float *r, int T, int D),        \
      (dx, dw, dy, x, w, r, T, D))                                                                                  \
    V(head_rmsnorm_forward,                                                                                         \
      (float *y, int ldy, float *r, const float *x, int ldx, const float *w, int T, int nh, int hd, float e),       \
      (y, ldy, r, x, ldx, w, T, nh, hd, e))                                                                         \
    V(head_rmsnorm_backward,                                                                                        \
      (float *dx, int lddx, float *dw, const float *dy, int lddy, const float *x, int ldx, const float *w,         \
       const float *r, int T, int nh, int hd),                                                                      \
      (dx, lddx, dw, dy, lddy, x, ldx, w, r, T, nh, hd))                                                            \
    V(rope, (float *x, int T, int S, int nh, int hd, int ld, const float *c, const float *s, int inv),            \
      (x, T, S, nh, hd, ld, c, s, inv))                                                                             \
    V(attention_forward,                                                                                            \
      (float *o, float *l, const float *q, int B, int S, int H, int KV, int hd, int ld),                           \
      (o, l, q, B, S, H, KV, hd, ld))                                                                               \
    V(attention_backward,                                                                                           \
      (float *dq, const float *d, const float *o, const float *l, const float *q, int B, int S, int H, int KV,     \
       int hd, int ld),                                                                                             \
      (dq, d, o, l, q, B, S, H, KV, hd, ld))                                                                        \
    V(swiglu_forward, (float *a, const float *g, int T, int I), (a, g, T, I))                                      \
    V(swiglu_backward, (float *dg, const float *da, const float *g, int T, int I), (dg, da, g, T, I))              \
    X(cross_entropy, double, (float *l, const int32_t *t, int T, int V, float g, int64_t *n), (l, t, T, V, g, n))  \
    V(cross_entropy_add, (float *l, const int32_t *t, int T, int V, float g), (l, t, T, V, g))                     \
    X(cross_entropy_total, double, (int64_t *n), (n))                                                               \
    V(dropout, (float *y, const float *x, size_t n, float p, uint64_t s), (y, x, n, p, s))                         \
    X(sumsq, double, (const float *x, size_t n), (x, n))                                                            \
    V(scale, (float *x, size_t n, float s), (x, n, s))                                                              \
    V(adamw,                                                                                                        \
      (float *p, const float *g, float *m, float *v, size_t n, double lr, double b1, double b2, double e, double wd, \
       double c1, double c2),                                                                                       \
      (p, g, m, v, n, lr, b1, b2, e, wd, c1, c2))                                                                   \
    X(all_finite, int, (const float *x, size_t n), (x, n))                                                          \
    V(add, (float *y, const float *x, size_t n), (y, x, n))                                                         \
    V(linear_rows, (float *y, int ldy, const float *x, int ldx, const float *W, int N, int K, int M, float a,      \
                    float b),                                                                                       \
      (y, ldy, x, ldx, W, N, K, M, a, b))                                                                           \
    V(rope_at, (float *x, int T, int nh, int hd, int ld, const int32_t *p, const float *c, const float *s),       \
      (x, T, nh, hd, ld, p, c, s))                                                                                  \
    V(attention_cached,                                                                                             \
      (float *o, const float *q, int ldq, const float *const *k, const float *const *v, const int32_t *p, int T,   \
       int H, int KV, int hd),                                                                                      \
      (o, q, ldq, k, v, p, T, H, KV, hd))

#define OP_ENUM_V(name, params, args) OP_##name,
#define OP_ENUM_X(name, ret, params, args) OP_##name,
enum { OP_matmul, PROFILED_OPS(OP_ENUM_V, OP_ENUM_X) OP_COUNT };

#define OP_NAME_V(name, params, args) #name,
#define OP_NAME_X(name, ret, params, args) #name,
static const char *const op_names[OP_COUNT] = {"matmul", PROFILED_OPS(OP_NAME_V, OP_NAME_X)};

#define MAX_SHAPES 256
typedef struct {
    int ta, tb, M, N, K;
    long calls;
    double seconds;
} shape_stat;

static const tn_backend *g_inner;
static tn_backend g_profiled;
static long g_calls[OP_COUNT];
static double g_seconds[OP_COUNT];
static shape_stat g_shapes[MAX_SHAPES];
static int g_n_shapes, g_shapes_full;

/* the call's time, the device's included: its kernels are waited for before the clock stops */
static double end_of(double t0) {
    g_inner->sync();
    return tn_now() - t0;
}

static void charge(int op, double seconds) {
    g_calls[op]++;
    g_seconds[op] += seconds;
}

#define WRAP_V(name, params, args)                                                                                   \
    static void p_##name params {                                                                                    \
        double t0 = tn_now();                                                                                        \
        g_inner->name args;                                                                                          \
        charge(OP_##name, end_of(t0));                                                                               \
    }
#define WRAP_X(name, ret, params, args)                                                                              \
    static ret p_##name params {                                                                                     \
        double t0 = tn_now();                                                                                        \
        ret r = g_inner->name args;                                                                                  \
        charge(OP_##name, end_of(t0));                                                                               \
        return r;                                                                                                    \
    }
PROFILED_OPS(WRAP_V, WRAP_X)

static void shape_charge(int ta, int tb, int M, int N, int K, double seconds) {
    for (int i = 0; i < g_n_shapes; i++) {
        shape_stat *s = &g_shapes[i];
        if (s->ta == ta && s->tb == tb && s->M == M && s->N == N && s->K == K) {
            s->calls++, s->seconds += seconds;
            return;
        }
    }
    if (g_n_shapes == MAX_SHAPES) { /* the ops table still counts it */
        g_shapes_full = 1;
        return;
    }
    g_shapes[g_n_shapes++] = (shape_stat){ta, tb, M, N, K, 1, seconds};
}

static void p_matmul(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc) {
    double t0 = tn_now();
    g_inner->matmul(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    double s = end_of(t0);
    charge(OP_matmul, s);
    shape_charge(ta, tb, M, N, K, s);
}

static int by_seconds_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int shapes_by_seconds_desc(const void *a, const void *b) {
    double x = ((const shape_stat *)a)->seconds, y = ((const shape_stat *)b)->seconds;
    return x < y ? 1 : x > y ? -1 : 0;
}

void tn_backend_profile_report(FILE *f) {
    double total = 0;
    for (int i = 0; i < OP_COUNT; i++) total += g_seconds[i];
    if (!g_inner || total <= 0) return;
    struct {
        double seconds;
        int op;
    } order[OP_COUNT];
    for (int i = 0; i < OP_COUNT; i++) order[i].seconds = g_seconds[i], order[i].op = i;
    qsort(order, OP_COUNT, sizeof *order, by_seconds_desc);
    fprintf(f, "tandem: profile (TANDEM_PROFILE=1; %s backend; the device waited for after every call): %.3f s in "
               "backend calls\n", g_inner->name, total);
    fprintf(f, "  %-22s %9s %11s %7s %11s\n", "op", "calls", "total ms", "share", "mean us");
    for (int i = 0; i < OP_COUNT && order[i].seconds > 0; i++) {
        int op = order[i].op;
        fprintf(f, "  %-22s %9ld %11.2f %6.1f%% %11.1f\n", op_names[op], g_calls[op], 1e3 * g_seconds[op],
                100 * g_seconds[op] / total, 1e6 * g_seconds[op] / (double)g_calls[op]);
    }
    qsort(g_shapes, (size_t)g_n_shapes, sizeof *g_shapes, shapes_by_seconds_desc);
    fprintf(f, "  matrix products by shape (C[M,N] = op(A)[M,K] op(B)[K,N]; ta/tb: transposed):\n");
    fprintf(f, "  %-5s %8s %8s %8s %7s %11s %7s %9s\n", "op", "M", "N", "K", "calls", "total ms", "share",
            "TFLOP/s");
    for (int i = 0; i < g_n_shapes && i < 12; i++) {
        const shape_stat *s = &g_shapes[i];
        double flops = 2.0 * s->M * (double)s->N * s->K * (double)s->calls;
        fprintf(f, "  %s%s    %8d %8d %8d %7ld %11.2f %6.1f%% %9.2f\n", s->ta ? "T" : "N", s->tb ? "T" : "N", s->M,
                s->N, s->K, s->calls, 1e3 * s->seconds, 100 * s->seconds / total,
                s->seconds > 0 ? flops / s->seconds / 1e12 : 0.0);
    }
    if (g_shapes_full) fprintf(f, "  (more than %d shapes: the rest are in the matmul row only)\n", MAX_SHAPES);
}

static void report_at_exit(void) { tn_backend_profile_report(stderr); }

int tn_backend_profile_wanted(void) {
    const char *s = getenv("TANDEM_PROFILE");
    if (!s || !*s || strcmp(s, "0") == 0) return 0;
    if (strcmp(s, "1") == 0) return 1;
    tn_die("TANDEM_PROFILE='%s': expected 1 (time every backend call) or 0", s);
}

#define INSTALL_V(name, params, args)                                                                                \
    if (inner->name) g_profiled.name = p_##name;
#define INSTALL_X(name, ret, params, args) INSTALL_V(name, params, args)

const tn_backend *tn_backend_profiled(const tn_backend *inner) {
    if (g_inner == inner) return &g_profiled;
    if (g_inner) tn_die("profile: one profiled backend per process (%s already, now %s)", g_inner->name, inner->name);
    g_inner = inner;
    g_profiled = *inner; /* entries not timed (alloc, free, describe, sync, ...) are the inner ones */
    g_profiled.matmul = p_matmul;
    PROFILED_OPS(INSTALL_V, INSTALL_X)
    atexit(report_at_exit);
    return &g_profiled;
}

long tn_backend_profile_calls(const char *op, double *seconds) {
    for (int i = 0; i < OP_COUNT; i++)
        if (strcmp(op_names[i], op) == 0) {
            if (seconds) *seconds = g_seconds[i];
            return g_calls[i];
        }
    if (seconds) *seconds = 0;
    return 0;
}
