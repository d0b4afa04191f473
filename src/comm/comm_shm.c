/* comm_shm.c -- the machine-local stage of the hierarchical allreduce, through an MPI shared-memory
 * window (MPI_Win_allocate_shared on the machine's ranks; plain loads/stores plus atomic counters).
 *
 * The buffer streams through NSLOT slots of tune.chunk floats. For chunk g (counted over the life of the
 * communicator, identical on every local rank because they run the same ops in the same order):
 *   IN   every local rank copies its chunk into its own input slot             -> in_done[me]  = g+1
 *   RED  every local rank sums all input slots over its sub-slice of the chunk -> red_done[me] = g+1
 *        into the machine's result slot
 *   TAKE the leader (local rank 0) copies the result slot into its own buffer and lets the network ring
 *        (comm_ring.c, one leader per machine) start that chunk's segments
 *   PUB  when the ring finished the chunk, the leader copies it back into the result slot -> pub = g+1
 *   OUT  the other local ranks copy the result slot into their buffers          -> out_done[me] = g+1
 * A slot is reused for chunk g+NSLOT only after everyone is done with chunk g, which the counters show.
 * Stages of different chunks overlap, so while the ring sends chunk g the machine already reduces g+1.
 * The next op starts while this one drains (all its chunks reduced and, on the leader, on the ring), so a
 * counter could be written by two ops: each stage writes chunk g only after its own counter reached g
 * (PUB: after the previous chunk was published), which keeps every counter in chunk order. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/core.h"

#define NSLOT 2
#define LINE 64

struct tn_shm {
    MPI_Win win;
    int L, me;
    uint64_t *in_done, *red_done, *out_done, *pub; /* one counter per cache line: stride LINE bytes */
    float *red;                                    /* NSLOT result slots (leader's segment) */
    float **in;                                    /* per local rank: NSLOT input slots */
    size_t chunk;
    uint64_t seq;                                  /* chunks handed to ops created so far */
};

#define CTR(base, r) ((uint64_t *)((char *)(base) + (size_t)(r) * LINE))

static uint64_t ld(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void st(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static uint64_t min_ctr(const tn_shm *m, uint64_t *base, int from) {
    uint64_t lo = UINT64_MAX;
    for (int r = from; r < m->L; r++) {
        uint64_t v = ld(CTR(base, r));
        lo = v < lo ? v : lo;
    }
    return lo;
}

int tn_shm_create(tn_comm *c) {
    tn_shm *m = tn_xcalloc(1, sizeof *m);
    m->L = c->info.local_size, m->me = c->info.local_rank, m->chunk = c->tune.chunk;
    size_t slots = (size_t)NSLOT * m->chunk * sizeof(float);
    size_t ctl = (size_t)(3 * m->L + 1) * LINE;
    size_t mine = slots + (m->me == 0 ? ctl + slots : 0);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void *base = NULL;
    int rc = MPI_Win_allocate_shared((MPI_Aint)mine, 1, info, c->local, &base, &m->win);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
        free(m);
        return tn_comm_mpi_err(rc, "MPI_Win_allocate_shared (machine-local slots)");
    }
    m->in = tn_xcalloc((size_t)m->L, sizeof *m->in);
    for (int r = 0; r < m->L; r++) {
        MPI_Aint sz;
        int du;
        char *p = NULL;
        rc = MPI_Win_shared_query(m->win, r, &sz, &du, &p);
        if (rc != MPI_SUCCESS || !p) {
            MPI_Win_free(&m->win);
            free(m->in), free(m);
            return rc != MPI_SUCCESS ? tn_comm_mpi_err(rc, "MPI_Win_shared_query")
                                     : tn_err("comm: shared window of local rank %d has no memory", r);
        }
        if (r == 0) {
            m->in_done = (uint64_t *)p, m->red_done = CTR(p, m->L), m->out_done = CTR(p, 2 * m->L);
            m->pub = CTR(p, 3 * m->L);
            m->red = (float *)(p + ctl);
            p += ctl + slots;
        }
        m->in[r] = (float *)p;
    }
    if (m->me == 0) memset(m->in_done, 0, ctl);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, m->win);
    MPI_Request rq;
    rc = MPI_Ibarrier(c->local, &rq);
    if (rc != MPI_SUCCESS || tn_comm_mpi_wait(c, &rq, "MPI_Ibarrier (shared window)") != 0) {
        MPI_Win_unlock_all(m->win);
        MPI_Win_free(&m->win);
        free(m->in), free(m);
        return rc != MPI_SUCCESS ? tn_comm_mpi_err(rc, "MPI_Ibarrier") : -1;
    }
    c->shm = m;
    return 0;
}

void tn_shm_free(tn_comm *c) {
    tn_shm *m = c->shm;
    if (!m) return;
    MPI_Win_unlock_all(m->win);
    MPI_Win_free(&m->win);
    free(m->in), free(m);
    c->shm = NULL;
}

typedef struct {
    tn_shm *m;
    float *buf;
    size_t n, nch, segs_per_chunk;
    uint64_t base;
    size_t next_in, next_red, next_take, next_pub, next_out;
    tn_ring *ring; /* leader, when there are several machines */
} hier;

static float *in_slot(tn_shm *m, int r, uint64_t g) { return m->in[r] + (g % NSLOT) * m->chunk; }
static float *red_slot(tn_shm *m, uint64_t g) { return m->red + (g % NSLOT) * m->chunk; }

static int hier_step(tn_comm_op *op, int *progressed) {
    hier *h = op->state;
    tn_shm *m = h->m;
    int leader = m->me == 0;
    size_t C = m->chunk;
#define CHUNK_LEN(k) (h->n - (k) * C < C ? h->n - (k) * C : C)
    while (h->next_in < h->nch) { /* IN: needs every rank done reading chunk g-NSLOT's inputs */
        uint64_t g = h->base + h->next_in;
        if (ld(CTR(m->in_done, m->me)) < g || (g >= NSLOT && min_ctr(m, m->red_done, 0) < g - NSLOT + 1)) break;
        memcpy(in_slot(m, m->me, g), h->buf + h->next_in * C, CHUNK_LEN(h->next_in) * sizeof(float));
        st(CTR(m->in_done, m->me), g + 1);
        h->next_in++, *progressed = 1;
    }
    while (h->next_red < h->next_in) { /* RED: every input is in; result slot free again */
        uint64_t g = h->base + h->next_red;
        if (min_ctr(m, m->in_done, 0) < g + 1 || ld(CTR(m->red_done, m->me)) < g) break;
        if (g >= NSLOT && (ld(m->pub) < g - NSLOT + 1 || (m->L > 1 && min_ctr(m, m->out_done, 1) < g - NSLOT + 1)))
            break;
        size_t off, len;
        tn_comm_slice(CHUNK_LEN(h->next_red), m->L, m->me, &off, &len);
        float *restrict d = red_slot(m, g) + off;
        memcpy(d, in_slot(m, 0, g) + off, len * sizeof(float));
        for (int r = 1; r < m->L; r++) {
            const float *restrict s = in_slot(m, r, g) + off;
            for (size_t i = 0; i < len; i++) d[i] += s[i];
        }
        st(CTR(m->red_done, m->me), g + 1);
        h->next_red++, *progressed = 1;
    }
    if (!leader) {
        while (h->next_out < h->nch) { /* OUT */
            uint64_t g = h->base + h->next_out;
            if (ld(m->pub) < g + 1 || ld(CTR(m->out_done, m->me)) < g) break;
            memcpy(h->buf + h->next_out * C, red_slot(m, g), CHUNK_LEN(h->next_out) * sizeof(float));
            st(CTR(m->out_done, m->me), g + 1);
            h->next_out++, *progressed = 1;
        }
        return h->next_out == h->nch;
    }
    while (h->next_take < h->next_red) { /* TAKE */
        uint64_t g = h->base + h->next_take;
        if (min_ctr(m, m->red_done, 0) < g + 1) break;
        memcpy(h->buf + h->next_take * C, red_slot(m, g), CHUNK_LEN(h->next_take) * sizeof(float));
        h->next_take++, *progressed = 1;
        if (h->ring) tn_ring_set_ready(h->ring, h->next_take * h->segs_per_chunk);
    }
    if (h->ring && tn_ring_step(h->ring, progressed) < 0) return -1;
    while (h->next_pub < h->next_take) { /* PUB */
        uint64_t g = h->base + h->next_pub;
        if (ld(m->pub) < g) break; /* the previous op's chunks first */
        if (h->ring) {
            size_t end = (h->next_pub + 1) * h->segs_per_chunk, nseg = tn_ring_segments(h->ring);
            if (tn_ring_done(h->ring) < (end < nseg ? end : nseg)) break;
            memcpy(red_slot(m, g), h->buf + h->next_pub * C, CHUNK_LEN(h->next_pub) * sizeof(float));
        } /* one machine: the result slot already holds the sum */
        st(m->pub, g + 1);
        h->next_pub++, *progressed = 1;
    }
#undef CHUNK_LEN
    return h->next_pub == h->nch;
}

/* Every chunk reduced and, on the leader, taken and started on the ring: only the drain is left. */
static int hier_draining(const tn_comm_op *op) {
    const hier *h = op->state;
    if (h->m->me != 0) return h->next_red == h->nch;
    return h->next_take == h->nch && (!h->ring || tn_ring_all_started(h->ring));
}

static void hier_release(tn_comm_op *op) {
    hier *h = op->state;
    if (!h) return;
    tn_ring_free(h->ring);
    free(h);
}

tn_comm_op *tn_shm_allreduce_op(tn_comm *c, float *buf, size_t n, int local_only) {
    tn_comm_op *op = tn_comm_op_new(c, local_only ? "machine allreduce" : "allreduce", n);
    hier *h = tn_xcalloc(1, sizeof *h);
    h->m = c->shm, h->buf = buf, h->n = n, h->nch = (n + c->shm->chunk - 1) / c->shm->chunk;
    if (c->info.local_rank == 0 && c->info.n_nodes > 1 && !local_only) {
        h->ring = tn_ring_create(c->leaders, TN_RING_AR, buf, n, NULL, NULL, c->tune.piece, c->tune.window,
                                 (int)(op->seq % TN_COMM_LANES));
        if (!h->ring) {
            free(h), free(op);
            return NULL;
        }
        h->segs_per_chunk = c->shm->chunk / tn_ring_segment_floats(h->ring);
        tn_ring_set_ready(h->ring, 0);
    }
    h->base = c->shm->seq; /* ops are created in submission order on the caller's thread... */
    c->shm->seq += h->nch; /* ...so their chunk numbers are reserved here, not when they run */
    op->state = h, op->step = hier_step, op->draining = hier_draining, op->release = hier_release;
    return op;
}
