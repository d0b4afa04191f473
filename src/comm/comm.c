/* comm.c -- process group setup (MPI init, machine topology, communicators, tuning), the small host-memory
 * collectives, and dispatch of the float collectives to the backend. See comm.h. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_impl.h"
#include "core/core.h"

/* Sanitizer builds: Open MPI keeps allocations alive until exit by design, from plugins it unloads at
 * MPI_Finalize. Full (slow) unwinding puts libmpi/ORTE frames in each leak's stack, which the
 * suppressions below then match; only binaries that use the comm layer link this file. */
#if defined(__SANITIZE_ADDRESS__)
#define TN_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TN_LSAN 1
#endif
#endif
#ifdef TN_LSAN
const char *__asan_default_options(void);
const char *__lsan_default_options(void);
const char *__lsan_default_suppressions(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }
const char *__lsan_default_options(void) { return "print_suppressions=0"; }
const char *__lsan_default_suppressions(void) {
    return "leak:libmpi.so\nleak:libopen-pal.so\nleak:libopen-rte.so\nleak:libpmix.so\nleak:libhwloc.so\n"
           "leak:libevent\nleak:mca_\nleak:libfontconfig.so\n"; /* cairo's fonts: see loss_plot.c */
}
#endif

void tn_comm_slice(size_t n, int size, int r, size_t *off, size_t *len) {
    size_t q = n / (size_t)size, extra = n % (size_t)size, rr = (size_t)r;
    *len = q + (rr < extra);
    *off = rr * q + (rr < extra ? rr : extra);
}

/* Positive integer from the environment, or the default; -1 + tn_err when set but not in [lo, hi]. */
static int env_int(const char *name, long dflt, long lo, long hi, long *out) {
    const char *s = getenv(name);
    if (!s || !*s) {
        *out = dflt;
        return 0;
    }
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi)
        return tn_err("comm: $%s='%s' is not an integer in [%ld, %ld]", name, s, lo, hi);
    *out = v;
    return 0;
}

/* $TANDEM_COMM_BACKEND: 0 not set (mpi, or nccl once a device is attached: comm_device.c), 1 nccl, 2 mpi. */
static int env_backend(long *out) {
    const char *be = getenv("TANDEM_COMM_BACKEND");
    if (!be || !*be) *out = 0;
    else if (strcmp(be, "mpi") == 0) *out = 2;
    else if (strcmp(be, "nccl") == 0) *out = 1;
    else return tn_err("comm: $TANDEM_COMM_BACKEND='%s' is not known (expected mpi or nccl)", be);
    return 0;
}

/* Every rank must pick the same backend and cut buffers the same way: rank 0 reads the settings and
 * broadcasts them (launchers need not forward the environment to every machine). */
static int read_settings(tn_comm *c, long *backend) {
    long piece_kb = 32, window = 32, chunk_mb = 4, poll_us = 1000, bg_poll_us = 20000;
    *backend = 0;
    int bad = c->info.rank == 0 && (env_int("TANDEM_COMM_PIECE_KB", 32, 1, 1 << 20, &piece_kb) != 0 ||
                                    env_int("TANDEM_COMM_WINDOW", 32, 1, 1024, &window) != 0 ||
                                    env_int("TANDEM_COMM_CHUNK_MB", 4, 1, 1024, &chunk_mb) != 0 ||
                                    env_int("TANDEM_COMM_POLL_US", 1000, 10, 100000, &poll_us) != 0 ||
                                    env_int("TANDEM_COMM_BG_POLL_US", 20000, 10, 1000000, &bg_poll_us) != 0 ||
                                    env_backend(backend) != 0);
    struct {
        int64_t v[7];
        char err[200]; /* rank 0's verdict, so that every rank reports the same line */
    } msg = {{bad, piece_kb, window, chunk_mb, poll_us, *backend, bg_poll_us}, ""};
    if (bad) snprintf(msg.err, sizeof msg.err, "%s", tn_errmsg());
    MPI_Request rq;
    int rc = MPI_Ibcast(&msg, (int)sizeof msg, MPI_BYTE, 0, c->world, &rq);
    if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Ibcast (tuning)");
    if (tn_comm_mpi_wait(c, &rq, "MPI_Ibcast (tuning)") != 0) return -1;
    if (msg.v[0]) return tn_err("%s", msg.err);
    int64_t *v = msg.v + 1;
    *backend = (long)v[4];
    c->tune.piece = (size_t)v[0] * 1024 / sizeof(float);
    c->tune.window = (int)v[1];
    c->tune.poll_max_us = (int)v[3];
    c->tune.bg_poll_max_us = (int)v[5];
    size_t seg = c->tune.piece * (size_t)c->info.n_nodes, chunk = (size_t)v[2] << 20 >> 2;
    c->tune.chunk = (chunk + seg - 1) / seg * seg; /* whole ring segments per shared-memory slot */
    return 0;
}

typedef struct {
    char host[64], node[64];
    int shm_root, bad_name;
} rank_id;

/* Machine topology: see the rule in comm.h. */
static int discover(tn_comm *c) {
    int rank = c->info.rank, size = c->info.size, rc;
    rank_id me;
    memset(&me, 0, sizeof me);
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "unknown");
    const char *node = getenv("TANDEM_NODE_NAME");
    me.bad_name = node && strlen(node) >= sizeof me.node; /* reported by every rank after the gather */
    snprintf(me.node, sizeof me.node, "%.63s", node && *node ? node : me.host);
    MPI_Comm shm;
    if ((rc = MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shm)) != MPI_SUCCESS)
        return tn_comm_mpi_err(rc, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    MPI_Request rq;
    me.shm_root = rank;
    rc = MPI_Iallreduce(MPI_IN_PLACE, &me.shm_root, 1, MPI_INT, MPI_MIN, shm, &rq);
    if (rc != MPI_SUCCESS || tn_comm_mpi_wait(c, &rq, "MPI_Iallreduce (topology)") != 0) {
        MPI_Comm_free(&shm);
        return rc != MPI_SUCCESS ? tn_comm_mpi_err(rc, "MPI_Iallreduce") : -1;
    }
    MPI_Comm_free(&shm);
    rank_id *all = tn_xmalloc((size_t)size * sizeof *all);
    rc = MPI_Iallgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, c->world, &rq);
    if (rc != MPI_SUCCESS || tn_comm_mpi_wait(c, &rq, "MPI_Iallgather (topology)") != 0) {
        free(all);
        return rc != MPI_SUCCESS ? tn_comm_mpi_err(rc, "MPI_Iallgather") : -1;
    }
    for (int r = 0; r < size; r++)
        if (all[r].bad_name) {
            free(all);
            return tn_err("comm: $TANDEM_NODE_NAME of rank %d is longer than %zu characters", r, sizeof me.node - 1);
        }
    int *node_of = tn_xmalloc((size_t)size * sizeof *node_of), *lrank = tn_xcalloc((size_t)size, sizeof *lrank);
    int *lsize = tn_xcalloc((size_t)size, sizeof *lsize), n_nodes = 0;
    c->hosts = tn_xmalloc((size_t)size * sizeof *c->hosts);
    for (int r = 0; r < size; r++) {
        memcpy(c->hosts[r], all[r].host, sizeof c->hosts[r]);
        node_of[r] = -1;
        for (int q = 0; q < r && node_of[r] < 0; q++)
            if (all[q].shm_root == all[r].shm_root && strcmp(all[q].node, all[r].node) == 0) node_of[r] = node_of[q];
        if (node_of[r] < 0) node_of[r] = n_nodes++;
        lrank[r] = lsize[node_of[r]]++;
    }
    c->info.node = node_of[rank], c->info.n_nodes = n_nodes;
    c->info.local_rank = lrank[rank], c->info.local_size = lsize[node_of[rank]];
    memcpy(c->info.host, me.host, sizeof c->info.host);
    /* ring order: machine by machine, so a ring over all ranks crosses the network n_nodes times */
    c->ring_world = tn_xmalloc((size_t)size * sizeof *c->ring_world);
    for (int k = 0, nd = 0; nd < n_nodes; nd++)
        for (int r = 0; r < size; r++)
            if (node_of[r] == nd) c->ring_world[k++] = r;
    int ring_key = 0;
    while (c->ring_world[ring_key] != rank) ring_key++;
    tn_comm_shard_layout(c, node_of, lrank, lsize);
    tn_comm_log_machines(c, node_of);
    free(all), free(node_of), free(lrank), free(lsize);
    if ((rc = MPI_Comm_split(c->world, c->info.node, rank, &c->local)) != MPI_SUCCESS ||
        (rc = MPI_Comm_split(c->world, c->info.local_rank == 0 ? 0 : MPI_UNDEFINED, c->info.node, &c->leaders)) !=
            MPI_SUCCESS ||
        (rc = MPI_Comm_split(c->world, 0, ring_key, &c->ring)) != MPI_SUCCESS ||
        (rc = MPI_Comm_split(c->world, c->uniform ? c->info.local_rank : MPI_UNDEFINED, c->info.node, &c->rail)) !=
            MPI_SUCCESS)
        return tn_comm_mpi_err(rc, "MPI_Comm_split");
    if ((rc = MPI_Comm_dup(c->local, &c->bg_local)) != MPI_SUCCESS ||
        (c->rail != MPI_COMM_NULL && (rc = MPI_Comm_dup(c->rail, &c->bg_rail)) != MPI_SUCCESS))
        return tn_comm_mpi_err(rc, "MPI_Comm_dup");
    return 0;
}

static void free_comms(tn_comm *c) {
    MPI_Comm *cs[] = {&c->bg_local, &c->bg_rail, &c->local, &c->leaders, &c->ring, &c->rail, &c->world};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++)
        if (*cs[i] != MPI_COMM_NULL) MPI_Comm_free(cs[i]);
}

tn_comm *tn_comm_init(int *argc, char ***argv) {
    int inited = 0, finalized = 0, provided = 0, rc;
    MPI_Finalized(&finalized);
    if (finalized) {
        tn_err("comm: MPI was already finalized in this process (one tn_comm_init per process)");
        return NULL;
    }
    MPI_Initialized(&inited);
    if (!inited) {
        if ((rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided)) != MPI_SUCCESS) {
            tn_comm_mpi_err(rc, "MPI_Init_thread");
            return NULL;
        }
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_MULTIPLE) {
        tn_err("comm: the MPI library offers thread level %d; the progress thread needs MPI_THREAD_MULTIPLE (%d)",
               provided, MPI_THREAD_MULTIPLE);
        if (!inited) MPI_Finalize();
        return NULL;
    }
    tn_comm *c = tn_xcalloc(1, sizeof *c);
    c->mpi_owned = !inited;
    c->world = c->local = c->leaders = c->ring = c->rail = c->wd_comm = c->bg_local = c->bg_rail = c->notes = MPI_COMM_NULL;
    c->tune.poll_max_us = 1000, c->tune.bg_poll_max_us = 20000;
    if (tn_comm_join_world(&c->world) != 0) goto fail; /* MPI_COMM_WORLD, or the joined nodes (comm_join.c) */
    MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN); /* inherited by the communicators split off it */
    MPI_Comm_rank(c->world, &c->info.rank);
    MPI_Comm_size(c->world, &c->info.size);
    long backend;
    if (discover(c) != 0 || read_settings(c, &backend) != 0) goto fail;
    if (c->info.local_size > 1 && tn_shm_create(c) != 0) goto fail;
    if (tn_watchdog_init(c) != 0 || tn_notes_init(c) != 0) goto fail;
    c->be = backend == 1 ? tn_comm_nccl_open(c) : &tn_comm_backend_mpi;
    c->be_explicit = backend != 0;
    if (!c->be) goto fail;
    if (tn_comm_progress_start(c) != 0) goto fail;
    tn_comm_log_init(c);
    return c;
fail:;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", tn_errmsg());
    if (c->be) c->be->finalize(c);
    if (c->wd_comm != MPI_COMM_NULL) tn_watchdog_free(c);
    tn_notes_free(c);
    tn_shm_free(c);
    free_comms(c);
    if (c->mpi_owned) MPI_Finalize();
    free(c->hosts), free(c->ring_world), free(c->shard_of), free(c);
    tn_err("%s", msg);
    return NULL;
}

void tn_comm_finalize(tn_comm *c) {
    if (!c) return;
    if (c->be->wait_all(c) != 0) fprintf(stderr, "tandem: warning: %s\n", tn_errmsg());
    tn_comm_log_finalize(c);
    tn_comm_device_free(c); /* staged copies still pending are dropped: their device memory may be gone */
    tn_comm_progress_stop(c);
    tn_watchdog_free(c);
    tn_notes_free(c);
    c->be->finalize(c);
    tn_shm_free(c);
    free_comms(c);
    if (c->mpi_owned) MPI_Finalize();
    free(c->hosts), free(c->ring_world), free(c->shard_of), free(c);
}

const tn_comm_info *tn_comm_get_info(const tn_comm *c) { return &c->info; }
const char *tn_comm_backend_name(const tn_comm *c) { return c->be->name; }

const char *tn_comm_host_of(const tn_comm *c, int rank) {
    return rank >= 0 && rank < c->info.size ? c->hosts[rank] : NULL;
}

void tn_comm_abort(tn_comm *c, int code) {
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code);
}

int tn_comm_barrier(tn_comm *c) {
    MPI_Request rq;
    int rc = MPI_Ibarrier(c->world, &rq);
    if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Ibarrier");
    return tn_comm_mpi_wait(c, &rq, "MPI_Ibarrier");
}

int tn_comm_bcast(tn_comm *c, void *buf, size_t bytes, int root) {
    if (root < 0 || root >= c->info.size) return tn_err("comm: bcast root %d is not a rank (size %d)", root, c->info.size);
    if (bytes > 0 && !buf) return tn_err("comm: bcast of %zu bytes got a NULL buffer", bytes);
    if (tn_comm_staging(c, buf)) return tn_comm_staged_blocking(c, TN_STAGE_BCAST, buf, bytes, root);
    return c->be->bcast(c, buf, bytes, root);
}

int tn_comm_allgather(tn_comm *c, const void *mine, size_t bytes, void *all) {
    if (bytes > INT_MAX) return tn_err("comm: allgather of %zu bytes per rank exceeds %d", bytes, INT_MAX);
    if (bytes > 0 && (!mine || !all)) return tn_err("comm: allgather got a NULL buffer");
    MPI_Request rq;
    int rc = MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, c->world, &rq);
    if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Iallgather");
    return tn_comm_mpi_wait(c, &rq, "MPI_Iallgather");
}

static int iallreduce_host(tn_comm *c, void *buf, size_t n, size_t elem, MPI_Datatype t, MPI_Op op, const char *what) {
    if (n > 0 && !buf) return tn_err("comm: %s of %zu values got a NULL buffer", what, n);
    for (size_t off = 0; off < n; off += INT_MAX) {
        int len = n - off < INT_MAX ? (int)(n - off) : INT_MAX;
        MPI_Request rq;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * elem, len, t, op, c->world, &rq);
        if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, what);
        if (tn_comm_mpi_wait(c, &rq, what) != 0) return -1;
    }
    return 0;
}

int tn_comm_allreduce_f64(tn_comm *c, double *buf, size_t n) {
    return iallreduce_host(c, buf, n, sizeof *buf, MPI_DOUBLE, MPI_SUM, "MPI_Iallreduce (f64 sum)");
}

int tn_comm_allreduce_max_i64(tn_comm *c, int64_t *buf, size_t n) {
    return iallreduce_host(c, buf, n, sizeof *buf, MPI_INT64_T, MPI_MAX, "MPI_Iallreduce (i64 max)");
}

int tn_comm_allreduce_f32_mpi(tn_comm *c, float *buf, size_t n) {
    if (n > 0 && !buf) return tn_err("comm: allreduce of %zu floats got a NULL buffer", n);
    for (size_t off = 0; off < n; off += INT_MAX) {
        int len = n - off < INT_MAX ? (int)(n - off) : INT_MAX;
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, len, MPI_FLOAT, MPI_SUM, c->world);
        if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Allreduce");
    }
    return 0;
}

/* Device buffers the backend cannot take are staged through host memory (comm_device.c). */
int tn_comm_allreduce_f32(tn_comm *c, float *buf, size_t n) {
    if (tn_comm_staging(c, buf)) return tn_comm_staged_blocking(c, TN_STAGE_ALLREDUCE, buf, n * sizeof *buf, 0);
    return c->be->allreduce_f32(c, buf, n);
}
int tn_comm_reduce_scatter_f32(tn_comm *c, float *buf, size_t n) {
    if (tn_comm_staging(c, buf)) return tn_comm_staged_blocking(c, TN_STAGE_REDUCE_SCATTER, buf, n * sizeof *buf, 0);
    return c->be->reduce_scatter_f32(c, buf, n);
}
int tn_comm_allgather_f32(tn_comm *c, float *buf, size_t n) {
    if (tn_comm_staging(c, buf)) return tn_comm_staged_blocking(c, TN_STAGE_ALLGATHER, buf, n * sizeof *buf, 0);
    return c->be->allgather_f32(c, buf, n);
}
tn_comm_op *tn_comm_iallreduce_f32(tn_comm *c, float *buf, size_t n) {
    tn_comm_staged_poll(c, 0);
    if (tn_comm_staging(c, buf)) return tn_comm_staged_iallreduce(c, buf, n);
    return c->be->iallreduce_f32(c, buf, n);
}
int tn_comm_test(tn_comm_op *op) {
    tn_comm_staged_poll(op->c, 0);
    pthread_mutex_lock(&op->c->mu);
    int done = op->done;
    pthread_mutex_unlock(&op->c->mu);
    return done;
}

#define P2P_TAG 7301 /* tn_comm_send / tn_comm_recv on the world communicator */

static int p2p(tn_comm *c, void *buf, size_t bytes, int peer, int send) {
    const char *what = send ? "MPI_Isend (point-to-point)" : "MPI_Irecv (point-to-point)";
    if (peer < 0 || peer >= c->info.size) return tn_err("comm: %s peer %d is not a rank", what, peer);
    if (bytes > 0 && !buf) return tn_err("comm: %s of %zu bytes got a NULL buffer", what, bytes);
    for (size_t off = 0; off < bytes; off += INT_MAX) {
        int len = bytes - off < INT_MAX ? (int)(bytes - off) : INT_MAX;
        MPI_Request rq;
        int rc = send ? MPI_Isend((char *)buf + off, len, MPI_BYTE, peer, P2P_TAG, c->world, &rq)
                      : MPI_Irecv((char *)buf + off, len, MPI_BYTE, peer, P2P_TAG, c->world, &rq);
        if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, what);
        if (tn_comm_mpi_wait(c, &rq, what) != 0) return -1;
    }
    return 0;
}

int tn_comm_send(tn_comm *c, const void *buf, size_t bytes, int to) { return p2p(c, (void *)buf, bytes, to, 1); }
int tn_comm_recv(tn_comm *c, void *buf, size_t bytes, int from) { return p2p(c, buf, bytes, from, 0); }

int tn_comm_wait(tn_comm_op *op) {
    if (!op) return tn_err("comm: wait on a NULL op");
    tn_comm *c = op->c;
    tn_comm_staged_poll(c, 1); /* the op, or one before it, may still wait for its copy out */
    struct tn_staged *st = tn_comm_staged_take(c, op); /* before the wait frees op */
    int rc = c->be->wait(op);
    return st ? tn_comm_staged_finish(c, st, rc) : rc;
}
int tn_comm_wait_all(tn_comm *c) {
    tn_comm_staged_poll(c, 1);
    return tn_comm_staged_finish_all(c, c->be->wait_all(c));
}
