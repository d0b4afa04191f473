/* dataset.c -- dataset lifetime, epoch sampler, batch assembly. See dataset.h. */
#include "data/dataset.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

void tn_dataset_free(tn_dataset *d) {
    free(d->ids);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

static void shuffle_epoch(tn_sampler *s, int epoch) {
    tn_rng rng;
    tn_rng_seed(&rng, s->seed * 1000003ull + (uint64_t)epoch);
    for (int i = 0; i < s->n; i++) s->order[i] = i;
    for (int i = s->n - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(tn_rng_next(&rng) % (uint64_t)(i + 1));
        int32_t t = s->order[i];
        s->order[i] = s->order[j];
        s->order[j] = t;
    }
    s->epoch = epoch;
}

void tn_sampler_init(tn_sampler *s, int n, uint64_t seed) {
    s->n = n;
    s->seed = seed;
    s->order = tn_xmalloc((size_t)(n ? n : 1) * sizeof *s->order);
    shuffle_epoch(s, 0);
}

void tn_sampler_free(tn_sampler *s) {
    free(s->order);
    s->order = NULL;
}

int tn_sampler_get(tn_sampler *s, int64_t k) {
    int epoch = (int)(k / s->n);
    if (epoch != s->epoch) shuffle_epoch(s, epoch);
    return s->order[k % s->n];
}

int tn_dataset_len(const tn_dataset *d, int i) {
    if (d->ids) return d->S;
    int64_t len = d->var_off[i + 1] - d->var_off[i];
    return len < d->S ? (int)len : d->S; /* never more: S is the longest sample */
}

int tn_dataset_batch_len(const tn_dataset *d, int longest) {
    int len = (longest + 7) & ~7;
    return len < d->S ? len : d->S;
}

void tn_dataset_row(const tn_dataset *d, int i, int len, int32_t *ids, int32_t *labels) {
    if (d->ids) {
        memcpy(ids, d->ids + (size_t)i * d->S, (size_t)d->S * sizeof *ids);
        memcpy(labels, d->labels + (size_t)i * d->S, (size_t)d->S * sizeof *labels);
        return;
    }
    size_t n = (size_t)tn_dataset_len(d, i);
    memcpy(ids, d->var_ids + d->var_off[i], n * sizeof *ids);
    memcpy(labels, d->var_labels + d->var_off[i], n * sizeof *labels);
    for (size_t t = n; t < (size_t)len; t++) ids[t] = d->pad_id, labels[t] = -100;
}

int tn_batch_fill(const tn_dataset *d, tn_sampler *s, int64_t k0, int B, int32_t *ids, int32_t *labels) {
    int longest = 1;
    for (int b = 0; b < B; b++) {
        int n = tn_dataset_len(d, tn_sampler_get(s, k0 + b));
        longest = n > longest ? n : longest;
    }
    int len = tn_dataset_batch_len(d, longest);
    for (int b = 0; b < B; b++)
        tn_dataset_row(d, tn_sampler_get(s, k0 + b), len, ids + (size_t)b * len, labels + (size_t)b * len);
    return len;
}

const tn_mm_batch *tn_rows_fill_mm(const tn_dataset *d, const int *idx, int B, tn_mm_buf *buf) {
    memset(&buf->mb, 0, sizeof buf->mb);
    if (!d->img_off) return &buf->mb;
    int n_img = 0, dim = tn_vl_patch_dim(d->vl);
    size_t n_vals = 0;
    for (int b = 0; b < B; b++) {
        int i = idx[b];
        for (int64_t k = i < 0 ? 0 : d->img_off[i]; i >= 0 && k < d->img_off[i + 1]; k++, n_img++)
            n_vals += (size_t)(d->img_hw[2 * k] / d->vl->patch_size) * (d->img_hw[2 * k + 1] / d->vl->patch_size) * dim;
    }
    if ((size_t)n_img > buf->cap_images) {
        buf->cap_images = (size_t)n_img;
        buf->grid_thw = tn_xrealloc(buf->grid_thw, buf->cap_images * 3 * sizeof *buf->grid_thw);
        buf->row = tn_xrealloc(buf->row, buf->cap_images * sizeof *buf->row);
    }
    if (n_vals > buf->cap_values) {
        buf->cap_values = n_vals;
        buf->pixel_values = tn_xrealloc(buf->pixel_values, n_vals * sizeof *buf->pixel_values);
    }
    float *out = buf->pixel_values;
    int j = 0;
    for (int b = 0; b < B; b++) {
        int i = idx[b];
        for (int64_t k = i < 0 ? 0 : d->img_off[i]; i >= 0 && k < d->img_off[i + 1]; k++, j++) {
            int h = d->img_hw[2 * k], w = d->img_hw[2 * k + 1], P = d->vl->patch_size;
            buf->grid_thw[3 * j] = 1, buf->grid_thw[3 * j + 1] = h / P, buf->grid_thw[3 * j + 2] = w / P;
            buf->row[j] = b;
            tn_vl_patchify(d->vl, d->pix + d->pix_off[k], h, w, out);
            out += (size_t)(h / P) * (w / P) * dim;
        }
    }
    buf->mb = (tn_mm_batch){.n_images = n_img, .grid_thw = buf->grid_thw, .row = buf->row,
                            .pixel_values = buf->pixel_values, .patch_dim = dim};
    return &buf->mb;
}

const tn_mm_batch *tn_batch_fill_mm(const tn_dataset *d, tn_sampler *s, int64_t k0, int B, tn_mm_buf *buf) {
    if (!d->img_off) return tn_rows_fill_mm(d, NULL, 0, buf);
    int *idx = tn_xmalloc((size_t)(B > 0 ? B : 1) * sizeof *idx);
    for (int b = 0; b < B; b++) idx[b] = tn_sampler_get(s, k0 + b);
    const tn_mm_batch *mb = tn_rows_fill_mm(d, idx, B, buf);
    free(idx);
    return mb;
}

void tn_mm_buf_free(tn_mm_buf *buf) {
    free(buf->grid_thw), free(buf->row), free(buf->pixel_values);
    memset(buf, 0, sizeof *buf);
}
