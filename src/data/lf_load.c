/* lf_load.c -- LLaMA-Factory's get_dataset for stages sft and pt: dataset_info entries -> files ->
 * aligned rows (max_samples per dataset, datasets concatenated in order) -> train_test_split when
 * val_size -> the stage's processor on each split. Every input is hashed first so that a matching
 * cache file is mapped without parsing or tokenizing anything. */
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
    if (lf_dsinfo_load(a->dataset_dir ? a->dataset_dir : "data", a->dataset, &info) != 0) {
        lf_template_free(&t);
        return -1;
    }
    lf_file **files = tn_xcalloc((size_t)info.n, sizeof *files);
    int *nfiles = tn_xcalloc((size_t)info.n, sizeof *nfiles), rc = 0, any_tools = 0;
    lf_sha256 h;
    lf_sha256_init(&h);
    key_str(&h, "tandem lf cache", "1");
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
        if ((rc = lf_dataset_files(a->dataset_dir ? a->dataset_dir : "data", &info.ds[d], &files[d], &nfiles[d])) != 0) break;
        for (int f = 0; f < nfiles[d]; f++) {
            const char *slash = strrchr(files[d][f].path, '/');
            key_str(&h, "file", slash ? slash + 1 : files[d][f].path);
            key_bytes(&h, "bytes", files[d][f].bytes, files[d][f].n);
        }
    }
    if (rc == 0 && any_tools && t.def->tool_format == LF_TOOLS_LLAMA3) key_str(&h, "date", t.date);
    if (rc == 0) rc = key_file(&h, "tokenizer.json", a->tokenizer_path, 0);
    if (rc == 0) {
        const char *slash = strrchr(a->tokenizer_path, '/');
        char *dir = slash ? tn_xstrdup(a->tokenizer_path) : tn_xstrdup(".");
        if (slash) dir[slash - a->tokenizer_path + (slash == a->tokenizer_path)] = '\0';
        char *cfg = tn_path_join(dir, "tokenizer_config.json");
        rc = key_file(&h, "tokenizer_config.json", cfg, 1);
        free(cfg), free(dir);
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

    lf_examples ex = {0};
    const lf_example **rows = NULL;
    int64_t *perm = NULL;
    for (int d = 0; d < info.n && rc == 0 && !hit; d++)
        rc = lf_align_dataset(&info.ds[d], files[d], nfiles[d], a->max_samples, &ex);
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
