/* lf_pack.c -- LLaMA-Factory's processors over a whole split: rows go through datasets.map in batches
 * of 1000 (preprocessing_batch_size), which matters for packing (remainders are per batch).
 *
 *   sft, no packing: each valid example is one sample (LF drops an example whose prompt has an even
 *     number of messages or that has no single response: broken sharegpt, missing output).
 *   sft, packing (PackedSupervisedDatasetProcessor): examples longer than cutoff are dropped, the rest
 *     are greedily knapsacked into bins of cutoff tokens (largest that fits first), each bin padded
 *     with PAD to cutoff + 1 (LF's packing cutoff is cutoff_len - 1, so that is cutoff_len) with
 *     position ids restarting at 0 per example and 0 on padding.
 *   pt (PretrainDatasetProcessor): text of the first message + the EOS text, tokenized as one string;
 *     packing concatenates a batch and cuts blocks of cutoff (remainder dropped, first token set to
 *     BOS when the tokenizer adds BOS); without packing each text is cut to cutoff (BOS text in front
 *     when it adds BOS). Labels are the ids, except PAD ids, which HF's DataCollatorForLanguageModeling
 *     sets to -100.
 * Images (sft without packing only): each example's images are prepared on the thread that encodes it and
 * kept with its sample (lf_build_add_images). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/lf_internal.h"

#define LF_MAP_BATCH 1000

void lf_build_add(lf_build *b, const int32_t *ids, const int32_t *labels, const int32_t *pos, size_t n) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        b->len = tn_xrealloc(b->len, (size_t)b->cap * sizeof *b->len);
    }
    b->len[b->n++] = (int)n;
    for (size_t i = 0; i < n; i++) {
        if (tn_ids_push(&b->ids, ids[i]) || tn_ids_push(&b->labels, labels[i])) tn_die("out of memory");
        if (b->has_pos && tn_ids_push(&b->pos, pos ? pos[i] : (int32_t)i)) tn_die("out of memory");
    }
}

void lf_build_add_images(lf_build *b, const lf_img *img, int n) {
    int fresh = b->img_off == NULL;
    b->img_off = tn_xrealloc(b->img_off, ((size_t)b->cap + 1) * sizeof *b->img_off);  /* cap >= n: lf_build_add */
    if (fresh) {
        b->img_off[0] = 0;
        for (int i = 1; i < b->n; i++) b->img_off[i] = 0;  /* samples added before any image column was seen */
    }
    if (b->n_img + n > b->cap_img) {
        int fresh_pix = b->pix_off == NULL;
        b->cap_img = (b->n_img + n) * 2;
        b->img_hw = tn_xrealloc(b->img_hw, (size_t)b->cap_img * 2 * sizeof *b->img_hw);
        b->pix_off = tn_xrealloc(b->pix_off, ((size_t)b->cap_img + 1) * sizeof *b->pix_off);
        if (fresh_pix) b->pix_off[0] = 0;
    }
    for (int k = 0; k < n; k++) {
        size_t bytes = (size_t)img[k].h * img[k].w * 3;
        if (b->n_pix + bytes > b->cap_pix) {
            b->cap_pix = (b->n_pix + bytes) * 2;
            b->pix = tn_xrealloc(b->pix, b->cap_pix);
        }
        memcpy(b->pix + b->n_pix, img[k].rgb, bytes);
        b->img_hw[2 * b->n_img] = img[k].h, b->img_hw[2 * b->n_img + 1] = img[k].w;
        b->n_pix += bytes;
        b->pix_off[++b->n_img] = (int64_t)b->n_pix;
    }
    b->img_off[b->n] = b->n_img;  /* the sample just added is n - 1: its images end here */
}

void lf_build_drop(lf_build *b, const lf_example *e, const char *why) {
    if (b->n_dropped++ == 0)
        snprintf(b->drop_reason, sizeof b->drop_reason, "%s: record %d: %s", e->file, e->rec, why);
}

void lf_build_finish(lf_build *b, lf_samples *out) {
    memset(out, 0, sizeof *out);
    out->n = b->n;
    out->len = b->len ? b->len : tn_xcalloc(1, sizeof *out->len);
    out->ids = b->ids.ids ? b->ids.ids : tn_xcalloc(1, sizeof *out->ids);
    out->labels = b->labels.ids ? b->labels.ids : tn_xcalloc(1, sizeof *out->labels);
    out->pos = b->has_pos ? (b->pos.ids ? b->pos.ids : tn_xcalloc(1, sizeof *out->pos)) : NULL;
    out->off = tn_xmalloc(((size_t)b->n + 1) * sizeof *out->off);
    out->off[0] = 0;
    for (int i = 0; i < b->n; i++) out->off[i + 1] = out->off[i] + out->len[i];
    out->n_dropped = b->n_dropped;
    memcpy(out->drop_reason, b->drop_reason, sizeof out->drop_reason);
    if (b->has_img) {  /* every sample has an image range, possibly empty */
        out->img_off = b->img_off ? b->img_off : tn_xcalloc((size_t)b->n + 1, sizeof *out->img_off);
        out->pix_off = b->pix_off ? b->pix_off : tn_xcalloc(1, sizeof *out->pix_off);
        out->img_hw = b->img_hw ? b->img_hw : tn_xcalloc(1, sizeof *out->img_hw);
        out->pix = b->pix ? b->pix : tn_xcalloc(1, 1);
    }
    memset(b, 0, sizeof *b);
}

void lf_build_free(lf_build *b) {
    tn_ids_free(&b->ids), tn_ids_free(&b->labels), tn_ids_free(&b->pos);
    free(b->len), free(b->img_off), free(b->pix_off), free(b->img_hw), free(b->pix);
    memset(b, 0, sizeof *b);
}

/* processor_utils.greedy_knapsack: lengths sorted ascending, then each bin takes the largest remaining
 * length that fits (bisect), until none fits. bin_of_sorted[i] = bin of the i-th smallest length;
 * lengths is left sorted. */
static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

void lf_greedy_knapsack(int *lengths, int n, int capacity, int *bin_of_sorted, int *n_bins) {
    qsort(lengths, (size_t)n, sizeof *lengths, cmp_int);
    /* the remaining items as a linked list over the sorted order; each bin scans down from the largest,
     * O(n^2) at worst, which batches of 1000 keep small */
    int *prev = tn_xmalloc((size_t)(n + 1) * sizeof *prev), *next = tn_xmalloc((size_t)(n + 1) * sizeof *next);
    for (int i = 0; i < n; i++) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
    int tail = n - 1, bins = 0, left = n;
    while (left > 0) {
        int remaining = capacity, it = tail;
        for (;;) {
            while (it >= 0 && lengths[it] > remaining) it = prev[it];  /* bisect_right(numbers, remaining) - 1 */
            if (it < 0) break;
            remaining -= lengths[it];
            bin_of_sorted[it] = bins;
            int p = prev[it], q = next[it];
            if (p >= 0) next[p] = q;
            if (q >= 0) prev[q] = p;
            else tail = p;
            left--;
            it = p;
        }
        bins++;
    }
    *n_bins = bins;
    free(prev), free(next);
}

static int pad_mask(const lf_template *t, tn_ids *ids, tn_ids *labels) {
    for (size_t i = 0; i < ids->n; i++)
        if (tn_ids_push(labels, ids->ids[i] == t->pad_id ? LF_IGNORE : ids->ids[i]) != 0) return -1;
    return 0;
}

static int pt_text(const lf_template *t, const lf_example *e, int with_bos, lf_buf *sb, tn_ids *out) {
    if (e->n_prompt == 0)
        return tn_err("%s: record %d: stage pt needs a text, but the record has none (%s)", e->file, e->rec,
                      e->bad ? e->bad : "empty");
    sb->n = 0;
    if (with_bos && t->bos_text) lf_buf_puts(sb, t->bos_text);
    lf_buf_put(sb, e->msg[0].s, e->msg[0].n);
    lf_buf_puts(sb, t->eos_text);
    return tn_tokenizer_encode(t->tok, sb->p, sb->n, t->parse_special, out);
}

/* One SFT example with its images prepared first (their token counts fill the <image> tags); *img gets them
 * (NULL when it has none). */
static int encode_sft(const lf_template *t, const lf_encode_opts *o, const lf_example *e, tn_ids *ids, tn_ids *lab,
                      lf_img **img) {
    *img = NULL;
    int *tokens = NULL, n = e->n_img, rc = 0;
    lf_img *im = NULL;
    if (n && t->def->vision) {  /* a template without vision refuses the images in lf_encode_supervised */
        if (!o->vl) return tn_err("%s: record %d: images but no image processor", e->file, e->rec);
        im = tn_xcalloc((size_t)n, sizeof *im), tokens = tn_xcalloc((size_t)n, sizeof *tokens);
        rc = lf_images_prepare(o->vl, e, im, tokens);
        if (rc != 0) free(im), im = NULL;
    }
    if (rc == 0) rc = lf_encode_supervised(t, o, e, tokens, ids, lab);
    free(tokens);
    if (rc != 0 && im) lf_imgs_free(im, n), free(im), im = NULL;
    *img = im;
    return rc;
}

/* Encodes every row on all threads (the tokenizer is read-only; images are decoded on the row's thread);
 * enc[i] stays empty where skip[i]. The error of the first failing row is made again on this thread, where
 * tn_err's message lives. */
static int encode_rows(const lf_template *t, const lf_encode_opts *o, const lf_example *const *ex, int n,
                       const unsigned char *skip, tn_ids *enc, tn_ids *lab, lf_img **imgs) {
    int bad = n;
#pragma omp parallel reduction(min : bad)
    {
        lf_buf sb = {0};
#pragma omp for schedule(dynamic, 8)
        for (int i = 0; i < n; i++) {
            if (skip && skip[i]) continue;
            int rc = o->pt ? pt_text(t, ex[i], !o->packing && t->add_bos, &sb, &enc[i])
                           : encode_sft(t, o, ex[i], &enc[i], &lab[i], &imgs[i]);
            if (rc != 0 && i < bad) bad = i;
        }
        free(sb.p);
    }
    if (bad == n) return 0;
    tn_ids x = {0}, y = {0};
    lf_buf sb = {0};
    lf_img *img = NULL;
    if (o->pt) pt_text(t, ex[bad], !o->packing && t->add_bos, &sb, &x);
    else encode_sft(t, o, ex[bad], &x, &y, &img);
    if (img) lf_imgs_free(img, ex[bad]->n_img), free(img);
    tn_ids_free(&x), tn_ids_free(&y);
    free(sb.p);
    return -1;
}

static void free_rows(tn_ids *enc, tn_ids *lab, lf_img **imgs, const lf_example *const *ex, int n) {
    for (int i = 0; i < n; i++) {
        tn_ids_free(&enc[i]);
        if (lab) tn_ids_free(&lab[i]);
        if (imgs && imgs[i]) lf_imgs_free(imgs[i], ex[i]->n_img), free(imgs[i]);
    }
    free(enc), free(lab), free(imgs);
}

static int process_pt(const lf_template *t, const lf_encode_opts *o, const lf_example *const *ex, int n, lf_build *b) {
    tn_ids *enc = tn_xcalloc((size_t)n + 1, sizeof *enc), cat = {0}, labels = {0};
    int rc = encode_rows(t, o, ex, n, NULL, enc, NULL, NULL);
    for (int s = 0; s < n && rc == 0; s += LF_MAP_BATCH) {
        int e_end = s + LF_MAP_BATCH < n ? s + LF_MAP_BATCH : n;
        if (!o->packing) {
            for (int i = s; i < e_end && rc == 0; i++) {
                tn_ids *ids = &enc[i];
                if (ids->n > (size_t)o->cutoff) ids->n = (size_t)o->cutoff;  /* truncation=True, max_length */
                labels.n = 0;
                if ((rc = pad_mask(t, ids, &labels)) != 0) break;
                lf_build_add(b, ids->ids, labels.ids, NULL, ids->n);
            }
            continue;
        }
        /* the batch's texts concatenated, cut into blocks; the remainder is dropped */
        cat.n = 0;
        for (int i = s; i < e_end; i++)
            for (size_t k = 0; k < enc[i].n; k++)
                if (tn_ids_push(&cat, enc[i].ids[k]) != 0) tn_die("out of memory");
        size_t block = (size_t)o->cutoff, whole = cat.n / block * block;
        for (size_t k = 0; k < whole && rc == 0; k += block) {
            if (t->add_bos && t->bos_id >= 0) cat.ids[k] = t->bos_id;
            tn_ids blk = {cat.ids + k, block, block};
            labels.n = 0;
            if ((rc = pad_mask(t, &blk, &labels)) != 0) break;
            lf_build_add(b, blk.ids, labels.ids, NULL, block);
        }
    }
    free_rows(enc, NULL, NULL, ex, n);
    tn_ids_free(&cat), tn_ids_free(&labels);
    return rc;
}

static int sft_valid(const lf_example *e, lf_build *b) {
    if (e->bad || e->n_prompt % 2 != 1 || e->n_resp != 1) {
        lf_build_drop(b, e, e->bad ? e->bad : "the prompt must have an odd number of messages and one response");
        return 0;
    }
    return 1;
}

static int process_sft(const lf_template *t, const lf_encode_opts *o, const lf_example *const *ex, int n, lf_build *b) {
    unsigned char *skip = tn_xcalloc((size_t)n + 1, 1);
    for (int i = 0; i < n; i++) skip[i] = !sft_valid(ex[i], b);
    tn_ids *enc = tn_xcalloc((size_t)n + 1, sizeof *enc), *lab = tn_xcalloc((size_t)n + 1, sizeof *lab);
    lf_img **imgs = tn_xcalloc((size_t)n + 1, sizeof *imgs);
    int rc = encode_rows(t, o, ex, n, skip, enc, lab, imgs);
    b->has_img = o->vl != NULL;
    if (rc == 0 && !o->packing) {
        for (int i = 0; i < n; i++) {
            if (skip[i]) continue;
            lf_build_add(b, enc[i].ids, lab[i].ids, NULL, enc[i].n);
            if (b->has_img) lf_build_add_images(b, imgs[i], imgs[i] ? ex[i]->n_img : 0);
        }
    }
    if (rc == 0 && o->packing) {
        b->has_pos = 1;
        int *row = tn_xmalloc(LF_MAP_BATCH * sizeof *row), *lengths = tn_xmalloc(LF_MAP_BATCH * sizeof *lengths);
        int *bin = tn_xmalloc(LF_MAP_BATCH * sizeof *bin), *stack_next = tn_xmalloc(LF_MAP_BATCH * sizeof *stack_next);
        int *stack_head = tn_xmalloc(((size_t)o->cutoff + 1) * sizeof *stack_head);
        int32_t *pk_ids = tn_xmalloc(((size_t)o->cutoff + 1) * sizeof *pk_ids);
        int32_t *pk_lab = tn_xmalloc(((size_t)o->cutoff + 1) * sizeof *pk_lab);
        int32_t *pk_pos = tn_xmalloc(((size_t)o->cutoff + 1) * sizeof *pk_pos);
        for (int s = 0; s < n; s += LF_MAP_BATCH) {
            int e_end = s + LF_MAP_BATCH < n ? s + LF_MAP_BATCH : n, nv = 0;
            for (int i = s; i < e_end; i++) {
                if (skip[i]) continue;
                if (enc[i].n > (size_t)o->cutoff) {  /* LF's rule; infer_seqlen has already cut every example */
                    char why[96];
                    snprintf(why, sizeof why, "%zu tokens, more than the packing cutoff %d", enc[i].n, o->cutoff);
                    lf_build_drop(b, ex[i], why);
                    continue;
                }
                row[nv] = i, lengths[nv] = (int)enc[i].n;
                nv++;
            }
            /* length2indexes[length] is a stack: pop() takes the LAST example of that length */
            for (int L = 0; L <= o->cutoff; L++) stack_head[L] = -1;
            for (int v = 0; v < nv; v++) stack_next[v] = stack_head[lengths[v]], stack_head[lengths[v]] = v;
            int nbins = 0;
            lf_greedy_knapsack(lengths, nv, o->cutoff, bin, &nbins);
            /* a bin holds its items in the order they were picked: from the largest down */
            for (int k = 0; k < nbins; k++) {
                int fill = 0;
                for (int it = nv - 1; it >= 0; it--) {
                    if (bin[it] != k) continue;
                    int v = stack_head[lengths[it]];
                    stack_head[lengths[it]] = stack_next[v];
                    const tn_ids *x = &enc[row[v]], *y = &lab[row[v]];
                    memcpy(pk_ids + fill, x->ids, x->n * sizeof *pk_ids);
                    memcpy(pk_lab + fill, y->ids, y->n * sizeof *pk_lab);
                    for (size_t j = 0; j < x->n; j++) pk_pos[fill + (int)j] = (int32_t)j;
                    fill += (int)x->n;
                }
                for (; fill < o->cutoff + 1; fill++) pk_ids[fill] = t->pad_id, pk_lab[fill] = LF_IGNORE, pk_pos[fill] = 0;
                lf_build_add(b, pk_ids, pk_lab, pk_pos, (size_t)o->cutoff + 1);
            }
        }
        free(row), free(lengths), free(bin), free(stack_head), free(stack_next);
        free(pk_ids), free(pk_lab), free(pk_pos);
    }
    free_rows(enc, lab, imgs, ex, n);
    free(skip);
    return rc;
}

int lf_process(const lf_template *t, const lf_encode_opts *o, const lf_example *const *ex, int n, lf_samples *out) {
    lf_build b = {0};
    int rc = o->pt ? process_pt(t, o, ex, n, &b) : process_sft(t, o, ex, n, &b);
    if (rc != 0) {
        lf_build_free(&b);
        return -1;
    }
    lf_build_finish(&b, out);
    return 0;
}
