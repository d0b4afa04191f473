/* fuzz_lf_cache -- the tokenized data cache (src/data/lf_cache.c) read back by lf_cache_map: the input is
 * written as a cache file and mapped. A file that maps must be self-consistent (offsets from 0 to the
 * token count, each sample's length its offsets' difference; image offsets from 0 to the image count and
 * byte count, each image h x w x 3 bytes with sides whole merge windows) and every id, label, position and
 * image byte is read, so ASan sees any access outside the mapping; one image per split is patchified.
 *
 * Seeds: TANDEM_FUZZ_WRITE_SEEDS=DIR build-fuzz/fuzz_lf_cache writes valid caches (lf_cache_write) into
 * DIR and exits; fuzz/corpus/fuzz_lf_cache/ was made that way. */
#include "fuzz_lf_common.h"

static void check_split(const lf_samples *s) {
    FZ_ASSERT(s->n >= 0 && s->off && s->off[0] == 0);
    int64_t sum = 0;
    for (int i = 0; i < s->n; i++) {
        FZ_ASSERT(s->len[i] >= 0 && s->off[i + 1] - s->off[i] == s->len[i]);
        sum += s->len[i];
    }
    FZ_ASSERT(s->off[s->n] == sum);
    int64_t acc = 0;  /* every element is read: ASan checks the mapping's bounds */
    for (int64_t k = 0; k < sum; k++) acc += (int64_t)s->ids[k] + s->labels[k] + (s->pos ? s->pos[k] : 0);
    FZ_ASSERT(acc != INT64_MIN);  /* keeps the reads */
    FZ_ASSERT(memchr(s->drop_reason, 0, sizeof s->drop_reason));
    if (!s->img_off) return;
    int64_t n_img = lf_samples_images(s), f = (int64_t)s->vl.patch_size * s->vl.merge_size;
    FZ_ASSERT(s->img_off[0] == 0 && n_img >= 0 && s->pix_off[0] == 0 && f > 0);
    for (int i = 0; i < s->n; i++) FZ_ASSERT(s->img_off[i] <= s->img_off[i + 1]);
    for (int64_t k = 0; k < n_img; k++) {
        int64_t h = s->img_hw[2 * k], w = s->img_hw[2 * k + 1];
        FZ_ASSERT(h > 0 && w > 0 && h % f == 0 && w % f == 0 && s->pix_off[k + 1] - s->pix_off[k] == h * w * 3);
        for (int64_t b = s->pix_off[k]; b < s->pix_off[k + 1]; b++) acc += s->pix[b];
    }
    FZ_ASSERT(acc != INT64_MIN);
    if (n_img > 0 && (int64_t)s->img_hw[0] * s->img_hw[1] <= 4096 * 4) {  /* small: patchify the first image */
        size_t nv = (size_t)(s->img_hw[0] / s->vl.patch_size) * (s->img_hw[1] / s->vl.patch_size) * tn_vl_patch_dim(&s->vl);
        float *pv = malloc(nv * sizeof *pv);
        FZ_ASSERT(pv != NULL);
        tn_vl_patchify(&s->vl, s->pix, s->img_hw[0], s->img_hw[1], pv);
        free(pv);
    }
}

/* Small sample sets: with and without position ids, an empty eval split, a long drop reason. */
static void write_seeds(const char *dir) {
    FZ_ASSERT(tn_mkdirs(dir) == 0);
    int len[3] = {2, 0, 3};
    int64_t off[4] = {0, 2, 2, 5};
    int32_t ids[5] = {1, 2, 3, 4, 5}, labels[5] = {-100, 2, -100, 4, 5}, pos[5] = {0, 1, 0, 1, 2};
    lf_samples train = {.n = 3, .len = len, .ids = ids, .labels = labels, .off = off, .n_dropped = 1};
    snprintf(train.drop_reason, sizeof train.drop_reason, "data.json: record 7: odd number of messages (3)");
    lf_samples eval = {.n = 1, .len = len + 2, .ids = ids, .labels = labels, .off = (int64_t[]){0, 3}, .pos = pos};
    lf_samples none = {.n = 0, .off = (int64_t[]){0}};
    uint8_t key[32] = {1, 2, 3};
    char *p = tn_path_join(dir, "train_eval.bin");
    FZ_ASSERT(lf_cache_write(p, key, &train, &eval) == 0);
    free(p);
    p = tn_path_join(dir, "train_only.bin");
    FZ_ASSERT(lf_cache_write(p, key, &train, NULL) == 0);
    free(p);
    lf_samples packed = train;
    packed.pos = pos;
    p = tn_path_join(dir, "packed_empty_eval.bin");
    FZ_ASSERT(lf_cache_write(p, key, &packed, &none) == 0);
    free(p);
    /* images: sample 0 has two 2 x 2-patch images (patch 2, merge 1: 4 x 4 and 4 x 2 pixels), sample 1 none,
     * sample 2 one */
    static uint8_t pix[(16 + 8 + 16) * 3];
    for (size_t i = 0; i < sizeof pix; i++) pix[i] = (uint8_t)(i * 37);
    int64_t img_off[4] = {0, 2, 2, 3}, pix_off[4] = {0, 48, 72, 120};
    int32_t img_hw[6] = {4, 4, 4, 2, 4, 4};
    lf_samples vis = train;
    vis.img_off = img_off, vis.pix_off = pix_off, vis.img_hw = img_hw, vis.pix = pix;
    vis.vl = (tn_vl_proc){.patch_size = 2, .temporal_patch_size = 2, .merge_size = 1, .min_pixels = 4, .max_pixels = 1 << 20,
                          .do_rescale = 1, .do_normalize = 1, .rescale_factor = 1.0 / 255, .image_mean = {0.5f, 0.5f, 0.5f},
                          .image_std = {0.5f, 0.5f, 0.5f}};
    p = tn_path_join(dir, "images.bin");
    FZ_ASSERT(lf_cache_write(p, key, &vis, &eval) == 0);
    free(p);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *seeds = getenv("TANDEM_FUZZ_WRITE_SEEDS");
    if (seeds && seeds[0]) {
        write_seeds(seeds);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_lf_init();
    char *p = fz_path("lf_cache.bin");
    fz_write(p, data, size);
    lf_samples train, eval;
    fz_err_reset();
    if (lf_cache_map(p, &train, &eval) != 0) {
        fz_check_error("lf_cache.bin");
    } else {
        check_split(&train);
        check_split(&eval);
        lf_samples_free(&train);
        lf_samples_free(&eval);
    }
    free(p);
    return 0;
}
