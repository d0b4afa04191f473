/* test_parity_vl_data -- the image side of vision-language training against ../shared/ref's fixtures
 * (qwen2vl, qwen25vl, qwen3vl, f32 and f64; made by vl_ref.py with PIL and transformers' slow
 * Qwen2VLImageProcessor, see ../shared/ref/README.md "Vision-language reference"):
 *   - images/image{0,1,2}.png decoded equal to preprocess.safetensors image{i}.rgb, byte for byte;
 *   - resized (smart_resize + PIL BICUBIC of the uint8 image) equal to image{i}.resized, byte for byte: tandem
 *     reproduces PIL's fixed-point arithmetic (22-bit taps, 8-bit intermediate), so the bound is 0;
 *   - image_grid_thw, the image-token counts and every smart_resize case of expected.json exactly;
 *   - pixel_values (the processor's float32 output) equal bit for bit: rescale is float64 x 1/255 rounded to
 *     float32, normalise (x - mean) / std in float32 with float32 mean/std, the same operations on the same
 *     values, so there is no rounding difference to bound; filled through tn_batch_fill_mm, in the order of
 *     the batch's <|image_pad|> runs (which must be vision_start + grid/4 pads + vision_end). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/dataset.h"
#include "data/image.h"
#include "data/lf_internal.h"
#include "data/vl_processor.h"
#include "model/safetensors.h"
#include "testlib.h"

enum { V_START = 223, V_END = 224, IMG_PAD = 226, N_IMG = 3 };

static int64_t jint(const lj_val *v) { return v && v->type == LJ_NUM ? strtoll(v->s, NULL, 10) : -1; }
static const lj_val *jat(const lj_val *arr, int i) {
    const lj_val *x = arr && arr->type == LJ_ARR ? arr->child : NULL;
    while (x && i-- > 0) x = x->next;
    return x;
}

static uint8_t *read_u8(const st_file *f, const char *name, int64_t *numel) {
    const st_tensor *t = st_find(f, name);
    if (!CHECKF(t != NULL, "%s: no tensor %s", f->path, name)) return NULL;
    int64_t *tmp = tn_xmalloc((size_t)t->numel * sizeof *tmp);
    uint8_t *out = tn_xmalloc((size_t)t->numel);
    if (st_read_i64(f, t, tmp, t->numel) != 0) tn_die("%s", tn_errmsg());
    for (int64_t i = 0; i < t->numel; i++) out[i] = (uint8_t)tmp[i];
    free(tmp);
    *numel = t->numel;
    return out;
}

static void check_smart_resize_cases(const char *name, const lj_val *cases) {
    int n = 0;
    for (const lj_val *c = cases ? cases->child : NULL; c; c = c->next, n++) {
        int oh = -1, ow = -1;
        int rc = tn_smart_resize(jint(lj_get(c, "h")), jint(lj_get(c, "w")), jint(lj_get(c, "factor")), jint(lj_get(c, "min_pixels")),
                                 jint(lj_get(c, "max_pixels")), &oh, &ow);
        const lj_val *out = lj_get(c, "out");
        CHECKF(rc == 0 && oh == jint(jat(out, 0)) && ow == jint(jat(out, 1)),
               "%s: smart_resize case %d (%lld x %lld, factor %lld): %d x %d, expected %lld x %lld", name, n,
               (long long)jint(lj_get(c, "h")), (long long)jint(lj_get(c, "w")), (long long)jint(lj_get(c, "factor")), oh, ow,
               (long long)jint(jat(out, 0)), (long long)jint(jat(out, 1)));
    }
    CHECKF(n >= 10, "%s: only %d smart_resize cases", name, n);
}

/* The batch's rows hold, in order, <|vision_start|> + n_i <|image_pad|> + <|vision_end|> for each image. */
static void check_runs(const char *name, const int64_t *ids, int B, int S, const int want[N_IMG], int32_t row_of[N_IMG]) {
    int img = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < S; t++) {
            if (ids[b * S + t] != IMG_PAD || (t > 0 && ids[b * S + t - 1] == IMG_PAD)) continue;
            int run = 0;
            while (t + run < S && ids[b * S + t + run] == IMG_PAD) run++;
            CHECKF(img < N_IMG && run == want[img] && t > 0 && ids[b * S + t - 1] == V_START && t + run < S &&
                       ids[b * S + t + run] == V_END,
                   "%s: <|image_pad|> run %d (row %d, at %d) is %d long, expected vision_start + %d pads + vision_end", name,
                   img, b, t, run, img < N_IMG ? want[img] : -1);
            if (img < N_IMG) row_of[img] = b;
            img++;
        }
    CHECKF(img == N_IMG, "%s: %d image runs in input_ids, expected %d", name, img, N_IMG);
}

static void check_fixture(const char *dir, const char *name) {
    int failures0 = tl_failures;
    char p[1400];
    snprintf(p, sizeof p, "%s/model/preprocessor_config.json", dir);
    tn_vl_proc vl;
    if (!CHECKF(tn_vl_proc_load(p, &vl) == 0, "%s: %s", name, tn_errmsg())) return;
    /* the fixtures run the processor alone: no LLaMA-Factory pre-resize (image1 is 28 x 28 = 784 < 32*32) */
    CHECK(tn_vl_proc_set_lf_limits(&vl, (int64_t)1 << 40, 1) == 0);
    snprintf(p, sizeof p, "%s/expected.json", dir);
    size_t jn;
    char *jtext = tn_read_file(p, &jn, 1 << 24);
    lf_arena arena = {0};
    lj_error jerr;
    const lj_val *exp = jtext ? lj_parse(&arena, jtext, jn, &jerr) : NULL;
    if (!CHECKF(exp != NULL, "%s: expected.json unreadable", name)) return;
    const lj_val *proc = lj_get(exp, "processor");
    CHECKF(jint(lj_get(proc, "patch_size")) == vl.patch_size && jint(lj_get(proc, "merge_size")) == vl.merge_size &&
               jint(lj_get(proc, "min_pixels")) == vl.min_pixels && jint(lj_get(proc, "max_pixels")) == vl.max_pixels,
           "%s: processor settings read from preprocessor_config.json differ from expected.json's", name);
    check_smart_resize_cases(name, lj_get(exp, "smart_resize_cases"));

    st_file pre, bat;
    snprintf(p, sizeof p, "%s/preprocess.safetensors", dir);
    if (!CHECKF(st_open(&pre, p) == 0, "%s", tn_errmsg())) return;
    snprintf(p, sizeof p, "%s/batch.safetensors", dir);
    if (!CHECKF(st_open(&bat, p) == 0, "%s", tn_errmsg())) return;

    tn_image prep[N_IMG];
    int tokens[N_IMG];
    memset(prep, 0, sizeof prep);
    for (int i = 0; i < N_IMG; i++) {
        char key[64];
        snprintf(p, sizeof p, "%s/images/image%d.png", dir, i);
        tn_image im;
        if (!CHECKF(tn_image_load(p, &im) == 0, "%s: %s", name, tn_errmsg())) return;
        tn_image rgb = im;
        rgb.px = tn_xmalloc((size_t)im.w * im.h * im.nch);
        memcpy(rgb.px, im.px, (size_t)im.w * im.h * im.nch);
        tn_image_to_rgb(&rgb);
        int64_t n;
        snprintf(key, sizeof key, "image%d.rgb", i);
        uint8_t *want = read_u8(&pre, key, &n);
        CHECKF(want && n == (int64_t)rgb.w * rgb.h * 3 && memcmp(rgb.px, want, (size_t)n) == 0, "%s: %s differs from the decoded PNG",
               name, key);
        free(want);
        tn_image_free(&rgb);
        if (!CHECKF(tn_vl_prepare(&vl, &im, p, &prep[i]) == 0, "%s: %s", name, tn_errmsg())) return;
        snprintf(key, sizeof key, "image%d.resized", i);
        want = read_u8(&pre, key, &n);
        size_t bad = 0;
        if (want && n == (int64_t)prep[i].w * prep[i].h * 3)
            for (int64_t k = 0; k < n; k++) bad += prep[i].px[k] != want[k];
        CHECKF(want && n == (int64_t)prep[i].w * prep[i].h * 3 && bad == 0, "%s: %s: %zu of %lld bytes differ from PIL's BICUBIC",
               name, key, bad, (long long)n);
        free(want);
        const lj_val *ie = jat(lj_get(exp, "images"), i), *g = lj_get(ie, "grid_thw");
        tokens[i] = tn_vl_image_tokens(&vl, prep[i].h, prep[i].w);
        CHECKF(jint(jat(g, 0)) == 1 && jint(jat(g, 1)) == prep[i].h / vl.patch_size && jint(jat(g, 2)) == prep[i].w / vl.patch_size &&
                   jint(lj_get(ie, "n_image_tokens")) == tokens[i],
               "%s: image %d: grid 1 x %d x %d, %d tokens; expected.json says %lld x %lld x %lld, %lld", name, i,
               prep[i].h / vl.patch_size, prep[i].w / vl.patch_size, tokens[i], (long long)jint(jat(g, 0)),
               (long long)jint(jat(g, 1)), (long long)jint(jat(g, 2)), (long long)jint(lj_get(ie, "n_image_tokens")));
    }

    /* the batch: image runs in input_ids, image_grid_thw, and pixel_values through tn_batch_fill_mm */
    const st_tensor *ti = st_find(&bat, "input_ids"), *tg = st_find(&bat, "image_grid_thw"), *tp = st_find(&bat, "pixel_values");
    if (!CHECK(ti && tg && tp && ti->ndim == 2 && tp->ndim == 2)) return;
    int B = (int)ti->shape[0], S = (int)ti->shape[1];
    int64_t *ids = tn_xmalloc((size_t)ti->numel * sizeof *ids), grid[9];
    float *pv = tn_xmalloc((size_t)tp->numel * sizeof *pv);
    CHECK(st_read_i64(&bat, ti, ids, ti->numel) == 0 && st_read_i64(&bat, tg, grid, 9) == 0 && st_read_f32(&bat, tp, pv, tp->numel) == 0);
    int32_t row_of[N_IMG] = {-1, -1, -1};
    check_runs(name, ids, B, S, tokens, row_of);
    for (int i = 0; i < N_IMG; i++)
        CHECKF(grid[3 * i] == 1 && grid[3 * i + 1] == prep[i].h / vl.patch_size && grid[3 * i + 2] == prep[i].w / vl.patch_size,
               "%s: image_grid_thw[%d]", name, i);
    /* a dataset of the batch's rows (sample b = row b) with their images; one micro-batch of all rows */
    int64_t img_off[3] = {0}, pix_off[N_IMG + 1] = {0};
    int32_t hw[2 * N_IMG];
    size_t total = 0;
    for (int i = 0; i < N_IMG; i++) total += (size_t)prep[i].w * prep[i].h * 3;
    uint8_t *pix = tn_xmalloc(total);
    for (int i = 0; i < N_IMG; i++) {
        size_t n = (size_t)prep[i].w * prep[i].h * 3;
        memcpy(pix + pix_off[i], prep[i].px, n);
        pix_off[i + 1] = pix_off[i] + (int64_t)n;
        hw[2 * i] = prep[i].h, hw[2 * i + 1] = prep[i].w;
        if (row_of[i] >= 0 && row_of[i] < 2) img_off[row_of[i] + 1]++;
    }
    img_off[2] += img_off[1];
    int64_t var_off[3] = {0, S, 2 * (int64_t)S};
    int32_t *ids32 = tn_xmalloc((size_t)B * S * sizeof *ids32);
    for (int64_t k = 0; k < (int64_t)B * S; k++) ids32[k] = (int32_t)ids[k];
    tn_dataset d = {.n = B, .S = S, .var_ids = ids32, .var_labels = ids32, .var_off = var_off, .img_off = img_off,
                    .pix_off = pix_off, .img_hw = hw, .pix = pix, .vl = &vl};
    tn_sampler smp;
    tn_sampler_init(&smp, B, 0);
    tn_mm_buf buf = {0};
    /* rows in sampler order; the fixture's order is row 0 then row 1 */
    int first = tn_sampler_get(&smp, 0);
    const tn_mm_batch *mb = tn_batch_fill_mm(&d, &smp, first == 0 ? 0 : 1, 1, &buf);  /* the sample that is row 0 */
    int dim = tn_vl_patch_dim(&vl);
    CHECKF(mb->patch_dim == dim && dim == tp->shape[1], "%s: patch_dim %d, pixel_values has %lld columns", name, mb->patch_dim,
           (long long)tp->shape[1]);
    size_t rows0 = 0, bad = 0, n_cmp = 0;
    for (int j = 0; j < mb->n_images; j++) rows0 += (size_t)mb->grid_thw[3 * j + 1] * mb->grid_thw[3 * j + 2];
    for (size_t k = 0; k < rows0 * (size_t)dim && k < (size_t)tp->numel; k++, n_cmp++) bad += memcmp(&mb->pixel_values[k], &pv[k], 4) != 0;
    mb = tn_batch_fill_mm(&d, &smp, first == 0 ? 1 : 0, 1, &buf);  /* row 1 */
    size_t rows1 = 0;
    for (int j = 0; j < mb->n_images; j++) rows1 += (size_t)mb->grid_thw[3 * j + 1] * mb->grid_thw[3 * j + 2];
    for (size_t k = 0; k < rows1 * (size_t)dim && rows0 * dim + k < (size_t)tp->numel; k++, n_cmp++)
        bad += memcmp(&mb->pixel_values[k], &pv[rows0 * dim + k], 4) != 0;
    CHECKF((int64_t)(rows0 + rows1) == tp->shape[0] && bad == 0 && n_cmp == (size_t)tp->numel,
           "%s: pixel_values: %zu + %zu rows (fixture %lld), %zu of %zu values not bit-equal", name, rows0, rows1,
           (long long)tp->shape[0], bad, n_cmp);
    if (tl_failures == failures0)
        printf("%s: 3 images decoded and resized byte-equal, %lld pixel_values bit-equal, %d smart_resize cases equal\n", name,
               (long long)tp->numel, (int)lj_get(exp, "smart_resize_cases")->n);
    tn_mm_buf_free(&buf);
    tn_sampler_free(&smp);
    for (int i = 0; i < N_IMG; i++) tn_image_free(&prep[i]);
    free(pix), free(ids), free(ids32), free(pv), free(jtext);
    lf_arena_free(&arena);
    st_close(&pre), st_close(&bat);
}

int main(void) {
    tl_require_shared("test_parity_vl_data");
    static const char *const names[] = {"qwen2vl-f32", "qwen2vl-f64", "qwen25vl-f32", "qwen25vl-f64", "qwen3vl-f32", "qwen3vl-f64"};
    int found = 0;
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/ref/fixtures/%s", tl_shared_dir(), names[k]);
        if (!tn_file_exists(dir)) continue;
        found++;
        check_fixture(dir, names[k]);
    }
    CHECKF(found == 6, "only %d of the 6 vision-language fixtures found under ../shared/ref/fixtures", found);
    return tl_done("test_parity_vl_data");
}
