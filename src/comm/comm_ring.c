/* comm_ring.c -- pipelined ring reduce-scatter / all-gather / allreduce over MPI point-to-point.
 *
 * Why a ring of small segments: for p ranks every link carries 2(p-1)/p of the buffer for an allreduce,
 * the minimum, and because each step is an Isend to the next rank plus an Irecv from the previous one,
 * both directions of every link carry data at the same time. Cutting the buffer into segments that
 * move through the ring independently (`window` at a time) keeps enough bytes posted that a slow TCP link
 * never idles while one segment waits for its reduction or for its next step to be posted. Messages stay
 * below Open MPI's TCP eager limit (64 KB; default piece 32 KB): a larger one is sent only after the
 * receiver's rendezvous reply, and that reply waits behind the receiver's own outgoing data on the one
 * TCP connection between the two ranks, so two large messages crossing in opposite directions go one
 * after the other. That is why a plain MPI_Allreduce between two machines reaches about half the link.
 *
 * Step t of segment s at position i (k = t, or t-(p-1) in the all-gather half of an allreduce):
 *   reduce-scatter: send block i-k-1 to i+1, receive block i-k-2 from i-1 into scratch and add it in;
 *                   after p-1 steps position i holds the full sum of block i.
 *   all-gather:     send block i-k to i+1, receive block i-k-1 from i-1 in place.
 * Message tags are (lane, s mod window, t): unique among the messages in flight (segments start in order
 * and never more than `window` past the oldest unfinished one; rings that run at the same time on one
 * communicator have different lanes, see TN_COMM_LANES); MPI's non-overtaking order covers reuse. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/core.h"

typedef struct {
    int active, step, pending;
    size_t s;
    float *scratch;
    float *rx;       /* block received in the current step (reduce-scatter: add scratch into it) */
    size_t rx_len;
    int reduce;
} seg_slot;

struct tn_ring {
    MPI_Comm comm;
    int p, pos, kind, steps, window, failed, tag_base;
    float *buf;
    size_t n, piece, seg_floats, nseg;
    size_t *boff, *blen;
    seg_slot *slot;
    MPI_Request *rq; /* 2 per slot: receive, send */
    int *idx;
    size_t next, ready, done_lo;
    unsigned char *seg_done;
    int n_active;
};

static inline int mod(int a, int p) { return ((a % p) + p) % p; }

static void block_of(const tn_ring *r, size_t s, int j, size_t *off, size_t *len) {
    if (r->kind == TN_RING_AR) {
        size_t so = s * r->seg_floats, sl = r->n - so < r->seg_floats ? r->n - so : r->seg_floats, o, l;
        tn_comm_slice(sl, r->p, j, &o, &l);
        *off = so + o, *len = l;
    } else {
        size_t po = s * r->piece;
        *off = r->boff[j] + (po < r->blen[j] ? po : r->blen[j]);
        *len = po < r->blen[j] ? (r->blen[j] - po < r->piece ? r->blen[j] - po : r->piece) : 0;
    }
}

tn_ring *tn_ring_create(MPI_Comm comm, int kind, float *buf, size_t n, const size_t *boff, const size_t *blen,
                        size_t piece, int window, int lane) {
    tn_ring *r = tn_xcalloc(1, sizeof *r);
    MPI_Comm_size(comm, &r->p);
    MPI_Comm_rank(comm, &r->pos);
    r->comm = comm, r->kind = kind, r->buf = buf, r->n = n, r->piece = piece, r->window = window;
    r->steps = (kind == TN_RING_AR ? 2 : 1) * (r->p - 1);
    if (kind == TN_RING_AR) {
        r->seg_floats = piece * (size_t)r->p;
        r->nseg = (n + r->seg_floats - 1) / r->seg_floats;
    } else {
        r->boff = tn_xmalloc((size_t)r->p * sizeof *r->boff);
        r->blen = tn_xmalloc((size_t)r->p * sizeof *r->blen);
        memcpy(r->boff, boff, (size_t)r->p * sizeof *r->boff);
        memcpy(r->blen, blen, (size_t)r->p * sizeof *r->blen);
        size_t longest = 0;
        for (int j = 0; j < r->p; j++) longest = blen[j] > longest ? blen[j] : longest;
        r->nseg = (longest + piece - 1) / piece;
    }
    if (r->p == 1) r->nseg = 0; /* nothing to exchange */
    int *tag_ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag); /* predefined on the world only */
    long tags = (long)TN_COMM_LANES * window * (r->steps > 0 ? r->steps : 1);
    if (!flag || !tag_ub || tags > *tag_ub || piece > INT_MAX || lane < 0 || lane >= TN_COMM_LANES) {
        tn_err("comm: ring of %d ranks with window %d needs %ld message tags (MPI offers %d) and pieces of "
               "at most %d floats", r->p, window, tags, flag && tag_ub ? *tag_ub : 0, INT_MAX);
        free(r->boff), free(r->blen), free(r);
        return NULL;
    }
    r->slot = tn_xcalloc((size_t)window, sizeof *r->slot);
    r->rq = tn_xmalloc(2 * (size_t)window * sizeof *r->rq);
    r->idx = tn_xmalloc(2 * (size_t)window * sizeof *r->idx);
    for (int k = 0; k < 2 * window; k++) r->rq[k] = MPI_REQUEST_NULL;
    r->tag_base = lane * window * (r->steps > 0 ? r->steps : 1);
    r->seg_done = tn_xcalloc(r->nseg ? r->nseg : 1, 1);
    r->ready = r->nseg;
    return r;
}

void tn_ring_free(tn_ring *r) {
    if (!r) return;
    for (int k = 0; k < r->window; k++) tn_free_aligned(r->slot[k].scratch);
    free(r->slot), free(r->rq), free(r->idx), free(r->seg_done), free(r->boff), free(r->blen), free(r);
}

size_t tn_ring_segments(const tn_ring *r) { return r->nseg; }
size_t tn_ring_segment_floats(const tn_ring *r) { return r->seg_floats; }
void tn_ring_set_ready(tn_ring *r, size_t segs) { r->ready = segs < r->nseg ? segs : r->nseg; }
size_t tn_ring_done(const tn_ring *r) { return r->done_lo; }
int tn_ring_all_started(const tn_ring *r) { return r->next == r->nseg; }

static void add_f32(float *restrict d, const float *restrict s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] += s[i];
}

/* Post step sl->step of slot k: Irecv from the previous position, Isend to the next. */
static int post(tn_ring *r, int k) {
    seg_slot *sl = &r->slot[k];
    int t = sl->step, rs = r->kind == TN_RING_RS || (r->kind == TN_RING_AR && t < r->p - 1);
    int kk = r->kind == TN_RING_AR && !rs ? t - (r->p - 1) : t;
    int js = rs ? mod(r->pos - kk - 1, r->p) : mod(r->pos - kk, r->p);
    int jr = rs ? mod(r->pos - kk - 2, r->p) : mod(r->pos - kk - 1, r->p);
    size_t so, sn, ro, rn;
    block_of(r, sl->s, js, &so, &sn);
    block_of(r, sl->s, jr, &ro, &rn);
    int tag = r->tag_base + (int)(sl->s % (size_t)r->window) * r->steps + t;
    int prev = mod(r->pos - 1, r->p), next = mod(r->pos + 1, r->p);
    sl->rx = r->buf + ro, sl->rx_len = rn, sl->reduce = rs, sl->pending = 2;
    int rc = MPI_Irecv(rs ? sl->scratch : r->buf + ro, (int)rn, MPI_FLOAT, prev, tag, r->comm, &r->rq[2 * k]);
    if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Irecv");
    rc = MPI_Isend(r->buf + so, (int)sn, MPI_FLOAT, next, tag, r->comm, &r->rq[2 * k + 1]);
    if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Isend");
    return 0;
}

static int start_segments(tn_ring *r, int *progressed) {
    while (r->n_active < r->window && r->next < r->ready && r->next < r->done_lo + (size_t)r->window) {
        int k = 0;
        while (r->slot[k].active) k++;
        seg_slot *sl = &r->slot[k];
        if (!sl->scratch && r->kind != TN_RING_AG) sl->scratch = tn_xalloc_floats(r->piece);
        sl->active = 1, sl->step = 0, sl->s = r->next++;
        r->n_active++;
        *progressed = 1;
        if (post(r, k) != 0) return -1;
    }
    return 0;
}

int tn_ring_step(tn_ring *r, int *progressed) {
    if (r->failed) return -1;
    if (start_segments(r, progressed) != 0) goto fail;
    if (r->n_active > 0) {
        int outcount = 0;
        int rc = MPI_Testsome(2 * r->window, r->rq, &outcount, r->idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            tn_comm_mpi_err(rc, "MPI_Testsome");
            goto fail;
        }
        if (outcount == MPI_UNDEFINED) outcount = 0;
        for (int q = 0; q < outcount; q++) {
            int k = r->idx[q] / 2;
            seg_slot *sl = &r->slot[k];
            if (--sl->pending > 0) continue;
            *progressed = 1;
            if (sl->reduce) add_f32(sl->rx, sl->scratch, sl->rx_len);
            if (++sl->step < r->steps) {
                if (post(r, k) != 0) goto fail;
                continue;
            }
            r->seg_done[sl->s] = 1;
            sl->active = 0;
            r->n_active--;
            while (r->done_lo < r->nseg && r->seg_done[r->done_lo]) r->done_lo++;
        }
        if (outcount > 0 && start_segments(r, progressed) != 0) goto fail;
    }
    return r->done_lo == r->nseg ? 1 : 0;
fail:
    r->failed = 1;
    return -1;
}
