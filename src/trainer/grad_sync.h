/* grad_sync -- data-parallel gradient exchange, once per optimizer step, overlapped with backward.
 *
 * Owns the bucket plan over the gradient slab. Buckets are contiguous ranges cut from the END of the slab
 * (backward finishes the last layers' gradients first: lm_head/final norm, then layer L-1 ... 0, then the
 * embedding), each at most bucket_bytes and at least 8 of them (64 KB or more each) so that little is
 * left to send after backward. During the step's last micro-batch the model's grad_ready hook
 * reports how far backward has got; every bucket that is complete is all-reduced at once, non-blocking
 * (the comm layer's progress thread moves it while backward goes on). The optimizer waits for all of them.
 * Accumulation micro-batches before the last exchange nothing. Only trainable gradients are in the slab,
 * so LoRA exchanges only the adapters. Sharded (ZeRO): buckets are reduce-scattered instead (comm.h's
 * shards: half the bytes of an all-reduce), and at stages 2-3 each bucket's memory outside this rank's
 * shard goes back to the system as soon as its exchange has finished; under a balanced layout
 * (shard_layout.h) the buckets are the layout's units, each reduce-scattered on the unit's chunks. Compressed (comm_compression): each
 * bucket goes through exchange.h's machine-level exchange (summed inside the machine, encoded, decoded and
 * added in machine order), with error feedback through a residual of this rank's parts of the buckets.
 * Machine-local (sync_mode: diloco): buckets are summed over this machine's ranks only. */
#ifndef TN_GRAD_SYNC_H
#define TN_GRAD_SYNC_H

#include <stddef.h>

#include "comm/comm.h"
#include "comm/compress.h"
#include "model/model.h"
#include "trainer/shard_layout.h"

typedef struct tn_grad_sync tn_grad_sync;

typedef struct {
    int n_buckets;
    size_t bucket_bytes; /* the largest bucket (the log states what runs, not the cap) */
    size_t bytes;        /* per step */
    double wait_s;       /* time the last step waited for communication after backward */
    double first_ready_s; /* from arm to the first complete bucket: what overlap cannot hide (forward, lm_head) */
} tn_grad_sync_stats;

/* How the buckets travel. Its own type and prefix, apart from the config's tn_sync_mode (TN_SYNC_DDP / DILOCO):
 * passing one for the other is an -Wenum-conversion error under -Wextra -Werror. */
typedef enum {
    TN_GRAD_ALLREDUCE,             /* every rank gets the sum */
    TN_GRAD_REDUCE_SCATTER,        /* each rank gets the sum of its shard (ZeRO-1) */
    TN_GRAD_REDUCE_SCATTER_RELEASE, /* + the rest of each bucket released once exchanged (ZeRO-2/3) */
    TN_GRAD_COMPRESSED,            /* machine-level exchange with a codec (tn_grad_sync_create_compressed) */
    TN_GRAD_LOCAL                  /* summed over this machine's ranks only (DiLoCo) */
} tn_grad_mode;
/* NULL with tn_err on a bad size. With one rank (one rank per machine: machine-local) it does nothing (and
 * costs nothing). */
tn_grad_sync *tn_grad_sync_create(tn_comm *c, tn_model *m, size_t bucket_bytes, tn_grad_mode mode);
/* A reduce-scatter mode over layout's shards (NULL: contiguous shards of the whole slab, as
 * tn_grad_sync_create); a balanced layout's units are the buckets. Same errors. */
tn_grad_sync *tn_grad_sync_create_sharded(tn_comm *c, tn_model *m, size_t bucket_bytes, tn_grad_mode mode,
                                          const tn_shard_layout *l);
/* The floats of a bucket (at most bucket_bytes, at least MIN_BUCKET_FLOATS, at most 1/8 of n): a balanced
 * layout's unit cap. */
size_t tn_grad_sync_bucket_floats(size_t n, size_t bucket_bytes);
/* TN_GRAD_COMPRESSED with this encoding; NULL + tn_err when the machines' rank counts differ. */
tn_grad_sync *tn_grad_sync_create_compressed(tn_comm *c, tn_model *m, size_t bucket_bytes, tn_codec codec);
/* Compressed: this rank's residual floats (its part of every bucket, in slab order) into out (NULL: only
 * count them); set copies them back. The count, 0 without compression. */
size_t tn_grad_sync_residual(const tn_grad_sync *s, float *out);
void tn_grad_sync_set_residual(tn_grad_sync *s, const float *in);
void tn_grad_sync_free(tn_grad_sync *s);
/* Makes s the exchange backward reports to (creating one installs it; a strategy that switches between two, as
 * DiLoCo after its synchronous phase, re-installs the one that runs now). One inactive removes the hook. */
void tn_grad_sync_attach(tn_grad_sync *s);
/* The next backward is the step's last micro-batch: launch buckets as they complete. */
void tn_grad_sync_arm(tn_grad_sync *s);
/* After that backward: launch what is left, wait for every bucket. 0, or -1 with tn_err. */
int tn_grad_sync_finish(tn_grad_sync *s);
const tn_grad_sync_stats *tn_grad_sync_get_stats(const tn_grad_sync *s);

#endif
