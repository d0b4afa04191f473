/* comm_shard.c -- the shard layout of sharded data parallelism (ZeRO) and its two collectives on a range
 * of a slab: reduce-scatter (gradients) and all-gather (parameters), as ops for the progress thread.
 *
 * Hierarchy (machines with equal rank counts L, M machines): shard index s = local_rank x M + node, so the
 * shards of local rank i on every machine, s = iM .. iM + M-1, are adjacent and form "local block" i.
 *   reduce-scatter: ring inside the machine over the L local blocks (local rank i gets the machine's sum of
 *                   block i), then ring between machines on the rail of local rank i over block i's M
 *                   shards (node m gets the global sum of shard iM + m: its own).
 *   all-gather:     the reverse (rails first, then inside the machine).
 * Only the rail rings cross the network: (M-1)/M of the range leaves each machine in all, split over its L
 * ranks, the minimum any algorithm can send. Machines with unequal rank counts use one ring over all ranks,
 * machine by machine, with shard index = ring position. Both rings are comm_ring.c's pipelined engine. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/core.h"

void tn_comm_shard_layout(tn_comm *c, const int *node_of, const int *lrank, const int *lsize) {
    int size = c->info.size, M = c->info.n_nodes;
    c->uniform = 1;
    for (int nd = 1; nd < M; nd++) c->uniform &= lsize[nd] == lsize[0];
    c->shard_of = tn_xmalloc((size_t)size * sizeof *c->shard_of);
    for (int k = 0; k < size; k++) {
        int r = c->ring_world[k];
        c->shard_of[r] = c->uniform ? lrank[r] * M + node_of[r] : k;
    }
}

int tn_comm_shard_index(const tn_comm *c, int rank) {
    return rank >= 0 && rank < c->info.size ? c->shard_of[rank] : -1;
}

void tn_comm_shard(const tn_comm *c, size_t n, int rank, size_t *off, size_t *len) {
    tn_comm_slice(n, c->info.size, tn_comm_shard_index(c, rank), off, len);
}

/* Shards s0 .. s1 (adjacent, so one contiguous span) intersected with [lo, hi): offset (from the slab start)
 * and length; empty -> len 0. */
static void span(const tn_comm *c, size_t n, size_t lo, size_t hi, int s0, int s1, size_t *off, size_t *len) {
    size_t o0, l0, o1, l1;
    tn_comm_slice(n, c->info.size, s0, &o0, &l0);
    tn_comm_slice(n, c->info.size, s1, &o1, &l1);
    size_t a = o0 > lo ? o0 : lo, b = o1 + l1 < hi ? o1 + l1 : hi;
    *off = a, *len = b > a ? b - a : 0;
}

typedef struct {
    tn_comm *c;
    float *slab;
    int kind, lane, phase;  /* phase 0 then 1; a NULL ring is an empty phase */
    tn_ring *ring[2];
} range_op;

/* The ring of one phase, blocks by ring position. what: 'L' local blocks, 'R' this rank's rail, 'F' all
 * ranks. *out stays NULL when the phase has one member (nothing to move). 0, or -1 + tn_err. */
static int phase_ring(range_op *o, size_t n, size_t lo, size_t hi, char what, tn_ring **out) {
    tn_comm *c = o->c;
    int M = c->info.n_nodes, me = c->info.local_rank;
    MPI_Comm comm = what == 'L' ? c->local : what == 'R' ? c->rail : c->ring;
    int p = what == 'L' ? c->info.local_size : what == 'R' ? M : c->info.size;
    *out = NULL;
    if (p == 1) return 0;
    size_t *boff = tn_xmalloc((size_t)p * sizeof *boff), *blen = tn_xmalloc((size_t)p * sizeof *blen);
    for (int j = 0; j < p; j++) {
        int s0 = what == 'L' ? j * M : what == 'R' ? me * M + j : j, s1 = what == 'L' ? s0 + M - 1 : s0;
        span(c, n, lo, hi, s0, s1, &boff[j], &blen[j]);
    }
    *out = tn_ring_create(comm, o->kind, o->slab, n, boff, blen, c->tune.piece, c->tune.window, o->lane);
    free(boff), free(blen);
    return *out ? 0 : -1;
}

static int range_step(tn_comm_op *op, int *progressed) {
    range_op *o = op->state;
    for (; o->phase < 2; o->phase++) {
        tn_ring *r = o->ring[o->phase];
        if (!r) continue;
        int rc = tn_ring_step(r, progressed);
        if (rc <= 0) return rc;
    }
    return 1;
}

/* Only the last phase's drain is left: the next op may start (its rings use another tag lane). */
static int range_draining(const tn_comm_op *op) {
    const range_op *o = op->state;
    if (o->phase == 0 && o->ring[0] && o->ring[1]) return 0;
    tn_ring *last = o->ring[1] ? o->ring[1] : o->ring[0];
    return !last || tn_ring_all_started(last);
}

static void range_release(tn_comm_op *op) {
    range_op *o = op->state;
    if (!o) return;
    tn_ring_free(o->ring[0]);
    tn_ring_free(o->ring[1]);
    free(o);
}

/* The shards [lo, hi) touches, as tn_comm_op.shards: such ops wait only for earlier ops on the same shards. */
static uint64_t shards_of(const tn_comm *c, size_t n, size_t lo, size_t hi) {
    uint64_t bits = 0;
    for (int s = 0; s < c->info.size; s++) {
        size_t off, len;
        tn_comm_slice(n, c->info.size, s, &off, &len);
        if (off < hi && lo < off + len) bits |= 1ull << (s % 64);
    }
    return bits;
}

static tn_comm_op *range_collective(tn_comm *c, int kind, float *slab, size_t n, size_t lo, size_t hi,
                                    const char *what) {
    if (lo > hi || hi > n) {
        tn_err("comm: %s of [%zu, %zu) outside a slab of %zu floats", what, lo, hi, n);
        return NULL;
    }
    if (hi > lo && !slab) {
        tn_err("comm: %s got a NULL slab", what);
        return NULL;
    }
    tn_comm_op *op = tn_comm_op_new(c, what, hi - lo);
    range_op *o = tn_xcalloc(1, sizeof *o);
    o->c = c, o->slab = slab, o->kind = kind, o->lane = (int)(op->seq % TN_COMM_LANES);
    op->shards = shards_of(c, n, lo, hi);
    /* reduce-scatter: inside the machine first; all-gather: between machines first */
    char first = !c->uniform ? 'F' : kind == TN_RING_RS ? 'L' : 'R';
    char second = !c->uniform ? 0 : kind == TN_RING_RS ? 'R' : 'L';
    int bad = c->info.size > 1 && hi > lo &&
              (phase_ring(o, n, lo, hi, first, &o->ring[0]) != 0 ||
               (second && phase_ring(o, n, lo, hi, second, &o->ring[1]) != 0));
    op->state = o, op->step = range_step, op->draining = range_draining, op->release = range_release;
    if (bad) {
        range_release(op);
        free(op);
        return NULL;
    }
    return tn_comm_submit(c, op);
}

tn_comm_op *tn_comm_mpi_range(tn_comm *c, int kind, float *slab, size_t n, size_t lo, size_t hi) {
    return range_collective(c, kind, slab, n, lo, hi, kind == TN_RING_RS ? "reduce-scatter" : "all-gather");
}

/* Device slabs go to the backend (NCCL) or through host copies (MPI); host slabs to the MPI rings. */
static tn_comm_op *range_dispatch(tn_comm *c, int kind, float *slab, size_t n, size_t lo, size_t hi) {
    if (c->dev && c->be->irange && c->dev->owns(slab)) {
        if (lo > hi || hi > n) {
            tn_err("comm: range collective of [%zu, %zu) outside a slab of %zu floats", lo, hi, n);
            return NULL;
        }
        return c->be->irange(c, kind, slab, n, lo, hi);
    }
    if (tn_comm_staging(c, slab)) return tn_comm_staged_range(c, kind, slab, n, lo, hi);
    return tn_comm_mpi_range(c, kind, slab, n, lo, hi);
}

tn_comm_op *tn_comm_ireduce_scatter_range(tn_comm *c, float *slab, size_t n, size_t lo, size_t hi) {
    return range_dispatch(c, TN_RING_RS, slab, n, lo, hi);
}

tn_comm_op *tn_comm_iallgather_range(tn_comm *c, float *slab, size_t n, size_t lo, size_t hi) {
    return range_dispatch(c, TN_RING_AG, slab, n, lo, hi);
}
