/* image_sync.c -- see image_sync.h. */
#include "trainer/image_sync.h"

#include <stdlib.h>

#include "core/core.h"

struct tn_image_sync {
    tn_comm *comm;
    tn_resnet *m;
    int active;          /* more than one rank */
    size_t n;            /* floats in the gradient slab */
    int n_buckets;
    size_t *lo;          /* [n_buckets + 1] bucket k = [lo[k], k ? lo[k-1] : n) */
    tn_comm_op **ops;    /* [n_buckets + 1] */
    int next;            /* first bucket not yet launched */
    int armed, failed;
    double armed_at;
    float *host;         /* staging of the largest BN buffer (broadcast) */
    tn_image_sync_stats stats;
};

static size_t bucket_hi(const tn_image_sync *s, int k) { return k ? s->lo[k - 1] : s->n; }

static void launch_ready(tn_image_sync *s, size_t ready_from) {
    while (s->next < s->n_buckets && s->lo[s->next] >= ready_from) {
        int k = s->next++;
        if (k == 0) s->stats.first_ready_s = tn_now() - s->armed_at;
        s->ops[k] = tn_comm_iallreduce_f32(s->comm, tn_resnet_grad(s->m) + s->lo[k], bucket_hi(s, k) - s->lo[k]);
        if (!s->ops[k]) s->failed = 1;
    }
}

static void on_grad_ready(void *ctx, size_t from) {
    tn_image_sync *s = ctx;
    if (s->armed) launch_ready(s, from);
}

tn_image_sync *tn_image_sync_create(tn_comm *c, tn_resnet *m, size_t bucket_bytes) {
    if (bucket_bytes && bucket_bytes < 4096) {
        tn_err("gradient bucket size %zu bytes is too small (expected at least 4 KB, or 0 for one all-reduce)",
               bucket_bytes);
        return NULL;
    }
    tn_image_sync *s = tn_xcalloc(1, sizeof *s);
    s->comm = c, s->m = m, s->n = tn_resnet_n_params(m);
    s->active = c && tn_comm_get_info(c)->size > 1;
    size_t per = bucket_bytes ? bucket_bytes / sizeof(float) : s->n;
    s->n_buckets = (int)((s->n + per - 1) / per);
    s->lo = tn_xcalloc((size_t)s->n_buckets + 1, sizeof *s->lo);
    s->ops = tn_xcalloc((size_t)s->n_buckets + 1, sizeof *s->ops);
    for (int k = 0; k < s->n_buckets; k++) s->lo[k] = s->n > (size_t)(k + 1) * per ? s->n - (size_t)(k + 1) * per : 0;
    s->stats.n_buckets = s->active ? s->n_buckets : 0;
    size_t big = 0;
    for (int i = 0; i < tn_resnet_n_tensors(m); i++) {
        const tn_resnet_tensor *t = tn_resnet_tensor_at(m, i);
        if (t->buffer && t->numel > big) big = t->numel;
    }
    s->host = tn_xmalloc((big ? big : 1) * sizeof *s->host);
    if (s->active && bucket_bytes) tn_resnet_set_grad_ready(m, on_grad_ready, s);
    return s;
}

void tn_image_sync_free(tn_image_sync *s) {
    if (!s) return;
    tn_resnet_set_grad_ready(s->m, NULL, NULL);
    free(s->lo), free(s->ops), free(s->host);
    free(s);
}

int tn_image_sync_buffers(tn_image_sync *s) {
    if (!s->active) return 0;
    for (int i = 0; i < tn_resnet_n_tensors(s->m); i++) {
        const tn_resnet_tensor *t = tn_resnet_tensor_at(s->m, i);
        if (!t->buffer) continue;
        tn_resnet_get(s->m, t, s->host);
        if (tn_comm_bcast(s->comm, s->host, t->numel * sizeof *s->host, 0)) return -1;
        tn_resnet_set(s->m, t, s->host);
    }
    return 0;
}

void tn_image_sync_arm(tn_image_sync *s) {
    if (!s->active) return;
    s->armed = 1, s->next = 0, s->failed = 0, s->armed_at = tn_now();
}

int tn_image_sync_finish(tn_image_sync *s) {
    if (!s->active) return 0;
    if (!s->armed) tn_image_sync_arm(s); /* nothing launched during backward: all of it now */
    launch_ready(s, 0);
    double t0 = tn_now();
    int rc = 0;
    for (int k = 0; k < s->n_buckets; k++) {
        if (s->ops[k] && tn_comm_wait(s->ops[k]) && rc == 0) rc = -1;
        s->ops[k] = NULL;
    }
    s->armed = 0;
    s->stats.wait_s = tn_now() - t0;
    if (rc == 0 && s->failed) rc = tn_err("gradient all-reduce: %s", tn_errmsg());
    return rc;
}

const tn_image_sync_stats *tn_image_sync_get_stats(const tn_image_sync *s) { return &s->stats; }
