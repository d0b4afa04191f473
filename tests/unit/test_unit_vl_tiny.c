/* test_unit_vl_tiny -- examples/tiny-qwen2-vl, tiny-qwen2.5-vl, tiny-qwen3-vl turned into model folders by
 * `tandem init-model CONFIG OUT --tokenizer ../shared/data/tokenizers/qwen3` (the real Qwen tokenizer), then:
 *   - the folder holds config.json, model.safetensors, tokenizer.json and a preprocessor_config.json that the data
 *     side reads (patch and merge sizes of the config);
 *   - the tokenizer encodes <|vision_start|><|image_pad|><|vision_end|> to the config's special ids;
 *   - one forward with an image (a 60x90 test pattern through the processor: LLaMA-Factory's limits,
 *     smart_resize, bicubic, patchify) gives finite logits; the logits before <|vision_start|> are bit-identical
 *     with another image (causal attention, the image enters only at its own tokens) and differ after it;
 *   - one forward/backward gives a finite loss and a nonzero gradient on the patch embedding (full fine-tuning);
 *   - generation's KV-cache path (tn_kv_forward_mm): the prompt with its image prefilled, then the text after it
 *     decoded token by token (positions continuing max(t, h, w) after the image) gives, row by row, the logits of
 *     the full forward (fp32, another summation order: rel L2 <= 1e-5 per row).
 * Needs ../shared (the tokenizer): skipped without it, a failure with CI=true. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/core.h"
#include "data/image.h"
#include "data/vl_processor.h"
#include "model/kv_forward.h"
#include "model/model.h"
#include "model/vision.h"
#include "testlib.h"
#include "tokenizer/tokenizer.h"

enum { H0 = 60, W0 = 90, PRE = 3, POST = 4 };

/* a 60x90 RGB pattern; flip != 0 gives another picture */
static void pattern(tn_image *im, int flip) {
    memset(im, 0, sizeof *im);
    im->w = W0, im->h = H0, im->mode = TN_IMG_RGB, im->nch = 3;
    im->px = tn_xmalloc((size_t)W0 * H0 * 3);
    for (int y = 0; y < H0; y++)
        for (int x = 0; x < W0; x++)
            for (int c = 0; c < 3; c++)
                im->px[((size_t)y * W0 + x) * 3 + c] = (uint8_t)(flip ? 255 - (x * 3 + y * c) % 256 : (x * 2 + y * (c + 1)) % 256);
}

/* pixel_values of one image; *n_tok image tokens, *grid (1, h/patch, w/patch) */
static float *image_patches(const tn_vl_proc *p, int flip, int *n_tok, int32_t grid[3]) {
    tn_image im, out;
    pattern(&im, flip);
    if (!CHECKF(tn_vl_prepare(p, &im, "pattern", &out) == 0, "%s", tn_errmsg())) return NULL;
    grid[0] = 1, grid[1] = out.h / p->patch_size, grid[2] = out.w / p->patch_size;
    *n_tok = tn_vl_image_tokens(p, out.h, out.w);
    float *pv = tn_xmalloc((size_t)grid[1] * grid[2] * tn_vl_patch_dim(p) * sizeof *pv);
    tn_vl_patchify(p, out.px, out.h, out.w, pv);
    tn_image_free(&out);
    return pv;
}

/* prefill [0, n0) with the image, then one token at a time; each step's last-row logits vs the full forward's */
static void check_kv(const char *example, tn_model *m, const int32_t *ids, int S, int n0, const tn_mm_batch *mm,
                     const float *full) {
    tn_kv *kv = tn_kv_create(m, 1, S + 4);
    if (!CHECKF(kv != NULL, "%s", tn_errmsg())) return;
    float *lg = tn_xmalloc((size_t)m->V * sizeof *lg);
    double worst = 0;
    for (int at = 0; at < S;) {
        int n = at == 0 ? n0 : 1;
        tn_kv_seg seg = {.slot = 0, .n = n, .ids = ids + at};
        if (!CHECKF(tn_kv_forward_mm(m, kv, &seg, 1, at == 0 ? mm : NULL, lg) == 0, "%s", tn_errmsg())) break;
        at += n;
        const float *ref = full + (size_t)(at - 1) * m->V;
        double num = 0, den = 0;
        for (int v = 0; v < m->V; v++) num += ((double)lg[v] - ref[v]) * ((double)lg[v] - ref[v]), den += (double)ref[v] * ref[v];
        worst = fmax(worst, sqrt(num / den));
    }
    CHECKF(worst <= 1e-5, "%s: KV-cache generation path vs full forward: worst row rel L2 %.3g", example, worst);
    free(lg);
    tn_kv_free(kv);
}

static void run_example(const char *example, const char *tokdir) {
    char cfg_in[1024], out[1024], path[1100];
    snprintf(cfg_in, sizeof cfg_in, "%s/../examples/%s/config.json", tl_tests_dir(), example);
    snprintf(out, sizeof out, "%s/%s", tl_tmpdir(), example);
    char *argv[] = {cfg_in, out, "--tokenizer", (char *)tokdir, "--seed", "5"};
    if (!CHECKF(tn_cmd_init_model(6, argv) == 0, "%s: init-model failed", example)) return;
    const char *files[] = {"config.json", "model.safetensors", "tokenizer.json", "preprocessor_config.json"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", out, files[i]);
        CHECKF(tn_file_exists(path), "%s: no %s", example, files[i]);
    }
    tn_model_config cfg;
    tn_vl_proc proc;
    snprintf(path, sizeof path, "%s/config.json", out);
    if (!CHECKF(tn_model_config_load(path, &cfg) == 0, "%s", tn_errmsg())) return;
    snprintf(path, sizeof path, "%s/preprocessor_config.json", out);
    if (!CHECKF(tn_vl_proc_load(path, &proc) == 0, "%s", tn_errmsg())) return;
    CHECK(proc.patch_size == cfg.vis.patch && proc.merge_size == cfg.vis.merge && proc.temporal_patch_size == cfg.vis.tpatch);
    snprintf(path, sizeof path, "%s/tokenizer.json", out);
    tn_tokenizer *tok = tn_tokenizer_load(path);
    tn_ids v = {0};
    const char *special = "<|vision_start|><|image_pad|><|vision_end|>";
    CHECKF(tok && tn_tokenizer_encode(tok, special, strlen(special), 1, &v) == 0 && v.n == 3 &&
               v.ids[0] == cfg.vis.vision_start_token_id && v.ids[1] == cfg.vis.image_token_id &&
               v.ids[2] == cfg.vis.vision_end_token_id,
           "%s: the tokenizer's vision tokens differ from the config's ids", example);
    tn_ids_free(&v);
    tn_tokenizer_free(tok);

    tn_model *m = tn_model_create(&cfg, NULL, tn_backend_cpu());
    if (!CHECKF(tn_model_load_hf(m, out) == 0, "%s", tn_errmsg())) {
        tn_model_free(m);
        return;
    }
    int n_tok = 0, n2 = 0;
    int32_t grid[3], grid2[3], row = 0;
    float *pv = image_patches(&proc, 0, &n_tok, grid), *pv2 = image_patches(&proc, 1, &n2, grid2);
    int S = PRE + 2 + n_tok + POST;
    int32_t *ids = tn_xmalloc((size_t)S * sizeof *ids);
    for (int s = 0; s < S; s++) ids[s] = 100 + 37 * s;
    ids[PRE] = cfg.vis.vision_start_token_id, ids[PRE + 1 + n_tok] = cfg.vis.vision_end_token_id;
    for (int k = 0; k < n_tok; k++) ids[PRE + 1 + k] = cfg.vis.image_token_id;
    tn_mm_batch mm = {.n_images = 1, .grid_thw = grid, .row = &row, .pixel_values = pv, .patch_dim = tn_vl_patch_dim(&proc)};
    tn_mm_batch mm2 = mm;
    mm2.pixel_values = pv2;
    tn_acts *a = tn_acts_create(m, 1, S, 0);
    float *l1 = tn_xmalloc((size_t)S * m->V * sizeof *l1), *l2 = tn_xmalloc((size_t)S * m->V * sizeof *l2);
    char err[256] = "";
    CHECKF(n2 == n_tok && tn_acts_set_images(a, &mm, err, sizeof err) == 0, "%s: %s", example, err);
    tn_model_logits(m, a, ids, 1, S, l1);
    CHECK(tn_acts_set_images(a, &mm2, err, sizeof err) == 0);
    tn_model_logits(m, a, ids, 1, S, l2);
    int finite = 1;
    for (size_t i = 0; i < (size_t)S * m->V; i++) finite &= isfinite(l1[i]) != 0;
    size_t before = (size_t)(PRE + 1) * m->V; /* rows up to <|vision_start|> see no image */
    CHECKF(finite && memcmp(l1, l2, before * sizeof *l1) == 0 && memcmp(l1 + before, l2 + before, ((size_t)S * m->V - before) * sizeof *l1) != 0,
           "%s: logits with an image: finite %d, equal before the image, different after", example, finite);
    check_kv(example, m, ids, S, PRE + 2 + n_tok, &mm, l1);
    /* forward/backward: a finite loss and a patch-embedding gradient */
    int64_t nv = 0;
    m->be->zero(m->grad, m->n_trainable);
    CHECK(tn_acts_set_images(a, &mm, err, sizeof err) == 0);
    double loss = tn_model_forward_backward(m, a, ids, ids, 1, S, 1.0f, &nv, 1);
    double g2 = m->be->sumsq(m->dvw->patch_w, (size_t)cfg.vis.E * mm.patch_dim);
    CHECKF(isfinite(loss) && nv == S - 1 && g2 > 0, "%s: loss %g over %lld targets, |d patch_embed|^2 %g", example, loss,
           (long long)nv, g2);
    printf("%s: %d image tokens (grid %d x %d), loss %.4f\n", example, n_tok, grid[1], grid[2], loss / (double)nv);
    tn_acts_free(a);
    tn_model_free(m);
    free(ids), free(pv), free(pv2), free(l1), free(l2);
}

int main(void) {
    tl_require_shared("test_unit_vl_tiny");
    char tokdir[1024];
    snprintf(tokdir, sizeof tokdir, "%s/data/tokenizers/qwen3", tl_shared_dir());
    run_example("tiny-qwen2-vl", tokdir);
    run_example("tiny-qwen2.5-vl", tokdir);
    run_example("tiny-qwen3-vl", tokdir);
    return tl_done("test_unit_vl_tiny");
}
