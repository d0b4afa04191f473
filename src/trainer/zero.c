/* zero.c -- see zero.h. Groups are indexed g + 1 (g = -1 the embedding .. L the final norm and lm_head). */
#include "trainer/zero.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "trainer/checkpoint.h"
#include "trainer/optimizer.h"

/* A group's parameters are gathered as pieces, one per layout unit the group touches (shard_layout.h), each
 * on its unit as its own slab. Balanced layout: the unit's chunks come from every rank at once. Contiguous
 * layout (one unit): the group is cut further at the shard boundaries, so a piece flows away from one owner
 * only; comm runs the pieces of different shards side by side and a rank computing on its own piece need not
 * wait for its sends to leave. */
typedef struct {
    size_t lo, hi;   /* the piece, inside the slab's trainable part */
    tn_span unit;    /* the unit it lies in */
    tn_span own;     /* this rank's chunk of that unit */
    size_t key;      /* stages 1-2 gather in this order: forward (balanced), offset into its shard (contiguous) */
    int mine;        /* inside this rank's chunk: nothing to receive */
    tn_comm_op *op;  /* its all-gather in flight */
} piece;

struct tn_zero {
    tn_comm *c;
    tn_model *m;
    int stage, full, track;
    int shared;          /* stage 3, one machine: the slab is one copy mapped by every rank (tn_zero_create) */
    size_t peak;         /* tn_zero_track_peak */
    const tn_shard_layout *layout;
    tn_span *own;        /* this rank's shard of the trainable slab: its chunk of every unit */
    int n_own;
    piece *pieces;       /* every group's, in slab order */
    int n_pieces;
    int *first;          /* [L + 3] group g's pieces are pieces[first[g + 1] .. first[g + 2]) */
    int *order;          /* [n_pieces] stages 1-2: piece indices by key */
    unsigned char *here; /* [L + 2] the group's parameters are complete on this rank */
    int failed;          /* an all-gather failed inside a pass (the hooks return nothing): reported by the next */
    char why[512];       /* call that can return an error (tn_zero_status, _clip, _after_update, _full) */
};

static void range_of(const tn_zero *z, int g, size_t *lo, size_t *hi) { tn_model_group_range(z->m, g, lo, hi); }

/* The first failure is kept (as grad_sync keeps its first_error): the pass goes on over stale parameters,
 * and the step that ran it fails with this message instead of the process dying inside the model. */
static void fail(tn_zero *z, const piece *p) {
    if (z->failed) return;
    z->failed = 1;
    snprintf(z->why, sizeof z->why, "parameter all-gather of [%zu, %zu) failed: %s", p->lo, p->hi, tn_errmsg());
}

static void start_piece(tn_zero *z, piece *p) {
    p->op = tn_comm_iallgather_range(z->c, z->m->slab + p->unit.lo, p->unit.n, p->lo - p->unit.lo, p->hi - p->unit.lo);
    if (!p->op) fail(z, p);
}

static void wait_piece(tn_zero *z, piece *p) {
    tn_comm_op *op = p->op;
    p->op = NULL;
    if (op && tn_comm_wait(op) != 0) fail(z, p);
}

int tn_zero_status(const tn_zero *z) { return z->failed ? tn_err("%s", z->why) : 0; }

static int gathering(const tn_zero *z, int g) {
    for (int i = z->first[g + 1]; i < z->first[g + 2]; i++)
        if (z->pieces[i].op) return 1;
    return 0;
}

static void gather(tn_zero *z, int g) {
    if (z->here[g + 1] || gathering(z, g)) return;
    for (int i = z->first[g + 1]; i < z->first[g + 2]; i++) start_piece(z, &z->pieces[i]);
    z->here[g + 1] = z->first[g + 1] == z->first[g + 2]; /* an empty group is always complete */
}

/* own_sends: stages 1-2 may leave the pieces this rank only sends running (collect_sends ends them). */
static void wait_group(tn_zero *z, int g, int own_sends) {
    for (int i = z->first[g + 1]; i < z->first[g + 2]; i++) {
        piece *p = &z->pieces[i];
        if (p->op && !(own_sends && p->mine && !tn_comm_test(p->op))) wait_piece(z, p);
    }
    z->here[g + 1] = 1;
}

/* Stages 1-2: a piece this rank only sends may still be moving; it must have left before the optimizer
 * writes the shard it is read from. */
static void collect_sends(tn_zero *z) {
    for (int i = 0; i < z->n_pieces; i++) wait_piece(z, &z->pieces[i]);
}

/* Stage 3: the group's parameters outside this rank's chunks go back to the system. */
static void release_group(tn_zero *z, int g) {
    const tn_backend *be = z->m->be;
    float *p = z->m->slab;
    for (int i = z->first[g + 1]; i < z->first[g + 2]; i++) {
        size_t lo = z->pieces[i].lo, hi = z->pieces[i].hi;
        size_t own_lo = z->pieces[i].own.lo, own_hi = own_lo + z->pieces[i].own.n;
        if (own_lo > lo) be->release(p + lo, (own_lo < hi ? own_lo : hi) - lo);
        if (own_hi < hi) {
            size_t a = own_hi > lo ? own_hi : lo;
            be->release(p + a, hi - a);
        }
    }
    z->here[g + 1] = z->first[g + 1] == z->first[g + 2];
}

static void sample_peak(tn_zero *z) {
    tn_zero_resident r;
    tn_zero_resident_bytes(z, &r);
    if (r.params + r.grads > z->peak) z->peak = r.params + r.grads;
}

static void on_params(void *ctx, int g, int need, int next) {
    tn_zero *z = ctx;
    if (z->full) return;
    if (z->track) sample_peak(z);
    if (z->shared) return; /* every parameter is there; the peak above still sees the gradients */
    if (!need) {
        if (z->stage == 3) release_group(z, g);
        return;
    }
    if (z->stage == 3) gather(z, g);
    wait_group(z, g, z->stage < 3); /* stage 3 gathers the group again for backward: every op must be over */
    if (z->stage == 3 && next >= -1) gather(z, next); /* prefetch: moves while this group computes */
    if (z->track) sample_peak(z);
}

/* Stages 2-3 before backward: the gradient outside this rank's shard goes back to the system (reduce-scatter
 * released most of it already), its shard is zeroed in place. Released, the shard would be faulted back and
 * cleared by the kernel as backward writes it, every step; it stays resident between steps anyway (4P/N). */
void tn_zero_clear_grads(tn_zero *z) {
    const tn_backend *be = z->m->be;
    float *g = z->m->grad;
    size_t at = 0; /* the spans are in slab order */
    for (int i = 0; i < z->n_own; i++) {
        if (z->own[i].lo > at) be->release(g + at, z->own[i].lo - at);
        be->zero(g + z->own[i].lo, z->own[i].n);
        at = z->own[i].lo + z->own[i].n;
    }
    if (z->m->n_trainable > at) be->release(g + at, z->m->n_trainable - at);
}

void tn_zero_track_peak(tn_zero *z, int on) { z->track = on, z->peak = 0; }

size_t tn_zero_peak_bytes(tn_zero *z) {
    size_t p = z->peak;
    z->peak = 0;
    return p;
}

/* The pieces of [lo, hi) (inside unit u): one, or (contiguous layout) one per shard it touches. */
static void cut_unit(tn_zero *z, int u, size_t lo, size_t hi, int size, int own) {
    size_t ulo, uhi;
    tn_shard_layout_unit(z->layout, u, &ulo, &uhi);
    tn_span unit = {ulo, uhi - ulo}, mine;
    tn_shard_layout_chunk(z->layout, u, own, &mine.lo, &mine.n);
    int balanced = tn_shard_layout_balanced(z->layout);
    for (int s = 0; s < (balanced ? 1 : size); s++) {
        size_t off = lo, len = hi - lo;
        if (!balanced) tn_shard_layout_chunk(z->layout, u, s, &off, &len);
        size_t a = lo > off ? lo : off, b = hi < off + len ? hi : off + len;
        if (b <= a) continue;
        z->pieces[z->n_pieces++] = (piece){.lo = a, .hi = b, .unit = unit, .own = mine, .key = balanced ? a : a - off,
                                           .mine = a >= mine.lo && b <= mine.lo + mine.n};
    }
}

/* Cuts every group at the unit boundaries (and, contiguous, at the shard boundaries). */
static void make_pieces(tn_zero *z) {
    const tn_model *m = z->m;
    int size = tn_comm_get_info(z->c)->size, L = m->L, own = tn_comm_shard_index(z->c, tn_comm_get_info(z->c)->rank);
    size_t most = ((size_t)tn_shard_layout_units(z->layout) + (size_t)L + 2) * (size_t)size;
    z->first = tn_xcalloc((size_t)L + 3, sizeof *z->first);
    z->pieces = tn_xcalloc(most + 1, sizeof *z->pieces);
    for (int g = -1; g <= L; g++) {
        size_t lo, hi, ulo, uhi;
        range_of(z, g, &lo, &hi);
        z->first[g + 1] = z->n_pieces;
        int U = hi > lo ? tn_shard_layout_units(z->layout) : 0;
        for (int u = U ? tn_shard_layout_unit_of(z->layout, lo) : 0; u < U; u++) {
            tn_shard_layout_unit(z->layout, u, &ulo, &uhi);
            if (ulo >= hi) break;
            cut_unit(z, u, lo > ulo ? lo : ulo, hi < uhi ? hi : uhi, size, own);
        }
    }
    z->first[L + 2] = z->n_pieces;
    z->order = tn_xmalloc(((size_t)z->n_pieces + 1) * sizeof *z->order);
    for (int i = 0; i < z->n_pieces; i++) { /* insertion sort by key, stable: a few dozen to a few hundred */
        int j = i;
        for (; j > 0 && z->pieces[z->order[j - 1]].key > z->pieces[i].key; j--) z->order[j] = z->order[j - 1];
        z->order[j] = i;
    }
}

/* Stage 3 with every rank on one machine: the ranks map one copy of the slab (comm.h's tn_comm_share_machine), each
 * updating its own chunks in place. That is the machine's memory of the sharded parameters (N chunks of P/N, once),
 * with nothing to gather: every gather inside a machine copies a chunk that already sits in the machine's memory,
 * and on a CPU its copy and the refaults of the released pages take the cores that compute (docs/performance.md,
 * "ZeRO-3 on one machine: one shared copy"). The ranks' reads and writes need no more ordering than the step
 * has: every rank's backward is over before the loss's all-reduce and clip's norm exchange, which precede any
 * update, and tn_zero_after_update waits for every update before the next pass reads. Across machines each
 * machine's chunks would still need the others' (not built). Collective; the reason it did not share in why. */
static void share_machine(tn_zero *z, char *why, size_t cap) {
    const tn_comm_info *in = tn_comm_get_info(z->c);
    snprintf(why, cap, "not asked");
    if (z->stage != 3 || in->n_nodes != 1 || in->size < 2) return;
    const tn_backend *be = z->m->be;
    size_t bytes = be->own_mapping ? be->own_mapping(z->m->slab) : 0; /* 0: refused on every rank alike */
    int rc = tn_comm_share_machine(z->c, z->m->slab, bytes, why, cap);
    if (rc < 0) {
        z->failed = 1;
        snprintf(z->why, sizeof z->why, "%s", tn_errmsg());
    }
    z->shared = rc == 1;
    if (z->shared) z->m->slab_sharers = in->local_size;
}

tn_zero *tn_zero_create(tn_comm *c, tn_model *m, int stage, const tn_shard_layout *layout, int share, char *why,
                        size_t cap) {
    tn_zero *z = tn_xcalloc(1, sizeof *z);
    z->c = c, z->m = m, z->stage = stage, z->layout = layout;
    if (share) share_machine(z, why, cap);
    else snprintf(why, cap, "zero_shared_params: false");
    int own = tn_comm_shard_index(c, tn_comm_get_info(c)->rank);
    z->n_own = tn_shard_layout_spans(layout, own, NULL);
    z->own = tn_xmalloc(((size_t)z->n_own + 1) * sizeof *z->own);
    tn_shard_layout_spans(layout, own, z->own);
    make_pieces(z);
    z->here = tn_xcalloc((size_t)m->L + 2, 1);
    for (int g = -1; g <= m->L; g++) {
        z->here[g + 1] = 1;
        if (stage == 3 && !z->shared) release_group(z, g);
    }
    m->param_hook = on_params;
    m->param_hook_ctx = z;
    return z;
}

void tn_zero_free(tn_zero *z) {
    if (!z) return;
    for (int i = 0; i < z->n_pieces; i++)
        if (z->pieces[i].op) tn_comm_wait(z->pieces[i].op);
    if (z->m->param_hook_ctx == z) z->m->param_hook = NULL, z->m->param_hook_ctx = NULL;
    free(z->pieces), free(z->first), free(z->order), free(z->here), free(z->own), free(z);
}

int tn_zero_stage(const tn_zero *z) { return z->stage; }

int tn_zero_shared(const tn_zero *z) { return z->shared; }

int tn_zero_after_update(tn_zero *z) {
    if (z->shared && tn_comm_barrier(z->c) != 0) /* every rank's chunks updated before anyone reads them */
        return tn_err("waiting for the machine's parameter updates failed: %s", tn_errmsg());
    if (z->stage == 3) return tn_zero_status(z); /* the next pass gathers what it needs */
    collect_sends(z); /* nothing left after tn_zero_clip; start_piece must never overwrite an op in flight */
    for (int g = -1; g <= z->m->L; g++) z->here[g + 1] = z->first[g + 1] == z->first[g + 2];
    /* by offset into their shards: every owner sends at once, each shard's pieces in forward order */
    for (int i = 0; i < z->n_pieces; i++) start_piece(z, &z->pieces[z->order[i]]);
    return tn_zero_status(z);
}

int tn_zero_full(tn_zero *z) {
    if (z->shared) return tn_zero_status(z); /* every parameter is there */
    for (int g = -1; g <= z->m->L; g++) gather(z, g);
    for (int g = -1; g <= z->m->L; g++) wait_group(z, g, 0);
    z->full = 1;
    return tn_zero_status(z);
}

void tn_zero_end_full(tn_zero *z) {
    z->full = 0;
    if (z->stage == 3 && !z->shared)
        for (int g = -1; g <= z->m->L; g++) release_group(z, g);
}

int tn_zero_clip(tn_zero *z, double max_norm, double *norm) {
    if (z->stage < 3) collect_sends(z); /* the update follows */
    if (tn_zero_status(z) != 0) return -1; /* the pass that made these gradients read stale parameters */
    int size = tn_comm_get_info(z->c)->size;
    double mine = tn_grad_sumsq(z->m, z->own, z->n_own), total = 0;
    double *all = tn_xmalloc((size_t)size * sizeof *all);
    /* every rank adds the same numbers in the same order: the same norm, the same clipping everywhere */
    int rc = tn_comm_allgather(z->c, &mine, sizeof mine, all);
    for (int r = 0; r < size && rc == 0; r++) total += all[r];
    free(all);
    if (rc != 0) return tn_err("gradient norm exchange failed: %s", tn_errmsg());
    *norm = sqrt(total);
    if (max_norm > 0) {
        double coef = max_norm / (*norm + 1e-6);
        if (coef < 1.0) tn_grad_scale(z->m, z->own, z->n_own, (float)coef);
    }
    return 0;
}

void tn_zero_resident_bytes(const tn_zero *z, tn_zero_resident *r) {
    const tn_backend *be = z->m->be;
    r->params = tn_model_param_resident(z->m);
    r->grads = be->resident(z->m->grad, z->m->n_trainable);
}

/* Rank r's spans (its shard: malloc'd) and their count. */
static tn_span *spans_of(const tn_zero *z, int r, int *k) {
    int s = tn_comm_shard_index(z->c, r);
    *k = tn_shard_layout_spans(z->layout, s, NULL);
    tn_span *sp = tn_xmalloc(((size_t)*k + 1) * sizeof *sp);
    tn_shard_layout_spans(z->layout, s, sp);
    return sp;
}

int tn_zero_save_moments(tn_zero *z, const tn_adamw *opt, const char *dir) {
    const tn_comm_info *in = tn_comm_get_info(z->c);
    size_t total = z->m->n_trainable;
    float *m = tn_xalloc_floats(opt->n ? opt->n : 1), *v = tn_xalloc_floats(opt->n ? opt->n : 1);
    opt->be->download(m, opt->m, opt->n);
    opt->be->download(v, opt->v, opt->n);
    int rc = 0;
    if (in->rank != 0) {
        rc = tn_comm_send(z->c, m, opt->n * sizeof *m, 0);
        if (rc == 0) rc = tn_comm_send(z->c, v, opt->n * sizeof *v, 0);
    } else {
        rc = tn_checkpoint_write_moments(dir, tn_comm_shard_index(z->c, 0), in->size, total, opt->spans, opt->n_spans,
                                         m, v);
        for (int r = 1; r < in->size; r++) {
            int k;
            tn_span *sp = spans_of(z, r, &k);
            size_t n = tn_span_total(sp, k);
            float *rm = tn_xalloc_floats(n ? n : 1), *rv = tn_xalloc_floats(n ? n : 1);
            int got = tn_comm_recv(z->c, rm, n * sizeof *rm, r) == 0 && tn_comm_recv(z->c, rv, n * sizeof *rv, r) == 0;
            if (!got) rc = tn_err("receiving rank %d's optimizer shard failed: %s", r, tn_errmsg());
            else if (rc == 0) rc = tn_checkpoint_write_moments(dir, tn_comm_shard_index(z->c, r), in->size, total, sp, k, rm, rv);
            free(rm), free(rv), free(sp);
        }
    }
    free(m), free(v);
    return rc;
}

int tn_zero_load_moments(tn_zero *z, tn_adamw *opt, const char *dir) {
    const tn_comm_info *in = tn_comm_get_info(z->c);
    size_t total = z->m->n_trainable;
    if (in->rank != 0) {
        int32_t status = -1;
        if (tn_comm_recv(z->c, &status, sizeof status, 0) != 0) return -1;
        if (status != 0) return tn_err("rank 0 could not read the optimizer shard of rank %d", in->rank);
        float *m = tn_xalloc_floats(opt->n ? opt->n : 1), *v = tn_xalloc_floats(opt->n ? opt->n : 1);
        int rc = tn_comm_recv(z->c, m, opt->n * sizeof *m, 0);
        if (rc == 0) rc = tn_comm_recv(z->c, v, opt->n * sizeof *v, 0);
        if (rc == 0) opt->be->upload(opt->m, m, opt->n), opt->be->upload(opt->v, v, opt->n);
        free(m), free(v);
        return rc;
    }
    int rc = 0;
    for (int r = 1; r < in->size; r++) {
        int k;
        tn_span *sp = spans_of(z, r, &k);
        size_t n = tn_span_total(sp, k);
        float *m = tn_xalloc_floats(n ? n : 1), *v = tn_xalloc_floats(n ? n : 1);
        int32_t status = tn_checkpoint_read_moments(dir, total, sp, k, m, v);
        if (status != 0 && rc == 0) rc = -1; /* tn_err names the file; every rank still gets its status */
        if (tn_comm_send(z->c, &status, sizeof status, r) != 0 ||
            (status == 0 && (tn_comm_send(z->c, m, n * sizeof *m, r) != 0 || tn_comm_send(z->c, v, n * sizeof *v, r) != 0)))
            rc = -1;
        free(m), free(v), free(sp);
    }
    return rc;
}
