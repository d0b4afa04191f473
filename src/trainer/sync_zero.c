/* sync_zero.c -- ZeRO stages 1-3 (strategy.h, zero.h) over the shards of shard_layout.h (zero_shard_layout:
 * balanced, FSDP's layout, or contiguous): gradients reduce-scattered into each rank's shard
 * (stages 2-3: the rest of each bucket released once exchanged), AdamW moments for the shard only, the updated
 * shard all-gathered after the step (stages 1-2) or before each use (stage 3, through the model's param_hook,
 * installed at start once every rank holds the whole model). Each rank saves and loads its own moments. */
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "trainer/shard_layout.h"
#include "trainer/strategy.h"
#include "trainer/zero.h"

extern const tn_strategy_ops tn_sync_zero;

typedef struct {
    tn_strategy base;
    tn_shard_layout *layout; /* who owns what: the exchange's units, the optimizer's spans, zero's pieces */
    tn_zero *zero;           /* from start on */
} zero_strategy;

static int picks(const tn_strategy_args *a) { return a->stage > 0; }

static int check(const tn_strategy_args *a) {
    if (a->cfg->comm_compression)
        return tn_err("%s: comm_compression works on whole gradients, not ZeRO's reduce-scatter: set zero_stage 0 "
                      "or comm_compression none", a->cfg->source_path[0] ? a->cfg->source_path : "<config>");
    return 0;
}

static tn_strategy *create(const tn_strategy_args *a) {
    zero_strategy *z = tn_xcalloc(1, sizeof *z);
    tn_grad_mode mode = a->stage == 1 ? TN_GRAD_REDUCE_SCATTER : TN_GRAD_REDUCE_SCATTER_RELEASE;
    size_t bucket = tn_strategy_bucket_bytes(a), n = a->model->n_trainable;
    /* balanced units at most a gradient bucket (as many exchanges to overlap with backward as DDP's), whole huge
     * pages where a group holds N of them (shard_layout.h: released chunks come back 2 MB at a time) */
    z->layout = tn_shard_layout_create(a->model, tn_comm_get_info(a->comm)->size, !a->cfg->zero_contiguous,
                                       tn_grad_sync_bucket_floats(n, bucket), TN_SHARD_PAGE_FLOATS);
    tn_grad_sync *sync = tn_grad_sync_create_sharded(a->comm, a->model, bucket, mode, z->layout);
    tn_adamw *opt = NULL;
    if (sync) {
        int me = tn_comm_shard_index(a->comm, tn_comm_get_info(a->comm)->rank), k = tn_shard_layout_spans(z->layout, me, NULL);
        tn_span *sp = tn_xmalloc(((size_t)k + 1) * sizeof *sp);
        tn_shard_layout_spans(z->layout, me, sp);
        opt = tn_adamw_create_spans(a->model, sp, k);
        free(sp);
    }
    if (tn_strategy_init(&z->base, &tn_sync_zero, a, sync, opt)) {
        tn_shard_layout_free(z->layout);
        free(z);
        return NULL;
    }
    z->base.shards_optimizer = 1;
    return &z->base;
}

static void destroy(tn_strategy *s) {
    zero_strategy *z = (zero_strategy *)s;
    tn_zero_free(z->zero);
    tn_strategy_fini(s);
    tn_shard_layout_free(z->layout);
    free(z);
}

static tn_zero *zero_of(const tn_strategy *s) { return ((const zero_strategy *)s)->zero; }

static void start(tn_strategy *s) {
    zero_strategy *z = (zero_strategy *)s;
    if (z->zero) return;
    char why[256];
    int share = s->a.cfg->zero_shared_params;
    z->zero = tn_zero_create(s->a.comm, s->a.model, s->a.stage, z->layout, share, why, sizeof why);
    const tn_comm_info *in = tn_comm_get_info(s->a.comm);
    if (s->a.stage != 3 || in->rank != 0 || in->n_nodes != 1 || !share) return;
    if (tn_zero_shared(z->zero))
        printf("tandem: ZeRO-3 on one machine: the %d ranks map one shared copy of the parameters, nothing to "
               "gather (zero_shared_params)%s%s\n", in->size, why[0] ? "; " : "", why);
    else
        printf("tandem: note: ZeRO-3 on one machine gathers the parameters: the %d ranks could not share one copy "
               "(%s)\n", in->size, why);
}

/* stages 2-3: zeros; outside the shard released, holding no memory until backward writes it */
static void clear_grads(tn_strategy *s) {
    tn_model *m = s->a.model;
    if (s->a.stage >= 2 && zero_of(s)) tn_zero_clear_grads(zero_of(s));
    else (s->a.stage >= 2 ? m->be->release : m->be->zero)(m->grad, m->n_trainable);
}

/* every rank adds the shards' sums of squares in the same order: the same norm everywhere */
static int clip(tn_strategy *s, double max_norm, double *norm) { return tn_zero_clip(zero_of(s), max_norm, norm); }
static int after_update(tn_strategy *s) { return tn_zero_after_update(zero_of(s)); }
static int full(tn_strategy *s) { return tn_zero_full(zero_of(s)); }
static void end_full(tn_strategy *s) { tn_zero_end_full(zero_of(s)); }
static int status(const tn_strategy *s) { return zero_of(s) ? tn_zero_status(zero_of(s)) : 0; }
static void track_peak(tn_strategy *s, int on) { tn_zero_track_peak(((zero_strategy *)s)->zero, on); }
static size_t peak_bytes(tn_strategy *s) { return tn_zero_peak_bytes(((zero_strategy *)s)->zero); }
static int save_moments(tn_strategy *s, const char *dir) { return tn_zero_save_moments(zero_of(s), s->opt, dir); }

/* a run resumed before any update has no moments to restore */
static int load_moments(tn_strategy *s, const char *dir) {
    return s->opt->step > 0 ? tn_zero_load_moments(zero_of(s), s->opt, dir) : 0;
}

/* The data-parallel line, and who owns what (test_zero_layout.sh reads the uneven count). */
static void describe(const tn_strategy *s, FILE *out) {
    const tn_shard_layout *l = ((const zero_strategy *)s)->layout;
    int N = s->a.world, U = tn_shard_layout_units(l), uneven = 0;
    size_t page = TN_SHARD_PAGE_FLOATS, paged = 0, n = s->a.model->n_trainable;
    for (int u = 0; u < U; u++) {
        size_t lo, hi;
        tn_shard_layout_unit(l, u, &lo, &hi);
        uneven += (hi - lo) % (size_t)N != 0;
        if (lo % page == 0 && (hi - lo) % (page * (size_t)N) == 0) paged += hi - lo; /* chunks of whole pages */
    }
    tn_strategy_describe_dp(s, out);
    if (tn_shard_layout_balanced(l))
        fprintf(out, "tandem: ZeRO shards balanced (FSDP's layout, zero_shard_layout: balanced): %d unit(s), each "
                "split into %d chunks, shard s owning chunk s of every unit; %d unit(s) not divisible by %d (chunks one value "
                "apart); every reduce-scatter and all-gather moves 1/%d of a unit from every rank; %.1f%% of the values in "
                "chunks of whole 2 MB pages\n", U, N, uneven, N, N, n ? 100.0 * (double)paged / (double)n : 0.0);
    else
        fprintf(out, "tandem: ZeRO shards contiguous (zero_shard_layout: contiguous): shard s is the s-th 1/%d of the "
                "slab; a bucket's reduce-scatter goes to its owner only\n", N);
}

const tn_strategy_ops tn_sync_zero = {
    .name = "zero",
    .summary = "ZeRO stages 1-3: gradients reduce-scattered, optimizer state (2: + gradients, 3: + parameters) sharded "
               "(zero_shard_layout: balanced, FSDP's chunk of every unit, or contiguous)",
    .picks = picks,
    .check = check,
    .create = create,
    .destroy = destroy,
    .start = start,
    .clear_grads = clear_grads,
    .clip = clip,
    .after_update = after_update,
    .full = full,
    .end_full = end_full,
    .status = status,
    .save_moments = save_moments,
    .load_moments = load_moments,
    .track_peak = track_peak,
    .peak_bytes = peak_bytes,
    .describe = describe,
};
