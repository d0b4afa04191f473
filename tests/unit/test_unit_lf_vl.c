/* test_unit_lf_vl -- LLaMA-Factory's multimodal data (src/data/lf_media.c, lf_* with images, dataset.c's
 * tn_batch_fill_mm) with the real Qwen3 tokenizer and LLaMA-Factory's own mllm_demo (../shared):
 *  1. Qwen's vision tokens are single ids of the tokenizer (151652 <|vision_start|> .. 151656 <|video_pad|>).
 *  2. mllm_demo under qwen2_vl and qwen3_vl_nothink, record by record, against sequences built here without the
 *     lf_ code: the template strings of LF's template.py, each plain-text piece between special tokens encoded
 *     on its own by tandem's (HF-verified) tokenizer, special tokens by id, and <|image_pad|> runs whose lengths
 *     are derived by hand from the JPEG sizes (comments at k_tokens_*); labels -100 on prompts.
 *  3. qwen3_vl (thinking): the empty think block in each response; LF's Qwen3-VL example mix
 *     mllm_demo,identity,alpaca_en_demo (counts, which samples carry which images).
 *  4. tn_batch_fill_mm: rows, grids and pixel_values of micro-batches agree with the samples' image-token runs
 *     and with tn_vl_patchify of the stored images.
 *  5. The cache: a second load maps it; an image's bytes, the processor or image_max_pixels change the key.
 *  6. Errors, each one line naming the data file, dataset, record and image: missing and undecodable images,
 *     tag/image count mismatches, a template without vision, image tokens cut by cutoff_len, packing / pt
 *     with images, no preprocessor_config.json, bad images column values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "data/dataset.h"
#include "data/lf_dataset.h"
#include "data/lf_internal.h"
#include "testlib.h"
#include "tokenizer/tokenizer.h"

enum { IM_START = 151644, IM_END = 151645, V_START = 151652, V_END = 151653, IMG_PAD = 151655 };

static tn_tokenizer *tok;
static char *TOK, *LFDIR, *PROC2, *PROC3;
static const char *TMP;

/* Qwen2-VL-7B-Instruct's and Qwen3-VL-4B-Instruct's preprocessor_config.json (the keys the processor reads). */
static const char k_qwen2vl_proc[] =
    "{\"min_pixels\": 3136, \"max_pixels\": 12845056, \"patch_size\": 14, \"temporal_patch_size\": 2, \"merge_size\": 2,"
    " \"image_mean\": [0.48145466, 0.4578275, 0.40821073], \"image_std\": [0.26862954, 0.26130258, 0.27577711],"
    " \"image_processor_type\": \"Qwen2VLImageProcessor\", \"processor_class\": \"Qwen2VLProcessor\"}";
static const char k_qwen3vl_proc[] =
    "{\"size\": {\"longest_edge\": 16777216, \"shortest_edge\": 65536}, \"patch_size\": 16, \"temporal_patch_size\": 2,"
    " \"merge_size\": 2, \"image_mean\": [0.5, 0.5, 0.5], \"image_std\": [0.5, 0.5, 0.5],"
    " \"processor_class\": \"Qwen3VLProcessor\", \"image_processor_type\": \"Qwen2VLImageProcessorFast\"}";

/* <|image_pad|> counts of mllm_demo_data/{1,2,3}.jpg (300x168, 300x199, 300x166; under 768*768 and over 32*32
 * pixels, sides >= 28: LF's pre-resize leaves them).
 * Qwen2-VL (factor 28, 3136..12845056 pixels): 168 -> round(6.0) = 6 -> 168, 300 -> round(10.71) = 11 -> 308:
 *   grid 12 x 22, 264 / 4 = 66; 199 -> round(7.11) = 7 -> 196: grid 14 x 22 -> 77; 166 -> round(5.93) = 6 -> 168: 66.
 * Qwen3-VL (factor 32, 65536..16777216): 168 x 300 -> 160 x 288 = 46080 < 65536: beta = sqrt(65536 / 50400) =
 *   1.1403, ceil(5.987) = 6 -> 192, ceil(10.69) = 11 -> 352: grid 12 x 22 -> 66; 199 x 300 -> 192 x 288 = 55296 <
 *   65536: beta = sqrt(65536 / 59700) = 1.0477, ceil(6.52) = 7 -> 224, ceil(9.82) = 10 -> 320: grid 14 x 20 -> 70;
 *   166 x 300: beta = sqrt(65536 / 49800) = 1.1472, ceil(5.95) = 6, ceil(10.76) = 11: 66. */
static const int k_tokens_q2[4] = {0, 66, 77, 66}, k_tokens_q3[4] = {0, 66, 70, 66};

/* ---- expected sequences ---- */
typedef struct { tn_ids ids, lab; } seq;

static void put(seq *s, int trained, int32_t id) {
    if (tn_ids_push(&s->ids, id) || tn_ids_push(&s->lab, trained ? id : LF_IGNORE)) exit(2);
}
/* A plain-text piece (no special tokens in it), tokenized on its own. */
static void text(seq *s, int trained, const char *t) {
    tn_ids x = {0};
    if (tn_tokenizer_encode(tok, t, strlen(t), 0, &x) != 0) exit(2);
    for (size_t i = 0; i < x.n; i++) put(s, trained, x.ids[i]);
    tn_ids_free(&x);
}
static void image(seq *s, int n) {
    put(s, 0, V_START);
    for (int k = 0; k < n; k++) put(s, 0, IMG_PAD);
    put(s, 0, V_END);
}
/* <|im_start|>user\n + content pieces + <|im_end|>\n<|im_start|>assistant\n; content: text with one optional
 * image before (img_first) or after. */
static void user_turn(seq *s, const char *sys, const char *content, int img, int img_first) {
    if (sys) {
        put(s, 0, IM_START), text(s, 0, sys), put(s, 0, IM_END), text(s, 0, "\n");
    }
    put(s, 0, IM_START);
    if (img && img_first) {
        text(s, 0, "user\n"), image(s, img), text(s, 0, content);
    } else {
        char b[512];
        snprintf(b, sizeof b, "user\n%s", content);
        text(s, 0, b);
        if (img) image(s, img);
    }
    put(s, 0, IM_END), text(s, 0, "\n"), put(s, 0, IM_START), text(s, 0, "assistant\n");
}
static void answer(seq *s, const char *content) {
    text(s, 1, content), put(s, 1, IM_END), text(s, 1, "\n");
}

static void check_seq(const lf_samples *x, int i, const seq *w, const char *what) {
    if (!CHECKF(i < x->n, "%s: sample %d missing", what, i)) return;
    const int32_t *ids = x->ids + x->off[i], *lab = x->labels + x->off[i];
    int n = x->len[i], bad = -1;
    for (int k = 0; k < n && k < (int)w->ids.n && bad < 0; k++)
        if (ids[k] != w->ids.ids[k] || lab[k] != w->lab.ids[k]) bad = k;
    if (bad < 0 && n != (int)w->ids.n) bad = n < (int)w->ids.n ? n : (int)w->ids.n;
    CHECKF(bad < 0, "%s: sample %d differs at token %d of %d (want %zu): got %d/%d, want %d/%d", what, i, bad, n, w->ids.n,
           bad >= 0 && bad < n ? ids[bad] : -1, bad >= 0 && bad < n ? lab[bad] : -1,
           bad >= 0 && bad < (int)w->ids.n ? w->ids.ids[bad] : -1, bad >= 0 && bad < (int)w->lab.n ? w->lab.ids[bad] : -1);
}

static lf_data_args vl_args(const char *ds, const char *tmpl, const char *proc) {
    lf_data_args a = {0};
    a.dataset = ds, a.dataset_dir = LFDIR, a.template_name = tmpl, a.stage = "sft";
    a.cutoff_len = 2048, a.packing = -1, a.seed = 42;
    a.tokenizer_path = TOK, a.processor_path = proc;
    return a;
}

static void write_text(const char *dir, const char *name, const char *text) {
    char *p = tn_path_join(dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        printf("cannot write %s\n", p);
        exit(2);
    }
    free(p);
}

static void test_vision_tokens(void) {
    static const char s[] = "<|vision_start|><|image_pad|><|image_pad|><|vision_end|><|vision_pad|><|video_pad|>";
    tn_ids x = {0};
    CHECK(tn_tokenizer_encode(tok, s, sizeof s - 1, 1, &x) == 0);
    int32_t want[] = {V_START, IMG_PAD, IMG_PAD, V_END, 151654, 151656};
    CHECKF(x.n == 6 && memcmp(x.ids, want, sizeof want) == 0, "vision tokens encode to %zu ids (first %d), want 6 single ids",
           x.n, x.n ? x.ids[0] : -1);
    tn_ids_free(&x);
}

/* mllm_demo records 0-2 (English; 3-5 are the same in Chinese with the same images). */
static void expected_mllm(seq w[3], const char *sys, const int tk[4]) {
    memset(w, 0, 3 * sizeof *w);
    user_turn(&w[0], sys, "Who are they?", tk[1], 1);
    answer(&w[0], "They're Kane and Gretzka from Bayern Munich.");
    user_turn(&w[0], NULL, "What are they doing?", tk[1], 0);
    answer(&w[0], "They are celebrating on the soccer field.");
    user_turn(&w[1], sys, "Who is he?", tk[2], 1);
    answer(&w[1], "He's Thomas Muller from Bayern Munich.");
    user_turn(&w[1], NULL, "Why is he on the ground?", 0, 0);
    answer(&w[1], "Because he's sliding on his knees to celebrate.");
    user_turn(&w[2], sys, "Please describe this image", tk[3], 1);
    answer(&w[2], "Chinese astronaut Gui Haichao is giving a speech.");
    user_turn(&w[2], NULL, "What has he accomplished?", 0, 0);
    answer(&w[2], "He was appointed to be a payload specialist on Shenzhou 16 mission in June 2022, thus becoming the first "
                  "Chinese civilian of Group 3 in space on 30 May 2023. He is responsible for the on-orbit operation of space "
                  "science experimental payloads.");
}

static void check_images(const lf_samples *s, const int tk[4], const char *what) {
    static const int per_sample[6][2] = {{1, 1}, {2, 0}, {3, 0}, {1, 1}, {2, 0}, {3, 0}};  /* jpg index per image */
    if (!CHECKF(s->img_off && s->n == 6, "%s: 6 samples with images", what)) return;
    CHECK(lf_samples_images(s) == 8);
    for (int i = 0; i < 6; i++) {
        int n = per_sample[i][1] ? 2 : 1;
        if (!CHECKF(s->img_off[i + 1] - s->img_off[i] == n, "%s: sample %d has %lld images, want %d", what, i,
                    (long long)(s->img_off[i + 1] - s->img_off[i]), n))
            continue;
        int64_t pads = 0, want = 0;
        for (int64_t k = s->img_off[i]; k < s->img_off[i + 1]; k++) {
            int jpg = per_sample[i][k - s->img_off[i]], h = s->img_hw[2 * k], w = s->img_hw[2 * k + 1];
            CHECKF(tn_vl_image_tokens(&s->vl, h, w) == tk[jpg], "%s: sample %d image %lld (%d.jpg) %dx%d: %d tokens, want %d",
                   what, i, (long long)k, jpg, h, w, tn_vl_image_tokens(&s->vl, h, w), tk[jpg]);
            CHECK(s->pix_off[k + 1] - s->pix_off[k] == (int64_t)h * w * 3);
            want += tk[jpg];
        }
        for (int64_t t = s->off[i]; t < s->off[i + 1]; t++) pads += s->ids[t] == IMG_PAD;
        CHECKF(pads == want, "%s: sample %d: %lld <|image_pad|>, want %lld", what, i, (long long)pads, (long long)want);
    }
}

static void test_mllm_demo(void) {
    seq w[3];
    lf_samples tr;
    lf_data_args a = vl_args("mllm_demo", "qwen2_vl", PROC2);
    if (CHECKF(lf_load(&a, tok, &tr, NULL) == 0, "qwen2_vl: %s", tn_errmsg())) {
        expected_mllm(w, "system\nYou are a helpful assistant.", k_tokens_q2);
        for (int i = 0; i < 3; i++) check_seq(&tr, i, &w[i], "mllm_demo/qwen2_vl");
        check_images(&tr, k_tokens_q2, "mllm_demo/qwen2_vl");
        CHECK(tr.vl.patch_size == 14 && tr.vl.min_pixels == 3136 && tr.vl.lf_max_pixels == 768 * 768);
        lf_samples_free(&tr);
        for (int i = 0; i < 3; i++) tn_ids_free(&w[i].ids), tn_ids_free(&w[i].lab);
    }
    a = vl_args("mllm_demo", "qwen3_vl_nothink", PROC3);
    if (CHECKF(lf_load(&a, tok, &tr, NULL) == 0, "qwen3_vl_nothink: %s", tn_errmsg())) {
        expected_mllm(w, NULL, k_tokens_q3);  /* no default system prompt */
        for (int i = 0; i < 3; i++) check_seq(&tr, i, &w[i], "mllm_demo/qwen3_vl_nothink");
        check_images(&tr, k_tokens_q3, "mllm_demo/qwen3_vl_nothink");
        CHECK(tr.vl.patch_size == 16 && tr.vl.min_pixels == 65536 && tr.vl.max_pixels == 16777216);
        lf_samples_free(&tr);
        for (int i = 0; i < 3; i++) tn_ids_free(&w[i].ids), tn_ids_free(&w[i].lab);
    }
    /* qwen3_vl: each answer starts with the (trained) empty think block */
    a = vl_args("mllm_demo", "qwen3_vl", PROC3);
    if (CHECKF(lf_load(&a, tok, &tr, NULL) == 0, "qwen3_vl: %s", tn_errmsg())) {
        seq x = {0};
        user_turn(&x, NULL, "Who is he?", k_tokens_q3[2], 1);
        put(&x, 1, 151667), text(&x, 1, "\n\n"), put(&x, 1, 151668), text(&x, 1, "\n\n");  /* <think>\n\n</think>\n\n */
        answer(&x, "He's Thomas Muller from Bayern Munich.");
        const int32_t *ids = tr.ids + tr.off[1], *lab = tr.labels + tr.off[1];
        int same = tr.len[1] >= (int)x.ids.n;
        for (size_t k = 0; same && k < x.ids.n; k++) same = ids[k] == x.ids.ids[k] && lab[k] == x.lab.ids[k];
        CHECKF(same, "qwen3_vl: sample 1's first turn is not prompt + image + trained empty think block + answer");
        tn_ids_free(&x.ids), tn_ids_free(&x.lab);
        lf_samples_free(&tr);
    }
}

/* LF's examples/train_lora/qwen3vl_lora_sft.yaml data: mllm_demo,identity,alpaca_en_demo, max_samples 1000,
 * image_max_pixels 262144, template qwen3_vl_nothink, cutoff 2048; then micro-batches through tn_batch_fill_mm. */
static void test_mix_and_batches(void) {
    lf_data_args a = vl_args("mllm_demo,identity,alpaca_en_demo", "qwen3_vl_nothink", PROC3);
    a.max_samples = 1000, a.image_max_pixels = 262144;
    lf_samples tr;
    if (!CHECKF(lf_load(&a, tok, &tr, NULL) == 0, "mix: %s", tn_errmsg())) return;
    CHECKF(tr.n == 6 + 91 + 999 && lf_samples_images(&tr) == 8, "mix: %d samples, %lld images (want 1096, 8)", tr.n,
           (long long)lf_samples_images(&tr));
    for (int i = 6; i < tr.n; i++)
        if (!CHECKF(tr.img_off[i] == 8 && tr.img_off[i + 1] == 8, "mix: text sample %d has images", i)) break;
    CHECK(tr.vl.lf_max_pixels == 262144);
    int S = 0;
    for (int i = 0; i < tr.n; i++) S = tr.len[i] > S ? tr.len[i] : S;
    tn_dataset d;
    lf_samples_dataset(&tr, S, &d);
    tn_sampler smp;
    tn_sampler_init(&smp, d.n, 7);
    tn_mm_buf buf = {0};
    int32_t *ids = tn_xmalloc((size_t)4 * S * sizeof *ids), *lab = tn_xmalloc((size_t)4 * S * sizeof *lab);
    int images_seen = 0, batches_with_images = 0, dim = tn_vl_patch_dim(&tr.vl);
    CHECK(dim == 3 * 2 * 16 * 16);
    for (int64_t k0 = 0; k0 < 2 * d.n; k0 += 4) {  /* two epochs of micro-batches of 4 */
        int len = tn_batch_fill(&d, &smp, k0, 4, ids, lab);
        const tn_mm_batch *mb = tn_batch_fill_mm(&d, &smp, k0, 4, &buf);
        images_seen += mb->n_images, batches_with_images += mb->n_images > 0;
        /* the i-th image fills the i-th <|image_pad|> run, row by row */
        int img = 0, ok = mb->patch_dim == dim;
        for (int b = 0; b < 4 && ok; b++) {
            for (int t = 0; t < len && ok; t++) {
                if (ids[b * len + t] != IMG_PAD || (t > 0 && ids[b * len + t - 1] == IMG_PAD)) continue;
                int run = 0;
                while (t + run < len && ids[b * len + t + run] == IMG_PAD) run++;
                ok = img < mb->n_images && mb->row[img] == b && mb->grid_thw[3 * img] == 1 &&
                     mb->grid_thw[3 * img + 1] * mb->grid_thw[3 * img + 2] / 4 == run;
                img++;
            }
        }
        ok = ok && img == mb->n_images;
        if (!CHECKF(ok, "micro-batch at %lld: images and <|image_pad|> runs disagree (%d runs, %d images)", (long long)k0, img,
                    mb->n_images))
            break;
    }
    CHECKF(images_seen == 16, "two epochs: %d images passed to the model, want 16", images_seen);
    CHECK(batches_with_images > 0);
    /* one micro-batch's pixel_values against tn_vl_patchify of the stored images */
    int found = -1;
    for (int64_t k0 = 0; k0 < d.n && found < 0; k0++)
        if (tn_batch_fill_mm(&d, &smp, k0, 1, &buf)->n_images > 0) found = (int)k0;
    if (CHECK(found >= 0)) {
        const tn_mm_batch *mb = tn_batch_fill_mm(&d, &smp, found, 1, &buf);
        int i = tn_sampler_get(&smp, found);
        const float *pv = mb->pixel_values;
        for (int64_t k = d.img_off[i]; k < d.img_off[i + 1]; k++) {
            int h = d.img_hw[2 * k], w = d.img_hw[2 * k + 1];
            size_t n = (size_t)(h / 16) * (w / 16) * dim;
            float *want = tn_xmalloc(n * sizeof *want);
            tn_vl_patchify(d.vl, d.pix + d.pix_off[k], h, w, want);
            CHECK(memcmp(pv, want, n * sizeof *want) == 0);
            /* value of patch row 0, column 0: pixel (0, 0) channel R, (v / 255 - 0.5) / 0.5 in float32 */
            float x = (float)((double)d.pix[d.pix_off[k]] * (1.0 / 255)), v = (x - 0.5f) / 0.5f;
            CHECK(pv[0] == v);
            pv += n;
            free(want);
        }
        /* rows by index (evaluation): the image sample, a padding row, a text sample (identity), the image sample
         * again: its images twice, on rows 0 and 3, the same pixel_values each time */
        int n_own = (int)(d.img_off[i + 1] - d.img_off[i]);
        size_t own = (size_t)(pv - mb->pixel_values);
        float *first = tn_xmalloc(own * sizeof *first);
        memcpy(first, mb->pixel_values, own * sizeof *first);
        int idx[4] = {i, -1, 6, i};
        const tn_mm_batch *rb = tn_rows_fill_mm(&d, idx, 4, &buf);
        CHECKF(rb->n_images == 2 * n_own && rb->row[0] == 0 && rb->row[n_own] == 3 && rb->row[2 * n_own - 1] == 3,
               "rows by index: %d images, want %d on rows 0 and 3", rb->n_images, 2 * n_own);
        CHECK(memcmp(rb->pixel_values, first, own * sizeof *first) == 0 &&
              memcmp(rb->pixel_values + own, first, own * sizeof *first) == 0);
        int none[2] = {-1, 6};
        CHECK(tn_rows_fill_mm(&d, none, 2, &buf)->n_images == 0);
        free(first);
    }
    tn_mm_buf_free(&buf);
    tn_sampler_free(&smp);
    free(ids), free(lab);
    lf_samples_free(&tr);
}

/* A copy of mllm_demo in a folder of our own (for the cache and error cases). */
static char *demo_copy(const char *name) {
    char *dir = tn_path_join(TMP, name), cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && cp -r %s/mllm_demo.json %s/mllm_demo_data %s/", dir, dir, LFDIR, LFDIR, dir);
    if (system(cmd) != 0) exit(2);
    write_text(dir, "dataset_info.json",
               "{\"mllm_demo\": {\"file_name\": \"mllm_demo.json\", \"formatting\": \"sharegpt\", \"columns\": {\"messages\": "
               "\"messages\", \"images\": \"images\"}, \"tags\": {\"role_tag\": \"role\", \"content_tag\": \"content\", "
               "\"user_tag\": \"user\", \"assistant_tag\": \"assistant\"}},\n"
               " \"bad\": {\"file_name\": \"bad.json\", \"formatting\": \"sharegpt\", \"columns\": {\"messages\": \"messages\", "
               "\"images\": \"images\"}, \"tags\": {\"role_tag\": \"role\", \"content_tag\": \"content\", \"user_tag\": \"user\", "
               "\"assistant_tag\": \"assistant\"}},\n"
               " \"vid\": {\"file_name\": \"bad.json\", \"formatting\": \"sharegpt\", \"columns\": {\"messages\": \"messages\", "
               "\"videos\": \"videos\"}}}");
    return dir;
}

static void test_cache(void) {
    char *dir = demo_copy("cache"), *cache = tn_path_join(TMP, "cache_files");
    lf_data_args a = vl_args("mllm_demo", "qwen2_vl", PROC2);
    a.dataset_dir = dir, a.cache_dir = cache;
    lf_samples t1, t2, t3;
    if (!CHECKF(lf_load(&a, tok, &t1, NULL) == 0, "cache 1: %s", tn_errmsg())) return;
    CHECK(t1.map_ == NULL);
    if (CHECKF(lf_load(&a, tok, &t2, NULL) == 0, "cache 2: %s", tn_errmsg())) {
        CHECKF(t2.map_ != NULL, "the second load should map the cache");
        CHECK(t2.n == t1.n && t2.off[t2.n] == t1.off[t1.n] && memcmp(t2.ids, t1.ids, (size_t)t1.off[t1.n] * 4) == 0);
        CHECK(lf_samples_images(&t2) == 8 && t2.pix_off[8] == t1.pix_off[8] &&
              memcmp(t2.pix, t1.pix, (size_t)t1.pix_off[8]) == 0 && memcmp(t2.img_hw, t1.img_hw, 16 * 4) == 0);
        CHECK(t2.vl.patch_size == 14 && t2.vl.image_std[2] == 0.27577711f);
        lf_samples_free(&t2);
    }
    /* one byte of 2.jpg's comment area changed: another key (the decoded pixels may not even change) */
    char *jpg = tn_path_join(dir, "mllm_demo_data/2.jpg");
    size_t n;
    char *b = tn_read_file(jpg, &n, 1 << 24);
    if (CHECK(b && n > 100)) {
        b[n - 3] ^= 1;  /* inside the entropy-coded data, before EOI */
        FILE *f = fopen(jpg, "wb");
        CHECK(f && fwrite(b, 1, n, f) == n && fclose(f) == 0);
        if (CHECKF(lf_load(&a, tok, &t3, NULL) == 0, "cache 3: %s", tn_errmsg())) {
            CHECKF(t3.map_ == NULL, "an image's bytes changed: the cache must not be used");
            lf_samples_free(&t3);
        }
    }
    free(b), free(jpg);
    a.image_max_pixels = 40000;  /* the pre-resize changes the images (300x168 = 50400 pixels) */
    if (CHECKF(lf_load(&a, tok, &t3, NULL) == 0, "cache 4: %s", tn_errmsg())) {
        CHECKF(t3.map_ == NULL && t3.img_hw[1] != t1.img_hw[1], "image_max_pixels changed: new key and smaller images");
        lf_samples_free(&t3);
    }
    a.image_max_pixels = 0, a.processor_path = PROC3;
    if (CHECKF(lf_load(&a, tok, &t3, NULL) == 0, "cache 5: %s", tn_errmsg())) {
        CHECKF(t3.map_ == NULL && t3.vl.patch_size == 16, "another processor: a new key");
        lf_samples_free(&t3);
    }
    lf_samples_free(&t1);
    free(dir), free(cache);
}

static void expect_err(lf_data_args *a, const char *s1, const char *s2, int line) {
    lf_samples tr;
    int rc = lf_load(a, tok, &tr, NULL);
    const char *m = tn_errmsg();
    tl_checkf(rc != 0 && strstr(m, s1) && (!s2 || strstr(m, s2)) && !strchr(m, '\n'), __FILE__, line,
              "%s/%s: want an error with '%s'%s%s, got %s", a->dataset, a->template_name, s1, s2 ? " and " : "", s2 ? s2 : "",
              rc ? m : "success");
    if (rc == 0) lf_samples_free(&tr);
}
#define ERR(s1, s2) expect_err(&a, s1, s2, __LINE__)

#define MSG(u, v) "{\"role\": \"user\", \"content\": \"" u "\"}, {\"role\": \"assistant\", \"content\": \"" v "\"}"
static void bad_case(const char *dir, const char *json) { write_text(dir, "bad.json", json); }

static void test_errors(void) {
    char *dir = demo_copy("errors");
    lf_data_args a = vl_args("bad", "qwen2_vl", PROC2);
    a.dataset_dir = dir;
    write_text(dir, "notes.jpg", "this is not a picture");
    char *cut = tn_path_join(dir, "mllm_demo_data/1.jpg");
    size_t n;
    char *b = tn_read_file(cut, &n, 1 << 24);
    char *half = tn_path_join(TMP, "half.jpg");
    FILE *f = b ? fopen(half, "wb") : NULL;
    if (!f || fwrite(b, 1, n / 2, f) != n / 2 || fclose(f) != 0) exit(2);
    free(b), free(cut), free(half);

    bad_case(dir, "[{\"messages\": [" MSG("<image>hi", "a") "], \"images\": [\"mllm_demo_data/9.jpg\"]}]");
    ERR("bad.json: dataset 'bad': record 0: image 0 'mllm_demo_data/9.jpg' not found", NULL);
    bad_case(dir, "[" "{\"messages\": [" MSG("<image>x", "y") "], \"images\": [\"mllm_demo_data/1.jpg\"]},"
                  "{\"messages\": [" MSG("<image>hi", "a") "], \"images\": [\"notes.jpg\"]}]");
    ERR("bad.json: dataset 'bad': record 1: image 0: ", "notes.jpg: not an image tandem can decode");
    char json[512];
    snprintf(json, sizeof json, "[{\"messages\": [" MSG("<image>hi", "a") "], \"images\": [\"%s/half.jpg\"]}]", TMP);
    bad_case(dir, json);
    ERR("dataset 'bad': record 0: image 0: ", "half.jpg: cannot decode JPEG: image file is truncated");
    bad_case(dir, "[{\"messages\": [" MSG("<image><image>hi", "a") "], \"images\": [\"mllm_demo_data/1.jpg\"]}]");
    ERR("bad.json: dataset 'bad': record 0: 2 <image> tag(s) in the messages but 1 image(s)", "mllm_demo_data/1.jpg");
    bad_case(dir, "[{\"messages\": [" MSG("hi", "a") "], \"images\": [\"mllm_demo_data/1.jpg\", \"mllm_demo_data/2.jpg\"]}]");
    ERR("record 0: 0 <image> tag(s) in the messages but 2 image(s)", NULL);
    bad_case(dir, "[{\"messages\": [" MSG("<image> in text", "a") "], \"images\": []}]");
    ERR("record 0: 1 <image> tag(s) in the messages but 0 image(s)", NULL);
    bad_case(dir, "[{\"messages\": [" MSG("hi", "a") "], \"images\": [3]}]");
    ERR("bad.json: record 0: images[0] must be an image file path", "number");
    bad_case(dir, "[{\"messages\": [" MSG("hi", "a") "], \"images\": {\"path\": \"x.jpg\"}}]");
    ERR("bad.json: record 0: images column 'images' must be an image path or a list", "object");
    bad_case(dir, "[{\"messages\": [" MSG("<image>hi", "a") "], \"images\": \"mllm_demo_data/1.jpg\"}]");  /* one path: fine */
    lf_samples tr;
    if (CHECKF(lf_load(&a, tok, &tr, NULL) == 0, "a single image path: %s", tn_errmsg())) {
        CHECK(lf_samples_images(&tr) == 1 && tr.img_hw[0] == 168 && tr.img_hw[1] == 308);
        lf_samples_free(&tr);
    }
    a.cutoff_len = 50;  /* 66 image tokens do not fit */
    ERR("record 0: cutoff_len 50 cuts its 66 image tokens to", "raise cutoff_len or lower image_max_pixels");
    a.cutoff_len = 2048;
    a.template_name = "qwen";
    ERR("bad.json: dataset 'bad': record 0: 1 image(s), but template 'qwen' takes no images", NULL);
    a.template_name = "qwen2_vl", a.packing = 1;
    ERR("dataset 'bad' has images: packing with images is not supported yet", NULL);
    a.packing = -1, a.stage = "pt";
    ERR("dataset 'bad' has images: stage pt takes text only", NULL);
    a.stage = "sft", a.processor_path = NULL;  /* beside the tokenizer: absent */
    ERR("preprocessor_config.json: not found; the images of dataset 'bad' need", NULL);
    a.processor_path = PROC2, a.dataset = "vid";
    ERR("dataset 'vid': columns.videos: videos are not supported yet", NULL);
    a.dataset = "bad", a.image_max_pixels = 100, a.image_min_pixels = 200;
    ERR("image_max_pixels (100) cannot be smaller than image_min_pixels (200)", NULL);
    a.image_max_pixels = 0, a.image_min_pixels = 0;
    /* a literal <|image_pad|> in a text-only row of a vision template: LF would crash in the model */
    bad_case(dir, "[{\"messages\": [" MSG("look <|image_pad|>", "a") "], \"images\": []}]");
    ERR("record 0: 1 <|image_pad|> tokens for 0 image(s) that need 0", NULL);
    /* a bad preprocessor_config.json */
    char *pbad = tn_path_join(TMP, "bad_proc.json");
    write_text(TMP, "bad_proc.json", "{\"patch_size\": 14.5}");
    a.processor_path = pbad;
    bad_case(dir, "[{\"messages\": [" MSG("<image>hi", "a") "], \"images\": [\"mllm_demo_data/1.jpg\"]}]");
    ERR("bad_proc.json: 'patch_size' must be an integer", NULL);
    write_text(TMP, "bad_proc.json", "{\"image_mean\": [0.5, 0.5]}");
    ERR("bad_proc.json: 'image_mean' must be a list of 3 numbers", NULL);
    write_text(TMP, "bad_proc.json", "{\"size\": {\"shortest_edge\": 100}}");
    ERR("bad_proc.json: 'size' must hold 'shortest_edge' and 'longest_edge'", NULL);
    write_text(TMP, "bad_proc.json", "{\"resample\": 2}");
    ERR("bad_proc.json: 'resample' = 2", "BICUBIC");
    free(pbad), free(dir);
}

int main(void) {
    tl_require_shared("test_unit_lf_vl");
    const char *sh = tl_shared_dir();
    char p[1024];
    snprintf(p, sizeof p, "%s/data/tokenizers/qwen3/tokenizer.json", sh);
    TOK = tn_xstrdup(p);
    snprintf(p, sizeof p, "%s/data/llamafactory", sh);
    LFDIR = tn_xstrdup(p);
    tok = tn_tokenizer_load(TOK);
    if (!tok) {
        printf("test_unit_lf_vl: %s\n", tn_errmsg());
        return 1;
    }
    TMP = tl_tmpdir();
    write_text(TMP, "q2_proc.json", k_qwen2vl_proc);
    write_text(TMP, "q3_proc.json", k_qwen3vl_proc);
    PROC2 = tn_path_join(TMP, "q2_proc.json"), PROC3 = tn_path_join(TMP, "q3_proc.json");
    test_vision_tokens();
    test_mllm_demo();
    test_mix_and_batches();
    test_cache();
    test_errors();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", TMP);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", TMP);
    tn_tokenizer_free(tok);
    free(TOK), free(LFDIR), free(PROC2), free(PROC3);
    return tl_done("test_unit_lf_vl");
}
