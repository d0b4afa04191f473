/* sync_ddp.c -- plain data parallelism (strategy.h): each step's gradients all-reduced over every rank in
 * buckets overlapped with backward (grad_sync.h), every rank the same whole update. Every op it leaves NULL is
 * strategy.c's plain behaviour; one process (no comm) runs it too, exchanging nothing. */
#include <stdlib.h>

#include "core/core.h"
#include "trainer/strategy.h"

extern const tn_strategy_ops tn_sync_ddp;

static int picks(const tn_strategy_args *a) { return a != NULL; } /* what is left when no other picks */

static tn_strategy *create(const tn_strategy_args *a) {
    return tn_strategy_plain(&tn_sync_ddp, a, tn_grad_sync_create(a->comm, a->model, tn_strategy_bucket_bytes(a), TN_GRAD_ALLREDUCE));
}

const tn_strategy_ops tn_sync_ddp = {
    .name = "ddp",
    .summary = "data parallel: gradients all-reduced every step (hierarchical: inside each machine first)",
    .picks = picks,
    .create = create,
    .destroy = tn_strategy_plain_free,
};
