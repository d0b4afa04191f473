/* lf_load.c -- LLaMA-Factory's get_dataset for stages sft and pt: dataset_info entries -> files ->
 * aligned rows (max_samples per dataset, datasets concatenated in order) -> train_test_split when
 * val_size -> the stage's processor on each split. Every input is hashed first so that a matching
 * cache file is mapped without parsing or tokenizing anything -- except with an images column: the rows
 * are aligned first to find the image files, whose bytes key the cache too (with preprocessor_config.json,
 * image_max/min_pixels and media_dir). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/lf_internal.h"

static void key_bytes(lf_sha256 *h, const char *label, const void *p, size_t n) {
    uint64_t len = n;
    lf_sha256_update(h, label, strlen(label) + 1);
    lf_sha256_update(h, &len, sizeof len);
    lf_sha256_update(h, p, n);
}
static void key_int(lf_sha256 *h, const char *label, int64_t v) { key_bytes(h, label, &v, sizeof v); }
static void key_str(lf_sha256 *h, const char *label, const char *s) { key_bytes(h, label, s, strlen(s)); }

/* Hashes a whole file (absent: a marker), so the tokenizer's and its config's bytes key the cache. */
static int key_file(lf_sha256 *h, const char *label, const char *path, int optional) {
    if (optional && !tn_file_exists(path)) {
        key_str(h, label, "(absent)");
        return 0;
    }
    size_t n;
    char *b = tn_read_file(path, &n, (size_t)4 << 30);
    if (!b) return -1;
    key_bytes(h, label, b, n);
    free(b);
    return 0;
}

/* The file `name` in the folder of path. */
static char *beside(const char *path, const char *name) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? tn_xstrdup(path) : tn_xstrdup(".");
    if (slash) dir[slash - path + (slash == path)] = '\0';
    char *p = tn_path_join(dir, name);
    free(dir);
    return p;
}

/* lf_internal.h */
int lf_vision_setup(const lf_data_args *a, const lf_template *t, const lf_dsinfo *info, const lf_encode_opts *o,
                        tn_vl_proc *vl, int *any) {
    *any = 0;
    const char *name = NULL;
    for (int d = 0; d < info->n; d++)
        if (info->ds[d].images) *any = 1, name = name ? name : info->ds[d].name;
    if (!*any) return 0;
    if (o->pt) return tn_err("dataset '%s' has images: stage pt takes text only in tandem (use stage sft)", name);
    if (o->packing) return tn_err("dataset '%s' has images: packing with images is not supported yet (set packing: false)", name);
    if (!t->def->vision) return 0;  /* each example with images is refused when it is encoded, as LF does */
    char *path = a->processor_path ? tn_xstrdup(a->processor_path) : beside(a->tokenizer_path, "preprocessor_config.json");
    int rc = 0;
    if (!tn_file_exists(path))
        rc = tn_err("%s: not found; the images of dataset '%s' need the model's image processor settings (template %s)",
                    path, name, t->def->name);
    else if (tn_vl_proc_load(path, vl) != 0 || tn_vl_proc_set_lf_limits(vl, a->image_max_pixels, a->image_min_pixels) != 0)
        rc = -1;
    free(path);
    return rc;
}

/* Every image file's bytes (an absent file: a marker; it is refused when its example is encoded, as in LF). */
static void key_images(lf_sha256 *h, const lf_examples *ex) {
    for (int i = 0; i < ex->n; i++)
        for (int k = 0; k < ex->ex[i].n_img; k++) {
            const char *p = ex->ex[i].img[k];
            key_str(h, "image", p);
            size_t n;
            char *b = tn_file_exists(p) ? tn_read_file(p, &n, (size_t)1 << 30) : NULL;
            if (b) key_bytes(h, "image bytes", b, n);
            else key_str(h, "image bytes", "(unreadable)");
            free(b);
        }
}

static void key_vision(lf_sha256 *h, const lf_data_args *a, const tn_vl_proc *v) {
    key_int(h, "patch_size", v->patch_size), key_int(h, "temporal_patch_size", v->temporal_patch_size);
    key_int(h, "merge_size", v->merge_size), key_int(h, "min_pixels", v->min_pixels), key_int(h, "max_pixels", v->max_pixels);
    key_int(h, "do_rescale", v->do_rescale), key_int(h, "do_normalize", v->do_normalize);
    key_bytes(h, "rescale_factor", &v->rescale_factor, sizeof v->rescale_factor);
    key_bytes(h, "image_mean", v->image_mean, sizeof v->image_mean), key_bytes(h, "image_std", v->image_std, sizeof v->image_std);
    key_int(h, "image_max_pixels", v->lf_max_pixels), key_int(h, "image_min_pixels", v->lf_min_pixels);
    key_str(h, "media_dir", a->media_dir ? a->media_dir : a->dataset_dir ? a->dataset_dir : "data");
}

static int check_args(const lf_data_args *a, lf_samples *eval, int *pt) {
    const char *stage = a->stage ? a->stage : "sft";
    if (strcmp(stage, "sft") == 0) *pt = 0;
    else if (strcmp(stage, "pt") == 0) *pt = 1;
    else return tn_err("stage: '%s' is not supported by the data pipeline (expected sft or pt)", stage);
    if (a->cutoff_len < 0) return tn_err("cutoff_len: %d must be positive", a->cutoff_len);
    if (a->max_samples < 0) return tn_err("max_samples: %d must be >= 0 (0 = all)", a->max_samples);
    if (!(a->val_size >= 0)) return tn_err("val_size: %g must be >= 0", a->val_size);
    if (a->val_size > 1e-6 && !eval) return tn_err("val_size: %g needs an eval split to fill", a->val_size);
    if (a->val_size > 1e-6 && a->seed < 0) return tn_err("seed: %d must be >= 0 to split val_size", a->seed);
    if (a->mask_history && a->train_on_prompt) return tn_err("mask_history is incompatible with train_on_prompt (as in LLaMA-Factory)");
    if (a->packing < -1 || a->packing > 1) return tn_err("packing: %d must be -1 (default), 0 or 1", a->packing);
    return 0;
}

static int run_split(const lf_template *t, const lf_encode_opts *o, const lf_example *const *ex, int n, lf_samples *out,
                     const char *which) {
    if (lf_process(t, o, ex, n, out) != 0) return -1;
    if (out->img_off) out->vl = *o->vl;
    if (out->n == 0) {
        int rc = o->pt ? tn_err("%s split: no pre-training block of %d tokens could be filled (too little text)", which,
                                o->cutoff)
                       : tn_err("%s split: no valid example (%d rows; %s)", which, n,
                                out->drop_reason[0] ? out->drop_reason : "none");
        lf_samples_free(out);
        return rc;
    }
    return 0;
}

int lf_load(const lf_data_args *a, const tn_tokenizer *tok, lf_samples *train, lf_samples *eval) {
    memset(train, 0, sizeof *train);
    if (eval) memset(eval, 0, sizeof *eval);
    int pt = 0;
    if (check_args(a, eval, &pt) != 0) return -1;
    lf_encode_opts o = {0};
    o.pt = pt;
    o.packing = a->packing < 0 ? pt : a->packing;
    /* LF's DataArguments: an explicit `packing: true` lowers cutoff_len by one (the pt default does not) */
    o.cutoff = (a->cutoff_len ? a->cutoff_len : 2048) - (a->packing == 1 ? 1 : 0);
    o.train_on_prompt = a->train_on_prompt, o.mask_history = a->mask_history;
    if (o.cutoff < 1) return tn_err("cutoff_len: %d is too small", a->cutoff_len);

    lf_template t;
    if (lf_template_init(&t, a->template_name, tok, a->tokenizer_path, a->enable_thinking >= 0 ? 1 : -1) != 0) return -1;
    lf_dsinfo info;
    const char *dataset_dir = a->dataset_dir ? a->dataset_dir : "data";
    if (lf_dsinfo_load(dataset_dir, a->dataset, &info) != 0) {
        lf_template_free(&t);
        return -1;
    }
    tn_vl_proc vl;
    memset(&vl, 0, sizeof vl);
    int any_images = 0;
    if (lf_vision_setup(a, &t, &info, &o, &vl, &any_images) != 0) {
        lf_dsinfo_free(&info);
        lf_template_free(&t);
        return -1;
    }
    if (any_images && t.def->vision) o.vl = &vl;
    const char *media_dir = a->media_dir ? a->media_dir : dataset_dir;  /* LF: media_dir defaults to dataset_dir */
    lf_file **files = tn_xcalloc((size_t)info.n, sizeof *files);
    int *nfiles = tn_xcalloc((size_t)info.n, sizeof *nfiles), rc = 0, any_tools = 0;
    lf_sha256 h;
    lf_sha256_init(&h);
    key_str(&h, "tandem lf cache", "2");
    key_str(&h, "stage", pt ? "pt" : "sft");
    key_str(&h, "template", t.def->name);
    key_int(&h, "cutoff", o.cutoff), key_int(&h, "packing", o.packing), key_int(&h, "max_samples", a->max_samples);
    key_int(&h, "train_on_prompt", o.train_on_prompt), key_int(&h, "mask_history", o.mask_history);
    key_int(&h, "enable_thinking", t.enable_thinking);
    if (a->val_size > 1e-6) {  /* the seed only matters to the split */
        key_bytes(&h, "val_size", &a->val_size, sizeof a->val_size);
        key_int(&h, "seed", a->seed);
    }
    for (int d = 0; d < info.n && rc == 0; d++) {
        key_str(&h, "dataset", info.ds[d].name);
        key_bytes(&h, "entry", info.ds[d].entry, info.ds[d].entry_len);
        any_tools |= info.ds[d].tools != NULL;
        if ((rc = lf_dataset_files(dataset_dir, &info.ds[d], &files[d], &nfiles[d])) != 0) break;
        for (int f = 0; f < nfiles[d]; f++) {
            const char *slash = strrchr(files[d][f].path, '/');
            key_str(&h, "file", slash ? slash + 1 : files[d][f].path);
            key_bytes(&h, "bytes", files[d][f].bytes, files[d][f].n);
        }
    }
    if (rc == 0 && any_tools && t.def->tool_format == LF_TOOLS_LLAMA3) key_str(&h, "date", t.date);
    if (rc == 0) rc = key_file(&h, "tokenizer.json", a->tokenizer_path, 0);
    if (rc == 0) {
        char *cfg = beside(a->tokenizer_path, "tokenizer_config.json");
        rc = key_file(&h, "tokenizer_config.json", cfg, 1);
        free(cfg);
    }
    lf_examples ex = {0};
    int aligned = 0;
    if (rc == 0 && any_images) { /* the rows name the image files: aligned before the key is complete */
        for (int d = 0; d < info.n && rc == 0; d++)
            rc = lf_align_dataset(&info.ds[d], files[d], nfiles[d], a->max_samples, media_dir, &ex);
        aligned = 1;
        if (rc == 0) key_images(&h, &ex);
        if (rc == 0 && o.vl) key_vision(&h, a, &vl);
    }
    uint8_t key[32];
    lf_sha256_final(&h, key);
    char *cache_path = NULL;
    int hit = 0;
    if (rc == 0 && a->cache_dir) {
        char name[64];
        int k = snprintf(name, sizeof name, "lf_");
        for (int i = 0; i < 8; i++) k += snprintf(name + k, sizeof name - (size_t)k, "%02x", key[i]);
        snprintf(name + k, sizeof name - (size_t)k, ".bin");
        cache_path = tn_path_join(a->cache_dir, name);
        hit = lf_cache_try(cache_path, key, train, eval);
        if (hit < 0) rc = -1;
    }

    const lf_example **rows = NULL;
    int64_t *perm = NULL;
    for (int d = 0; d < info.n && rc == 0 && !hit && !aligned; d++)
        rc = lf_align_dataset(&info.ds[d], files[d], nfiles[d], a->max_samples, media_dir, &ex);
    for (int d = 0; d < info.n; d++) lf_files_free(files[d], nfiles[d]);
    free(files), free(nfiles);
    if (rc == 0 && !hit) {
        rows = tn_xmalloc(((size_t)ex.n + 1) * sizeof *rows);
        for (int i = 0; i < ex.n; i++) rows[i] = &ex.ex[i];
        int64_t n_test = 0;
        if (a->val_size > 1e-6) {
            perm = tn_xmalloc(((size_t)ex.n + 1) * sizeof *perm);
            rc = lf_train_test_split(ex.n, a->val_size, (uint64_t)a->seed, perm, &n_test);
            for (int64_t i = 0; rc == 0 && i < ex.n; i++) rows[i] = &ex.ex[perm[i]];
        }
        if (rc == 0) rc = run_split(&t, &o, rows + n_test, (int)(ex.n - n_test), train, "train");
        if (rc == 0 && n_test) rc = run_split(&t, &o, rows, (int)n_test, eval, "eval");
        if (rc == 0 && !n_test && eval) {  /* no split: an empty, valid set */
            lf_build empty = {0};
            lf_build_finish(&empty, eval);
        }
        if (rc == 0 && cache_path) {
            if (tn_mkdirs(a->cache_dir) != 0 || lf_cache_write(cache_path, key, train, a->val_size > 1e-6 ? eval : NULL) != 0)
                rc = -1;
        }
    }
    if (rc != 0) {
        lf_samples_free(train);
        if (eval) lf_samples_free(eval);
    }
    free(rows), free(perm), free(cache_path);
    lf_examples_free(&ex);
    lf_dsinfo_free(&info);
    lf_template_free(&t);
    return rc;
}

void lf_samples_dataset(const lf_samples *s, int S, tn_dataset *d) {
    memset(d, 0, sizeof *d);
    d->n = s->n, d->S = S;
    d->var_ids = s->ids, d->var_labels = s->labels, d->var_off = s->off;
    if (s->img_off) {
        d->img_off = s->img_off, d->pix_off = s->pix_off, d->img_hw = s->img_hw, d->pix = s->pix;
        d->vl = &s->vl;
    }
}
