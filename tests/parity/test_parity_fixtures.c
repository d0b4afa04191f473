/* Parity with the independent PyTorch reference (../shared/ref/llama_ref.py via make_fixture.py).
 *
 * For each committed fixture (llama GQA, qwen2 with biases + tied embeddings, llama LoRA, qwen3 with per-head q/k
 * norms and head_dim 24 != hidden 64 / 4 heads, qwen3 LoRA) tandem computes in
 * fp32 and is compared with PyTorch's float64 results, with bounds that follow from fp32 arithmetic alone
 * (u = 2^-24), never from one machine's measurement, so any BLAS kernel (OPENBLAS_CORETYPE) must pass:
 *   loss, logits, every gradient: relative L2 error <= GRAD_TOL = 1e-5 per tensor. A length-n fp32 dot
 *   product errs by at most ~n u relative (worst case, n <= 172 here: 1e-5); observed <= 6e-7 everywhere.
 *   Parameters after 3 clipped AdamW steps (lr 1e-3, wd 0.1), judged on the update p3 - p0 per tensor:
 *   - AdamW moves an element along d_t = m_t / sqrt(v_t) (bias-corrected), which is scale-free in g: an
 *     element's relative gradient error becomes the same relative error of d_t, times at most 2 per gradient
 *     it averages (t = 2, 3; d_1 = sign(g) is exact). For elements with |g| >= TAU x the tensor's rms
 *     gradient, a gradient error of GRAD_TOL relative to the tensor (L2) is at most GRAD_TOL / TAU relative
 *     to each such element, so over the tensor (L2) the update errs by at most
 *       DIR_GAIN x GRAD_TOL / TAU x ||update||,   DIR_GAIN = (2 x 2 + 2 x 3) / 3 = 10/3, taken as 4,
 *     plus fp32 storage: p is rounded twice per step (decay product, update sum): 6 u ||p3||.
 *   - Elements whose float64 gradient is nonzero but below TAU x rms (a few per tensor; e.g. the components
 *     of qwen2's k_proj.bias that RoPE barely rotates, whose exact gradient is ~0 by softmax shift
 *     invariance) carry a gradient that is mostly rounding: any summation order may flip their step. They
 *     are counted and printed, and held only to AdamW's own bound: with beta (0.9, 0.95) and t <= 3,
 *     |m_t / sqrt(v_t)| <= 1.001 (Cauchy-Schwarz), so two correct runs differ by at most
 *     2 x 3 x lr x (1.001 + wd |p|).
 *   Which elements are excluded depends only on the float64 reference, never on the code under test. How many a
 *   tensor has is a property of the mathematics (another seed and shape leaves 17 of qwen2's 32 k_proj.bias
 *   elements there), so a fixture is refused only for real degeneracy (parity_bounds.c): a trainable tensor with
 *   an all-zero gradient, or over half of all nonzero-gradient elements excluded.
 * The same test runs the CUDA backend (tests/gpu, `make test-gpu`) with TANDEM_TEST_BACKEND=cuda (its fp32 mode:
 * the bounds above, unchanged) or cuda-bf16. In bf16 mode each matrix-product operand (and, under LoRA, each
 * frozen weight) is rounded to bf16 (u16 = 2^-8); to first order, with unit condition, a tensor's relative error
 * is at most u16 times the roundings on its longest path: per layer 12 product operands (q|k|v, QK^T, PV, o, gate|up,
 * down) and up to 4 rounded norm weights, plus lm_head (2), embedding and final norm (2): FWD = (16 L + 4) u16 for
 * logits and loss; gradients pass the chain twice (forward and backward products): 2 FWD. The 3-step update is then
 * held element by element to AdamW's step bound (the gradient bound is too loose to say more), and the sensitivity
 * checks below, which need the tight fp32 bound, are left to the fp32 mode.
 * tests/mutants.sh plants bugs (AdamW bias correction at t-1, eps inside the sqrt, weight decay on norm
 * weights, RoPE theta 1% off, clipping skipped, LoRA scale alpha instead of alpha/r) in a copy of the source
 * and shows that each makes this test fail. Runs with and without gradient checkpointing.
 * TANDEM_PARITY_FIXTURE=DIR runs one fixture folder instead: any valid fixture passes (tests/cli/test_parity_any_fixture.sh
 * makes one with another seed and shape). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "parity/parity_bounds.h"
#include "testlib.h"
#include "trainer/optimizer.h"


static const tn_backend *g_be; /* the backend under test (TANDEM_TEST_BACKEND) */
static int g_bf16;             /* its bf16 mode: the bounds of the header's last paragraph */
static double fwd_tol(const tn_model *m) { return g_bf16 ? (16.0 * m->L + 4) * BF16_U : GRAD_TOL; }
static double grad_tol(const tn_model *m) { return g_bf16 ? 2 * fwd_tol(m) : GRAD_TOL; }

typedef struct {
    tn_model *m;
    tn_acts *acts;
    int B, S;
    int32_t *ids, *labels;
    int64_t n_targets;
} fixture_run;

static cJSON *load_json(const char *dir, const char *file) {
    char *path = tn_path_join(dir, file);
    char *text = tn_read_file(path, NULL, 0);
    free(path);
    if (!text) return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    return j;
}

static double json_num(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static int32_t *read_i64_as_i32(const st_file *f, const char *name, int *B, int *S) {
    const st_tensor *t = st_find(f, name);
    if (!t || t->ndim != 2) return NULL;
    *B = (int)t->shape[0], *S = (int)t->shape[1];
    int64_t *tmp = tn_xmalloc((size_t)t->numel * sizeof *tmp);
    int32_t *out = tn_xmalloc((size_t)t->numel * sizeof *out);
    if (st_read_i64(f, t, tmp, t->numel) != 0) tn_die("%s", tn_errmsg());
    for (int64_t i = 0; i < t->numel; i++) out[i] = (int32_t)tmp[i];
    free(tmp);
    return out;
}


static int setup(fixture_run *r, const char *dir, int checkpointing) {
    char *model_dir = tn_path_join(dir, "model"), *cfg_path = tn_path_join(model_dir, "config.json");
    char *adapter_dir = tn_path_join(model_dir, "adapter");
    tn_model_config cfg;
    tn_lora_config lora = {0};
    int ok = CHECKF(tn_model_config_load(cfg_path, &cfg) == 0, "%s", tn_errmsg());
    if (ok && tn_file_exists(adapter_dir)) ok = CHECKF(tn_lora_config_load(adapter_dir, &lora) == 0, "%s", tn_errmsg());
    if (ok) {
        r->m = tn_model_create(&cfg, &lora, g_be);
        ok = CHECKF(tn_model_load_hf(r->m, model_dir) == 0, "%s", tn_errmsg());
        if (ok && lora.r) ok = CHECKF(tn_model_load_adapter(r->m, adapter_dir) == 0, "%s", tn_errmsg());
    }
    if (ok) {
        char *bpath = tn_path_join(dir, "batch.safetensors");
        st_file bf;
        ok = CHECKF(st_open(&bf, bpath) == 0, "%s", tn_errmsg());
        if (ok) {
            r->ids = read_i64_as_i32(&bf, "input_ids", &r->B, &r->S);
            r->labels = read_i64_as_i32(&bf, "labels", &r->B, &r->S);
            ok = CHECK(r->ids && r->labels);
            st_close(&bf);
        }
        free(bpath);
    }
    if (ok) {
        r->acts = tn_acts_create(r->m, r->B, r->S, checkpointing);
        r->n_targets = tn_count_targets(r->labels, r->B, r->S);
    }
    free(model_dir);
    free(cfg_path);
    free(adapter_dir);
    return ok;
}

static void teardown(fixture_run *r) {
    tn_acts_free(r->acts);
    tn_model_free(r->m);
    free(r->ids);
    free(r->labels);
}

static double logits_error(fixture_run *r, const double *ref, int64_t n) {
    float *lg = tn_xmalloc((size_t)n * sizeof *lg);
    tn_model_logits(r->m, r->acts, r->ids, r->B, r->S, lg);
    double e = tl_rel_l2(lg, ref, n);
    free(lg);
    return e;
}

/* Perturb one tensor with f, measure the logits error, restore. */
static double mutated_logits_error(fixture_run *r, const char *name, void (*f)(float *, const tn_param *),
                                   const double *ref, int64_t n) {
    const tn_param *p = tn_model_find(r->m, name);
    if (!CHECKF(p != NULL, "no tensor %s", name)) return 0;
    float *orig = tn_xmalloc(p->numel * sizeof *orig), *mod = tn_xmalloc(p->numel * sizeof *mod);
    tn_model_get(r->m, p, orig);
    memcpy(mod, orig, p->numel * sizeof *mod);
    f(mod, p);
    tn_model_set(r->m, p, mod);
    double e = logits_error(r, ref, n);
    tn_model_set(r->m, p, orig);
    free(orig);
    free(mod);
    return e;
}

static void zero_all(float *x, const tn_param *p) { memset(x, 0, p->numel * sizeof *x); }
static void set_ones(float *x, const tn_param *p) {
    for (size_t i = 0; i < p->numel; i++) x[i] = 1.0f;
}
static void negate(float *x, const tn_param *p) {
    for (size_t i = 0; i < p->numel; i++) x[i] = -x[i];
}
static void transpose_square_block(float *x, const tn_param *p) { /* transpose the leading square block */
    int64_t n = p->shape[0] < p->shape[1] ? p->shape[0] : p->shape[1], c = p->shape[1];
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n; j++) {
            float t = x[i * c + j];
            x[i * c + j] = x[j * c + i];
            x[j * c + i] = t;
        }
}

static void run_fixture(const char *name, int checkpointing) {
    char d64[1024];
    if (strchr(name, '/')) snprintf(d64, sizeof d64, "%s", name); /* a fixture folder (TANDEM_PARITY_FIXTURE) */
    else snprintf(d64, sizeof d64, "%s/fixtures/%s-f64", tl_tests_dir(), name);
    fixture_run r = {0};
    cJSON *exp64 = load_json(d64, "expected.json");
    if (!CHECKF(exp64 != NULL, "%s: expected.json missing", name) ||
        !setup(&r, d64, checkpointing)) {
        cJSON_Delete(exp64);
        teardown(&r);
        return;
    }
    char *path;
    st_file lf, gf, pf;
    path = tn_path_join(d64, "logits.safetensors");
    CHECK(st_open(&lf, path) == 0);
    free(path);
    path = tn_path_join(d64, "grads.safetensors");
    CHECK(st_open(&gf, path) == 0);
    free(path);
    path = tn_path_join(d64, "params_step3.safetensors");
    CHECK(st_open(&pf, path) == 0);
    free(path);

    /* logits */
    int64_t nl = 0;
    double *ref_logits = pb_read_f64(&lf, "logits", &nl);
    CHECK(ref_logits && nl == (int64_t)r.B * r.S * r.m->V);
    double le = logits_error(&r, ref_logits, nl), ftol = fwd_tol(r.m), gtol = grad_tol(r.m);
    CHECKF(le <= ftol, "%s: logits rel L2 %.3g > %.3g", name, le, ftol);

    /* loss and gradients of the first forward/backward */
    int64_t nv = 0;
    tn_model *m = r.m;
    m->be->zero(m->grad, m->n_trainable);
    double loss = tn_model_forward_backward(m, r.acts, r.ids, r.labels, r.B, r.S, 1.0f / (float)r.n_targets, &nv, 1) /
                  (double)r.n_targets;
    double ref_loss = json_num(exp64, "loss");
    CHECKF(nv == r.n_targets && nv == (int64_t)json_num(exp64, "n_targets"), "%s: %lld targets", name, (long long)nv);
    CHECKF(fabs(loss - ref_loss) <= ftol * fabs(ref_loss), "%s: loss %.9f vs %.12f", name, loss, ref_loss);
    double worst_grad = 0;
    int n_grads = 0;
    float *host = tn_xmalloc(m->n_total * sizeof *host);
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        if (!p->trainable) continue;
        int64_t n = 0;
        double *ref = pb_read_f64(&gf, p->name, &n);
        if (!CHECKF(ref && n == (int64_t)p->numel, "%s: reference has no gradient for %s", name, p->name)) continue;
        m->be->download(host, m->grad + p->offset, p->numel);
        double e = tl_rel_l2(host, ref, n);
        worst_grad = e > worst_grad ? e : worst_grad;
        CHECKF(e <= gtol, "%s: grad %s rel L2 %.3g (bound %.3g)", name, p->name, e, gtol);
        n_grads++;
        free(ref);
    }
    CHECKF(n_grads == gf.n, "%s: %d gradients compared, reference has %d", name, n_grads, gf.n);

    /* 3 optimizer steps on the same batch (the first uses the gradients above) */
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(exp64, "optimizer");
    const cJSON *betas = cJSON_GetObjectItemCaseSensitive(opt, "betas");
    tn_adamw_hparams h = {.beta1 = cJSON_GetArrayItem(betas, 0)->valuedouble,
                          .beta2 = cJSON_GetArrayItem(betas, 1)->valuedouble,
                          .eps = json_num(opt, "eps"),
                          .weight_decay = json_num(opt, "weight_decay")};
    double lr = json_num(opt, "lr"), max_norm = json_num(opt, "max_grad_norm");
    int steps = (int)json_num(opt, "steps");
    const cJSON *norms = cJSON_GetObjectItemCaseSensitive(exp64, "grad_norms_preclip");
    float *p0 = tn_xmalloc(m->n_trainable * sizeof *p0); /* the step-0 trainable slab, for the update */
    m->be->download(p0, m->slab, m->n_trainable);
    tn_adamw *o = tn_adamw_create(m);
    for (int s = 0; s < steps; s++) {
        if (s > 0) {
            m->be->zero(m->grad, m->n_trainable);
            int64_t nv2 = 0;
            tn_model_forward_backward(m, r.acts, r.ids, r.labels, r.B, r.S, 1.0f / (float)r.n_targets, &nv2, 1);
        }
        double norm = tn_clip_grad_norm(m, max_norm), ref_norm = cJSON_GetArrayItem(norms, s)->valuedouble;
        CHECKF(fabs(norm - ref_norm) <= (g_bf16 ? gtol : 1e-5) * ref_norm, "%s: step %d grad norm %.9g vs %.9g", name,
               s + 1, norm, ref_norm);
        tn_adamw_step(o, m, &h, lr);
    }
    pb_step3 w = pb_check_step3(name, m, p0, &gf, &pf, lr, h.weight_decay, g_bf16);
    printf("%s%s: logits %.2e, loss %.2e, worst grad rel L2 %.2e, step-3 update error at most %.2f of its bound "
           "(worst %s), %lld of %lld elements with |g| < %g x rms judged only by AdamW's step bound\n",
           name, checkpointing ? " (checkpointing)" : "", le, fabs(loss - ref_loss) / fabs(ref_loss), worst_grad,
           w.ratio, w.tensor, (long long)w.excluded, (long long)w.elements, TAU);

    /* sensitivity: each of these bugs must be caught by the logits tolerance */
    if (!checkpointing && !g_bf16) {
        if (m->cfg.qkv_bias)
            CHECK(mutated_logits_error(&r, "model.layers.0.self_attn.k_proj.bias", zero_all, ref_logits, nl) >
                  100 * GRAD_TOL);
        if (m->cfg.qk_norm) /* the fixture's norm weights are 1 + N(0, 0.1): a norm applied without its weight */
            CHECK(mutated_logits_error(&r, "model.layers.0.self_attn.k_norm.weight", set_ones, ref_logits, nl) >
                  100 * GRAD_TOL);
        CHECK(mutated_logits_error(&r, "model.layers.1.mlp.down_proj.weight", negate, ref_logits, nl) > 100 * GRAD_TOL);
        CHECK(mutated_logits_error(&r, "model.layers.0.self_attn.o_proj.weight", transpose_square_block, ref_logits,
                                   nl) > 100 * GRAD_TOL);
    }
    tn_adamw_free(o);
    free(p0);
    free(host);
    free(ref_logits);
    st_close(&lf);
    st_close(&gf);
    st_close(&pf);
    cJSON_Delete(exp64);
    teardown(&r);
}

int main(void) {
    /* TANDEM_TEST_BACKEND: cpu (default), cuda (its fp32 mode) or cuda-bf16; a missing GPU skips (77) */
    const char *which = getenv("TANDEM_TEST_BACKEND");
    which = which && *which ? which : "cpu";
    g_bf16 = strcmp(which, "cuda-bf16") == 0;
    if (strcmp(which, "cpu") != 0 && strcmp(which, "cuda") != 0 && !g_bf16) {
        fprintf(stderr, "test_parity_fixtures: TANDEM_TEST_BACKEND='%s' (expected cpu, cuda or cuda-bf16)\n", which);
        return 1;
    }
    g_be = strcmp(which, "cpu") == 0 ? tn_backend_cpu() : tn_backend_select("cuda", g_bf16, 0);
    if (!g_be) {
        printf("test_parity_fixtures: skipped (%s): %s\n", which, tn_errmsg());
        return 77;
    }
    if (strcmp(which, "cpu") != 0) printf("test_parity_fixtures: %s\n", g_be->describe());
    /* TANDEM_PARITY_FIXTURE=DIR: that one f64 fixture folder (any seed or shape make_fixture.py writes) */
    const char *one = getenv("TANDEM_PARITY_FIXTURE");
    if (one && *one) {
        run_fixture(one, 0);
        run_fixture(one, 1);
        return tl_done("test_parity_fixtures");
    }
    /* qwen3-lora: ../shared/ref/make_fixture.py --config qwen3-f32/model/config.json --lora 4,8 --name qwen3-lora */
    const char *names[] = {"llama", "qwen2", "llama-lora", "qwen3", "qwen3-lora"};
    for (int i = 0; i < 5; i++) {
        run_fixture(names[i], 0);
        run_fixture(names[i], 1);
    }
    return tl_done(strcmp(which, "cpu") == 0 ? "test_parity_fixtures" : g_bf16 ? "test_parity_fixtures (cuda, bf16)"
                                                                              : "test_parity_fixtures (cuda, fp32)");
}
