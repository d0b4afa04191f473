/* parity_bounds.c -- see parity_bounds.h; the bounds are derived in test_parity_fixtures.c's header.
 *
 * When a fixture is too degenerate to test the update: elements whose float64 gradient is nonzero but below
 * TAU x the tensor's rms are judged only by AdamW's step bound. How many of them a tensor has is a property of the
 * mathematics, not of the fixture's quality (a key bias barely reaches the softmax: by shift invariance its exact
 * gradient is ~0 along the components RoPE does not rotate, so another seed or shape may leave half of k_proj.bias
 * near zero). So no per-tensor share is imposed; a tensor always keeps its elements at or above TAU x rms
 * (the largest |g| is at least the rms), and a fixture is refused only when it stops testing the update for real:
 * a trainable tensor whose float64 gradient is exactly zero everywhere, or more than half of all elements with a
 * nonzero gradient judged by the loose bound. */
#include "parity/parity_bounds.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "testlib.h"

double *pb_read_f64(const st_file *f, const char *name, int64_t *n) {
    const st_tensor *t = st_find(f, name);
    if (!t) return NULL;
    double *d = tn_xmalloc((size_t)t->numel * sizeof *d);
    if (st_read_f64(f, t, d, t->numel) != 0) tn_die("%s", tn_errmsg());
    *n = t->numel;
    return d;
}

/* One tensor: tight bound on the included elements (returned ratio), AdamW's step bound on the others. */
static double judge_tensor(const char *name, const tn_param *p, const float *t0, const float *t3, const double *ref3,
                           const double *g, int64_t n, double lr, double wd, int bf16, int64_t *excluded,
                           int64_t *nonzero) {
    double g2 = 0;
    int64_t nz = 0;
    for (int64_t k = 0; k < n; k++) g2 += g[k] * g[k], nz += g[k] != 0;
    const double floor_g = TAU * sqrt(g2 / (double)(nz ? nz : 1));
    double err2 = 0, upd2 = 0, p2 = 0, worst_excluded = 0;
    int64_t ex = 0;
    for (int64_t k = 0; k < n; k++) {
        double d = (double)t3[k] - ref3[k];
        if (bf16 || (g[k] != 0 && fabs(g[k]) < floor_g)) {
            ex++;
            double step_bound = 2 * 3 * lr * (ADAMW_STEP_MAX + (p->decay ? wd : 0) * fabs(ref3[k]));
            worst_excluded = fmax(worst_excluded, fabs(d) / step_bound);
            continue;
        }
        double u = ref3[k] - (double)t0[k];
        err2 += d * d, upd2 += u * u, p2 += ref3[k] * ref3[k];
    }
    double bound = STORE_ROUNDINGS * FP32_U * sqrt(p2) + DIR_GAIN * GRAD_TOL / TAU * sqrt(upd2);
    double ratio = bf16 ? 0 : sqrt(err2) / bound;
    CHECKF(ratio <= 1.0, "%s: step-3 update of %s errs by %.3g (L2), bound %.3g (%lld elements near zero gradient "
           "excluded)", name, p->name, sqrt(err2), bound, (long long)ex);
    CHECKF(worst_excluded <= 1.0, "%s: step-3 %s: an element with near-zero gradient moved %.3g x AdamW's step "
           "bound away from float64's", name, p->name, worst_excluded);
    CHECKF(bf16 || nz > 0, "%s: %s: the float64 gradient is zero everywhere; the fixture does not test its update",
           name, p->name);
    if (getenv("TANDEM_PARITY_VERBOSE"))
        printf("  %-56s update error %.3g of bound (%lld/%lld near-zero)\n", p->name, ratio, (long long)ex, (long long)n);
    *excluded += ex, *nonzero += nz;
    return ratio;
}

pb_step3 pb_check_step3(const char *name, tn_model *m, const float *p0, const st_file *gf, const st_file *pf, double lr,
                        double wd, int bf16) {
    pb_step3 w = {0};
    float *p3 = tn_xmalloc(m->n_trainable * sizeof *p3);
    m->be->download(p3, m->slab, m->n_trainable);
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        if (!p->trainable) continue;
        int64_t n = 0, ng = 0;
        char fname[160];
        tn_model_file_name(m, p->name, fname, sizeof fname);
        double *ref3 = pb_read_f64(pf, fname, &n), *g = pb_read_f64(gf, fname, &ng);
        if (CHECKF(ref3 && g && n == (int64_t)p->numel && ng == n, "%s: no step-3 reference for %s", name, fname)) {
            double ratio = judge_tensor(name, p, p0 + p->offset, p3 + p->offset, ref3, g, n, lr, wd, bf16, &w.excluded,
                                        &w.nonzero);
            if (ratio > w.ratio) {
                w.ratio = ratio;
                snprintf(w.tensor, sizeof w.tensor, "%s", p->name);
            }
            w.elements += n;
        }
        free(ref3);
        free(g);
    }
    CHECKF(bf16 || w.excluded * 2 <= w.nonzero, "%s: %lld of the %lld elements with a nonzero gradient are near zero "
           "(below %g x their tensor's rms); the fixture no longer tests the update", name, (long long)w.excluded,
           (long long)w.nonzero, TAU);
    free(p3);
    return w;
}
