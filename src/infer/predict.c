/* predict.c -- see predict.h. */
#include "infer/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/vl_processor.h"
#include "infer/infer.h"
#include "infer/nlg_metrics.h"
#include "outputs/pyfmt.h"

/* one finished example of this rank: its jsonl line and its scores */
typedef struct {
    char *line;
    double s[4]; /* bleu-4, rouge-1, rouge-2, rouge-l (x 100, rounded) */
} result;

/* json.dumps(s, ensure_ascii=False) */
static void json_str(tn_strbuf *b, const char *s) {
    tn_sb_putn(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': tn_sb_puts(b, "\\\""); break;
        case '\\': tn_sb_puts(b, "\\\\"); break;
        case '\n': tn_sb_puts(b, "\\n"); break;
        case '\r': tn_sb_puts(b, "\\r"); break;
        case '\t': tn_sb_puts(b, "\\t"); break;
        case '\b': tn_sb_puts(b, "\\b"); break;
        case '\f': tn_sb_puts(b, "\\f"); break;
        default:
            if (*p < 0x20) tn_sb_printf(b, "\\u%04x", *p);
            else tn_sb_putn(b, (const char *)p, 1);
        }
    }
    tn_sb_putn(b, "\"", 1);
}

static char *decode(const tn_infer *s, const int32_t *ids, int64_t n, int skip_special) {
    char *t = tn_tokenizer_decode(s->tok, ids, (size_t)n, skip_special);
    return t ? t : tn_xstrdup("");
}

static void finish_example(const tn_infer *s, const lf_predict_set *ps, int i, const int32_t *out, int n_out,
                           result *r) {
    const int32_t *p = ps->prompt + ps->prompt_off[i], *l = ps->label + ps->label_off[i];
    char *prompt = decode(s, p, ps->prompt_off[i + 1] - ps->prompt_off[i], 0);
    char *pred = decode(s, out, n_out, 1), *label = decode(s, l, ps->label_off[i + 1] - ps->label_off[i], 1);
    tn_strbuf b = {0};
    tn_sb_puts(&b, "{\"prompt\": "), json_str(&b, prompt);
    tn_sb_puts(&b, ", \"predict\": "), json_str(&b, pred);
    tn_sb_puts(&b, ", \"label\": "), json_str(&b, label);
    tn_sb_puts(&b, "}\n");
    r->line = b.s;
    tn_nlg_scores sc;
    tn_nlg_score(pred, label, &sc);
    r->s[0] = sc.bleu4, r->s[1] = sc.rouge1, r->s[2] = sc.rouge2, r->s[3] = sc.rougel;
    free(prompt), free(pred), free(label);
}

/* The images of the example a slot runs, patchified for its prefill (tn_gen borrows mm until then). */
typedef struct {
    float *pix;
    size_t cap;
    int32_t *grid, *row;
    int64_t n_cap;
    tn_mm_batch mm;
} slot_images;

/* Example i's images (prepared as training prepares them) patchified into si; NULL when it has none. */
static const tn_mm_batch *example_images(const lf_samples *im, int i, slot_images *si) {
    int64_t k0 = im->img_off ? im->img_off[i] : 0, n = im->img_off ? im->img_off[i + 1] - k0 : 0;
    if (n == 0) return NULL;
    if (n > si->n_cap) {
        si->n_cap = n;
        si->grid = tn_xrealloc(si->grid, (size_t)n * 3 * sizeof *si->grid);
        si->row = tn_xrealloc(si->row, (size_t)n * sizeof *si->row);
    }
    const tn_vl_proc *p = &im->vl;
    size_t dim = (size_t)tn_vl_patch_dim(p), rows = 0;
    for (int64_t k = k0; k < k0 + n; k++)
        rows += (size_t)(im->img_hw[2 * k] / p->patch_size) * (size_t)(im->img_hw[2 * k + 1] / p->patch_size);
    if (rows * dim > si->cap) si->cap = rows * dim, si->pix = tn_xrealloc(si->pix, si->cap * sizeof *si->pix);
    rows = 0;
    for (int64_t k = k0; k < k0 + n; k++) {
        int h = im->img_hw[2 * k], w = im->img_hw[2 * k + 1], j = (int)(k - k0);
        si->grid[3 * j] = 1, si->grid[3 * j + 1] = h / p->patch_size, si->grid[3 * j + 2] = w / p->patch_size;
        si->row[j] = 0;
        tn_vl_patchify(p, im->pix + im->pix_off[k], h, w, si->pix + rows * dim);
        rows += (size_t)(h / p->patch_size) * (w / p->patch_size);
    }
    si->mm = (tn_mm_batch){.n_images = (int)n, .grid_thw = si->grid, .row = si->row, .pixel_values = si->pix,
                           .patch_dim = (int)dim};
    return &si->mm;
}

/* Starts example i in slot k: its prompt (a text prompt longer than the context keeps its end; one with images, whose
 * runs cannot be cut, is refused), its images, its seed. */
static int start_example(const tn_infer *s, const tn_train_config *cfg, const lf_predict_set *ps, int i, tn_gen *g,
                         int k, slot_images *si, const int32_t *stop, int n_stop) {
    int ctx = tn_gen_ctx(g);
    int64_t n = ps->prompt_off[i + 1] - ps->prompt_off[i];
    if (n < 1) return tn_err("eval_dataset: example %d has an empty prompt", i);
    const tn_mm_batch *mm = example_images(&ps->images, i, si);
    if (mm && n > ctx - 1)
        return tn_err("eval_dataset: example %d: its prompt of %lld tokens holds images and does not fit the model's %d "
                      "positions (an image's tokens cannot be cut: lower image_max_pixels)", i, (long long)n, ctx);
    if (n > ctx - 1) n = ctx - 1; /* cutoff_len beyond the model's positions: the prompt's end is kept */
    tn_sampling sp = tn_infer_sampling(s, (uint64_t)cfg->seed + (uint64_t)i);
    int rc = tn_gen_set_images(g, k, mm);
    return rc ? rc : tn_gen_start(g, k, ps->prompt + ps->prompt_off[i + 1] - n, (int)n, &sp, stop, n_stop);
}

/* Generates examples [lo, hi) with B sequences at a time; results[i - lo]. */
static int generate_slice(const tn_infer *s, const tn_train_config *cfg, const lf_predict_set *ps, int lo, int hi,
                          const int32_t *stop, int n_stop, result *results, int lead, int total) {
    int B = cfg->per_device_eval_batch_size, ctx = 2, max_pos = tn_infer_context(s, 0);
    for (int i = lo; i < hi; i++) {
        int need = (int)(ps->prompt_off[i + 1] - ps->prompt_off[i]) + cfg->max_new_tokens;
        ctx = need > ctx ? need : ctx;
    }
    ctx = ctx < max_pos ? ctx : max_pos;
    if (B > hi - lo) B = hi - lo > 0 ? hi - lo : 1;
    tn_gen *g = tn_gen_create(s->m, B, ctx);
    if (!g) return -1;
    int *example = tn_xmalloc((size_t)B * sizeof *example), next = lo, done = 0, rc = 0;
    tn_gen_event *ev = tn_xcalloc((size_t)B, sizeof *ev);
    slot_images *si = tn_xcalloc((size_t)B, sizeof *si);
    double t_report = tn_now();
    long tokens = 0;
    for (int k = 0; k < B; k++) example[k] = -1;
    while (rc == 0 && done < hi - lo) {
        for (int k = 0; k < B && next < hi && rc == 0; k++) { /* keep every sequence busy */
            if (example[k] >= 0) continue;
            rc = start_example(s, cfg, ps, next, g, k, &si[k], stop, n_stop);
            example[k] = next++;
        }
        int got = rc == 0 ? tn_gen_step(g, ev) : 0;
        if (got < 0) rc = -1;
        tokens += got > 0 ? got : 0;
        for (int e = 0; e < got; e++) {
            if (ev[e].finish == TN_FINISH_NONE) continue;
            int n;
            const int32_t *out = tn_gen_output(g, ev[e].slot, &n);
            finish_example(s, ps, example[ev[e].slot], out, n, &results[example[ev[e].slot] - lo]);
            example[ev[e].slot] = -1;
            done++;
        }
        if (lead && tn_now() - t_report > 5) { /* rank 0: a line every 5 s, so a long run never looks hung */
            printf("tandem: predict: %d/%d examples of this rank done (%d in all), %.1f tokens/s\n", done, hi - lo,
                   total, tokens / (tn_now() - t_report));
            fflush(stdout);
            t_report = tn_now(), tokens = 0;
        }
    }
    for (int k = 0; k < B; k++) free(si[k].pix), free(si[k].grid), free(si[k].row);
    free(example), free(ev), free(si);
    tn_gen_free(g);
    return rc;
}

/* "    \"key\": value" lines of an HF metrics file (flat, sorted, indent 4), merged with ours and rewritten */
typedef struct {
    char key[96], val[64];
} kv;
static int kv_cmp(const void *a, const void *b) { return strcmp(((const kv *)a)->key, ((const kv *)b)->key); }

static int write_metrics(const char *dir, const char *name, const kv *ours, int n_ours, int merge) {
    kv all[64];
    int n = 0;
    char *path = tn_path_join(dir, name);
    size_t len;
    char *old = merge && tn_file_exists(path) ? tn_read_file(path, &len, 1 << 20) : NULL;
    for (char *line = old ? strtok(old, "\n") : NULL; line && n < 48; line = strtok(NULL, "\n")) {
        kv x;
        if (sscanf(line, " \"%95[^\"]\": %63[^,\n]", x.key, x.val) == 2) all[n++] = x;
    }
    for (int i = 0; i < n_ours; i++) {
        int at = n;
        for (int j = 0; j < n; j++)
            if (!strcmp(all[j].key, ours[i].key)) at = j;
        all[at] = ours[i];
        n += at == n;
    }
    qsort(all, (size_t)n, sizeof *all, kv_cmp);
    tn_strbuf b = {0};
    tn_sb_puts(&b, "{\n");
    for (int i = 0; i < n; i++) tn_sb_printf(&b, "    \"%s\": %s%s\n", all[i].key, all[i].val, i + 1 < n ? "," : "");
    tn_sb_puts(&b, "}");
    int rc = tn_write_file_atomic(path, b.s, b.n);
    tn_sb_free(&b);
    free(old), free(path);
    return rc;
}

static void put(kv *m, int *n, const char *key, double v) {
    snprintf(m[*n].key, sizeof m[*n].key, "%s", key);
    tn_py_float(m[*n].val, v);
    (*n)++;
}

/* Rank 0: every rank's lines in rank order (each rank's slice is contiguous), the files written. */
static int write_outputs(const tn_train_config *cfg, tn_comm *comm, result *mine, int n_mine, int total, double runtime,
                         double prep) {
    const tn_comm_info *in = tn_comm_get_info(comm);
    int rc = 0;
    if (in->rank != 0) { /* sizes, then text and scores */
        tn_strbuf b = {0};
        double *sc = tn_xmalloc(((size_t)n_mine * 4 + 1) * sizeof *sc);
        for (int i = 0; i < n_mine; i++) tn_sb_puts(&b, mine[i].line), memcpy(sc + 4 * i, mine[i].s, sizeof mine[i].s);
        uint64_t hdr[2] = {b.n, (uint64_t)n_mine};
        rc = tn_comm_send(comm, hdr, sizeof hdr, 0);
        if (rc == 0 && b.n) rc = tn_comm_send(comm, b.s, b.n, 0);
        if (rc == 0 && n_mine) rc = tn_comm_send(comm, sc, (size_t)n_mine * 4 * sizeof *sc, 0);
        tn_sb_free(&b);
        free(sc);
        return rc;
    }
    tn_strbuf lines = {0};
    double sum[4] = {0};
    for (int i = 0; i < n_mine; i++) {
        tn_sb_puts(&lines, mine[i].line);
        for (int k = 0; k < 4; k++) sum[k] += mine[i].s[k];
    }
    int count = n_mine;
    for (int r = 1; r < in->size && rc == 0; r++) {
        uint64_t hdr[2];
        rc = tn_comm_recv(comm, hdr, sizeof hdr, r);
        char *text = rc == 0 ? tn_xmalloc(hdr[0] + 1) : NULL;
        double *sc = rc == 0 ? tn_xmalloc((hdr[1] * 4 + 1) * sizeof *sc) : NULL;
        if (rc == 0 && hdr[0]) rc = tn_comm_recv(comm, text, hdr[0], r);
        if (rc == 0 && hdr[1]) rc = tn_comm_recv(comm, sc, hdr[1] * 4 * sizeof *sc, r);
        if (rc == 0) {
            tn_sb_putn(&lines, text, hdr[0]);
            for (uint64_t i = 0; i < hdr[1] * 4; i++) sum[i % 4] += sc[i];
            count += (int)hdr[1];
        }
        free(text), free(sc);
    }
    if (rc == 0 && count != total) rc = tn_err("predict: %d of %d examples came back from the ranks", count, total);
    if (rc == 0 && tn_mkdirs(cfg->output_dir) != 0) rc = -1;
    if (rc == 0) {
        char *path = tn_path_join(cfg->output_dir, "generated_predictions.jsonl");
        rc = tn_write_file_atomic(path, lines.s ? lines.s : "", lines.n);
        free(path);
    }
    if (rc == 0) {
        kv m[8];
        int n = 0;
        int steps = (total + cfg->per_device_eval_batch_size * in->size - 1) / (cfg->per_device_eval_batch_size * in->size);
        put(m, &n, "predict_bleu-4", sum[0] / total);
        put(m, &n, "predict_model_preparation_time", tn_py_round(prep, 4));
        put(m, &n, "predict_rouge-1", sum[1] / total);
        put(m, &n, "predict_rouge-2", sum[2] / total);
        put(m, &n, "predict_rouge-l", sum[3] / total);
        put(m, &n, "predict_runtime", tn_py_round(runtime, 4));
        put(m, &n, "predict_samples_per_second", tn_py_round(total / runtime, 3));
        put(m, &n, "predict_steps_per_second", tn_py_round(steps / runtime, 3));
        rc = write_metrics(cfg->output_dir, "predict_results.json", m, n, 0);
        if (rc == 0) rc = write_metrics(cfg->output_dir, "all_results.json", m, n, 1);
        if (rc == 0)
            printf("tandem: predict: %d examples in %.1f s: bleu-4 %.2f, rouge-1 %.2f, rouge-2 %.2f, rouge-l %.2f -> "
                   "%s/generated_predictions.jsonl, predict_results.json\n",
                   total, runtime, sum[0] / total, sum[1] / total, sum[2] / total, sum[3] / total, cfg->output_dir);
    }
    tn_sb_free(&lines);
    return rc;
}

/* -1 for this rank's failure, -2 for another's, as tn_job_train */
static int agree(tn_comm *c, int rc) {
    int mine = rc != 0, any = mine;
    double v = mine;
    if (tn_comm_get_info(c)->size > 1) {
        if (tn_comm_allreduce_f64(c, &v, 1) != 0) return -1;
        any = v > 0;
    }
    return !any ? 0 : mine ? -1 : -2;
}

int tn_predict(const tn_train_config *cfg, tn_comm *comm) {
    const tn_comm_info *in = tn_comm_get_info(comm);
    tn_infer s;
    double t0 = tn_now();
    int rc = tn_infer_open(&s, cfg, 1);
    double prep = tn_now() - t0;
    lf_predict_set ps = {0};
    if (rc == 0) {
        lf_data_args a = {.dataset = cfg->eval_dataset, .dataset_dir = cfg->dataset_dir, .template_name = cfg->template_name,
                          .cutoff_len = cfg->cutoff_len, .max_samples = cfg->max_samples, .tokenizer_path = s.tok_path,
                          .enable_thinking = cfg->enable_thinking ? 1 : -1,
                          .media_dir = cfg->media_dir[0] ? cfg->media_dir : NULL,
                          .image_max_pixels = cfg->image_max_pixels, .image_min_pixels = cfg->image_min_pixels};
        rc = lf_load_predict(&a, s.tok, &ps);
        if (rc != 0) tn_err("%s: key 'eval_dataset': %s", cfg->source_path, tn_errmsg());
        else if (lf_samples_images(&ps.images) > 0 && s.m->cfg.vis.kind == TN_VL_NONE) /* before any generation */
            rc = tn_err("%s: key 'eval_dataset': %s has %lld image(s); model_type %s takes no images (a vision-language "
                        "model_type is needed)", cfg->source_path, cfg->eval_dataset,
                        (long long)lf_samples_images(&ps.images), s.m->cfg.model_type);
    }
    if ((rc = agree(comm, rc)) != 0) {
        tn_infer_close(&s);
        return rc;
    }
    int32_t stop[TN_MAX_STOP + 32];
    int n_stop = s.n_stop;
    memcpy(stop, s.stop, (size_t)s.n_stop * sizeof *stop);
    n_stop += lf_additional_special_ids(s.tok_path, s.tok, stop + n_stop, 32);
    size_t off, len;
    tn_comm_slice((size_t)ps.n, in->size, in->rank, &off, &len);
    if (in->rank == 0) {
        printf("tandem: predict: %d examples of %s (%d dropped as LF drops them), template %s, %d sequences at a time on "
               "each of %d rank(s), %s, max_new_tokens %d\n", ps.n, cfg->eval_dataset, ps.n_dropped, cfg->template_name,
               cfg->per_device_eval_batch_size, in->size, cfg->do_sample ? "sampling" : "greedy", cfg->max_new_tokens);
        fflush(stdout);
    }
    result *res = tn_xcalloc(len + 1, sizeof *res);
    double t1 = tn_now();
    rc = generate_slice(&s, cfg, &ps, (int)off, (int)(off + len), stop, n_stop, res, in->rank == 0, ps.n);
    rc = agree(comm, rc);
    double runtime = tn_now() - t1;
    if (in->size > 1 && rc == 0) { /* the slowest rank's time is the run's */
        double t = runtime;
        int64_t us = (int64_t)(t * 1e6);
        if (tn_comm_allreduce_max_i64(comm, &us, 1) == 0) runtime = us / 1e6;
    }
    if (rc == 0) rc = agree(comm, write_outputs(cfg, comm, res, (int)len, ps.n, runtime, prep));
    for (size_t i = 0; i < len; i++) free(res[i].line);
    free(res);
    lf_predict_set_free(&ps);
    tn_infer_close(&s);
    return rc;
}
