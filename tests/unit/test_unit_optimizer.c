/* test_unit_optimizer -- global gradient-norm clipping and AdamW against references written here in
 * double precision (torch's clip_grad_norm_ and AdamW formulas), on a small qwen2 model (biases and
 * tied embeddings, more than 4096 trainable floats so the blocked sum of squares is crossed), and the
 * backend's all_finite / sumsq / scale primitives on arrays holding NaN and Inf. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model.h"
#include "testlib.h"
#include "trainer/optimizer.h"

static tn_rng rng;
static double urand(double lo, double hi) { return lo + (hi - lo) * tn_rng_uniform(&rng); }

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ------------------------------------------------------------------ clipping */

static void test_clip(tn_model *m) {
    const size_t n = m->n_trainable;
    CHECKF(n > 2 * 4096, "model too small for the test: %zu trainable floats", n);
    float *g = malloc(n * sizeof *g), *out = malloc(n * sizeof *out);
    double ss = 0;
    for (size_t i = 0; i < n; i++) {
        g[i] = (float)(urand(-1, 1) * (i % 7 == 0 ? 10.0 : 0.1));
        ss += (double)g[i] * g[i];
    }
    double norm = sqrt(ss);

    /* max_norm <= 0: measure only */
    const double only_measure[] = {0.0, -1.0};
    for (int k = 0; k < 2; k++) {
        m->be->upload(m->grad, g, n);
        double r = tn_clip_grad_norm(m, only_measure[k]);
        CHECKF(fabs(r - norm) <= 1e-5 * norm, "norm %.9g vs %.9g", r, norm);
        m->be->download(out, m->grad, n);
        CHECK(memcmp(out, g, n * sizeof *g) == 0);
    }
    /* max_norm just above the norm: unchanged */
    m->be->upload(m->grad, g, n);
    double r = tn_clip_grad_norm(m, 1.001 * norm);
    CHECKF(fabs(r - norm) <= 1e-5 * norm, "norm %.9g vs %.9g", r, norm);
    m->be->download(out, m->grad, n);
    CHECK(memcmp(out, g, n * sizeof *g) == 0);

    /* max_norm below: every gradient scaled by max_norm / (norm + 1e-6) */
    const double max_norm = norm / 3.7;
    m->be->upload(m->grad, g, n);
    r = tn_clip_grad_norm(m, max_norm);
    CHECKF(fabs(r - norm) <= 1e-5 * norm, "pre-clip norm returned %.9g, want %.9g", r, norm);
    m->be->download(out, m->grad, n);
    /* the kernel sums squares in fp32 lanes (~1e-6 relative), so the coefficient is checked two ways: exactly
     * from the returned norm, and to the norm's own accuracy from the double one */
    double coef = max_norm / (r + 1e-6), coef_d = max_norm / (norm + 1e-6), worst = 0, worst_d = 0, ss2 = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(out[i] - g[i] * coef) / fmax(1e-30, fabs(g[i] * coef)));
        worst_d = fmax(worst_d, fabs(out[i] - g[i] * coef_d) / fmax(1e-30, fabs(g[i] * coef_d)));
        ss2 += (double)out[i] * out[i];
    }
    printf("clip: norm rel err %.2e, clipped grads rel err %.2e (vs double norm %.2e)\n", fabs(r - norm) / norm, worst,
           worst_d);
    CHECKF(worst < 2e-7, "clipped gradients rel err %.3g", worst);
    CHECKF(worst_d < 1e-5, "clipped gradients rel err vs the double norm %.3g", worst_d);
    CHECKF(fabs(sqrt(ss2) - max_norm) < 1e-5 * max_norm, "norm after clipping %.9g, want %.9g", sqrt(ss2), max_norm);

    /* norm 1e-7 with max_norm 1e-7: clipping still scales, by 1e-7 / (1e-7 + 1e-6) (torch's +1e-6) */
    for (size_t i = 0; i < n; i++) g[i] = i == 5 ? 1e-7f : 0.0f;
    m->be->upload(m->grad, g, n);
    r = tn_clip_grad_norm(m, 1e-7);
    m->be->download(out, m->grad, n);
    CHECKF(fabs(r - 1e-7) < 1e-12, "tiny norm %.9g", r);
    CHECKF(fabs(out[5] - 1e-7 * (1e-7 / (1e-7 + 1e-6))) < 1e-12, "tiny-norm clip uses norm + 1e-6: got %.9g", out[5]);
    free(g);
    free(out);
}

/* ------------------------------------------------------------------ AdamW */

typedef struct {
    double *p, *m, *v;
} ref_state;

/* torch.optim.AdamW (single tensor), step t: everything in double */
static void ref_adamw(ref_state *s, const float *g, size_t n, double lr, double b1, double b2, double eps, double wd,
                      int t) {
    double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
    for (size_t i = 0; i < n; i++) {
        s->p[i] *= 1 - lr * wd;
        s->m[i] = b1 * s->m[i] + (1 - b1) * g[i];
        s->v[i] = b2 * s->v[i] + (1 - b2) * (double)g[i] * g[i];
        s->p[i] -= lr / bc1 * s->m[i] / (sqrt(s->v[i]) / sqrt(bc2) + eps);
    }
}

/* Two steps from the same parameters with hand-filled gradients; returns the worst relative errors of
 * parameters, exp_avg and exp_avg_sq over both steps. Errors are relative to the magnitudes that enter
 * each quantity (|p| or the step's change, whichever is larger; b1|m| + (1-b1)|g| for the first moment),
 * so fp32 rounding of a cancelling sum is not mistaken for a wrong formula. */
static void run_adamw(tn_model *m, const tn_adamw_hparams *h, double err[3]) {
    const size_t N = m->n_total, n = m->n_trainable;
    float *p0 = malloc(N * sizeof *p0), *g = malloc(n * sizeof *g), *host = malloc(N * sizeof *host);
    float *mm = malloc(n * sizeof *mm), *vv = malloc(n * sizeof *vv);
    double *prev_p = malloc(n * sizeof(double)), *prev_m = malloc(n * sizeof(double));
    ref_state s = {malloc(n * sizeof(double)), calloc(n, sizeof(double)), calloc(n, sizeof(double))};
    tn_rng_seed(&rng, 7); /* same parameters and gradients for every hyper-parameter set */
    for (size_t i = 0; i < N; i++) p0[i] = (float)urand(-1, 1);
    for (size_t i = 0; i < n; i++) s.p[i] = p0[i];
    m->be->upload(m->slab, p0, N);
    tn_adamw *o = tn_adamw_create(m);
    CHECK(o->n == n && o->step == 0);
    const double lrs[2] = {0.02, 0.013};
    err[0] = err[1] = err[2] = 0;
    double moved = 0;
    for (int step = 1; step <= 2; step++) {
        /* magnitudes from 1e-4 to 1 so that eps (1e-3) placement matters; some exact zeros */
        for (size_t i = 0; i < n; i++) g[i] = i % 11 == 0 ? 0.0f : (float)(urand(-1, 1) * pow(10.0, urand(-4, 0)));
        memcpy(prev_p, s.p, n * sizeof(double));
        memcpy(prev_m, s.m, n * sizeof(double));
        m->be->upload(m->grad, g, n);
        tn_adamw_step(o, m, h, lrs[step - 1]);
        for (int k = 0; k < m->n_params; k++) {
            const tn_param *p = &m->params[k];
            /* decay decided here from the HF name: norms and biases are not decayed */
            int decay = !(ends_with(p->name, "norm.weight") || ends_with(p->name, ".bias"));
            ref_state sub = {s.p + p->offset, s.m + p->offset, s.v + p->offset};
            ref_adamw(&sub, g + p->offset, p->numel, lrs[step - 1], h->beta1, h->beta2, h->eps,
                      decay ? h->weight_decay : 0.0, step);
        }
        CHECK(o->step == step);
        m->be->download(host, m->slab, N);
        m->be->download(mm, o->m, n);
        m->be->download(vv, o->v, n);
        for (size_t i = 0; i < n; i++) {
            double dp = fabs(s.p[i] - prev_p[i]);
            err[0] = fmax(err[0], fabs(host[i] - s.p[i]) / fmax(fmax(fabs(s.p[i]), dp), 1e-30));
            double mscale = h->beta1 * fabs(prev_m[i]) + (1 - h->beta1) * fabs(g[i]);
            err[1] = fmax(err[1], fabs(mm[i] - s.m[i]) / fmax(mscale, 1e-30));
            err[2] = fmax(err[2], fabs(vv[i] - s.v[i]) / fmax(s.v[i], 1e-30));
            moved = fmax(moved, fabs(s.p[i] - p0[i]));
        }
    }
    CHECK(moved > 1e-2); /* the comparison is not trivially satisfied */
    tn_adamw_free(o);
    free(p0), free(g), free(host), free(mm), free(vv), free(prev_p), free(prev_m);
    free(s.p), free(s.m), free(s.v);
}

static void test_adamw(tn_model *m) {
    CHECK(m->n_total == m->n_trainable); /* full fine-tuning: everything trainable */
    /* the decay flags: norms and biases exempt, embeddings decayed; no lm_head (tied) */
    int n_decay = 0, n_nodecay = 0, n_bias = 0;
    for (int k = 0; k < m->n_params; k++) {
        const tn_param *p = &m->params[k];
        int want = !(ends_with(p->name, "norm.weight") || ends_with(p->name, ".bias"));
        n_bias += ends_with(p->name, ".bias");
        CHECKF(p->decay == want, "%s: decay flag %d", p->name, p->decay);
        want ? n_decay++ : n_nodecay++;
    }
    CHECK(n_bias == 2 * 3 && n_decay > 0 && n_nodecay > 0); /* qwen2: q/k/v biases per layer */
    CHECK(tn_model_find(m, "model.embed_tokens.weight")->decay);
    CHECK(tn_model_find(m, "lm_head.weight") == NULL);
    /* (decaying a norm weight by mistake would move it by lr*wd*|p| ~ 6e-3 |p|: far above the tolerance) */

    /* betas whose 1 - beta is exact in fp32, so only the formula is under test: 1e-6 */
    const tn_adamw_hparams exact = {.beta1 = 0.875, .beta2 = 0.96875, .eps = 1e-3, .weight_decay = 0.3};
    double e[3];
    run_adamw(m, &exact, e);
    CHECKF(e[0] < 1e-6, "AdamW params rel err %.3g", e[0]);
    CHECKF(e[1] < 1e-6, "AdamW exp_avg rel err %.3g", e[1]);
    CHECKF(e[2] < 1e-6, "AdamW exp_avg_sq rel err %.3g", e[2]);
    printf("adamw (betas 0.875, 0.96875): rel err params %.2e exp_avg %.2e exp_avg_sq %.2e\n", e[0], e[1], e[2]);

    /* torch's usual betas: 1 - 0.999 is not exact in fp32; torch rounds the double 1 - beta once (0.001f),
     * where 1.0f - 0.999f would be 0.00099998713 (1.3e-5 relative off in exp_avg_sq) */
    const tn_adamw_hparams usual = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    run_adamw(m, &usual, e);
    CHECKF(e[0] < 1e-6, "AdamW params rel err %.3g", e[0]);
    CHECKF(e[1] < 1e-6, "AdamW exp_avg rel err %.3g", e[1]);
    CHECKF(e[2] < 1e-6, "AdamW exp_avg_sq rel err %.3g", e[2]);
    printf("adamw (betas 0.9, 0.999): rel err params %.2e exp_avg %.2e exp_avg_sq %.2e\n", e[0], e[1], e[2]);
}

/* ------------------------------------------------------------------ backend primitives */

static void test_primitives(void) {
    const tn_backend *be = tn_backend_cpu();
    const size_t n = 10001;
    float *x = be->alloc(n);
    for (size_t i = 0; i < n; i++) x[i] = (float)urand(-3, 3);
    x[17] = FLT_MAX;
    x[18] = -FLT_MIN / 4; /* subnormal */
    CHECK(be->all_finite(x, n) == 1);
    CHECK(be->all_finite(x, 0) == 1);
    double ss = 0, s17 = 0;
    for (size_t i = 0; i < n; i++)
        if (i != 17) ss += (double)x[i] * x[i];
    for (size_t i = 0; i < 17; i++) s17 += (double)x[i] * x[i];
    CHECKF(fabs(be->sumsq(x, 17) - s17) <= 1e-6 * s17, "sumsq of 17: %.12g vs %.12g", be->sumsq(x, 17), s17);
    x[17] = 0.5f;
    ss += 0.25;
    double r = be->sumsq(x, n);
    CHECKF(fabs(r - ss) <= 1e-6 * ss, "sumsq %.12g vs %.12g", r, ss);
    CHECK(be->sumsq(x, 0) == 0.0);

    const float specials[3] = {NAN, INFINITY, -INFINITY};
    const size_t where[3] = {0, 5000, n - 1};
    for (int s = 0; s < 3; s++)
        for (int w = 0; w < 3; w++) {
            float keep = x[where[w]];
            x[where[w]] = specials[s];
            CHECKF(be->all_finite(x, n) == 0, "all_finite misses %g at %zu", specials[s], where[w]);
            CHECKF(!isfinite(be->sumsq(x, n)), "sumsq finite with %g at %zu", specials[s], where[w]);
            /* only the prefix before it is scanned */
            if (where[w] > 0) CHECK(be->all_finite(x, where[w]) == 1);
            x[where[w]] = keep;
        }
    CHECK(be->all_finite(x, n) == 1);

    float *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    be->scale(x, n, -0.375f);
    int exact = 1;
    for (size_t i = 0; i < n; i++) exact &= x[i] == y[i] * -0.375f;
    CHECK(exact);
    x[3] = NAN;
    x[4] = INFINITY;
    be->scale(x, n, 2.0f);
    CHECK(isnan(x[3]) && isinf(x[4]) && x[4] > 0 && x[5] == y[5] * -0.75f);
    be->scale(x, 5, 0.0f);
    CHECK(x[0] == 0.0f && isnan(x[3]) && isnan(x[4])); /* inf * 0 = nan, as IEEE */
    free(y);
    be->free(x);
}

int main(void) {
    tn_rng_seed(&rng, 99);
    tn_model *m = tl_tiny_qwen2();
    test_clip(m);
    test_adamw(m);
    tn_model_free(m);
    test_primitives();
    return tl_done("test_unit_optimizer");
}
