/* Parity of tandem's ResNet (model/resnet.c on the CPU backend's image kernels) with torchvision's own ResNet-18
 * topology at base width 8 (../shared/ref/make_resnet_fixture.py; fixtures resnet18w8-{f32,f64}): tandem computes
 * in fp32 and is compared with PyTorch's float64 run on the same initial weights and batch (16 images 3x32x32):
 *   train-mode logits and loss, every parameter gradient, every BN running_mean/running_var after that one
 *   train-mode forward, parameters and running statistics after 3 AdamW steps, eval-mode logits after them.
 * Bounds, from fp32 arithmetic (u = 2^-24) and the network's shape, never from one machine's output:
 *   A sum of n fp32 products errs by at most gamma_n ~ n u relative to the sum of absolute products, in any
 *   summation order (so any OpenBLAS kernel). The longest fp32 sums here are the convolutions' weight gradients,
 *   n = N*OH*OW <= 16*16*16 = 4096 (stem): 2.4e-4; forward products are shorter (C*9 <= 576: 3.4e-5). BN
 *   statistics are summed in double. Every weighted layer is followed by a BN, which rescales the layer's output
 *   to unit variance, so a relative error entering a layer leaves it at about the same relative size (BN's
 *   Jacobian has norm <= gamma rstd sqrt(M)/sqrt(M) ~ |gamma| ~ 1 along the directions it keeps), and the 18
 *   weighted layers (17 convs + fc, 3 downsamples on side paths) add their own errors. Worst case per layer
 *   576 u = 3.4e-5, 18 layers: FWD_TOL = 6.2e-4 relative L2 for logits, loss and running statistics (which are
 *   forward quantities); gradients pass the chain forward and back, and the weight-gradient sums are up to 4096
 *   long: GRAD_TOL = 2 FWD_TOL + 4096 u = 1.5e-3. Observed (this CPU, printed below) is ~1e-6: the bounds are
 *   worst-case, still 20x below the smallest planted bug (tests/mutants: unbiased variance normalising moves
 *   the 1x1 last stage by sqrt(16/15) - 1 = 3%).
 *   3 AdamW steps (lr 1e-3, betas 0.9/0.999, wd 0.01) are judged on the update p3 - p0 exactly as
 *   test_parity_fixtures derives it: elements whose float64 step-1 gradient is at least TAU x the tensor's rms
 *   carry an update error <= DIR_GAIN x GRAD_TOL / TAU relative (L2) + 6 u ||p3|| of fp32 storage; the rest
 *   (gradients that are mostly rounding) only to AdamW's own step bound 2 x 3 x lr x (ADAMW_STEP_MAX + wd |p|),
 *   ADAMW_STEP_MAX = 1.004 = max over t <= 3 of |m_t / sqrt(v_t)| for betas (0.9, 0.999) (Cauchy-Schwarz:
 *   t=3 gives 1.0037, t=2 1.0014). Running statistics after 3 steps and eval logits: FWD_TOL plus what the 3-step
 *   parameter differences add, bounded by the same update bound propagated through the forward (x 2). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/core.h"
#include "model/resnet.h"
#include "model/safetensors.h"
#include "testlib.h"

#define FP32_U 5.9604644775390625e-8
#define FWD_TOL (18 * 576 * FP32_U)
#define GRAD_TOL (2 * FWD_TOL + 4096 * FP32_U)
#define TAU 0.01
#define DIR_GAIN 4.0
#define STORE_ROUNDINGS 6.0
#define ADAMW_STEP_MAX 1.004
#define STEP3_TOL (DIR_GAIN * GRAD_TOL / TAU)

static double *read_f64(const st_file *f, const char *name, int64_t *n) {
    const st_tensor *t = st_find(f, name);
    if (!t) return NULL;
    double *d = tn_xmalloc((size_t)t->numel * sizeof *d);
    if (st_read_f64(f, t, d, t->numel) != 0) tn_die("%s", tn_errmsg());
    if (n) *n = t->numel;
    return d;
}

static int open_in(st_file *f, const char *dir, const char *file) {
    char *p = tn_path_join(dir, file);
    int rc = st_open(f, p);
    free(p);
    return CHECKF(rc == 0, "%s", tn_errmsg());
}

static double worst_err(const char *what, double e, double tol, double worst) {
    CHECKF(e <= tol, "%s: relative L2 error %.3e > %.3e", what, e, tol);
    return e > worst ? e : worst;
}

typedef struct {
    tn_resnet *m;
    int B;
    float *images;
    int32_t *labels;
    double losses[3];
} run;

static int setup(run *r, const char *d64) {
    char *mdir = tn_path_join(d64, "model"), *cpath = tn_path_join(mdir, "config.json");
    tn_resnet_config cfg;
    int ok = CHECKF(tn_resnet_config_load(cpath, &cfg) == 0, "%s", tn_errmsg());
    if (ok) ok = CHECKF((r->m = tn_resnet_create(&cfg, tn_backend_cpu())) != NULL, "%s", tn_errmsg());
    if (ok) ok = CHECKF(tn_resnet_load(r->m, mdir) == 0, "%s", tn_errmsg());
    free(mdir), free(cpath);
    st_file bf;
    if (!ok || !open_in(&bf, d64, "batch.safetensors")) return 0;
    int64_t n = 0, nl;
    double *img = read_f64(&bf, "images", &n);
    const st_tensor *lt = st_find(&bf, "labels");
    ok = CHECK(img && lt && lt->ndim == 1);
    if (ok) {
        r->B = (int)lt->shape[0];
        nl = lt->numel;
        int64_t *lab = tn_xmalloc((size_t)nl * sizeof *lab);
        if (st_read_i64(&bf, lt, lab, nl) != 0) tn_die("%s", tn_errmsg());
        r->labels = tn_xmalloc((size_t)nl * sizeof *r->labels);
        for (int64_t i = 0; i < nl; i++) r->labels[i] = (int32_t)lab[i];
        free(lab);
        r->images = tn_xmalloc((size_t)n * sizeof *r->images);
        for (int64_t i = 0; i < n; i++) r->images[i] = (float)img[i];
        int rc = tn_resnet_reserve(r->m, r->B, 32, 32);
        ok = CHECKF(rc == 0, "%s", tn_errmsg());
    }
    free(img);
    st_close(&bf);
    return ok;
}

/* every gradient against grads.safetensors */
static void check_grads(run *r, const char *d64) {
    st_file f;
    if (!open_in(&f, d64, "grads.safetensors")) return;
    const float *g = tn_resnet_grad(r->m);
    double worst = 0;
    int n = 0;
    for (int i = 0; i < tn_resnet_n_tensors(r->m); i++) {
        const tn_resnet_tensor *t = tn_resnet_tensor_at(r->m, i);
        if (t->buffer) continue;
        int64_t k = 0;
        double *ref = read_f64(&f, t->name, &k);
        if (!CHECKF(ref && (size_t)k == t->numel, "grads: %s missing or mis-sized", t->name)) continue;
        char what[128];
        snprintf(what, sizeof what, "gradient %s", t->name);
        worst = worst_err(what, tl_rel_l2(g + t->offset, ref, k), GRAD_TOL, worst), n++;
        free(ref);
    }
    printf("  %d gradients: worst relative L2 %.2e (bound %.2e)\n", n, worst, GRAD_TOL);
    st_close(&f);
}

/* running statistics (and, with params, parameters) against a file of torchvision names */
static void check_state(run *r, const char *d64, const char *file, int params, double tol) {
    st_file f;
    if (!open_in(&f, d64, file)) return;
    double worst = 0;
    int n = 0;
    for (int i = 0; i < tn_resnet_n_tensors(r->m); i++) {
        const tn_resnet_tensor *t = tn_resnet_tensor_at(r->m, i);
        if (!t->buffer && !params) continue;
        int64_t k = 0;
        double *ref = read_f64(&f, t->name, &k);
        if (!CHECKF(ref && (size_t)k == t->numel, "%s: %s missing or mis-sized", file, t->name)) continue;
        float *h = tn_xmalloc(t->numel * sizeof *h);
        tn_resnet_get(r->m, t, h);
        char what[160];
        snprintf(what, sizeof what, "%s %s", file, t->name);
        worst = worst_err(what, tl_rel_l2(h, ref, k), tol, worst), n++;
        free(h), free(ref);
    }
    printf("  %s: %d tensors, worst relative L2 %.2e (bound %.2e)\n", file, n, worst, tol);
    st_close(&f);
}

/* parameters after 3 steps judged on the update p3 - p0 (header) */
static void check_step3(run *r, const char *d64, float *const *p0, double lr, double wd) {
    st_file gf, pf;
    if (!open_in(&gf, d64, "grads.safetensors") || !open_in(&pf, d64, "params_step3.safetensors")) return;
    double worst = 0;
    int64_t excluded = 0;
    for (int i = 0; i < tn_resnet_n_tensors(r->m); i++) {
        const tn_resnet_tensor *t = tn_resnet_tensor_at(r->m, i);
        if (t->buffer) continue;
        double *g = read_f64(&gf, t->name, NULL), *ref = read_f64(&pf, t->name, NULL);
        float *p3 = tn_xmalloc(t->numel * sizeof *p3);
        tn_resnet_get(r->m, t, p3);
        double rms = 0, num = 0, den = 0, pn = 0;
        for (size_t k = 0; k < t->numel; k++) rms += g[k] * g[k];
        rms = sqrt(rms / t->numel);
        for (size_t k = 0; k < t->numel; k++) {
            double du = (double)p3[k] - p0[i][k], dr = ref[k] - p0[i][k];
            if (fabs(g[k]) >= TAU * rms) {
                num += (du - dr) * (du - dr), den += dr * dr, pn += ref[k] * ref[k];
            } else {
                excluded++;
                CHECKF(fabs(du - dr) <= 6 * lr * (ADAMW_STEP_MAX + wd * fabs(ref[k])), "%s[%zu]: step-3 update "
                       "%.3e vs %.3e beyond AdamW's step bound", t->name, k, du, dr);
            }
        }
        double bound = STEP3_TOL * sqrt(den) + STORE_ROUNDINGS * FP32_U * sqrt(pn), err = sqrt(num);
        CHECKF(err <= bound, "%s: 3-step update error %.3e > bound %.3e", t->name, err, bound);
        if (bound > 0 && err / bound > worst) worst = err / bound;
        free(g), free(ref), free(p3);
    }
    /* most of those have an exactly zero gradient: the 3x3 taps of layer3/layer4 that only ever see padding at
     * 2x2 and 1x1 spatial size (their update is weight decay alone) */
    printf("  params after 3 AdamW steps: worst update error / bound %.3f; %lld elements held to AdamW's step bound\n",
           worst, (long long)excluded);
    st_close(&gf), st_close(&pf);
}

static void check_logits(const float *lg, const char *d64, const char *file, double tol) {
    st_file f;
    if (!open_in(&f, d64, file)) return;
    int64_t n = 0;
    double *ref = read_f64(&f, "logits", &n);
    if (CHECK(ref != NULL)) {
        double e = tl_rel_l2(lg, ref, n);
        worst_err(file, e, tol, 0);
        printf("  %s: relative L2 %.2e (bound %.2e)\n", file, e, tol);
    }
    free(ref);
    st_close(&f);
}

static void adamw_step(run *r, float *mom, float *var, int t) {
    const tn_backend *be = tn_backend_cpu();
    double b1 = 0.9, b2 = 0.999;
    be->adamw(tn_resnet_params(r->m), tn_resnet_grad(r->m), mom, var, tn_resnet_n_params(r->m), 1e-3, b1, b2, 1e-8,
              0.01, 1.0 - pow(b1, t), 1.0 - pow(b2, t));
}

static void load_losses(const char *d64, double *losses) {
    char *p = tn_path_join(d64, "expected.json");
    char *text = tn_read_file(p, NULL, 0);
    free(p);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *l = j ? cJSON_GetObjectItemCaseSensitive(j, "losses") : NULL;
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetArrayItem(l, i);
        losses[i] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    }
    cJSON_Delete(j);
    free(text);
}

int main(void) {
    tl_require_shared("test_parity_resnet");
    char *d64 = tn_path_join(tl_shared_dir(), "ref/fixtures/resnet18w8-f64");
    run r = {0};
    if (!setup(&r, d64)) return tl_done("test_parity_resnet");
    double ref_loss[3];
    load_losses(d64, ref_loss);
    int K = tn_resnet_cfg(r.m)->num_classes, nt = tn_resnet_n_tensors(r.m);
    size_t np = tn_resnet_n_params(r.m);
    float *lg = tn_xmalloc((size_t)r.B * K * sizeof *lg), **p0 = tn_xcalloc((size_t)nt, sizeof *p0);
    for (int i = 0; i < nt; i++) {
        const tn_resnet_tensor *t = tn_resnet_tensor_at(r.m, i);
        p0[i] = tn_xmalloc(t->numel * sizeof *p0[i]);
        tn_resnet_get(r.m, t, p0[i]);
    }
    const tn_backend *be = tn_backend_cpu();
    float *mom = be->alloc(np), *var = be->alloc(np);
    for (int step = 1; step <= 3; step++) {
        be->zero(tn_resnet_grad(r.m), np);
        double loss = tn_resnet_forward_backward(r.m, r.images, r.labels, r.B, 1.0f / r.B, 0.0f, lg) / r.B;
        double ltol = step == 1 ? FWD_TOL : FWD_TOL + 2 * STEP3_TOL * 6e-3; /* steps 2, 3: as the eval logits */
        CHECKF(fabs(loss - ref_loss[step - 1]) <= ltol * fabs(ref_loss[step - 1]),
               "loss at step %d: %.9f vs %.9f", step, loss, ref_loss[step - 1]);
        printf("  loss step %d: %.9f (torch float64 %.9f)\n", step, loss, ref_loss[step - 1]);
        if (step == 1) {
            check_logits(lg, d64, "train_logits.safetensors", FWD_TOL);
            check_grads(&r, d64);
            check_state(&r, d64, "stats_step1.safetensors", 0, FWD_TOL);
        }
        adamw_step(&r, mom, var, step);
    }
    check_step3(&r, d64, p0, 1e-3, 0.01);
    /* running statistics after 3 steps: forward quantities of parameters that differ by the update bound */
    check_state(&r, d64, "params_step3.safetensors", 0, FWD_TOL + 2 * STEP3_TOL * 6e-3);
    tn_resnet_logits(r.m, r.images, r.B, lg);
    check_logits(lg, d64, "eval_logits.safetensors", FWD_TOL + 2 * STEP3_TOL * 6e-3);
    be->free(mom), be->free(var);
    for (int i = 0; i < nt; i++) free(p0[i]);
    free(p0), free(lg), free(r.images), free(r.labels), free(d64);
    tn_resnet_free(r.m);
    return tl_done("test_parity_resnet");
}
