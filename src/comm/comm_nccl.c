/* comm_nccl.c -- the NCCL backend ($TANDEM_COMM_BACKEND=nccl): float collectives on device buffers run as
 * NCCL calls on one CUDA stream per rank (device = local_rank mod device count); host buffers fall back to
 * the MPI backend, so the same calls work for both. The NCCL unique id is made on rank 0 and broadcast
 * over MPI. A non-blocking op records a CUDA event; the progress thread polls it (cudaEventQuery + the
 * usual backoff) so tn_comm_wait / wait_all and submission order work as with MPI. With a compute backend
 * attached (comm_device.c), NCCL's stream first waits for the kernels queued on the backend's stream, and the range
 * collectives of ZeRO run as NCCL groups. Built with the CUDA backend when the toolkit ships NCCL (TANDEM_NCCL). */
#include "comm/comm_impl.h"
#include "core/core.h"

#ifndef TANDEM_HAVE_NCCL

const tn_comm_backend *tn_comm_nccl_open(tn_comm *c) {
    (void)c;
    tn_err("comm: this tandem was built without NCCL (CMake option TANDEM_NCCL is OFF)");
    return NULL;
}

#else

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t ready; /* recorded on the compute stream: NCCL's stream waits for it (wait_compute) */
    int device;
} nccl_state;

static int cuda_check(cudaError_t e, const char *what) {
    return e == cudaSuccess ? 0 : tn_err("comm (nccl): %s failed: %s", what, cudaGetErrorString(e));
}

static int nccl_check(ncclResult_t r, const char *what) {
    return r == ncclSuccess ? 0 : tn_err("comm (nccl): %s failed: %s", what, ncclGetErrorString(r));
}

static nccl_state *st_of(tn_comm *c) { return c->be_state; }

/* Device (or managed) memory goes to NCCL; anything else to MPI. An attached compute backend knows its memory. */
static int on_device(const tn_comm *c, const void *p) {
    if (c->dev) return p && c->dev->owns(p);
    struct cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky "invalid value" of a plain host pointer */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* Record an event after the work just enqueued and wait on it without spinning (BlockingSync). */
static cudaEvent_t record(nccl_state *s) {
    cudaEvent_t ev = NULL;
    if (cuda_check(cudaEventCreateWithFlags(&ev, cudaEventBlockingSync | cudaEventDisableTiming), "cudaEventCreate") != 0)
        return NULL;
    if (cuda_check(cudaEventRecord(ev, s->stream), "cudaEventRecord") != 0) {
        cudaEventDestroy(ev);
        return NULL;
    }
    return ev;
}

static int sync_stream(nccl_state *s) {
    cudaEvent_t ev = record(s);
    if (!ev) return -1;
    int rc = cuda_check(cudaEventSynchronize(ev), "cudaEventSynchronize");
    cudaEventDestroy(ev);
    return rc;
}

/* The kernels queued on the compute backend's stream so far produce the buffers: NCCL's stream waits for them
 * (without blocking the host). Also makes this thread's device the right one. */
static int wait_compute(tn_comm *c, nccl_state *s) {
    if (c->dev && c->dev->written) c->dev->written(); /* every collective here may write device memory */
    if (cuda_check(cudaSetDevice(s->device), "cudaSetDevice") != 0) return -1;
    if (!c->dev || !c->dev->queue) return 0;
    if (cuda_check(cudaEventRecord(s->ready, (cudaStream_t)c->dev->queue), "cudaEventRecord (compute)") != 0) return -1;
    return cuda_check(cudaStreamWaitEvent(s->stream, s->ready, 0), "cudaStreamWaitEvent");
}

static int nccl_allreduce_enqueue(tn_comm *c, nccl_state *s, float *buf, size_t n) {
    if (wait_compute(c, s) != 0) return -1;
    return nccl_check(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, s->comm, s->stream), "ncclAllReduce");
}

static int nccl_allreduce_f32(tn_comm *c, float *buf, size_t n) {
    if (!on_device(c, buf)) return tn_comm_backend_mpi.allreduce_f32(c, buf, n);
    if (nccl_allreduce_enqueue(c, st_of(c), buf, n) != 0) return -1;
    return sync_stream(st_of(c));
}

/* Uneven slices (n % size != 0) cannot use ncclReduceScatter / ncclAllGather, which need equal counts:
 * a group of per-root reduces / broadcasts moves the same bytes. */
static int nccl_reduce_scatter_f32(tn_comm *c, float *buf, size_t n) {
    if (!on_device(c, buf)) return tn_comm_backend_mpi.reduce_scatter_f32(c, buf, n);
    nccl_state *s = st_of(c);
    int p = c->info.size, me = c->info.rank;
    if (wait_compute(c, s) != 0) return -1;
    if (n % (size_t)p == 0) {
        size_t k = n / (size_t)p;
        if (nccl_check(ncclReduceScatter(buf, buf + (size_t)me * k, k, ncclFloat, ncclSum, s->comm, s->stream),
                       "ncclReduceScatter") != 0)
            return -1;
    } else {
        if (nccl_check(ncclGroupStart(), "ncclGroupStart") != 0) return -1;
        for (int r = 0; r < p; r++) {
            size_t off, len;
            tn_comm_slice(n, p, r, &off, &len);
            if (nccl_check(ncclReduce(buf + off, buf + off, len, ncclFloat, ncclSum, r, s->comm, s->stream),
                           "ncclReduce") != 0) {
                ncclGroupEnd();
                return -1;
            }
        }
        if (nccl_check(ncclGroupEnd(), "ncclGroupEnd") != 0) return -1;
    }
    return sync_stream(s);
}

static int nccl_allgather_f32(tn_comm *c, float *buf, size_t n) {
    if (!on_device(c, buf)) return tn_comm_backend_mpi.allgather_f32(c, buf, n);
    nccl_state *s = st_of(c);
    int p = c->info.size, me = c->info.rank;
    if (wait_compute(c, s) != 0) return -1;
    if (n % (size_t)p == 0) {
        size_t k = n / (size_t)p;
        if (nccl_check(ncclAllGather(buf + (size_t)me * k, buf, k, ncclFloat, s->comm, s->stream), "ncclAllGather") != 0)
            return -1;
    } else {
        if (nccl_check(ncclGroupStart(), "ncclGroupStart") != 0) return -1;
        for (int r = 0; r < p; r++) {
            size_t off, len;
            tn_comm_slice(n, p, r, &off, &len);
            if (nccl_check(ncclBroadcast(buf + off, buf + off, len, ncclFloat, r, s->comm, s->stream), "ncclBroadcast") !=
                0) {
                ncclGroupEnd();
                return -1;
            }
        }
        if (nccl_check(ncclGroupEnd(), "ncclGroupEnd") != 0) return -1;
    }
    return sync_stream(s);
}

static int nccl_bcast(tn_comm *c, void *buf, size_t bytes, int root) {
    if (!on_device(c, buf)) return tn_comm_backend_mpi.bcast(c, buf, bytes, root);
    nccl_state *s = st_of(c);
    if (wait_compute(c, s) != 0) return -1;
    if (nccl_check(ncclBroadcast(buf, buf, bytes, ncclUint8, root, s->comm, s->stream), "ncclBroadcast") != 0) return -1;
    return sync_stream(s);
}

typedef struct {
    cudaEvent_t ev;
    int device;
} event_op;

static int event_step(tn_comm_op *op, int *progressed) {
    event_op *e = op->state;
    (void)progressed;
    if (cuda_check(cudaSetDevice(e->device), "cudaSetDevice") != 0) return -1;
    cudaError_t r = cudaEventQuery(e->ev);
    if (r == cudaErrorNotReady) return 0;
    return cuda_check(r, "cudaEventQuery (nccl allreduce)") == 0 ? 1 : -1;
}

static void event_release(tn_comm_op *op) {
    event_op *e = op->state;
    if (!e) return;
    cudaEventDestroy(e->ev);
    free(e);
}

/* Queue an op that completes when the work just enqueued on NCCL's stream has. */
static tn_comm_op *event_op_submit(tn_comm *c, nccl_state *s, const char *what, size_t floats) {
    cudaEvent_t ev = record(s);
    if (!ev) return NULL;
    event_op *e = tn_xmalloc(sizeof *e);
    e->ev = ev, e->device = s->device;
    tn_comm_op *op = tn_comm_op_new(c, what, floats);
    op->state = e, op->step = event_step, op->release = event_release;
    return tn_comm_submit(c, op);
}

static tn_comm_op *nccl_iallreduce_f32(tn_comm *c, float *buf, size_t n) {
    if (!on_device(c, buf)) return tn_comm_backend_mpi.iallreduce_f32(c, buf, n);
    nccl_state *s = st_of(c);
    if (nccl_allreduce_enqueue(c, s, buf, n) != 0) return NULL;
    return event_op_submit(c, s, "allreduce", n);
}

/* ZeRO's range collectives (comm_shard.c) on device slabs: each rank's shard within [lo, hi) is reduced to that
 * rank (reduce-scatter) or broadcast from it (all-gather), one NCCL group; NCCL picks its own rings and trees. */
static tn_comm_op *nccl_irange(tn_comm *c, int kind, float *slab, size_t n, size_t lo, size_t hi) {
    nccl_state *s = st_of(c);
    if (wait_compute(c, s) != 0) return NULL;
    if (nccl_check(ncclGroupStart(), "ncclGroupStart") != 0) return NULL;
    for (int r = 0; r < c->info.size; r++) {
        size_t off, len;
        tn_comm_shard(c, n, r, &off, &len);
        size_t a = off > lo ? off : lo, b = off + len < hi ? off + len : hi;
        if (b <= a) continue;
        ncclResult_t res = kind == TN_RING_RS
                               ? ncclReduce(slab + a, slab + a, b - a, ncclFloat, ncclSum, r, s->comm, s->stream)
                               : ncclBroadcast(slab + a, slab + a, b - a, ncclFloat, r, s->comm, s->stream);
        if (nccl_check(res, kind == TN_RING_RS ? "ncclReduce (reduce-scatter)" : "ncclBroadcast (all-gather)") != 0) {
            ncclGroupEnd();
            return NULL;
        }
    }
    if (nccl_check(ncclGroupEnd(), "ncclGroupEnd") != 0) return NULL;
    return event_op_submit(c, s, kind == TN_RING_RS ? "reduce-scatter" : "all-gather", hi - lo);
}

static void nccl_finalize(tn_comm *c) {
    nccl_state *s = st_of(c);
    if (!s) return;
    cudaSetDevice(s->device);
    cudaStreamSynchronize(s->stream);
    ncclCommDestroy(s->comm);
    cudaEventDestroy(s->ready);
    cudaStreamDestroy(s->stream);
    free(s);
    c->be_state = NULL;
}

static const tn_comm_backend backend_nccl = {
    .name = "nccl",
    .allreduce_f32 = nccl_allreduce_f32,
    .reduce_scatter_f32 = nccl_reduce_scatter_f32,
    .allgather_f32 = nccl_allgather_f32,
    .bcast = nccl_bcast,
    .iallreduce_f32 = nccl_iallreduce_f32,
    .irange = nccl_irange,
    .device_buffers = 1,
    .wait = tn_comm_op_wait,
    .wait_all = tn_comm_op_wait_all,
    .finalize = nccl_finalize,
};

/* Collective. Every rank reports whether its CUDA setup worked before anyone enters ncclCommInitRank, so
 * one rank without a device fails all of them instead of leaving the others waiting. */
const tn_comm_backend *tn_comm_nccl_open(tn_comm *c) {
    int ndev = 0, ok = 1;
    nccl_state *s = tn_xcalloc(1, sizeof *s);
    struct {
        int ok;
        ncclUniqueId id;
    } root = {1, {{0}}};
    if (cuda_check(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount") != 0) {
        ok = 0;
    } else if (ndev <= 0) {
        ok = tn_err("comm (nccl): no CUDA device on %s", c->info.host) + 1;
    } else {
        s->device = c->dev ? c->dev->device : c->info.local_rank % ndev; /* the compute backend's, once attached */
        ok = cuda_check(cudaSetDevice(s->device), "cudaSetDevice") == 0 &&
             (c->info.rank != 0 || nccl_check(ncclGetUniqueId(&root.id), "ncclGetUniqueId") == 0);
    }
    char why[256];
    snprintf(why, sizeof why, "%s", ok ? "" : tn_errmsg());
    MPI_Request rq[2];
    int all_ok = ok;
    root.ok = ok;
    int rc = MPI_Ibcast(&root, (int)sizeof root, MPI_BYTE, 0, c->world, &rq[0]);
    if (rc == MPI_SUCCESS) rc = MPI_Iallreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, c->world, &rq[1]);
    if (rc != MPI_SUCCESS) {
        tn_comm_mpi_err(rc, "MPI_Ibcast (NCCL id)");
        free(s);
        return NULL;
    }
    if (tn_comm_mpi_wait(c, &rq[0], "MPI_Ibcast (NCCL id)") != 0 || tn_comm_mpi_wait(c, &rq[1], "MPI_Iallreduce") != 0) {
        free(s);
        return NULL;
    }
    if (!all_ok) {
        if (ok) tn_err("comm (nccl): CUDA/NCCL setup failed on another rank");
        else tn_err("%s", why);
        free(s);
        return NULL;
    }
    if (nccl_check(ncclCommInitRank(&s->comm, c->info.size, root.id, c->info.rank), "ncclCommInitRank") != 0) {
        free(s);
        return NULL;
    }
    if (cuda_check(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreate") != 0) {
        ncclCommDestroy(s->comm);
        free(s);
        return NULL;
    }
    if (cuda_check(cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming), "cudaEventCreate") != 0) {
        ncclCommDestroy(s->comm);
        cudaStreamDestroy(s->stream);
        free(s);
        return NULL;
    }
    c->be_state = s;
    return &backend_nccl;
}

#endif
