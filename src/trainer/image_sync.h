/* image_sync -- data parallelism of the image classifier (model_type resnet) as PyTorch DDP runs it: the BN running
 * statistics broadcast from rank 0 before a forward (DDP's broadcast_buffers), and the gradient all-reduce
 * overlapped with backward in buckets (DDP's Reducer).
 *
 * Buckets are contiguous ranges cut from the END of the gradient slab (torchvision's parameter order: backward
 * finishes fc first, then layer4 ... layer1, then the stem), each at most bucket_bytes. While the step's last
 * backward runs, the model's grad-ready hook (tn_resnet_set_grad_ready: after fc, after each BasicBlock, after the
 * stem) says how far it has got; every bucket then complete starts its all-reduce at once, non-blocking (the comm
 * layer's progress thread moves it while backward goes on); finish launches the rest and waits. With one rank
 * everything here does nothing. Shared by `tandem train` (image_job.c) and `tandem bench resnet`, so the benchmark
 * times the trainer's exchange. */
#ifndef TN_IMAGE_SYNC_H
#define TN_IMAGE_SYNC_H

#include <stddef.h>

#include "comm/comm.h"
#include "model/resnet.h"

typedef struct tn_image_sync tn_image_sync;

typedef struct {
    int n_buckets;
    double wait_s;        /* last step: time finish waited for communication after backward */
    double first_ready_s; /* last step: from arm to the first complete bucket (what overlap cannot hide) */
} tn_image_sync_stats;

/* bucket_bytes: the largest bucket (DDP: bucket_cap_mb, 25 MB); 0 = one all-reduce of the whole slab after
 * backward (no overlap). NULL + tn_err on a bad size. */
tn_image_sync *tn_image_sync_create(tn_comm *c, tn_resnet *m, size_t bucket_bytes);
void tn_image_sync_free(tn_image_sync *s);
/* DDP's broadcast_buffers: rank 0's running statistics on every rank. 0 or -1 + tn_err. */
int tn_image_sync_buffers(tn_image_sync *s);
/* The next backward is the step's last micro-batch: start buckets as they complete. */
void tn_image_sync_arm(tn_image_sync *s);
/* After that backward: launch what is left, wait for every bucket (the slab then holds the sum over ranks).
 * 0 or -1 + tn_err. */
int tn_image_sync_finish(tn_image_sync *s);
const tn_image_sync_stats *tn_image_sync_get_stats(const tn_image_sync *s);

#endif
