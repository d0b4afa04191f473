/* lf_predict.c -- LLaMA-Factory's predict set (see lf_dataset.h lf_load_predict): eval_dataset's rows through
 * UnsupervisedDatasetProcessor (images prepared and their tags expanded as in training), and the extra stop ids LF
 * hands generate() in predict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/lf_internal.h"

static void push_all(tn_ids *v, const tn_ids *x) {
    for (size_t i = 0; i < x->n; i++) tn_ids_push(v, x->ids[i]);
}

/* Example e's prompt and label, appended to p and l; with a processor its images are prepared (their <|image_pad|>
 * counts expand its tags) and kept in ib, one entry per example. */
static int encode_example(const lf_template *t, const tn_vl_proc *vl, int cutoff, const lf_example *e, tn_ids *p,
                          tn_ids *l, lf_build *ib) {
    int n_img = vl ? e->n_img : 0; /* without a processor lf_encode_oneturn refuses the images by name */
    lf_img *img = tn_xcalloc((size_t)n_img + 1, sizeof *img);
    int *tokens = tn_xcalloc((size_t)n_img + 1, sizeof *tokens);
    int rc = n_img ? lf_images_prepare(vl, e, img, tokens) : 0, prepared = rc == 0;
    if (rc == 0) rc = lf_encode_oneturn(t, cutoff, e, n_img ? tokens : NULL, p, l);
    if (rc == 0 && ib->has_img) {
        lf_build_add(ib, NULL, NULL, NULL, 0);
        lf_build_add_images(ib, img, n_img);
    }
    if (prepared) lf_imgs_free(img, n_img);
    free(img), free(tokens);
    return rc;
}

int lf_load_predict(const lf_data_args *a, const tn_tokenizer *tok, lf_predict_set *out) {
    memset(out, 0, sizeof *out);
    const char *dir = a->dataset_dir ? a->dataset_dir : "data";
    int cutoff = a->cutoff_len ? a->cutoff_len : 2048;
    lf_template t;
    if (lf_template_init(&t, a->template_name, tok, a->tokenizer_path, a->enable_thinking >= 0 ? 1 : -1) != 0) return -1;
    lf_dsinfo info;
    if (lf_dsinfo_load(dir, a->dataset, &info) != 0) {
        lf_template_free(&t);
        return -1;
    }
    lf_examples ex = {0};
    lf_encode_opts o = {0};
    tn_vl_proc vl;
    memset(&vl, 0, sizeof vl);
    lf_build ib = {0};
    int rc = lf_vision_setup(a, &t, &info, &o, &vl, &ib.has_img);
    ib.has_img = ib.has_img && t.def->vision; /* a text template refuses each example with images, as LF does */
    for (int d = 0; d < info.n && rc == 0; d++) {
        lf_file *files = NULL;
        int nf = 0;
        rc = lf_dataset_files(dir, &info.ds[d], &files, &nf);
        if (rc == 0) /* media_dir: LF defaults it to dataset_dir */
            rc = lf_align_dataset(&info.ds[d], files, nf, a->max_samples, a->media_dir ? a->media_dir : dir, &ex);
        lf_files_free(files, nf);
    }
    tn_ids prompt = {0}, label = {0};
    out->prompt_off = tn_xcalloc((size_t)ex.n + 1, sizeof *out->prompt_off);
    out->label_off = tn_xcalloc((size_t)ex.n + 1, sizeof *out->label_off);
    for (int i = 0; i < ex.n && rc == 0; i++) {
        const lf_example *e = &ex.ex[i];
        /* LF keeps an example without an answer (an empty label); a broken one has no prompt turns and is dropped */
        if (e->n_prompt % 2 != 1 || (e->bad && e->n_resp != 0)) {
            if (!out->n_dropped++)
                snprintf(out->drop_reason, sizeof out->drop_reason, "%s record %d: %s", e->file ? e->file : "?", e->rec,
                         e->bad ? e->bad : "the prompt must have an odd number of messages");
            continue;
        }
        tn_ids p = {0}, l = {0};
        rc = encode_example(&t, ib.has_img ? &vl : NULL, cutoff, e, &p, &l, &ib);
        if (rc == 0) {
            push_all(&prompt, &p), push_all(&label, &l);
            out->n++;
            out->prompt_off[out->n] = (int64_t)prompt.n, out->label_off[out->n] = (int64_t)label.n;
        }
        tn_ids_free(&p), tn_ids_free(&l);
    }
    if (rc == 0 && out->n == 0) rc = tn_err("eval_dataset '%s': no example to predict (%d dropped%s%s)", a->dataset,
                                            out->n_dropped, out->n_dropped ? ", first: " : "", out->drop_reason);
    out->prompt = prompt.ids, out->label = label.ids;
    if (!out->prompt) out->prompt = tn_xcalloc(1, sizeof *out->prompt);
    if (!out->label) out->label = tn_xcalloc(1, sizeof *out->label);
    int has_img = ib.has_img;
    lf_build_finish(&ib, &out->images);
    if (has_img) out->images.vl = vl;
    lf_examples_free(&ex);
    lf_dsinfo_free(&info);
    lf_template_free(&t);
    if (rc != 0) lf_predict_set_free(out);
    return rc;
}

void lf_predict_set_free(lf_predict_set *s) {
    free(s->prompt_off), free(s->label_off), free(s->prompt), free(s->label);
    lf_samples_free(&s->images);
    memset(s, 0, sizeof *s);
}

int lf_additional_special_ids(const char *tokenizer_path, const tn_tokenizer *tok, int32_t *out, int max) {
    const char *slash = strrchr(tokenizer_path, '/');
    char *dir = slash ? tn_xstrdup(tokenizer_path) : tn_xstrdup(".");
    if (slash) dir[slash - tokenizer_path + (slash == tokenizer_path)] = '\0';
    char *path = tn_path_join(dir, "tokenizer_config.json");
    free(dir);
    int n = 0;
    size_t len;
    char *text = tn_file_exists(path) ? tn_read_file(path, &len, (size_t)64 << 20) : NULL;
    lf_arena a = {0};
    lj_error err;
    const lj_val *cfg = text ? lj_parse(&a, text, len, &err) : NULL;
    const lj_val *list = cfg && cfg->type == LJ_OBJ ? lj_get(cfg, "additional_special_tokens") : NULL;
    for (const lj_val *v = list && list->type == LJ_ARR ? list->child : NULL; v && n < max; v = v->next) {
        const lj_val *s = v->type == LJ_OBJ ? lj_get(v, "content") : v;
        int32_t id = s && s->type == LJ_STR ? tn_tokenizer_token_to_id(tok, s->s) : -1;
        if (id >= 0) out[n++] = id;
    }
    lf_arena_free(&a);
    free(text), free(path);
    return n;
}
