/* comm_impl -- internals shared by the comm layer's files: the tn_comm object, the backend vtable, the op
 * queue run by the progress thread, the pipelined ring engine and the shared-memory stage. Not for use
 * outside src/comm and src/cli/cmd_bench_allreduce.c. */
#ifndef TN_COMM_IMPL_H
#define TN_COMM_IMPL_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "comm/comm.h"

/* A backend provides the float collectives; the small host-memory collectives always use MPI. */
typedef struct {
    const char *name;
    int (*allreduce_f32)(tn_comm *c, float *buf, size_t n);
    int (*reduce_scatter_f32)(tn_comm *c, float *buf, size_t n);
    int (*allgather_f32)(tn_comm *c, float *buf, size_t n);
    int (*bcast)(tn_comm *c, void *buf, size_t bytes, int root);
    tn_comm_op *(*iallreduce_f32)(tn_comm *c, float *buf, size_t n);
    /* Range collectives of comm_shard.c on device memory (NULL: the backend has none; TN_RING_RS or TN_RING_AG) */
    tn_comm_op *(*irange)(tn_comm *c, int kind, float *slab, size_t n, size_t lo, size_t hi);
    int device_buffers;           /* takes device memory as it is (else comm_device.c stages it) */
    int (*wait)(tn_comm_op *op);
    int (*wait_all)(tn_comm *c);
    void (*finalize)(tn_comm *c); /* releases the backend's state (before MPI_Finalize) */
} tn_comm_backend;

extern const tn_comm_backend tn_comm_backend_mpi;
/* NULL + tn_err when tandem was built without NCCL or no GPU/NCCL can be set up. */
const tn_comm_backend *tn_comm_nccl_open(tn_comm *c);

/* Tuning shared by every rank (rank 0's values are broadcast at init). */
typedef struct {
    size_t piece;        /* floats per ring message (pipelining grain) */
    int window;          /* ring segments in flight at once */
    size_t chunk;        /* floats per shared-memory slot (multiple of piece * n_nodes) */
    int poll_max_us;     /* longest sleep between polls */
    int bg_poll_max_us;  /* the same while only background ops wait for their peers (comm_progress.c) */
} tn_comm_tuning;

typedef struct tn_shm tn_shm;   /* comm_shm.c */

#define TN_NOTES_IN_FLIGHT 16    /* a rank's notes sent and not yet delivered (comm_notes.c) */

struct tn_comm {
    tn_comm_info info;
    char (*hosts)[64];           /* hostname of every rank */
    MPI_Comm world;              /* dup of MPI_COMM_WORLD (or the joined nodes): small collectives, caller's thread */
    MPI_Comm local;              /* ranks of this machine, by world rank */
    MPI_Comm leaders;            /* local rank 0 of every machine, by node index; MPI_COMM_NULL elsewhere */
    MPI_Comm ring;               /* all ranks, machine by machine (reduce-scatter / all-gather) */
    int *ring_world;             /* world rank at each position of `ring` */
    MPI_Comm rail;               /* the ranks with this local rank, one per machine, by node (uniform machines) */
    MPI_Comm bg_local, bg_rail;  /* dups of local and rail for background ops (their own tag space) */
    int uniform;                 /* every machine has the same number of ranks */
    int *shard_of;               /* shard index of each world rank (comm.h: tn_comm_shard) */
    tn_comm_tuning tune;
    tn_shm *shm;                 /* NULL when alone on the machine */
    const tn_comm_backend *be;
    int be_explicit;             /* $TANDEM_COMM_BACKEND named it */
    void *be_state;              /* backend-private (NCCL) */
    const tn_comm_device *dev;   /* attached accelerator memory (comm_device.c), NULL: host memory only */
    tn_comm_device dev_copy;
    struct tn_staged *staged;    /* MPI ops on host copies of device buffers, copied back at wait (comm_device.c) */
    struct tn_mirror *mirrors;   /* host copies of device slabs for the range collectives */
    struct tn_pinned *pinned;    /* pinned host buffers of finished async stagings, kept for the next ones */
    int gate_next;               /* the next op tn_comm_submit queues starts gated (set around one call only) */
    int mpi_owned;               /* we called MPI_Init */

    /* op queue, run in order by the progress thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* op finished / op queued / stop */
    tn_comm_op *head, *tail;     /* every op not yet freed, in submission order */
    tn_comm_op *cur;             /* first op not finished (NULL: idle) */
    tn_comm_op *bg;              /* background ops not finished, stepped alongside the queue (exchange.h) */
    uint64_t bg_seq;             /* background ops created: their ring lane is bg_seq mod TN_COMM_LANES */
    int stop, thread_started;
    int waiting;                 /* callers blocked in tn_comm_op_wait / _wait_all: the progress thread polls fast */
    uint64_t polls;              /* rounds of the progress thread that stepped ops (tn_comm_stats.polls) */
    pthread_t thread;
    uint64_t op_seq;             /* ops created, on the caller's thread (same order on every rank) */
    double busy_s, busy_since;
    int trace_ops;               /* under mu: log every op as it finishes (tn_comm_trace_ops) */
    int trace_step;
    double trace_epoch;

    /* watchdog (comm_watchdog.c) */
    MPI_Comm wd_comm;            /* pings and answers */
    pthread_mutex_t wd_mu;
    _Atomic double wd_timeout;   /* seconds; 0 = off. Set by the trainer's thread, read by the progress thread */
    double wd_beat;              /* last tn_comm_heartbeat */
    int wd_busy;
    MPI_Request *wd_sends;       /* answers in flight */
    void *wd_pongs;
    int wd_n_sends;

    /* notes to rank 0 (comm_notes.c) */
    MPI_Comm notes;              /* their own communicator: they never match another message */
    MPI_Request note_rq[TN_NOTES_IN_FLIGHT];
    unsigned char note_buf[TN_NOTES_IN_FLIGHT][TN_COMM_NOTE_MAX];
    uint64_t notes_dropped;
};

/* Ops that may be in progress at once. A gradient bucket's all-reduce ends with a drain (its last segments
 * cross the link and come back) during which the link would idle; the next bucket's op starts meanwhile.
 * Range collectives on different shards run side by side (tn_comm_op.shards), so there can be more of them.
 * Op number k uses message-tag lane k mod TN_COMM_LANES, so ops in progress together never share tags. */
#define TN_COMM_LANES 16

/* An op: the progress thread calls step() until it returns 1 (done) or -1 (failed, err filled). While
 * draining(op) is true (the op has handed all its work on and only waits for it to finish), the next op
 * is stepped too; ops without draining() run strictly one after the other. An op that names the shards its
 * data belongs to (bit s mod 64 for shard index s; 0 = every shard) waits only for earlier ops that share
 * one: with contiguous shards a range collective's bytes flow towards (reduce-scatter) or away from
 * (all-gather) the owners of its range, so on two ranks a range inside one shard uses one direction of the
 * link and a range of the other shard, run beside it, the other direction. */
struct tn_comm_op {
    tn_comm *c;
    tn_comm_op *next;
    uint64_t seq;                       /* submission number: lane = seq mod TN_COMM_LANES */
    uint64_t shards;                    /* see above; 0: ordered after every earlier op */
    int (*step)(tn_comm_op *op, int *progressed);
    int (*draining)(const tn_comm_op *op);
    void (*release)(tn_comm_op *op);   /* frees the op-specific state */
    void *state;
    int done, failed;                   /* under c->mu */
    int gated;                          /* under c->mu: not stepped until its staged copy out of device memory has
                                         * landed (comm_device.c); later ops on its shards wait behind it */
    int background;                     /* not in the queue: stepped whatever the queue does */
    int one_piece;                      /* background: each of its messages is one ring piece, sent whole at once,
                                         * so no flow needs polling to keep moving (comm_progress.c) */
    const char *what;                   /* its name in the op trace (tn_comm_trace_ops) */
    size_t floats;                      /* the floats it reduces or gathers (the trace's size) */
    double t_queued, t_started;         /* tn_now() at submission and at its first step */
    char err[256];
};

/* comm_log.c: NCCL_DEBUG=INFO's communication log (silent otherwise) */
int tn_comm_log_on(void);
void tn_comm_log_machines(const tn_comm *c, const int *node_of); /* rank 0: each machine's ranks */
void tn_comm_log_init(const tn_comm *c);                         /* this rank's place; rank 0: tuning */
void tn_comm_log_finalize(tn_comm *c);

/* comm_progress.c */
int tn_comm_progress_start(tn_comm *c);
void tn_comm_progress_stop(tn_comm *c);
tn_comm_op *tn_comm_submit(tn_comm *c, tn_comm_op *op); /* queues op (allocated by the caller) */
/* The queued ops to step now, from first (the oldest unfinished) on, into run[TN_COMM_LANES]: an op runs when
 * every earlier unfinished op that shares a shard with it runs and drains (ops without shards share every
 * shard: one after the other), all within TN_COMM_LANES submission numbers of first, so their tags differ. */
int tn_comm_pick(tn_comm_op *first, tn_comm_op **run);
/* Runs op outside the queue: the progress thread steps it together with whatever the queue runs, so queued
 * ops never wait for it (at most TN_COMM_LANES at once; they must use bg_local / bg_rail). Waited and freed
 * by its owner with tn_comm_wait; tn_comm_wait_all waits for it to finish but does not free it. */
tn_comm_op *tn_comm_submit_background(tn_comm *c, tn_comm_op *op);
int tn_comm_op_wait(tn_comm_op *op);
int tn_comm_op_wait_all(tn_comm *c);
/* Wait for an MPI request from the caller's thread without spinning (MPI_Test + backoff sleeps). */
int tn_comm_mpi_wait(tn_comm *c, MPI_Request *rq, const char *what);
/* One idle poll: re-poll at once for the first few, then sleep *us microseconds, doubling up to max_us.
 * Start (and restart after progress) from TN_BACKOFF_START. */
#define TN_BACKOFF_START (-8)
void tn_comm_backoff(int *us, int max_us);
int tn_comm_mpi_err(int rc, const char *what); /* tn_err with MPI's error string; returns -1 */

/* comm_ring.c -- pipelined ring on `comm` (position = rank in comm). Segments move through the ring
 * independently, `window` of them at a time, each as p-1 reduce-scatter and/or p-1 all-gather steps
 * with one Isend + one Irecv per step. */
enum { TN_RING_RS = 1, TN_RING_AG = 2, TN_RING_AR = 3 };
typedef struct tn_ring tn_ring;
/* AR: contiguous segments of piece*p floats, each cut into p blocks by tn_comm_slice.
 * RS/AG: block j is the span [boff[j], boff[j]+blen[j]) of position j; segment s is piece s of every
 * block. buf is worked on in place. */
tn_ring *tn_ring_create(MPI_Comm comm, int kind, float *buf, size_t n, const size_t *boff, const size_t *blen,
                        size_t piece, int window, int lane);
void tn_ring_free(tn_ring *r);
size_t tn_ring_segments(const tn_ring *r);
size_t tn_ring_segment_floats(const tn_ring *r); /* AR: floats per segment */
void tn_ring_set_ready(tn_ring *r, size_t segs);  /* segments [0, segs) may start (default: all) */
size_t tn_ring_done(const tn_ring *r);            /* segments [0, done) are finished */
int tn_ring_all_started(const tn_ring *r);        /* every segment has started: only the drain is left */
/* Advance without blocking: 1 finished, 0 not yet, -1 failed (tn_err set). *progressed |= 1 on change. */
int tn_ring_step(tn_ring *r, int *progressed);

/* comm_shm.c -- the machine-local shared window and the hierarchical allreduce op. */
int tn_shm_create(tn_comm *c);
void tn_shm_free(tn_comm *c);
/* local_only: the machine's sum only (no ring between machines). */
tn_comm_op *tn_shm_allreduce_op(tn_comm *c, float *buf, size_t n, int local_only);

/* comm_shard.c -- the shard layout (indices, set at discovery) */
void tn_comm_shard_layout(tn_comm *c, const int *node_of, const int *lrank, const int *lsize);

/* comm_watchdog.c */
int tn_watchdog_init(tn_comm *c);
void tn_watchdog_free(tn_comm *c);
/* comm_notes.c (collective) */
int tn_notes_init(tn_comm *c);
void tn_notes_free(tn_comm *c);
void tn_watchdog_answer(tn_comm *c);
/* Call while waiting: after peer_timeout without progress since *stalled_since, finds and names the ranks
 * that do not answer (or are hung) and aborts the job; when all answer, resets *stalled_since. */
void tn_watchdog_check(tn_comm *c, double *stalled_since, const char *what);

/* comm_join.c -- *world = a dup of MPI_COMM_WORLD, or, under the per-node launch ($TANDEM_JOIN_SERVICE), the
 * world joined from every node's local job. 0 or -1 + tn_err. */
int tn_comm_join_world(MPI_Comm *world);

/* comm_mpi.c */
tn_comm_op *tn_comm_op_new(tn_comm *c, const char *what, size_t floats); /* what: a string literal */

/* comm_shard.c: the range collectives on host memory (MPI rings) */
tn_comm_op *tn_comm_mpi_range(tn_comm *c, int kind, float *slab, size_t n, size_t lo, size_t hi);

/* comm_device.c: device buffers (see tn_comm_attach_device). tn_comm_staging(c, p) is 1 when p is device memory
 * that the backend cannot take (then the tn_comm_staged_* calls carry it); the wait hooks copy staged results back
 * (op: the op about to be waited, or NULL after a wait_all). */
int tn_comm_staging(const tn_comm *c, const void *p);
int tn_comm_staged_blocking(tn_comm *c, int what, void *buf, size_t bytes, int root);
tn_comm_op *tn_comm_staged_iallreduce(tn_comm *c, float *buf, size_t n);
tn_comm_op *tn_comm_staged_range(tn_comm *c, int kind, float *slab, size_t n, size_t lo, size_t hi);
/* The ops that run on host memory whatever the backend (exchange.h: the machine-level exchange, the machine-local
 * sum): tn_comm_stage_out returns a host copy of buf when it is device memory (NULL: buf is host memory), and
 * tn_comm_stage_track hands the op that runs on that copy to the wait hooks (which copy it back and free it). */
float *tn_comm_stage_out(tn_comm *c, const float *buf, size_t n);
tn_comm_op *tn_comm_stage_track(tn_comm *c, tn_comm_op *op, float *dev, float *host, size_t n);
struct tn_staged *tn_comm_staged_take(tn_comm *c, const tn_comm_op *op);
int tn_comm_staged_finish(tn_comm *c, struct tn_staged *s, int rc);
int tn_comm_staged_finish_all(tn_comm *c, int rc);
/* The gated ops whose copies out have landed are released to the progress thread (wait: blocks until every copy
 * has landed). Called by the issuing thread: before it issues an op (no wait) and before it waits (wait). */
void tn_comm_staged_poll(tn_comm *c, int wait);
void tn_comm_device_free(tn_comm *c);
/* What each rank computes on (gathered by tn_comm_attach_device), and the first rank that shares its machine's GPU
 * with a lower rank (-1: none). A GPU is its PCI bus id where both ranks know it: with CUDA_VISIBLE_DEVICES set per
 * rank, as schedulers do, every rank's device ordinal is 0, yet the GPUs differ. */
typedef struct {
    int32_t has, device, node;
    char bus[32];
} tn_comm_dev_id;
int tn_comm_first_shared_device(const tn_comm_dev_id *all, int size);
enum { TN_STAGE_ALLREDUCE, TN_STAGE_REDUCE_SCATTER, TN_STAGE_ALLGATHER, TN_STAGE_BCAST };

#endif
