/* comm_device.c -- collectives on accelerator memory (comm.h tn_comm_attach_device): which backend carries device
 * buffers, and, for the MPI backend, staging through host memory.
 *
 * Staging: a blocking collective copies the device buffer to host memory, runs the MPI collective there and copies
 * the result back. A non-blocking one copies out at once (to_host waits for the kernels that produce the buffer)
 * and is queued on the host copy like any MPI op; the copy back happens in tn_comm_wait (or wait_all) on the
 * caller's thread, so every CUDA call stays on the thread that computes. Where the device copies asynchronously
 * (tn_comm_device.to_host_async), a non-blocking all-reduce does not wait for the kernels still queued: its copy
 * out is queued behind them into a pinned buffer and its MPI op queued gated (the progress thread leaves it, and
 * every later op on its shards, alone); the issuing thread releases it once the copy has landed, polling at its
 * next collective and blocking at the latest when it waits. The range collectives (ZeRO) work on a
 * host mirror of the whole slab, allocated on first use and touched only where ranges are copied. The ops that exist
 * on host memory only (exchange.h) stage a device buffer the same way whichever backend carries the rest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "comm/comm_impl.h"
#include "core/core.h"

struct tn_staged {
    tn_comm_op *op;
    void *dev, *host;
    size_t bytes;
    int owns_host;   /* 1: malloc'd, 2: pinned (back to c->pinned) */
    void *token;     /* the copy out still in flight (op gated until it lands) */
    struct tn_staged *next;
};

struct tn_pinned {
    void *p;
    size_t bytes;
    struct tn_pinned *next;
};

struct tn_mirror {
    const void *dev;
    size_t n;
    float *host;
    struct tn_mirror *next;
};

int tn_comm_staging(const tn_comm *c, const void *p) {
    return c->dev && !c->be->device_buffers && p && c->dev->owns(p);
}

int tn_comm_staged_blocking(tn_comm *c, int what, void *buf, size_t bytes, int root) {
    void *host = tn_xmalloc(bytes ? bytes : 1);
    c->dev->to_host(host, buf, bytes);
    size_t n = bytes / sizeof(float);
    const tn_comm_backend *m = &tn_comm_backend_mpi;
    int rc = what == TN_STAGE_ALLREDUCE        ? m->allreduce_f32(c, host, n)
             : what == TN_STAGE_REDUCE_SCATTER ? m->reduce_scatter_f32(c, host, n)
             : what == TN_STAGE_ALLGATHER      ? m->allgather_f32(c, host, n)
                                               : m->bcast(c, host, bytes, root);
    if (rc == 0) c->dev->to_device(buf, host, bytes);
    free(host);
    return rc;
}

static void pinned_give(tn_comm *c, void *p, size_t bytes);

static struct tn_staged *remember(tn_comm *c, tn_comm_op *op, void *dev, void *host, size_t bytes, int owns_host) {
    struct tn_staged *s = tn_xcalloc(1, sizeof *s), **tail = &c->staged;
    s->op = op, s->dev = dev, s->host = host, s->bytes = bytes, s->owns_host = owns_host;
    while (*tail) tail = &(*tail)->next; /* submission order: wait_all copies back in that order */
    *tail = s;
    return s;
}

/* the host side of a finished staging goes (a pinned buffer is kept for the next; its copy out waited for first) */
static void drop_host(tn_comm *c, struct tn_staged *s) {
    if (s->token) c->dev->copied(s->token, 1);
    if (s->owns_host == 2) pinned_give(c, s->host, s->bytes);
    else if (s->owns_host) free(s->host);
}

/* A pinned buffer of exactly bytes: a kept one of that size (buckets repeat their sizes every step), else a new one */
static void *pinned_take(tn_comm *c, size_t bytes) {
    for (struct tn_pinned **pp = &c->pinned; *pp; pp = &(*pp)->next)
        if ((*pp)->bytes == bytes) {
            struct tn_pinned *k = *pp;
            void *p = k->p;
            *pp = k->next;
            free(k);
            return p;
        }
    void *p = c->dev->host_alloc(bytes ? bytes : 1);
    if (!p) tn_die("comm: %zu bytes of pinned host memory for a staged all-reduce could not be had", bytes);
    return p;
}

static void pinned_give(tn_comm *c, void *p, size_t bytes) { /* kept until tn_comm_device_free */
    struct tn_pinned *k = tn_xcalloc(1, sizeof *k);
    k->p = p, k->bytes = bytes, k->next = c->pinned;
    c->pinned = k;
}

/* The copy out is queued behind the kernels; the op waits, gated, until tn_comm_staged_poll sees it land. */
static tn_comm_op *iallreduce_async(tn_comm *c, float *buf, size_t n) {
    size_t bytes = n * sizeof *buf;
    float *host = pinned_take(c, bytes);
    void *token = c->dev->to_host_async(host, buf, bytes);
    c->gate_next = token != NULL;
    tn_comm_op *op = tn_comm_backend_mpi.iallreduce_f32(c, host, n);
    c->gate_next = 0;
    if (!op) {
        if (token) c->dev->copied(token, 1);
        pinned_give(c, host, bytes);
        return NULL;
    }
    remember(c, op, buf, host, bytes, 2)->token = token;
    return op;
}

void tn_comm_staged_poll(tn_comm *c, int wait) {
    for (struct tn_staged *s = c->staged; s; s = s->next) {
        if (!s->token) continue;
        if (!c->dev->copied(s->token, wait)) continue;
        s->token = NULL;
        pthread_mutex_lock(&c->mu);
        s->op->gated = 0;
        pthread_mutex_unlock(&c->mu);
    }
}

tn_comm_op *tn_comm_staged_iallreduce(tn_comm *c, float *buf, size_t n) {
    if (c->dev->to_host_async) return iallreduce_async(c, buf, n);
    float *host = tn_xmalloc(n ? n * sizeof *host : 1);
    c->dev->to_host(host, buf, n * sizeof *host);
    tn_comm_op *op = tn_comm_backend_mpi.iallreduce_f32(c, host, n);
    if (!op) {
        free(host);
        return NULL;
    }
    remember(c, op, buf, host, n * sizeof *host, 1);
    return op;
}

float *tn_comm_stage_out(tn_comm *c, const float *buf, size_t n) {
    if (!c->dev || !buf || !c->dev->owns(buf)) return NULL;
    float *host = tn_xmalloc(n ? n * sizeof *host : 1);
    c->dev->to_host(host, buf, n * sizeof *host);
    return host;
}

tn_comm_op *tn_comm_stage_track(tn_comm *c, tn_comm_op *op, float *dev, float *host, size_t n) {
    if (!host) return op;
    if (!op) free(host);
    else remember(c, op, dev, host, n * sizeof *host, 1);
    return op;
}

static float *mirror_of(tn_comm *c, const float *slab, size_t n) {
    for (struct tn_mirror *m = c->mirrors; m; m = m->next)
        if (m->dev == slab && m->n == n) return m->host;
    struct tn_mirror *m = tn_xcalloc(1, sizeof *m);
    m->dev = slab, m->n = n;
    m->host = tn_xcalloc(n ? n : 1, sizeof *m->host); /* untouched pages cost nothing */
    m->next = c->mirrors;
    c->mirrors = m;
    return m->host;
}

tn_comm_op *tn_comm_staged_range(tn_comm *c, int kind, float *slab, size_t n, size_t lo, size_t hi) {
    if (lo > hi || hi > n) {
        tn_err("comm: range collective of [%zu, %zu) outside a slab of %zu floats", lo, hi, n);
        return NULL;
    }
    float *host = mirror_of(c, slab, n);
    c->dev->to_host(host + lo, slab + lo, (hi - lo) * sizeof *host);
    tn_comm_op *op = tn_comm_mpi_range(c, kind, host, n, lo, hi);
    if (op) remember(c, op, slab + lo, host + lo, (hi - lo) * sizeof *host, 0);
    return op;
}

struct tn_staged *tn_comm_staged_take(tn_comm *c, const tn_comm_op *op) {
    for (struct tn_staged **p = &c->staged; *p; p = &(*p)->next)
        if ((*p)->op == op) {
            struct tn_staged *s = *p;
            *p = s->next;
            return s;
        }
    return NULL;
}

int tn_comm_staged_finish(tn_comm *c, struct tn_staged *s, int rc) {
    if (rc == 0 && s->bytes) c->dev->to_device(s->dev, s->host, s->bytes);
    drop_host(c, s);
    free(s);
    return rc;
}

int tn_comm_staged_finish_all(tn_comm *c, int rc) {
    while (c->staged) {
        struct tn_staged *s = c->staged;
        c->staged = s->next;
        tn_comm_staged_finish(c, s, rc);
    }
    return rc;
}

void tn_comm_device_free(tn_comm *c) {
    while (c->staged) {
        struct tn_staged *s = c->staged;
        c->staged = s->next;
        drop_host(c, s);
        free(s);
    }
    while (c->pinned) {
        struct tn_pinned *k = c->pinned;
        c->pinned = k->next;
        c->dev->host_free(k->p);
        free(k);
    }
    while (c->mirrors) {
        struct tn_mirror *m = c->mirrors;
        c->mirrors = m->next;
        free(m->host);
        free(m);
    }
}

static int same_gpu(const tn_comm_dev_id *a, const tn_comm_dev_id *b) {
    if (a->node != b->node) return 0;
    if (a->bus[0] && b->bus[0]) return strcasecmp(a->bus, b->bus) == 0;
    return a->device == b->device; /* a bus id unknown: the ordinals are all there is */
}

int tn_comm_first_shared_device(const tn_comm_dev_id *all, int size) {
    for (int r = 1; r < size; r++)
        for (int q = 0; q < r; q++)
            if (all[q].has && all[r].has && same_gpu(&all[q], &all[r])) return r;
    return -1;
}

int tn_comm_attach_device(tn_comm *c, const tn_comm_device *dev, char *note, size_t note_size) {
    char scratch[8];
    if (!note) note = scratch, note_size = sizeof scratch;
    note[0] = 0;
    if (c->dev) return tn_err("comm: a device is attached already");
    int async = dev ? !!dev->to_host_async + !!dev->copied + !!dev->host_alloc + !!dev->host_free : 0;
    if (async != 0 && async != 4) /* a backend's programming error, the same on every rank */
        tn_die("comm: device %s has some of to_host_async, copied, host_alloc, host_free but not all", dev->name);
    int size = c->info.size;
    tn_comm_dev_id me;
    memset(&me, 0, sizeof me);
    me.has = dev != NULL, me.device = dev ? dev->device : -1, me.node = c->info.node;
    if (dev) snprintf(me.bus, sizeof me.bus, "%s", dev->bus_id);
    tn_comm_dev_id *all = tn_xmalloc((size_t)size * sizeof *all);
    if (tn_comm_allgather(c, &me, sizeof me, all) != 0) {
        free(all);
        return -1;
    }
    for (int r = 1; r < size; r++)
        if (all[r].has != all[0].has) {
            int rc = tn_err("rank %d on host %s computes on %s but rank 0 on host %s on %s: every rank needs the same "
                            "device kind (set device: cpu or cuda)", r, tn_comm_host_of(c, r),
                            all[r].has ? "a GPU" : "the CPU", tn_comm_host_of(c, 0), all[0].has ? "a GPU" : "the CPU");
            free(all);
            return rc;
        }
    if (!dev) {
        free(all);
        return 0;
    }
    c->dev_copy = *dev;
    c->dev = &c->dev_copy;
    int shared = tn_comm_first_shared_device(all, size); /* a rank sharing its machine's GPU with a lower rank */
    if (c->be->device_buffers) {
        snprintf(note, note_size, "gradients between GPUs through NCCL ($TANDEM_COMM_BACKEND=nccl)");
    } else if (size == 1) {
        /* nothing is exchanged */
    } else if (c->be_explicit) {
        snprintf(note, note_size, "gradients through MPI, staged in host memory ($TANDEM_COMM_BACKEND=mpi)");
    } else if (shared >= 0) {
        snprintf(note, note_size, "rank %d and another rank share GPU %d (%s) on host %s, which NCCL refuses: "
                 "gradients through MPI, staged in host memory", shared, all[shared].device,
                 all[shared].bus[0] ? all[shared].bus : "bus id unknown", tn_comm_host_of(c, shared));
    } else {
        const tn_comm_backend *nccl = tn_comm_nccl_open(c); /* collective: every rank tries, all agree */
        if (nccl) {
            c->be = nccl;
            snprintf(note, note_size, "gradients between GPUs through NCCL");
        } else {
            snprintf(note, note_size, "gradients through MPI, staged in host memory (NCCL: %.200s)", tn_errmsg());
        }
    }
    free(all);
    return 0;
}
