/* test_parity_vl -- the Qwen vision-language models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) against ../shared/ref's
 * independent PyTorch reference (vl_ref.py via make_vl_fixture.py, float64 fixtures), at the text models' bounds
 * (tests/parity/parity_bounds.h, derived in test_parity_fixtures.c from fp32 arithmetic alone):
 *   - position_ids of get_rope_index (with the attention mask) and the image-token counts: exactly;
 *   - intermediates (patch embeddings, Qwen3-VL position embeddings, vision blocks' output, merged image
 *     embeddings, deepstack features, the decoder's input embeddings), logits, loss and every gradient: relative
 *     L2 <= GRAD_TOL per tensor; the 3-step AdamW update by pb_check_step3.
 *   Logits are compared on the attended positions (attention_mask 1). The reference's padded query rows attend only
 *   to the valid keys before them and sit at position 1; tandem has no attention mask (right padding with causal
 *   attention leaves every attended row, hence the loss and every gradient, exactly as with the mask) and computes
 *   those rows as continuations of the text: their logits are scored by nothing and differ.
 * Fixtures: qwen2vl, qwen25vl, qwen3vl (everything trains), qwen2vl-lm, qwen3vl-lm (vision tower and merger frozen,
 * detected from the gradients file), *-lora (LoRA r 4 on the language model). Also: the released Qwen2-VL naming
 * (model_legacy/) loads to the same weights and saves back under its own names.
 * And `tandem export` of a VL LoRA (LLaMA-Factory's merge YAML keys): the merged folder's logits equal the base +
 * adapter logits (both fp32: the merge adds one rounding per weight, well inside GRAD_TOL), under the base's names,
 * with the preprocessor_config.json copied.
 * TANDEM_VL_FIXTURE=DIR runs one fixture folder instead (any seed or shape make_vl_fixture.py writes).
 * tests/mutants/mutants.sh plants M-RoPE section order, vision RoPE axes, merger order and deepstack layer bugs. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/core.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/vision.h"
#include "parity/parity_bounds.h"
#include "testlib.h"
#include "trainer/optimizer.h"

typedef struct {
    tn_model *m;
    tn_acts *acts;
    int B, S, n_images;
    int32_t *ids, *labels, *mask, *grid, *row;
    float *pv;
    tn_mm_batch mm;
    int64_t n_targets;
} vl_run;

static cJSON *load_json(const char *dir, const char *file) {
    char *path = tn_path_join(dir, file);
    char *text = tn_read_file(path, NULL, 0);
    free(path);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

static double json_num(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static int32_t *read_i32(const st_file *f, const char *name, int64_t *numel) {
    const st_tensor *t = st_find(f, name);
    if (!CHECKF(t != NULL, "%s: no tensor %s", f->path, name)) return NULL;
    int64_t *tmp = tn_xmalloc((size_t)t->numel * sizeof *tmp);
    int32_t *out = tn_xmalloc((size_t)t->numel * sizeof *out);
    if (st_read_i64(f, t, tmp, t->numel) != 0) tn_die("%s", tn_errmsg());
    for (int64_t i = 0; i < t->numel; i++) out[i] = (int32_t)tmp[i];
    free(tmp);
    *numel = t->numel;
    return out;
}

/* the batch row of each image: the i-th <|vision_start|><|image_pad|> pair in row-major order */
static void image_rows(vl_run *r) {
    const tn_vision_config *v = &r->m->cfg.vis;
    int k = 0;
    r->row = tn_xcalloc((size_t)r->n_images + 1, sizeof *r->row);
    for (int b = 0; b < r->B; b++)
        for (int s = 0; s + 1 < r->S; s++)
            if (r->ids[b * r->S + s] == v->vision_start_token_id && r->ids[b * r->S + s + 1] == v->image_token_id &&
                k < r->n_images)
                r->row[k++] = b;
    CHECKF(k == r->n_images, "%d images placed in the rows, %d grids", k, r->n_images);
}

static int load_batch(vl_run *r, const char *dir) {
    char *path = tn_path_join(dir, "batch.safetensors");
    st_file f;
    int ok = CHECKF(st_open(&f, path) == 0, "%s", tn_errmsg());
    free(path);
    if (!ok) return 0;
    int64_t n = 0, ng = 0;
    r->ids = read_i32(&f, "input_ids", &n);
    r->labels = read_i32(&f, "labels", &n);
    r->mask = read_i32(&f, "attention_mask", &n);
    r->grid = read_i32(&f, "image_grid_thw", &ng);
    const st_tensor *ti = st_find(&f, "input_ids"), *tp = st_find(&f, "pixel_values");
    ok = CHECK(r->ids && r->labels && r->mask && r->grid && ti && tp);
    if (ok) {
        r->B = (int)ti->shape[0], r->S = (int)ti->shape[1], r->n_images = (int)(ng / 3);
        r->pv = tn_xmalloc((size_t)tp->numel * sizeof *r->pv);
        ok = CHECKF(st_read_f32(&f, tp, r->pv, tp->numel) == 0, "%s", tn_errmsg());
        r->mm = (tn_mm_batch){.n_images = r->n_images, .grid_thw = r->grid, .pixel_values = r->pv,
                              .patch_dim = (int)tp->shape[1]};
    }
    st_close(&f);
    return ok;
}

/* LLaMA-Factory's full-SFT default freezes the vision tower and merger: a fixture whose gradients hold none of
 * model.visual.* was made that way */
static unsigned fixture_freeze(const char *dir) {
    char *path = tn_path_join(dir, "grads.safetensors");
    st_file f;
    unsigned freeze = 0;
    if (st_open(&f, path) == 0) {
        freeze = TN_FREEZE_VISION | TN_FREEZE_PROJECTOR;
        for (int i = 0; i < f.n; i++)
            if (strncmp(f.tensors[i].name, "model.visual.", 13) == 0) freeze = 0;
        st_close(&f);
    }
    free(path);
    return freeze;
}

static int setup(vl_run *r, const char *dir, int checkpointing) {
    char *model_dir = tn_path_join(dir, "model"), *cfg_path = tn_path_join(model_dir, "config.json");
    char *adapter_dir = tn_path_join(model_dir, "adapter");
    tn_model_config cfg;
    tn_lora_config lora = {0};
    int ok = CHECKF(tn_model_config_load(cfg_path, &cfg) == 0, "%s", tn_errmsg());
    if (ok && tn_file_exists(adapter_dir)) ok = CHECKF(tn_lora_config_load(adapter_dir, &lora) == 0, "%s", tn_errmsg());
    if (ok) {
        if (!lora.r) lora.freeze = fixture_freeze(dir);
        r->m = tn_model_create(&cfg, &lora, tn_backend_cpu());
        ok = CHECKF(tn_model_load_hf(r->m, model_dir) == 0, "%s", tn_errmsg());
        if (ok && lora.r) ok = CHECKF(tn_model_load_adapter(r->m, adapter_dir) == 0, "%s", tn_errmsg());
    }
    if (ok) ok = load_batch(r, dir);
    if (ok) {
        image_rows(r);
        r->mm.row = r->row;
        r->acts = tn_acts_create(r->m, r->B, r->S, checkpointing);
        r->n_targets = tn_count_targets(r->labels, r->B, r->S);
    }
    free(model_dir), free(cfg_path), free(adapter_dir);
    return ok;
}

static void teardown(vl_run *r) {
    tn_acts_free(r->acts);
    tn_model_free(r->m);
    free(r->ids), free(r->labels), free(r->mask), free(r->grid), free(r->row), free(r->pv);
}

static void set_images(vl_run *r) {
    char err[256] = "";
    CHECKF(tn_acts_set_images(r->acts, &r->mm, err, sizeof err) == 0, "set_images: %s", err);
}

/* relative L2 of a [rows, V] block over the rows with mask 1 */
static double masked_rel_l2(const float *x, const double *ref, const int32_t *mask, int rows, int V) {
    double num = 0, den = 0;
    for (int t = 0; t < rows; t++) {
        if (!mask[t]) continue;
        for (int v = 0; v < V; v++) {
            double d = x[(size_t)t * V + v] - ref[(size_t)t * V + v];
            num += d * d, den += ref[(size_t)t * V + v] * ref[(size_t)t * V + v];
        }
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static double logits_error(vl_run *r, const double *ref) {
    float *lg = tn_xmalloc((size_t)r->B * r->S * r->m->V * sizeof *lg);
    set_images(r);
    tn_model_logits(r->m, r->acts, r->ids, r->B, r->S, lg);
    double e = masked_rel_l2(lg, ref, r->mask, r->B * r->S, r->m->V);
    free(lg);
    return e;
}

/* position_ids (get_rope_index with the attention mask) and image-token counts, exactly */
static void check_positions(const char *name, vl_run *r, const char *dir, const cJSON *exp) {
    char *path = tn_path_join(dir, "batch.safetensors"), err[256] = "";
    st_file f;
    int64_t n = 0;
    if (!CHECKF(st_open(&f, path) == 0, "%s", tn_errmsg())) {
        free(path);
        return;
    }
    int32_t *ref = read_i32(&f, "position_ids", &n), *pos = tn_xmalloc((size_t)3 * r->B * r->S * sizeof *pos);
    int rc = tn_vl_rope_index(r->m, r->ids, r->mask, r->B, r->S, r->grid, r->n_images, pos, err, sizeof err);
    int64_t bad = 0;
    for (int64_t i = 0; ref && rc == 0 && i < n; i++) bad += pos[i] != ref[i];
    CHECKF(rc == 0 && ref && n == 3 * (int64_t)r->B * r->S && bad == 0, "%s: position_ids: %lld of %lld differ (%s)", name,
           (long long)bad, (long long)n, err);
    const cJSON *imgs = cJSON_GetObjectItemCaseSensitive(exp, "images"), *it;
    int i = 0, total = 0, pads = 0;
    cJSON_ArrayForEach(it, imgs) {
        int want = (int)json_num(it, "n_image_tokens"), mg = r->m->cfg.vis.merge;
        int got = i < r->n_images ? r->grid[3 * i] * r->grid[3 * i + 1] * r->grid[3 * i + 2] / (mg * mg) : -1;
        CHECKF(got == want, "%s: image %d: %d image tokens, expected %d", name, i, got, want);
        total += want, i++;
    }
    for (int t = 0; t < r->B * r->S; t++) pads += r->ids[t] == r->m->cfg.vis.image_token_id;
    CHECKF(i == r->n_images && pads == total, "%s: %d <|image_pad|> tokens, %d expected over %d images", name, pads, total,
           i);
    free(ref), free(pos), free(path);
    st_close(&f);
}

/* every intermediate the fixture holds, after a forward */
static void check_intermediates(const char *name, vl_run *r, const char *dir) {
    char *path = tn_path_join(dir, "intermediates.safetensors");
    st_file f;
    if (!CHECKF(st_open(&f, path) == 0, "%s", tn_errmsg())) {
        free(path);
        return;
    }
    float *lg = tn_xmalloc((size_t)r->B * r->S * r->m->V * sizeof *lg);
    set_images(r);
    tn_model_logits(r->m, r->acts, r->ids, r->B, r->S, lg);
    int compared = 0;
    for (int i = 0; i < f.n; i++) {
        int64_t n = 0;
        int rows = 0, cols = 0;
        double *ref = pb_read_f64(&f, f.tensors[i].name, &n);
        const float *got = tn_acts_intermediate(r->acts, f.tensors[i].name, &rows, &cols);
        if (CHECKF(got && ref && (int64_t)rows * cols == n, "%s: intermediate %s: %s", name, f.tensors[i].name,
                   got ? "shape differs" : "not produced")) {
            double e = tl_rel_l2(got, ref, n);
            CHECKF(e <= GRAD_TOL, "%s: intermediate %s rel L2 %.3g > %g", name, f.tensors[i].name, e, GRAD_TOL);
            compared++;
        }
        free(ref);
    }
    CHECKF(compared >= 4, "%s: only %d intermediates compared", name, compared);
    free(lg), free(path);
    st_close(&f);
}

static double fb(vl_run *r, int64_t *nv) {
    set_images(r);
    return tn_model_forward_backward(r->m, r->acts, r->ids, r->labels, r->B, r->S, 1.0f / (float)r->n_targets, nv, 1);
}

static void check_grads_and_steps(const char *name, vl_run *r, const char *dir, const cJSON *exp, double *worst,
                                  pb_step3 *w) {
    tn_model *m = r->m;
    st_file gf, pf;
    char *gp = tn_path_join(dir, "grads.safetensors"), *pp = tn_path_join(dir, "params_step3.safetensors");
    int ok = CHECK(st_open(&gf, gp) == 0) & CHECK(st_open(&pf, pp) == 0);
    free(gp), free(pp);
    if (!ok) return;
    m->be->zero(m->grad, m->n_trainable);
    int64_t nv = 0;
    double loss = fb(r, &nv) / (double)r->n_targets, ref_loss = json_num(exp, "loss");
    CHECKF(nv == r->n_targets && nv == (int64_t)json_num(exp, "n_targets"), "%s: %lld targets", name, (long long)nv);
    CHECKF(fabs(loss - ref_loss) <= GRAD_TOL * fabs(ref_loss), "%s: loss %.9f vs %.12f", name, loss, ref_loss);
    float *host = tn_xmalloc(m->n_trainable * sizeof *host);
    int n_grads = 0;
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        if (!p->trainable) continue;
        char fname[160];
        int64_t n = 0;
        double *ref = pb_read_f64(&gf, tn_model_file_name(m, p->name, fname, sizeof fname), &n);
        if (CHECKF(ref && n == (int64_t)p->numel, "%s: reference has no gradient for %s", name, fname)) {
            m->be->download(host, m->grad + p->offset, p->numel);
            double e = tl_rel_l2(host, ref, n);
            *worst = e > *worst ? e : *worst;
            CHECKF(e <= GRAD_TOL, "%s: grad %s rel L2 %.3g (bound %g)", name, fname, e, GRAD_TOL);
            n_grads++;
        }
        free(ref);
    }
    CHECKF(n_grads == gf.n, "%s: %d gradients compared, reference has %d", name, n_grads, gf.n);
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(exp, "optimizer"), *betas = cJSON_GetObjectItemCaseSensitive(opt, "betas");
    tn_adamw_hparams h = {.beta1 = cJSON_GetArrayItem(betas, 0)->valuedouble, .beta2 = cJSON_GetArrayItem(betas, 1)->valuedouble,
                          .eps = json_num(opt, "eps"), .weight_decay = json_num(opt, "weight_decay")};
    double lr = json_num(opt, "lr"), max_norm = json_num(opt, "max_grad_norm");
    const cJSON *norms = cJSON_GetObjectItemCaseSensitive(exp, "grad_norms_preclip");
    float *p0 = tn_xmalloc(m->n_trainable * sizeof *p0);
    m->be->download(p0, m->slab, m->n_trainable);
    tn_adamw *o = tn_adamw_create(m);
    for (int s = 0; s < (int)json_num(opt, "steps"); s++) {
        if (s > 0) {
            m->be->zero(m->grad, m->n_trainable);
            int64_t nv2 = 0;
            fb(r, &nv2);
        }
        double norm = tn_clip_grad_norm(m, max_norm), ref_norm = cJSON_GetArrayItem(norms, s)->valuedouble;
        CHECKF(fabs(norm - ref_norm) <= GRAD_TOL * ref_norm, "%s: step %d grad norm %.9g vs %.9g", name, s + 1, norm,
               ref_norm);
        tn_adamw_step(o, m, &h, lr);
    }
    *w = pb_check_step3(name, m, p0, &gf, &pf, lr, h.weight_decay, 0);
    tn_adamw_free(o);
    free(p0), free(host);
    st_close(&gf);
    st_close(&pf);
}

static void run_fixture(const char *name, const char *dir, int checkpointing) {
    vl_run r = {0};
    cJSON *exp = load_json(dir, "expected.json");
    if (!CHECKF(exp != NULL, "%s: expected.json missing", name) || !setup(&r, dir, checkpointing)) {
        cJSON_Delete(exp);
        teardown(&r);
        return;
    }
    check_positions(name, &r, dir, exp);
    check_intermediates(name, &r, dir);
    char *lp = tn_path_join(dir, "logits.safetensors");
    st_file lf;
    int64_t nl = 0;
    double *ref_logits = NULL, le = 1;
    if (CHECK(st_open(&lf, lp) == 0)) {
        ref_logits = pb_read_f64(&lf, "logits", &nl);
        st_close(&lf);
    }
    if (CHECK(ref_logits && nl == (int64_t)r.B * r.S * r.m->V)) le = logits_error(&r, ref_logits);
    CHECKF(le <= GRAD_TOL, "%s: logits rel L2 %.3g > %g", name, le, GRAD_TOL);
    double worst = 0;
    pb_step3 w = {0};
    check_grads_and_steps(name, &r, dir, exp, &worst, &w);
    printf("%s%s: logits %.2e, worst grad rel L2 %.2e, step-3 update error at most %.2f of its bound (worst %s), "
           "%lld of %lld elements near-zero\n", name, checkpointing ? " (checkpointing)" : "", le, worst, w.ratio,
           w.tensor, (long long)w.excluded, (long long)w.elements);
    free(ref_logits), free(lp);
    cJSON_Delete(exp);
    teardown(&r);
}

/* model_legacy/ (released Qwen2-VL names) loads the same weights; a save keeps those names and the 5-D kernel */
static void check_legacy_naming(const char *fixtures) {
    char cur[1200], leg[1200], out[1200];
    snprintf(cur, sizeof cur, "%s/qwen2vl-f32/model", fixtures);
    snprintf(leg, sizeof leg, "%s/qwen2vl-f32/model_legacy", fixtures);
    char *cfg_path = tn_path_join(cur, "config.json");
    tn_model_config cfg;
    snprintf(out, sizeof out, "%s/vl-legacy-save", tl_tmpdir());
    if (!CHECKF(tn_model_config_load(cfg_path, &cfg) == 0, "%s", tn_errmsg())) {
        free(cfg_path);
        return;
    }
    tn_model *a = tn_model_create(&cfg, NULL, tn_backend_cpu()), *b = tn_model_create(&cfg, NULL, tn_backend_cpu());
    CHECKF(tn_model_load_hf(a, cur) == 0, "%s", tn_errmsg());
    CHECKF(tn_model_load_hf(b, leg) == 0, "%s", tn_errmsg());
    CHECK(!a->vl_legacy_names && b->vl_legacy_names);
    CHECK(memcmp(a->slab, b->slab, a->n_total * sizeof(float)) == 0);
    CHECKF(tn_model_save_hf(b, out, 0) == 0, "%s", tn_errmsg());
    char *saved = tn_path_join(out, "model.safetensors");
    st_file f;
    if (CHECKF(st_open(&f, saved) == 0, "%s", tn_errmsg())) {
        const st_tensor *t = st_find(&f, "visual.patch_embed.proj.weight");
        CHECKF(t && t->ndim == 5 && st_find(&f, "model.layers.0.self_attn.q_proj.weight") &&
                   !st_find(&f, "model.visual.merger.mlp.0.weight"),
               "saved legacy checkpoint: names or the 5-D patch kernel not kept");
        st_close(&f);
    }
    tn_model_config back;
    char *cfg_out = tn_path_join(out, "config.json");
    CHECKF(tn_model_config_load(cfg_out, &back) == 0 && back.vis.kind == cfg.vis.kind && back.vis.E == cfg.vis.E &&
               memcmp(back.vis.mrope, cfg.vis.mrope, sizeof back.vis.mrope) == 0 && back.head_dim == cfg.head_dim,
           "config.json written back does not read back equal: %s", tn_errmsg());
    free(saved), free(cfg_out), free(cfg_path);
    tn_model_free(a);
    tn_model_free(b);
}

static void check_export(const char *fixtures) {
    char dir[1100], yaml[1200], out[1200];
    snprintf(dir, sizeof dir, "%s/qwen25vl-lora-f64", fixtures);
    snprintf(out, sizeof out, "%s/vl-merged", tl_tmpdir());
    snprintf(yaml, sizeof yaml, "%s/merge.yaml", tl_tmpdir());
    char *text = NULL;
    if (asprintf(&text, "model_name_or_path: %s/model\nadapter_name_or_path: %s/model/adapter\ntemplate: qwen2_vl\n"
                 "finetuning_type: lora\nexport_dir: %s\n", dir, dir, out) < 0 ||
        !CHECK(tn_write_file_atomic(yaml, text, strlen(text)) == 0)) {
        free(text);
        return;
    }
    free(text);
    char *argv[] = {yaml};
    if (!CHECKF(tn_cmd_export(1, argv) == 0, "export of a VL LoRA failed")) return;
    vl_run r = {0}, g = {0};
    if (setup(&r, dir, 0)) { /* base + adapter */
        char *cfg_path = tn_path_join(out, "config.json"), *pp = tn_path_join(out, "preprocessor_config.json");
        tn_model_config cfg;
        CHECK(tn_file_exists(pp));
        if (CHECKF(tn_model_config_load(cfg_path, &cfg) == 0, "%s", tn_errmsg())) {
            g = r;
            g.m = tn_model_create(&cfg, NULL, tn_backend_cpu());
            g.acts = tn_acts_create(g.m, r.B, r.S, 0);
            if (CHECKF(tn_model_load_hf(g.m, out) == 0, "%s", tn_errmsg())) {
                float *l1 = tn_xmalloc((size_t)r.B * r.S * r.m->V * sizeof *l1);
                float *l2 = tn_xmalloc((size_t)r.B * r.S * r.m->V * sizeof *l2);
                set_images(&r), set_images(&g);
                tn_model_logits(r.m, r.acts, r.ids, r.B, r.S, l1);
                tn_model_logits(g.m, g.acts, g.ids, g.B, g.S, l2);
                double *d = tn_xmalloc((size_t)r.B * r.S * r.m->V * sizeof *d);
                for (size_t i = 0; i < (size_t)r.B * r.S * r.m->V; i++) d[i] = l1[i];
                double e = masked_rel_l2(l2, d, r.mask, r.B * r.S, r.m->V);
                CHECKF(e <= GRAD_TOL && !g.m->vl_legacy_names, "export: merged VL model's logits vs base + adapter: rel L2 "
                       "%.3g", e);
                free(l1), free(l2), free(d);
            }
            tn_acts_free(g.acts);
            tn_model_free(g.m);
        }
        free(cfg_path), free(pp);
    }
    teardown(&r);
}

int main(void) {
    const char *one = getenv("TANDEM_VL_FIXTURE");
    if (one && *one) {
        run_fixture(one, one, 0);
        return tl_done("test_parity_vl");
    }
    tl_require_shared("test_parity_vl");
    char fixtures[1024];
    snprintf(fixtures, sizeof fixtures, "%s/ref/fixtures", tl_shared_dir());
    const char *names[] = {"qwen2vl", "qwen25vl", "qwen3vl", "qwen2vl-lm", "qwen3vl-lm", "qwen2vl-lora", "qwen25vl-lora",
                           "qwen3vl-lora"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char dir[1100];
        snprintf(dir, sizeof dir, "%s/%s-f64", fixtures, names[i]);
        run_fixture(names[i], dir, 0);
        if (i < 3) run_fixture(names[i], dir, 1);
    }
    check_legacy_naming(fixtures);
    check_export(fixtures);
    return tl_done("test_parity_vl");
}
