/* zero -- sharded data parallelism (ZeRO stages 1-3, what DeepSpeed's ZeRO and PyTorch's FSDP give).
 *
 * Owns: keeping a sharded model usable by the plain layer-by-layer passes, through the model's param_hook, with
 * the shards of shard_layout.h (balanced: this rank's chunk of every unit, FSDP's layout; or contiguous):
 *   stage 1  AdamW moments only for the shard; gradients reduce-scattered (every rank still holds the whole
 *            gradient slab), the shard updated, the updated parameters all-gathered per group (layer)
 *            while the next forward runs, unit by unit in forward order: each layer's forward waits only
 *            for its own group. Balanced, every unit's all-gather moves 1/N from every rank. Contiguous, a
 *            group is gathered as one piece per shard it touches, every owner's pieces at once (so each
 *            direction of a link carries bytes, not one owner's after the other's); a rank does not wait
 *            for the pieces it only sends until the next update.
 *   stage 2  + the gradient memory outside the shard goes back to the system after each bucket's
 *            reduce-scatter (grad_sync.h).
 *   stage 3  + the parameters outside the shard too: a group is all-gathered just before the pass uses it
 *            (forward, and again backward), the next group's gather started at once (prefetch), and its
 *            memory released after use. The embedding of a tied model stays from the first use to the
 *            lm_head. With every rank on one machine the ranks instead map one shared copy of the
 *            parameters (zero_shared_params, host memory): each updates its chunks in place, nothing is
 *            gathered or released, and each rank counts 1/N of the copy as its own.
 * Only trainable tensors are sharded: under LoRA the frozen base stays replicated (a rank needs every base
 * weight in every forward and backward; sharding it would send the whole base twice per step to save
 * memory that LoRA already saves). The byte counts behind that choice are in docs/performance.md. */
#ifndef TN_ZERO_H
#define TN_ZERO_H

#include <stddef.h>

#include "comm/comm.h"
#include "model/model.h"
#include "trainer/optimizer.h"
#include "trainer/shard_layout.h"

typedef struct tn_zero tn_zero;

typedef struct {
    size_t params, grads; /* resident bytes of the parameter slab's trainable part and of the gradient slab */
} tn_zero_resident;

/* stage 1..3 over comm's ranks and layout's shards (kept, not copied); installs the model's param_hook. At
 * stage 3 the parameters outside the shard are released at once (every rank must hold the whole model on
 * entry, e.g. after a broadcast). */
tn_zero *tn_zero_create(tn_comm *c, tn_model *m, int stage, const tn_shard_layout *layout, int share, char *why,
                        size_t cap);
/* share: at stage 3 with every rank on one machine, the ranks map one copy of the parameters instead of gathering
 * them (zero.c: share_machine); collective. tn_zero_shared says whether they did, why (cap bytes) why not. */
int tn_zero_shared(const tn_zero *z);
void tn_zero_free(tn_zero *z);
int tn_zero_stage(const tn_zero *z);
/* After the optimizer updated the shard: stages 1-2 start the all-gathers of the updated parameters. 0, or -1
 * + tn_err when one could not start (or an earlier one failed). */
int tn_zero_after_update(tn_zero *z);
/* 0, or -1 + tn_err naming the first parameter all-gather that failed so far (inside a forward or backward
 * pass, where the model's param_hook cannot return it): that pass ran on stale parameters. */
int tn_zero_status(const tn_zero *z);
/* Every parameter on every rank (saving, generation): waits for / runs every gather; collective. While
 * full, the passes gather and release nothing. tn_zero_end_full releases again (stage 3). */
int tn_zero_full(tn_zero *z);
void tn_zero_end_full(tn_zero *z);
/* Gradient norm over all shards (the same value on every rank) and clipping of this shard; call before the
 * update (stages 1-2: it also waits for this rank's parameter sends still reading the shard). -1 + tn_err
 * when the exchange fails, or a parameter all-gather of the pass before did (tn_zero_status). */
int tn_zero_clip(tn_zero *z, double max_norm, double *norm);
/* Stages 2-3, before a step's backward: gradients zero, resident only in this rank's shard. */
void tn_zero_clear_grads(tn_zero *z);
void tn_zero_resident_bytes(const tn_zero *z, tn_zero_resident *r);
/* Benchmarks: the most parameter + gradient bytes resident at any group boundary of the passes since the
 * last call (sampled at every gather and release; costs a residency scan each, so off unless asked). */
void tn_zero_track_peak(tn_zero *z, int on);
size_t tn_zero_peak_bytes(tn_zero *z);
/* Checkpoints, collective. Save: rank 0 writes every shard's moments into dir (its own, then each other
 * rank's as it arrives; the others send theirs) and goes on receiving after a write error, so that nobody
 * waits forever. Load: rank 0 reads each other rank's shard from dir (written at any world size or stage)
 * and sends it, a status first. dir matters on rank 0 only. 0, or -1 + tn_err on this rank. */
int tn_zero_save_moments(tn_zero *z, const tn_adamw *opt, const char *dir);
int tn_zero_load_moments(tn_zero *z, tn_adamw *opt, const char *dir);

#endif
