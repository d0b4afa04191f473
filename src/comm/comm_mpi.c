/* comm_mpi.c -- the MPI backend: float collectives as ops for the progress thread (shared-memory stage
 * + leader ring for allreduce, ring over all ranks for reduce-scatter / all-gather). */
#include <limits.h>
#include <stdlib.h>

#include "comm/comm_impl.h"
#include "core/core.h"

tn_comm_op *tn_comm_op_new(tn_comm *c, const char *what, size_t floats) {
    tn_comm_op *op = tn_xcalloc(1, sizeof *op);
    op->c = c, op->what = what, op->floats = floats;
    op->seq = c->op_seq++;
    return op;
}

static int noop_step(tn_comm_op *op, int *progressed) {
    (void)op;
    *progressed = 1;
    return 1;
}

static int ring_op_step(tn_comm_op *op, int *progressed) { return tn_ring_step(op->state, progressed); }
static int ring_op_draining(const tn_comm_op *op) { return tn_ring_all_started(op->state); }
static void ring_op_release(tn_comm_op *op) { tn_ring_free(op->state); }

static tn_comm_op *ring_op(tn_comm *c, MPI_Comm comm, int kind, float *buf, size_t n, const size_t *boff,
                           const size_t *blen, const char *what) {
    tn_comm_op *op = tn_comm_op_new(c, what, n);
    tn_ring *r = tn_ring_create(comm, kind, buf, n, boff, blen, c->tune.piece, c->tune.window,
                                (int)(op->seq % TN_COMM_LANES));
    if (!r) {
        free(op);
        return NULL;
    }
    op->state = r, op->step = ring_op_step, op->draining = ring_op_draining, op->release = ring_op_release;
    return op;
}

static int check_buf(const float *buf, size_t n, const char *what) {
    if (n > 0 && !buf) return tn_err("comm: %s of %zu floats got a NULL buffer", what, n);
    return 0;
}

static tn_comm_op *allreduce_op(tn_comm *c, float *buf, size_t n) {
    if (check_buf(buf, n, "allreduce") != 0) return NULL;
    tn_comm_op *op;
    if (c->info.size == 1 || n == 0) {
        op = tn_comm_op_new(c, "allreduce", n);
        op->step = noop_step;
    } else if (c->shm) {
        op = tn_shm_allreduce_op(c, buf, n, 0);
    } else { /* alone on this machine: this rank is its machine's leader */
        op = ring_op(c, c->leaders, TN_RING_AR, buf, n, NULL, NULL, "allreduce");
    }
    return op ? tn_comm_submit(c, op) : NULL;
}

/* Reduce-scatter / all-gather: ring over all ranks machine by machine; block j = slice of the rank at
 * ring position j. */
static int ring_slices(tn_comm *c, int kind, float *buf, size_t n, const char *what) {
    if (check_buf(buf, n, what) != 0) return -1;
    if (c->info.size == 1 || n == 0) return 0;
    int p = c->info.size;
    size_t *boff = tn_xmalloc((size_t)p * sizeof *boff), *blen = tn_xmalloc((size_t)p * sizeof *blen);
    for (int j = 0; j < p; j++) tn_comm_slice(n, p, c->ring_world[j], &boff[j], &blen[j]);
    tn_comm_op *op = ring_op(c, c->ring, kind, buf, n, boff, blen, what);
    free(boff), free(blen);
    if (!op) return -1;
    return tn_comm_op_wait(tn_comm_submit(c, op));
}

static int mpi_allreduce_f32(tn_comm *c, float *buf, size_t n) {
    tn_comm_op *op = allreduce_op(c, buf, n);
    return op ? tn_comm_op_wait(op) : -1;
}

static int mpi_reduce_scatter_f32(tn_comm *c, float *buf, size_t n) {
    return ring_slices(c, TN_RING_RS, buf, n, "reduce-scatter");
}

static int mpi_allgather_f32(tn_comm *c, float *buf, size_t n) {
    return ring_slices(c, TN_RING_AG, buf, n, "all-gather");
}

static int mpi_bcast(tn_comm *c, void *buf, size_t bytes, int root) {
    for (size_t off = 0; off < bytes; off += INT_MAX) {
        int len = bytes - off < INT_MAX ? (int)(bytes - off) : INT_MAX;
        MPI_Request rq;
        int rc = MPI_Ibcast((char *)buf + off, len, MPI_BYTE, root, c->world, &rq);
        if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Ibcast");
        if (tn_comm_mpi_wait(c, &rq, "MPI_Ibcast") != 0) return -1;
    }
    return 0;
}

static void mpi_finalize(tn_comm *c) { (void)c; }

const tn_comm_backend tn_comm_backend_mpi = {
    .name = "mpi",
    .allreduce_f32 = mpi_allreduce_f32,
    .reduce_scatter_f32 = mpi_reduce_scatter_f32,
    .allgather_f32 = mpi_allgather_f32,
    .bcast = mpi_bcast,
    .iallreduce_f32 = allreduce_op,
    .wait = tn_comm_op_wait,
    .wait_all = tn_comm_op_wait_all,
    .finalize = mpi_finalize,
};
