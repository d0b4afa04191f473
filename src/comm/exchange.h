/* exchange -- the collectives of low-communication training (comm_compression, sync_mode: diloco):
 * a machine-level exchange that may be compressed, a reduction inside one machine only, and the small
 * machine-local sums that go with it. Built on comm.h's machinery (the ring engine, the progress thread, the
 * shared-memory stage); every machine must run the same number of ranks L (tn_comm_uniform).
 *
 * tn_comm_iexchange on a buffer of n floats, every rank, M machines:
 *   1. reduce_local: the machine's sum is formed by a ring reduce-scatter inside the machine, so local rank
 *      i holds the machine's sum of its part (tn_comm_exchange_part: slice i of L); without it the machine's
 *      ranks must hold the same buffer (parameters kept in step) and each takes its part of it.
 *   2. each rank encodes its part (compress.h, error feedback through its residual of that part),
 *   3. the encodings are all-gathered between machines over the rail of its local rank (one rank per
 *      machine: every byte crosses the network once per machine, the L ranks of a machine share the
 *      sending; for M = 2 that is the bytes of an all-reduce, for M machines (M - 1) encodings each),
 *   4. each rank decodes the M encodings and adds them in machine order 0 .. M-1, times `scale`: the same
 *      bytes summed in the same order, so every machine gets bit-identical floats (with fp32 and M = 2 they
 *      equal those of tn_comm_iallreduce_f32),
 *   5. the parts are all-gathered inside the machine: every rank holds the result.
 * `extra` doubles (per machine, the same on its ranks: loss sums, counts) ride along with the encodings and
 * are summed over machines in machine order into the same buffer.
 * A background exchange runs outside the op queue (comm_progress.c), on its own communicators, so the
 * reductions of the steps that overlap it never wait for it. */
#ifndef TN_EXCHANGE_H
#define TN_EXCHANGE_H

#include <stddef.h>

#include "comm/comm.h"
#include "comm/compress.h"

typedef struct {
    tn_codec codec;
    float *residual;   /* [n]: error feedback of this rank's part (the rest untouched), or NULL */
    float scale;       /* result = scale x sum over machines (1 / M: the mean) */
    int reduce_local;  /* 1: sum the machine's ranks first; 0: they hold the same buffer */
    int background;    /* 1: outside the op queue (see above) */
    double *extra;     /* [n_extra] summed over machines in place, or NULL */
    size_t n_extra;
} tn_exchange;

/* 1 when every machine runs the same number of ranks (the exchanges below need it). */
int tn_comm_uniform(const tn_comm *c);
/* This rank's part [*off, *off + *len) of an n-float exchange (the residual floats it owns). */
void tn_comm_exchange_part(const tn_comm *c, size_t n, size_t *off, size_t *len);
/* Bytes one machine sends to the network per exchange of n floats (0 with one machine). */
size_t tn_comm_exchange_bytes(const tn_comm *c, size_t n, tn_codec codec, size_t n_extra);
/* Non-blocking; buf, residual and extra stay untouched until tn_comm_wait. NULL + tn_err on error. */
tn_comm_op *tn_comm_iexchange(tn_comm *c, float *buf, size_t n, const tn_exchange *x);
/* Sum over this machine's ranks only (shared memory), in the op queue. */
tn_comm_op *tn_comm_iallreduce_local_f32(tn_comm *c, float *buf, size_t n);
/* Blocking sum of doubles over this machine's ranks. 0 or -1 + tn_err. */
int tn_comm_allreduce_f64_local(tn_comm *c, double *buf, size_t n);

#endif
