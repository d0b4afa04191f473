/* grad_sync.c -- see grad_sync.h. */
#include "trainer/grad_sync.h"

#include <stdlib.h>
#include <string.h>

#include "comm/exchange.h"
#include "core/core.h"

struct tn_grad_sync {
    tn_comm *comm;
    tn_model *model;
    int active;              /* more than one rank */
    tn_grad_mode mode;
    int released;            /* buckets [0, released) waited for (and, in the release mode, released) */
    int n_buckets;
    size_t *lo;              /* [n_buckets] bucket k = [lo[k], k ? lo[k-1] : n_trainable) */
    tn_span *unit, *own;     /* [n_buckets] reduce-scatter modes: bucket k's unit and this rank's chunk of it */
    int next;                /* first bucket not yet launched */
    int armed;
    double armed_at;
    tn_comm_op **ops;        /* [n_buckets] */
    int first_error;
    tn_codec codec;          /* TN_GRAD_COMPRESSED */
    float *residual;         /* [n_trainable], this rank's parts only (compressed) */
    tn_grad_sync_stats stats;
};

#define MIN_BUCKETS 8
#define MIN_BUCKET_FLOATS 16384 /* 64 KB: smaller ones would be all per-message overhead */

static size_t bucket_hi(const tn_grad_sync *s, int k) { return k ? s->lo[k - 1] : s->model->n_trainable; }

static void launch_ready(tn_grad_sync *s, size_t ready_from) {
    while (s->next < s->n_buckets && s->lo[s->next] >= ready_from) {
        int k = s->next++;
        size_t lo = s->lo[k], hi = bucket_hi(s, k);
        if (k == 0) s->stats.first_ready_s = tn_now() - s->armed_at;
        float *g = s->model->grad;
        if (s->mode == TN_GRAD_ALLREDUCE) s->ops[k] = tn_comm_iallreduce_f32(s->comm, g + lo, hi - lo);
        else if (s->mode == TN_GRAD_LOCAL) s->ops[k] = tn_comm_iallreduce_local_f32(s->comm, g + lo, hi - lo);
        else if (s->mode == TN_GRAD_COMPRESSED)
            s->ops[k] = tn_comm_iexchange(s->comm, g + lo, hi - lo,
                                          &(tn_exchange){.codec = s->codec, .residual = s->residual + lo, .scale = 1,
                                                         .reduce_local = 1});
        else /* on the unit as its own slab: comm's shards of it are the chunks */
            s->ops[k] = tn_comm_ireduce_scatter_range(s->comm, g + s->unit[k].lo, s->unit[k].n, lo - s->unit[k].lo,
                                                      hi - s->unit[k].lo);
        if (!s->ops[k] && !s->first_error) s->first_error = 1;
    }
}

/* Bucket k's exchange is over: in the release mode, what is not this rank's shard is scratch now. */
static int retire(tn_grad_sync *s, int k) {
    int rc = s->ops[k] ? tn_comm_wait(s->ops[k]) : 0;
    s->ops[k] = NULL;
    if (s->mode == TN_GRAD_REDUCE_SCATTER_RELEASE) {
        size_t lo = s->lo[k], hi = bucket_hi(s, k);
        const tn_backend *be = s->model->be;
        float *g = s->model->grad;
        size_t own_lo = s->own[k].lo, own_hi = own_lo + s->own[k].n;
        if (own_lo > lo) be->release(g + lo, (own_lo < hi ? own_lo : hi) - lo);
        if (own_hi < hi) be->release(g + (own_hi > lo ? own_hi : lo), hi - (own_hi > lo ? own_hi : lo));
    }
    return rc;
}

static void on_grad_ready(void *ctx, size_t from) {
    tn_grad_sync *s = ctx;
    if (!s->armed) return;
    launch_ready(s, from);
    /* memory of finished buckets goes back while backward goes on */
    while (s->mode == TN_GRAD_REDUCE_SCATTER_RELEASE && s->released < s->next &&
           (!s->ops[s->released] || tn_comm_test(s->ops[s->released])))
        if (retire(s, s->released++) != 0 && !s->first_error) s->first_error = 1;
}

size_t tn_grad_sync_bucket_floats(size_t n, size_t bucket_bytes) {
    /* Never fewer than MIN_BUCKETS buckets (but none under MIN_BUCKET_FLOATS): the bucket holding the first
     * layers is complete only when backward ends, so one big bucket (LoRA's 2 MB of adapters under a 4 MB
     * cap) would overlap nothing; with 8 only an eighth of the bytes is left after backward. */
    size_t per = bucket_bytes / sizeof(float), fair = (n + MIN_BUCKETS - 1) / MIN_BUCKETS;
    if (fair < MIN_BUCKET_FLOATS) fair = MIN_BUCKET_FLOATS;
    return per > fair ? fair : per;
}

/* Buckets of at most per floats from the end of the slab, or a balanced layout's units (last first). */
static void plan_buckets(tn_grad_sync *s, size_t n, size_t per, const tn_shard_layout *l) {
    int rs = s->active && (s->mode == TN_GRAD_REDUCE_SCATTER || s->mode == TN_GRAD_REDUCE_SCATTER_RELEASE);
    int balanced = rs && l && tn_shard_layout_balanced(l);
    s->n_buckets = balanced ? tn_shard_layout_units(l) : n ? (int)((n + per - 1) / per) : 0;
    s->lo = tn_xcalloc((size_t)s->n_buckets + 1, sizeof *s->lo);
    s->ops = tn_xcalloc((size_t)s->n_buckets + 1, sizeof *s->ops);
    s->unit = tn_xcalloc((size_t)s->n_buckets + 1, sizeof *s->unit);
    s->own = tn_xcalloc((size_t)s->n_buckets + 1, sizeof *s->own);
    for (int k = 0; k < s->n_buckets; k++) {
        size_t lo, hi;
        if (balanced) tn_shard_layout_unit(l, s->n_buckets - 1 - k, &lo, &hi);
        s->lo[k] = balanced ? lo : n > (size_t)(k + 1) * per ? n - (size_t)(k + 1) * per : 0;
    }
    if (!rs) return;
    int me = tn_comm_shard_index(s->comm, tn_comm_get_info(s->comm)->rank);
    for (int k = 0; k < s->n_buckets; k++) {
        int u = l ? tn_shard_layout_unit_of(l, s->lo[k]) : 0;
        size_t lo = 0, hi = n, olo, on;
        if (l) tn_shard_layout_unit(l, u, &lo, &hi);
        if (l) tn_shard_layout_chunk(l, u, me, &olo, &on);
        else tn_comm_shard(s->comm, n, tn_comm_get_info(s->comm)->rank, &olo, &on);
        s->unit[k] = (tn_span){lo, hi - lo}, s->own[k] = (tn_span){olo, on};
    }
}

tn_grad_sync *tn_grad_sync_create_sharded(tn_comm *c, tn_model *m, size_t bucket_bytes, tn_grad_mode mode,
                                          const tn_shard_layout *l) {
    if (bucket_bytes / sizeof(float) < 1024) {
        tn_err("gradient bucket size %zu bytes is too small (expected at least 4 KB)", bucket_bytes);
        return NULL;
    }
    tn_grad_sync *s = tn_xcalloc(1, sizeof *s);
    s->comm = c;
    s->model = m;
    s->active = c && (mode == TN_GRAD_LOCAL ? tn_comm_get_info(c)->local_size : tn_comm_get_info(c)->size) > 1 &&
                m->n_trainable > 0;
    s->mode = mode;
    size_t n = m->n_trainable, per = tn_grad_sync_bucket_floats(n, bucket_bytes), most = 0;
    plan_buckets(s, n, per, l);
    for (int k = 0; k < s->n_buckets; k++) most = bucket_hi(s, k) - s->lo[k] > most ? bucket_hi(s, k) - s->lo[k] : most;
    s->stats.n_buckets = s->active ? s->n_buckets : 0;
    s->stats.bucket_bytes = s->active ? most * sizeof(float) : 0;
    s->stats.bytes = s->active ? n * sizeof(float) : 0;
    if (s->active) {
        m->grad_ready = on_grad_ready;
        m->grad_ready_ctx = s;
    }
    return s;
}

tn_grad_sync *tn_grad_sync_create(tn_comm *c, tn_model *m, size_t bucket_bytes, tn_grad_mode mode) {
    return tn_grad_sync_create_sharded(c, m, bucket_bytes, mode, NULL);
}

void tn_grad_sync_free(tn_grad_sync *s) {
    if (!s) return;
    if (s->model->grad_ready_ctx == s) {
        s->model->grad_ready = NULL;
        s->model->grad_ready_ctx = NULL;
    }
    free(s->lo);
    free(s->ops);
    free(s->unit);
    free(s->own);
    tn_free_aligned(s->residual);
    free(s);
}

void tn_grad_sync_attach(tn_grad_sync *s) {
    s->model->grad_ready = s->active ? on_grad_ready : NULL;
    s->model->grad_ready_ctx = s->active ? s : NULL;
}

tn_grad_sync *tn_grad_sync_create_compressed(tn_comm *c, tn_model *m, size_t bucket_bytes, tn_codec codec) {
    tn_grad_sync *s = tn_grad_sync_create(c, m, bucket_bytes, TN_GRAD_COMPRESSED);
    if (!s || !s->active) return s;
    if (!tn_comm_uniform(c)) {
        tn_grad_sync_free(s);
        tn_err("comm_compression needs the same number of ranks on every machine");
        return NULL;
    }
    s->codec = codec;
    s->residual = tn_xalloc_floats(m->n_trainable);
    memset(s->residual, 0, m->n_trainable * sizeof *s->residual);
    s->stats.bytes = 0; /* what one machine sends to the network per step: every bucket's encodings */
    for (int k = 0; k < s->n_buckets; k++) s->stats.bytes += tn_comm_exchange_bytes(c, bucket_hi(s, k) - s->lo[k], codec, 0);
    return s;
}

/* This rank's part of each bucket (exchange.h), in slab order: copied out, or in. */
static size_t residual_parts(const tn_grad_sync *s, float *out, const float *in) {
    size_t count = 0;
    for (int k = s->n_buckets - 1; k >= 0 && s->residual; k--) {
        size_t off, len;
        tn_comm_exchange_part(s->comm, bucket_hi(s, k) - s->lo[k], &off, &len);
        float *r = s->residual + s->lo[k] + off;
        if (out) memcpy(out + count, r, len * sizeof *r);
        if (in) memcpy(r, in + count, len * sizeof *r);
        count += len;
    }
    return count;
}

size_t tn_grad_sync_residual(const tn_grad_sync *s, float *out) { return residual_parts(s, out, NULL); }
void tn_grad_sync_set_residual(tn_grad_sync *s, const float *in) { residual_parts(s, NULL, in); }

void tn_grad_sync_arm(tn_grad_sync *s) {
    if (!s->active) return;
    s->armed = 1;
    s->armed_at = tn_now();
    s->next = 0;
    s->released = 0;
    s->first_error = 0;
}

int tn_grad_sync_finish(tn_grad_sync *s) {
    if (!s->active) return 0;
    double t0 = tn_now();
    launch_ready(s, 0);
    s->armed = 0;
    int rc = s->first_error ? -1 : 0;
    for (int k = s->released; k < s->n_buckets; k++)
        if (retire(s, k) != 0) rc = -1;
    s->stats.wait_s = tn_now() - t0;
    static const char *const what[] = {"all-reduce", "reduce-scatter", "reduce-scatter", "exchange", "machine-local sum"};
    return rc ? tn_err("gradient %s failed: %s", what[s->mode], tn_errmsg()) : 0;
}

const tn_grad_sync_stats *tn_grad_sync_get_stats(const tn_grad_sync *s) { return &s->stats; }
