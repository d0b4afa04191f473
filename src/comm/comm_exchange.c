/* comm_exchange.c -- see exchange.h. The exchange is one op whose phases run in turn on the progress
 * thread: local reduce-scatter ring, encode, rail all-gather ring, decode + sum, local all-gather ring. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "comm/exchange.h"
#include "core/core.h"

int tn_comm_uniform(const tn_comm *c) { return c->uniform; }

void tn_comm_exchange_part(const tn_comm *c, size_t n, size_t *off, size_t *len) {
    tn_comm_slice(n, c->info.local_size, c->info.local_rank, off, len);
}

/* Floats of one rank's encoding (its part, then the extra doubles). */
static size_t payload_floats(size_t len, tn_codec codec, size_t n_extra) {
    return (tn_codec_bytes(codec, len) + 8 * n_extra) / 4;
}

size_t tn_comm_exchange_bytes(const tn_comm *c, size_t n, tn_codec codec, size_t n_extra) {
    size_t total = 0;
    for (int i = 0; i < c->info.local_size; i++) {
        size_t off, len;
        tn_comm_slice(n, c->info.local_size, i, &off, &len);
        total += 4 * payload_floats(len, codec, n_extra);
    }
    return total * (size_t)(c->info.n_nodes - 1);
}

typedef struct {
    tn_comm *c;
    float *buf;
    size_t n, off, len, P;   /* this rank's part; floats per encoding */
    tn_exchange x;
    float *gather;           /* [M * P]: machine m's encoding of this part at m * P */
    int phase;
    tn_ring *rs, *ag_rail, *ag_local;
} xop;

static void encode(xop *o) {
    int M = o->c->info.n_nodes, me = o->c->info.node;
    float *mine = o->gather + (size_t)me * o->P;
    (void)M;
    tn_codec_encode(o->x.codec, o->buf + o->off, o->x.residual ? o->x.residual + o->off : NULL, o->len, mine);
    if (o->x.n_extra) memcpy((char *)mine + tn_codec_bytes(o->x.codec, o->len), o->x.extra, 8 * o->x.n_extra);
}

static void decode(xop *o) {
    int M = o->c->info.n_nodes;
    float *out = o->buf + o->off;
    for (int m = 0; m < M; m++) /* machine order: the same sum everywhere */
        tn_codec_decode(o->x.codec, o->gather + (size_t)m * o->P, o->len, out, m > 0);
    if (o->x.scale != 1.0f)
        for (size_t i = 0; i < o->len; i++) out[i] *= o->x.scale;
    for (size_t k = 0; k < o->x.n_extra; k++) {
        double s = 0, v;
        for (int m = 0; m < M; m++) {
            memcpy(&v, (char *)(o->gather + (size_t)m * o->P) + tn_codec_bytes(o->x.codec, o->len) + 8 * k, 8);
            s = m ? s + v : v;
        }
        o->x.extra[k] = s;
    }
}

static int xop_step(tn_comm_op *op, int *progressed) {
    xop *o = op->state;
    for (;;) {
        int rc = 1;
        switch (o->phase) {
        case 0: rc = o->rs ? tn_ring_step(o->rs, progressed) : 1; break;
        case 1: encode(o), *progressed = 1; break;
        case 2: rc = o->ag_rail ? tn_ring_step(o->ag_rail, progressed) : 1; break;
        case 3: decode(o), *progressed = 1; break;
        case 4: rc = o->ag_local ? tn_ring_step(o->ag_local, progressed) : 1; break;
        default: return 1;
        }
        if (rc <= 0) return rc;
        o->phase++;
    }
}

/* Every encoding is on its way between machines: the next queued op may start (its rings use another tag
 * lane), so a gradient bucket's exchange does not wait for the one before to cross the link and come back. */
static int xop_draining(const tn_comm_op *op) {
    const xop *o = op->state;
    return o->phase > 2 || (o->phase == 2 && (!o->ag_rail || tn_ring_all_started(o->ag_rail)));
}

static void xop_release(tn_comm_op *op) {
    xop *o = op->state;
    if (!o) return;
    tn_ring_free(o->rs), tn_ring_free(o->ag_rail), tn_ring_free(o->ag_local);
    tn_free_aligned(o->gather);
    free(o);
}

/* A ring over `comm` of p members whose block j is [boff(j), +blen(j)). NULL ring (ok) when p == 1. */
static int make_ring(tn_comm *c, MPI_Comm comm, int kind, float *buf, size_t n, int p, size_t P, int lane,
                     tn_ring **out) {
    *out = NULL;
    if (p == 1) return 0;
    size_t *boff = tn_xmalloc((size_t)p * sizeof *boff), *blen = tn_xmalloc((size_t)p * sizeof *blen);
    for (int j = 0; j < p; j++) {
        if (P) boff[j] = (size_t)j * P, blen[j] = P; /* equal blocks (the encodings) */
        else tn_comm_slice(n, p, j, &boff[j], &blen[j]);
    }
    *out = tn_ring_create(comm, kind, buf, n, boff, blen, c->tune.piece, c->tune.window, lane);
    free(boff), free(blen);
    return *out ? 0 : -1;
}

tn_comm_op *tn_comm_iexchange(tn_comm *c, float *buf, size_t n, const tn_exchange *x) {
    if (!c->uniform) {
        tn_err("comm: the machine-level exchange needs the same number of ranks on every machine");
        return NULL;
    }
    if (n > 0 && !buf) {
        tn_err("comm: exchange of %zu floats got a NULL buffer", n);
        return NULL;
    }
    float *dev = buf, *host = tn_comm_stage_out(c, buf, n); /* device memory: the exchange runs on a host copy */
    if (host) buf = host;
    tn_comm_op *op = tn_comm_op_new(c, x->background ? "exchange (background)" : "exchange", n);
    xop *o = tn_xcalloc(1, sizeof *o);
    o->c = c, o->buf = buf, o->n = n, o->x = *x;
    tn_comm_exchange_part(c, n, &o->off, &o->len);
    o->P = payload_floats(o->len, x->codec, x->n_extra);
    int M = c->info.n_nodes, L = c->info.local_size;
    o->gather = tn_xalloc_floats((size_t)M * o->P + 1);
    int lane = x->background ? (int)(c->bg_seq++ % TN_COMM_LANES) : (int)(op->seq % TN_COMM_LANES);
    MPI_Comm local = x->background ? c->bg_local : c->local, rail = x->background ? c->bg_rail : c->rail;
    int bad = (x->reduce_local && make_ring(c, local, TN_RING_RS, buf, n, L, 0, lane, &o->rs) != 0) ||
              make_ring(c, rail, TN_RING_AG, o->gather, (size_t)M * o->P, M, o->P, lane, &o->ag_rail) != 0 ||
              make_ring(c, local, TN_RING_AG, buf, n, L, 0, lane, &o->ag_local) != 0;
    op->state = o, op->step = xop_step, op->release = xop_release, op->draining = xop_draining;
    op->one_piece = o->P <= c->tune.piece && (L == 1 || n <= c->tune.piece);
    if (bad) {
        xop_release(op);
        free(op);
        return tn_comm_stage_track(c, NULL, dev, host, n);
    }
    return tn_comm_stage_track(c, x->background ? tn_comm_submit_background(c, op) : tn_comm_submit(c, op), dev, host, n);
}

static int noop_step(tn_comm_op *op, int *progressed) {
    (void)op;
    *progressed = 1;
    return 1;
}

tn_comm_op *tn_comm_iallreduce_local_f32(tn_comm *c, float *buf, size_t n) {
    if (n > 0 && !buf) {
        tn_err("comm: local allreduce of %zu floats got a NULL buffer", n);
        return NULL;
    }
    if (c->shm && n > 0) { /* through shared memory: a device buffer goes through a host copy */
        float *host = tn_comm_stage_out(c, buf, n);
        return tn_comm_stage_track(c, tn_comm_submit(c, tn_shm_allreduce_op(c, host ? host : buf, n, 1)), buf, host, n);
    }
    tn_comm_op *op = tn_comm_op_new(c, "machine allreduce", n); /* alone on the machine: the sum is the buffer itself */
    op->step = noop_step;
    return tn_comm_submit(c, op);
}

int tn_comm_allreduce_f64_local(tn_comm *c, double *buf, size_t n) {
    if (c->info.local_size == 1 || n == 0) return 0;
    if (!buf) return tn_err("comm: local sum of %zu doubles got a NULL buffer", n);
    MPI_Request rq;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, c->local, &rq);
    if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Iallreduce (machine-local sum)");
    return tn_comm_mpi_wait(c, &rq, "MPI_Iallreduce (machine-local sum)");
}
