/* test_unit_lora -- PEFT-style LoRA on a tiny llama built in code (vocab 17, hidden 8, 1 layer, 2 heads,
 * 1 kv head, head_dim 6 so q_proj's out (12) differs from its in (8), intermediate 10), r = 2, alpha = 6:
 *   layout: only lora_A [r, in] / lora_B [out, r] are trainable, HF/PEFT names, first in the slab;
 *   scale alpha / r: with B = 0 the logits equal the plain model's; with B != 0 they equal those of a
 *     plain model whose weights are merged here in double (W + alpha/r B A), for q_proj + down_proj and
 *     for all seven projections; (alpha 6, B) and (alpha 3, 2B) agree;
 *   freezing: training steps leave every base tensor bit-identical and move every LoRA tensor;
 *   gradients: central finite differences of the loss (fp32, eps 1e-2) on LoRA elements;
 *   dropout: active in training, off in tn_model_logits;
 *   tn_lora_parse_targets, and the PEFT adapter folder written and read back. */
#include <cjson/cJSON.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "testlib.h"
#include "trainer/optimizer.h"

#define R 2
#define ALPHA 6.0
#define QD (1u << TN_LT_Q | 1u << TN_LT_DOWN)
#define ALL ((1u << TN_LT_COUNT) - 1)
enum { B = 2, S = 6 };

static const char *const module_of[TN_LT_COUNT] = {"self_attn", "self_attn", "self_attn", "self_attn",
                                                   "mlp",       "mlp",       "mlp"};
static tn_model_config cfg;
static tn_rng rng;
static int32_t ids[B * S], labels[B * S];

static void make_config(void) {
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.model_type, sizeof cfg.model_type, "llama");
    cfg.vocab_size = 17, cfg.hidden_size = 8, cfg.intermediate_size = 10, cfg.num_hidden_layers = 1;
    cfg.num_attention_heads = 2, cfg.num_key_value_heads = 1, cfg.head_dim = 6, cfg.max_position_embeddings = 32;
    cfg.rope_theta = 10000.0, cfg.rms_norm_eps = 1e-6;
    cfg.initializer_range = 0.4; /* large enough that every path moves the loss visibly */
    cfg.bos_token_id = cfg.eos_token_id = -1;
    if (!CHECKF(tn_model_config_finish(&cfg, "test") == 0, "%s", tn_errmsg())) exit(1);
    for (int i = 0; i < B * S; i++) ids[i] = (int32_t)((i * 5 + 2) % 17);
    for (int i = 0; i < B * S; i++) labels[i] = ids[i];
    labels[3] = -100, labels[S + 1] = -100, labels[S + 2] = -100;
}

static tn_model *lora_model(unsigned targets, double alpha, double dropout) {
    tn_lora_config l = {.r = R, .alpha = alpha, .dropout = dropout, .targets = targets};
    return tn_model_create(&cfg, &l, tn_backend_cpu());
}

static float *get(const tn_model *m, const char *name) {
    const tn_param *p = tn_model_find(m, name);
    if (!p) tn_die("no tensor %s", name);
    float *h = malloc(p->numel * sizeof *h);
    tn_model_get(m, p, h);
    return h;
}

static void set(tn_model *m, const char *name, const float *h) {
    const tn_param *p = tn_model_find(m, name);
    if (!p) tn_die("no tensor %s", name);
    tn_model_set(m, p, h);
}

/* copy every tensor dst has from src, by name (those src lacks are left alone) */
static void copy_by_name(tn_model *dst, const tn_model *src) {
    for (int i = 0; i < dst->n_params; i++) {
        const tn_param *q = tn_model_find(src, dst->params[i].name);
        if (!q) continue;
        float *h = get(src, q->name);
        tn_model_set(dst, &dst->params[i], h);
        free(h);
    }
}

static void lora_name(char *buf, size_t n, int t, const char *ab) {
    snprintf(buf, n, "model.layers.0.%s.%s.lora_%s.weight", module_of[t], tn_lora_target_names[t], ab);
}

/* random B (PEFT initialises B to 0, which would hide everything) */
static void randomize_B(tn_model *m, double sd) {
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        if (!strstr(p->name, ".lora_B.")) continue;
        float *h = malloc(p->numel * sizeof *h);
        for (size_t j = 0; j < p->numel; j++) h[j] = (float)(sd * tn_rng_normal(&rng));
        tn_model_set(m, p, h);
        free(h);
    }
}

static float *logits(tn_model *m) {
    float *l = malloc((size_t)B * S * m->V * sizeof *l);
    tn_acts *a = tn_acts_create(m, B, S, 0);
    tn_model_logits(m, a, ids, B, S, l);
    tn_acts_free(a);
    return l;
}

static double max_abs(const float *x, size_t n) {
    double v = 0;
    for (size_t i = 0; i < n; i++) v = fmax(v, fabs(x[i]));
    return v;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double v = 0;
    for (size_t i = 0; i < n; i++) v = fmax(v, fabs((double)a[i] - b[i]));
    return v;
}

/* ------------------------------------------------------------------ (a) layout */

static void test_layout(void) {
    tn_model *m = lora_model(QD, ALPHA, 0);
    tn_model *full = tn_model_create(&cfg, NULL, tn_backend_cpu());
    CHECK(m->lora.r == R && fabsf(m->lora_scale - 3.0f) == 0.0f);
    CHECK(m->n_params == full->n_params + 4);
    CHECK(m->n_total == full->n_total + m->n_trainable);
    struct {
        const char *name;
        int64_t d0, d1;
    } want[4] = {{"model.layers.0.self_attn.q_proj.lora_A.weight", R, 8},
                 {"model.layers.0.self_attn.q_proj.lora_B.weight", 12, R},
                 {"model.layers.0.mlp.down_proj.lora_A.weight", R, 10},
                 {"model.layers.0.mlp.down_proj.lora_B.weight", 8, R}};
    size_t sum = 0;
    for (int k = 0; k < 4; k++) {
        const tn_param *p = tn_model_find(m, want[k].name);
        if (!CHECKF(p != NULL, "no tensor %s", want[k].name)) continue;
        CHECKF(p->trainable && p->ndim == 2 && p->shape[0] == want[k].d0 && p->shape[1] == want[k].d1 &&
                   p->numel == (size_t)(want[k].d0 * want[k].d1),
               "%s: shape [%lld, %lld]", p->name, (long long)p->shape[0], (long long)p->shape[1]);
        CHECK(p->decay); /* PEFT trains A and B with weight decay (2-D) */
        sum += p->numel;
    }
    CHECKF(m->n_trainable == sum, "n_trainable %zu, LoRA tensors hold %zu", m->n_trainable, sum);
    int n_train = 0, in_prefix = 1;
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        int is_lora = strstr(p->name, ".lora_") != NULL;
        n_train += p->trainable;
        CHECKF(p->trainable == is_lora, "%s: trainable %d", p->name, p->trainable);
        /* trainable tensors are the slab's prefix (the gradient slab's layout) */
        in_prefix &= is_lora ? p->offset + p->numel <= m->n_trainable : p->offset >= m->n_trainable;
        /* base tensors keep the plain model's names and shapes */
        if (!is_lora) {
            const tn_param *q = tn_model_find(full, p->name);
            CHECKF(q && q->numel == p->numel && q->shape[0] == p->shape[0], "%s differs from the plain model", p->name);
        }
    }
    CHECK(n_train == 4 && in_prefix);
    /* no LoRA on the projections that were not asked for */
    CHECK(!tn_model_find(m, "model.layers.0.self_attn.k_proj.lora_A.weight") &&
          !tn_model_find(m, "model.layers.0.mlp.up_proj.lora_B.weight"));
    /* gradient pointers: only LoRA, inside the n_trainable gradient slab */
    CHECK(!m->d_embed && !m->d_norm && !m->d_lm_head);
    const tn_layer_tensors *dw = &m->dw[0];
    CHECK(!dw->ln1 && !dw->wqkv && !dw->wo && !dw->ln2 && !dw->wgu && !dw->wdown);
    CHECK(!dw->lora[TN_LT_K].A && !dw->lora[TN_LT_O].B);
    for (int t = 0; t < TN_LT_COUNT; t++) {
        if (!(QD & (1u << t))) continue;
        const float *ptrs[2] = {dw->lora[t].A, dw->lora[t].B};
        for (int k = 0; k < 2; k++) CHECK(ptrs[k] && ptrs[k] >= m->grad && ptrs[k] < m->grad + m->n_trainable);
    }
    /* the optimizer holds moments for the trainable floats only */
    tn_adamw *o = tn_adamw_create(m);
    CHECK(o->n == m->n_trainable);
    tn_adamw_free(o);
    /* full fine-tuning: everything trainable */
    CHECK(full->lora.r == 0 && full->n_trainable == full->n_total && full->lora_scale == 0.0f);
    tn_model_free(full);
    tn_model_free(m);
}

/* ------------------------------------------------------------------ (b) scale alpha / r */

/* plain model with W_t += (alpha / r) B_t A_t for every adapted projection t, merged in double */
static tn_model *merged(const tn_model *m, unsigned only) {
    tn_model *f = tn_model_create(&cfg, NULL, tn_backend_cpu());
    copy_by_name(f, m);
    double s = m->lora.alpha / m->lora.r;
    for (int t = 0; t < TN_LT_COUNT; t++) {
        if (!(m->lora.targets & only & (1u << t))) continue;
        char an[128], bn[128], wn[128];
        lora_name(an, sizeof an, t, "A");
        lora_name(bn, sizeof bn, t, "B");
        snprintf(wn, sizeof wn, "model.layers.0.%s.%s.weight", module_of[t], tn_lora_target_names[t]);
        const tn_param *pa = tn_model_find(m, an), *pw = tn_model_find(f, wn);
        int in = (int)pa->shape[1], out = (int)pw->shape[0];
        CHECK(pw->shape[1] == in);
        float *A = get(m, an), *Bm = get(m, bn), *W = get(f, wn);
        for (int o = 0; o < out; o++)
            for (int i = 0; i < in; i++) {
                double d = 0;
                for (int k = 0; k < R; k++) d += (double)Bm[o * R + k] * A[k * in + i];
                W[o * in + i] = (float)((double)W[o * in + i] + s * d);
            }
        set(f, wn, W);
        free(A), free(Bm), free(W);
    }
    return f;
}

static void test_scale(unsigned targets, const char *label) {
    const size_t nl = (size_t)B * S * cfg.vocab_size;
    tn_model *m = lora_model(targets, ALPHA, 0);
    tn_model_init_random(m, 11);
    /* B = 0 (PEFT init): exactly the plain model */
    tn_model *plain = tn_model_create(&cfg, NULL, tn_backend_cpu());
    copy_by_name(plain, m);
    float *L0 = logits(m), *Lp = logits(plain);
    double scale0 = max_abs(Lp, nl);
    CHECKF(max_diff(L0, Lp, nl) <= 1e-6 * scale0, "%s: B = 0 logits differ from the plain model by %.3g", label,
           max_diff(L0, Lp, nl));
    tn_model_free(plain);

    randomize_B(m, 0.5);
    float *L1 = logits(m);
    double moved = max_diff(L1, L0, nl);
    CHECKF(moved > 0.05 * scale0, "%s: LoRA moved the logits by only %.3g (scale %.3g)", label, moved, scale0);

    /* merged in double: W + alpha/r B A */
    tn_model *f = merged(m, ALL);
    float *Lm = logits(f);
    double em = max_diff(L1, Lm, nl);
    CHECKF(em <= 2e-5 * scale0, "%s: LoRA logits vs merged weights differ by %.3g (scale %.3g)", label, em, scale0);
    tn_model_free(f);
    /* each adapted projection matters: leaving any one out of the merge is far outside that tolerance */
    for (int t = 0; t < TN_LT_COUNT; t++) {
        if (!(targets & (1u << t))) continue;
        tn_model *g = merged(m, ALL & ~(1u << t));
        float *Lg = logits(g);
        CHECKF(max_diff(L1, Lg, nl) > 100 * 2e-5 * scale0, "%s: %s's LoRA hardly changes the logits", label,
               tn_lora_target_names[t]);
        free(Lg);
        tn_model_free(g);
    }

    /* alpha 3 with 2B: the same product scale * B */
    tn_model *m2 = lora_model(targets, ALPHA / 2, 0);
    copy_by_name(m2, m);
    for (int i = 0; i < m2->n_params; i++) {
        const tn_param *p = &m2->params[i];
        if (!strstr(p->name, ".lora_B.")) continue;
        float *h = get(m2, p->name);
        for (size_t j = 0; j < p->numel; j++) h[j] *= 2.0f;
        tn_model_set(m2, p, h);
        free(h);
    }
    CHECK(m2->lora_scale == 1.5f);
    float *L2 = logits(m2);
    CHECKF(max_diff(L1, L2, nl) <= 1e-6 * max_abs(L1, nl), "%s: (alpha 6, B) vs (alpha 3, 2B) differ by %.3g", label,
           max_diff(L1, L2, nl));
    printf("lora scale (%s): B=0 vs plain %.2e, LoRA vs merged %.2e, (6,B) vs (3,2B) %.2e, LoRA effect %.2e\n", label,
           max_diff(L0, Lp, nl), em, max_diff(L1, L2, nl), moved);
    tn_model_free(m2);
    free(L0), free(Lp), free(L1), free(Lm), free(L2);
    tn_model_free(m);
}

/* ------------------------------------------------------------------ (c) freezing */

static void test_freezing(double dropout) {
    tn_model *m = lora_model(QD, ALPHA, dropout);
    tn_model_init_random(m, 5);
    randomize_B(m, 0.2);
    float **before = calloc((size_t)m->n_params, sizeof *before);
    for (int i = 0; i < m->n_params; i++) before[i] = get(m, m->params[i].name);
    tn_acts *a = tn_acts_create(m, B, S, dropout > 0);
    tn_adamw *o = tn_adamw_create(m);
    tn_adamw_hparams h = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    int64_t nt = tn_count_targets(labels, B, S);
    double losses[3];
    for (int step = 0; step < 3; step++) {
        m->be->zero(m->grad, m->n_trainable);
        int64_t nv = 0;
        losses[step] = tn_model_forward_backward(m, a, ids, labels, B, S, 1.0f / (float)nt, &nv, 100 + step) / nt;
        CHECK(nv == nt && isfinite(losses[step]));
        CHECK(m->be->all_finite(m->grad, m->n_trainable));
        tn_clip_grad_norm(m, 1.0);
        tn_adamw_step(o, m, &h, 1e-2);
    }
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        float *now = get(m, p->name);
        int same = memcmp(now, before[i], p->numel * sizeof *now) == 0;
        if (strstr(p->name, ".lora_"))
            CHECKF(!same, "dropout %.1f: LoRA tensor %s did not change", dropout, p->name);
        else
            CHECKF(same, "dropout %.1f: frozen tensor %s changed", dropout, p->name);
        free(now);
    }
    CHECKF(losses[2] < losses[0], "dropout %.1f: loss did not decrease: %.6f -> %.6f", dropout, losses[0], losses[2]);
    if (dropout > 0) {
        /* training masks depend on the seed; evaluation ignores dropout: logits equal a dropout-free copy */
        int64_t nv = 0;
        double la = tn_model_forward_backward(m, a, ids, labels, B, S, 0.0f, &nv, 7);
        double lb = tn_model_forward_backward(m, a, ids, labels, B, S, 0.0f, &nv, 7);
        double lc = tn_model_forward_backward(m, a, ids, labels, B, S, 0.0f, &nv, 8);
        CHECK(la == lb && la != lc);
        tn_model *nd = lora_model(QD, ALPHA, 0);
        copy_by_name(nd, m);
        float *l1 = logits(m), *l2 = logits(nd);
        CHECK(memcmp(l1, l2, (size_t)B * S * cfg.vocab_size * sizeof *l1) == 0);
        free(l1), free(l2);
        tn_model_free(nd);
    }
    for (int i = 0; i < m->n_params; i++) free(before[i]);
    free(before);
    tn_adamw_free(o);
    tn_acts_free(a);
    tn_model_free(m);
}

/* ------------------------------------------------------------------ (d) gradient check */

static double loss_of(tn_model *m, tn_acts *a, int64_t nt) {
    int64_t nv = 0;
    return tn_model_forward_backward(m, a, ids, labels, B, S, 1.0f / (float)nt, &nv, 1) / (double)nt;
}

static void test_gradients(unsigned targets, int checkpointing) {
    tn_model *m = lora_model(targets, ALPHA, 0);
    tn_model_init_random(m, 3);
    randomize_B(m, 0.3);
    tn_acts *a = tn_acts_create(m, B, S, checkpointing);
    int64_t nt = tn_count_targets(labels, B, S);
    CHECK(nt == B * (S - 1) - 3);
    m->be->zero(m->grad, m->n_trainable);
    loss_of(m, a, nt);
    float *g = malloc(m->n_trainable * sizeof *g);
    m->be->download(g, m->grad, m->n_trainable);
    const float eps = 1e-2f;
    int checked = 0, bad = 0;
    double worst = 0;
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        if (!p->trainable) continue;
        /* the three largest |g| of the tensor and two fixed ones */
        size_t pick[5] = {0, 0, 0, p->numel / 2, p->numel - 1};
        for (int k = 0; k < 3; k++) {
            double best = -1;
            for (size_t j = 0; j < p->numel; j++) {
                int taken = 0;
                for (int q = 0; q < k; q++) taken |= pick[q] == j;
                if (!taken && fabs(g[p->offset + j]) > best) best = fabs(g[p->offset + j]), pick[k] = j;
            }
        }
        float *w = get(m, p->name);
        for (int k = 0; k < 5; k++) {
            size_t j = pick[k];
            float w0 = w[j];
            w[j] = w0 + eps;
            tn_model_set(m, p, w);
            double lp = loss_of(m, a, nt);
            w[j] = w0 - eps;
            tn_model_set(m, p, w);
            double lm = loss_of(m, a, nt);
            w[j] = w0;
            tn_model_set(m, p, w);
            double fd = (lp - lm) / (2.0 * (double)eps), an = g[p->offset + j];
            double err = fabs(fd - an) / (fabs(an) + 1e-2);
            worst = fmax(worst, err);
            checked++;
            if (err > 2e-2) {
                bad++;
                fprintf(stderr, "%s[%zu]: analytic %.6g, finite difference %.6g\n", p->name, j, an, fd);
            }
            if (k == 0) CHECKF(fabs(an) > 1e-2, "%s: largest gradient %.3g is too small to test", p->name, an);
        }
        free(w);
    }
    CHECKF(bad == 0 && checked == 5 * 2 * __builtin_popcount(targets), "%d of %d LoRA gradient elements off (worst %.3g)",
           bad, checked, worst);
    printf("lora gradients (%s%s): %d elements, worst |fd - analytic| / (|analytic| + 1e-2) = %.2e\n",
           targets == ALL ? "all" : "q_proj,down_proj", checkpointing ? ", checkpointing" : "", checked, worst);
    free(g);
    tn_acts_free(a);
    tn_model_free(m);
}

/* ------------------------------------------------------------------ (e) target lists */

static void test_parse_targets(void) {
    unsigned mask = 12345;
    CHECK(tn_lora_parse_targets("all", &mask) == 0 && mask == ALL && mask == 0x7F);
    CHECK(tn_lora_parse_targets("q_proj,v_proj", &mask) == 0 && mask == (1u << TN_LT_Q | 1u << TN_LT_V));
    CHECK(tn_lora_parse_targets("down_proj, gate_proj,up_proj", &mask) == 0 &&
          mask == (1u << TN_LT_DOWN | 1u << TN_LT_GATE | 1u << TN_LT_UP));
    CHECK(tn_lora_parse_targets("o_proj,o_proj", &mask) == 0 && mask == 1u << TN_LT_O);
    CHECK(tn_lora_parse_targets("q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", &mask) == 0 && mask == ALL);
    CHECK(tn_lora_parse_targets("q_proj,qkv_proj", &mask) == -1);
    CHECKF(strstr(tn_errmsg(), "qkv_proj") != NULL, "error does not name the unknown projection: %s", tn_errmsg());
    CHECK(tn_lora_parse_targets("Q_PROJ", &mask) == -1 && strstr(tn_errmsg(), "Q_PROJ"));
    CHECK(tn_lora_parse_targets("", &mask) == -1);
    CHECK(strcmp(tn_lora_target_names[TN_LT_Q], "q_proj") == 0 && strcmp(tn_lora_target_names[TN_LT_DOWN], "down_proj") == 0);
}

/* ------------------------------------------------------------------ (f) adapter folder */

static void test_adapter_io(void) {
    tn_model *m = lora_model(QD, ALPHA, 0.05);
    tn_model_init_random(m, 9);
    randomize_B(m, 0.3);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/adapter", tl_tmpdir());
    CHECKF(tn_model_save_adapter(m, dir) == 0, "%s", tn_errmsg());

    char *p = tn_path_join(dir, "adapter_config.json");
    char *text = tn_read_file(p, NULL, 0);
    free(p);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "r"), *al = cJSON_GetObjectItemCaseSensitive(j, "lora_alpha");
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(j, "lora_dropout"), *tm = cJSON_GetObjectItemCaseSensitive(j, "target_modules");
    CHECK(cJSON_IsNumber(r) && r->valuedouble == R);
    CHECK(cJSON_IsNumber(al) && al->valuedouble == ALPHA);
    CHECK(cJSON_IsNumber(dr) && dr->valuedouble == 0.05);
    CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "peft_type")), "LORA") == 0);
    int nq = 0, nd = 0;
    if (CHECK(cJSON_IsArray(tm) && cJSON_GetArraySize(tm) == 2)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, tm) {
            nq += cJSON_IsString(it) && strcmp(it->valuestring, "q_proj") == 0;
            nd += cJSON_IsString(it) && strcmp(it->valuestring, "down_proj") == 0;
        }
    }
    CHECK(nq == 1 && nd == 1);
    cJSON_Delete(j);

    p = tn_path_join(dir, "adapter_model.safetensors");
    st_file f;
    if (CHECKF(st_open(&f, p) == 0, "%s", tn_errmsg())) {
        CHECK(f.n == 4);
        for (int i = 0; i < f.n; i++) {
            const st_tensor *t = &f.tensors[i];
            const char *prefix = "base_model.model.";
            if (!CHECKF(strncmp(t->name, prefix, strlen(prefix)) == 0, "adapter tensor %s lacks the PEFT prefix", t->name))
                continue;
            const tn_param *q = tn_model_find(m, t->name + strlen(prefix));
            if (!CHECKF(q && strstr(q->name, ".lora_"), "adapter tensor %s is not a LoRA tensor", t->name)) continue;
            CHECK(t->dtype == ST_F32 && t->ndim == 2 && t->shape[0] == q->shape[0] && t->shape[1] == q->shape[1]);
            float *a = get(m, q->name), *b = malloc(q->numel * sizeof *b);
            CHECK(st_read_f32(&f, t, b, (int64_t)q->numel) == 0 && memcmp(a, b, q->numel * sizeof *a) == 0);
            free(a), free(b);
        }
        st_close(&f);
    }
    free(p);

    tn_lora_config lc;
    if (CHECKF(tn_lora_config_load(dir, &lc) == 0, "%s", tn_errmsg())) {
        CHECK(lc.r == R && lc.alpha == ALPHA && lc.dropout == 0.05 && lc.targets == QD);
        tn_model *m2 = tn_model_create(&cfg, &lc, tn_backend_cpu());
        copy_by_name(m2, m); /* base from m ... */
        for (int i = 0; i < m2->n_params; i++) /* ... LoRA wiped, to be restored from the folder */
            if (m2->params[i].trainable) {
                float *z = calloc(m2->params[i].numel, sizeof *z);
                tn_model_set(m2, &m2->params[i], z);
                free(z);
            }
        CHECKF(tn_model_load_adapter(m2, dir) == 0, "%s", tn_errmsg());
        for (int i = 0; i < m->n_params; i++) {
            float *a = get(m, m->params[i].name), *b = get(m2, m->params[i].name);
            CHECKF(memcmp(a, b, m->params[i].numel * sizeof *a) == 0, "%s differs after the adapter round trip",
                   m->params[i].name);
            free(a), free(b);
        }
        float *l1 = logits(m), *l2 = logits(m2);
        CHECK(memcmp(l1, l2, (size_t)B * S * cfg.vocab_size * sizeof *l1) == 0);
        free(l1), free(l2);
        tn_model_free(m2);
    }
    /* an adapter of another rank or other targets is refused, naming the tensor */
    tn_lora_config r4 = {.r = 4, .alpha = 8, .targets = QD};
    tn_model *m4 = tn_model_create(&cfg, &r4, tn_backend_cpu());
    CHECK(tn_model_load_adapter(m4, dir) == -1 && strstr(tn_errmsg(), "lora_A.weight"));
    tn_model_free(m4);
    tn_lora_config kv = {.r = R, .alpha = 8, .targets = 1u << TN_LT_K};
    tn_model *mk = tn_model_create(&cfg, &kv, tn_backend_cpu());
    CHECK(tn_model_load_adapter(mk, dir) == -1 && strstr(tn_errmsg(), "k_proj.lora_A.weight"));
    tn_model_free(mk);
    /* a plain model has no adapter to save */
    tn_model *plain = tn_model_create(&cfg, NULL, tn_backend_cpu());
    char d2[512];
    snprintf(d2, sizeof d2, "%s/none", tl_tmpdir());
    CHECK(tn_model_save_adapter(plain, d2) == -1);
    tn_model_free(plain);
    tn_model_free(m);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(void) {
    tn_rng_seed(&rng, 77);
    make_config();
    test_layout();
    test_scale(QD, "q_proj,down_proj");
    test_scale(ALL, "all");
    test_freezing(0.0);
    test_freezing(0.1);
    test_gradients(QD, 0);
    test_gradients(ALL, 1);
    test_parse_targets();
    test_adapter_io();
    if (!tl_failures) nftw(tl_tmpdir(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return tl_done("test_unit_lora");
}
