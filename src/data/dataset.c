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

void tn_dataset_row(const tn_dataset *d, int i, int32_t *ids, int32_t *labels) {
    const size_t S = (size_t)d->S;
    if (d->ids) {
        memcpy(ids, d->ids + (size_t)i * S, S * sizeof *ids);
        memcpy(labels, d->labels + (size_t)i * S, S * sizeof *labels);
        return;
    }
    size_t len = (size_t)(d->var_off[i + 1] - d->var_off[i]);
    if (len > S) len = S; /* never: S is the longest sample */
    memcpy(ids, d->var_ids + d->var_off[i], len * sizeof *ids);
    memcpy(labels, d->var_labels + d->var_off[i], len * sizeof *labels);
    for (size_t t = len; t < S; t++) ids[t] = d->pad_id, labels[t] = -100;
}

void tn_batch_fill(const tn_dataset *d, tn_sampler *s, int64_t k0, int B, int32_t *ids, int32_t *labels) {
    for (int b = 0; b < B; b++)
        tn_dataset_row(d, tn_sampler_get(s, k0 + b), ids + (size_t)b * d->S, labels + (size_t)b * d->S);
}
