/* comm -- tandem's communication layer: process group, topology (which ranks share a machine) and the
 * collectives data parallelism needs. All data moves through MPI (or NCCL for device buffers); tandem adds
 * the hierarchy, chunking/pipelining and a background progress thread on top of MPI point-to-point.
 *
 * Machine ("node") rule: two ranks are on the same machine when they share an MPI shared-memory domain
 * (MPI_COMM_TYPE_SHARED) AND have the same node name. The node name is $TANDEM_NODE_NAME when set,
 * else the hostname. A launcher sets TANDEM_NODE_NAME per host (scripts/netns/ does, as namespaces share
 * one kernel and may share a hostname); setting it differently per rank fakes several machines on one
 * host (tests do). Node indices follow the lowest world rank on each machine (node of rank 0 is 0).
 *
 * Backends: "mpi" (default; host buffers) or "nccl" (device buffers for the float collectives; host
 * buffers fall back to MPI), chosen by $TANDEM_COMM_BACKEND at tn_comm_init.
 *
 * Float collectives (mpi backend), all run by the progress thread, in submission order:
 *  - allreduce: reduce inside each machine through a shared-memory window (every local rank sums its
 *    sub-slice), a pipelined ring reduce-scatter + all-gather between one leader per machine over MPI
 *    Isend/Irecv (both link directions busy at once), then shared memory again to hand the result out.
 *    Chunks flow through the three stages concurrently, so the network never waits on the copies.
 *  - reduce-scatter / all-gather: pipelined ring over all ranks, ordered machine by machine.
 * The progress thread polls with MPI_Test and short sleeps (never a spinning blocking call), and waiting
 * callers sleep on a condition variable; the small blocking collectives (barrier, bcast, scalars) also
 * poll with sleeps, so a waiting rank leaves its core to the ranks that compute.
 *
 * Settings (environment; rank 0's values apply to all ranks): TANDEM_COMM_BACKEND, TANDEM_COMM_PIECE_KB (ring message size, 32; keep
 * it under Open MPI's TCP eager limit of 64 KB: larger messages need a rendezvous reply that queues behind
 * the peer's own bulk data on the shared TCP connection, which halves a bidirectional exchange),
 * TANDEM_COMM_WINDOW (ring segments in flight, 32), TANDEM_COMM_CHUNK_MB (shared-memory slot, 4),
 * TANDEM_COMM_POLL_US (longest poll sleep, 1000), TANDEM_COMM_BG_POLL_US (longest poll sleep while only a background
 * exchange waits for its peers and no caller waits for it, 20000; comm_progress.c).
 *
 * Thread use: one application thread calls tn_comm_* at a time; MPI runs with MPI_THREAD_MULTIPLE. */
#ifndef TN_COMM_H
#define TN_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef struct tn_comm tn_comm;
typedef struct tn_comm_op tn_comm_op; /* one in-flight non-blocking operation */
typedef struct {
    int rank, size;             /* world */
    int local_rank, local_size; /* ranks on this machine (see the machine rule above) */
    int node, n_nodes;          /* machine index (node of rank 0 is 0), number of machines */
    char host[64];              /* this machine's hostname */
} tn_comm_info;

/* MPI_Init_thread (works as a singleton without mpirun: size 1); argc/argv may be NULL. Collective.
 * NULL + tn_err on failure. */
tn_comm *tn_comm_init(int *argc, char ***argv);
void tn_comm_finalize(tn_comm *c); /* waits for pending ops, then MPI_Finalize; collective */
const tn_comm_info *tn_comm_get_info(const tn_comm *c);
const char *tn_comm_host_of(const tn_comm *c, int rank); /* hostname of any rank (gathered at init) */
const char *tn_comm_backend_name(const tn_comm *c);     /* "mpi" or "nccl" */
void tn_comm_abort(tn_comm *c, int code);                /* MPI_Abort: kills every rank */

/* Blocking collectives on host memory; they do not wait for pending non-blocking ops. 0 or -1 + tn_err. */
int tn_comm_barrier(tn_comm *c);
int tn_comm_bcast(tn_comm *c, void *buf, size_t bytes, int root);
int tn_comm_allgather(tn_comm *c, const void *mine, size_t bytes, void *all /* size*bytes */);
int tn_comm_allreduce_f64(tn_comm *c, double *buf, size_t n); /* sum; small scalars (token counts, losses) */
int tn_comm_allreduce_max_i64(tn_comm *c, int64_t *buf, size_t n);

/* Slice rule of reduce-scatter / all-gather: rank r owns [off, off+len) with len = n/size, plus one for
 * the first n%size ranks; slices are contiguous and in rank order. */
void tn_comm_slice(size_t n, int size, int r, size_t *off, size_t *len);

/* Sum-all-reduce of float buffers on tandem's path (see above). In place. Blocking: */
int tn_comm_allreduce_f32(tn_comm *c, float *buf, size_t n);
/* Afterwards rank r's slice (tn_comm_slice) holds the sum of every rank's slice; the rest of buf is
 * scratch (partial sums). */
int tn_comm_reduce_scatter_f32(tn_comm *c, float *buf, size_t n);
/* Inverse: on entry each rank's own slice is valid; afterwards every rank holds all slices. */
int tn_comm_allgather_f32(tn_comm *c, float *buf, size_t n);

/* ---- sharded data parallelism (ZeRO): a slab of n floats is cut into size contiguous shards; the rank whose
 * shard index is s owns tn_comm_slice(n, size, s). Shard index = local_rank x n_nodes + node when every
 * machine runs the same number of ranks (then the collectives below are hierarchical: a ring inside each
 * machine, then one ring per local rank between machines over 1/local_size of the range each, so every
 * byte crosses the network once per machine and all of a machine's ranks share the sending), else the
 * position in the machine-by-machine ring (one ring over all ranks). The "slab" may be any part of a bigger
 * one: ZeRO's balanced layout (trainer/shard_layout.h) passes each unit as its own slab, so its chunks are
 * this slab's shards. */
int tn_comm_shard_index(const tn_comm *c, int rank);
void tn_comm_shard(const tn_comm *c, size_t n, int rank, size_t *off, size_t *len); /* rank's shard */
/* Non-blocking, on the range [lo, hi) of the n-float slab starting at slab (the rest is not touched):
 * reduce-scatter: afterwards this rank's shard within the range holds the sum over ranks, the rest of the
 *   range is scratch; all-gather: on entry this rank's shard within the range is valid, afterwards the
 *   whole range is on every rank. NULL + tn_err on error. */
tn_comm_op *tn_comm_ireduce_scatter_range(tn_comm *c, float *slab, size_t n, size_t lo, size_t hi);
tn_comm_op *tn_comm_iallgather_range(tn_comm *c, float *slab, size_t n, size_t lo, size_t hi);
/* 1 when op has finished (tn_comm_wait then returns at once), 0 while it runs. */
int tn_comm_test(tn_comm_op *op);
/* Point-to-point of host bytes (e.g. checkpoint shards to the writing rank), polling like every wait. */
int tn_comm_send(tn_comm *c, const void *buf, size_t bytes, int to);
int tn_comm_recv(tn_comm *c, void *buf, size_t bytes, int from);

/* Non-blocking allreduce: returns at once; the progress thread moves it while the caller computes; ops
 * complete in submission order. buf must stay untouched until the op is waited. NULL + tn_err on error.
 * An op may start while the one before it drains: ops on overlapping floats need a wait in between. */
tn_comm_op *tn_comm_iallreduce_f32(tn_comm *c, float *buf, size_t n);
int tn_comm_wait(tn_comm_op *op); /* frees op; 0 or -1 + tn_err */
/* Waits for every op submitted so far and frees them all (their handles become invalid: do not
 * tn_comm_wait them afterwards). 0, or -1 + tn_err when any of them failed. */
int tn_comm_wait_all(tn_comm *c);

/* Reference path for benchmarks: plain in-place MPI_Allreduce (sum) on host memory, Open MPI's own
 * algorithm choice and its spinning wait. */
int tn_comm_allreduce_f32_mpi(tn_comm *c, float *buf, size_t n);

/* Collective over the world (comm_share.c): every machine's ranks come to hold [addr, addr + bytes) as one copy,
 * local rank 0's bytes, mapped at the same place in each of them (addr and bytes whole pages of one private
 * mapping the caller owns, identical on every rank of a machine). 1 shared, 0 not shared on any rank (every rank
 * keeps its own copy: alone on its machine, or a kernel or sandbox refused a step; the reason in why, cap bytes;
 * shared, why says how to get 2 MB pages when the copy sits on 4 KB ones, else it is empty),
 * -1 + tn_err when the collective failed. The caller orders the ranks' writes and reads. */
int tn_comm_share_machine(tn_comm *c, void *addr, size_t bytes, char *why, size_t cap);

/* Cost of the progress thread so far: CPU seconds it used, seconds it had an op in flight, ops created, rounds in
 * which it stepped ops (each a wake-up). Call from the thread that issues the collectives. */
typedef struct {
    double progress_cpu_s, progress_busy_s;
    uint64_t ops, polls;
} tn_comm_stats;
void tn_comm_get_stats(const tn_comm *c, tn_comm_stats *s);

/* From now on every collective op prints one line to stderr as it finishes: its name, size, and when it was
 * queued, first stepped and done, in ms from epoch (a tn_now() value), labelled with step. Call again at every
 * step to move the epoch (an op queued in the step before shows a negative queued time). A diagnostic (bench
 * train --trace): where a step's link time and idle gaps go. Call from the thread that issues the collectives. */
void tn_comm_trace_ops(tn_comm *c, int step, double epoch);

/* ---- accelerator memory (comm_device.c). A compute backend whose tensors live in device memory attaches it; the
 * float collectives, the range collectives and bcast then take device buffers as well: the NCCL backend hands
 * them to NCCL (each collective first waits for the kernels queued on `queue`), the MPI backend stages them
 * through host memory (a blocking collective copies out, runs, copies back; a non-blocking one copies out at
 * once and back in tn_comm_wait / tn_comm_wait_all). */
typedef struct {
    const char *name;                                             /* "cuda" */
    int (*owns)(const void *p);                                   /* p lies in the device's memory */
    void (*to_host)(void *host, const void *dev, size_t bytes);   /* after every kernel queued so far */
    void (*to_device)(void *dev, const void *host, size_t bytes);
    void *queue;                                                  /* the kernels' cudaStream_t (NCCL waits on it) */
    int device;                                                   /* the CUDA device ordinal */
    char bus_id[32]; /* its PCI bus id ("0000:1b:00.0"; "" unknown): which GPU it is, whatever CUDA_VISIBLE_DEVICES */
    void (*written)(void); /* a collective is about to write device memory (NCCL): the backend's caches of it go */
    /* Optional (all four or none), for the MPI staging of non-blocking all-reduces to overlap the kernels still
     * queued: to_host_async queues the copy of [dev, dev + bytes), after every kernel queued so far, into host
     * memory from host_alloc (pinned), without waiting, and returns a token (NULL: copied already); copied(token,
     * wait) is 1 once the bytes have landed (wait: blocks until then) and frees the token when it says 1. Without
     * them each staged all-reduce waits in to_host. Called on the thread that issues the collectives only. */
    void *(*to_host_async)(void *host, const void *dev, size_t bytes);
    int (*copied)(void *token, int wait);
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *host);
} tn_comm_device;
/* Collective, once, before any collective on device memory; dev NULL for a host (CPU) backend. Every rank must
 * attach the same kind (else one line naming the first rank that differs). With a device on every rank and
 * $TANDEM_COMM_BACKEND unset, the NCCL backend takes over when this build has it and no two ranks of a machine
 * share a device (NCCL refuses that; MPI stages instead); *note (may be NULL) gets a line saying which carries
 * device buffers. 0 or -1 + tn_err. */
int tn_comm_attach_device(tn_comm *c, const tn_comm_device *dev, char *note, size_t note_size);

/* ---- notes to rank 0 (comm_notes.c): a few bytes a step that nobody waits for (the job monitor's timings).
 * tn_comm_note_send hands at most TN_COMM_NOTE_MAX bytes to MPI and returns at once: 1 sent, 0 dropped (this
 * rank's earlier notes are all still undelivered: rank 0 is busy), -1 + tn_err. Rank 0 sends none. On rank 0,
 * tn_comm_note_recv takes one note that has arrived, never waiting: its bytes (at most cap; the rest of a longer
 * note is dropped) and *from, or 0 when none has arrived, or -1 + tn_err. Notes of one sender arrive in order. */
#define TN_COMM_NOTE_MAX 256
int tn_comm_note_send(tn_comm *c, const void *buf, size_t bytes);
int tn_comm_note_recv(tn_comm *c, void *buf, size_t cap, int *from);
/* Notes this rank dropped so far. */
uint64_t tn_comm_notes_dropped(const tn_comm *c);

/* Dead-peer detection (comm_watchdog.c). After `seconds` without progress in any wait (0 = off, the
 * default), the waiting rank finds the ranks that do not answer, or whose trainer has not called
 * tn_comm_heartbeat for that long, names them in one error line and aborts the job. tn_comm_busy(c, 1)
 * marks a long local task (a checkpoint write) during which this rank counts as alive. */
void tn_comm_set_peer_timeout(tn_comm *c, double seconds);
void tn_comm_heartbeat(tn_comm *c);
void tn_comm_busy(tn_comm *c, int busy);

#endif
