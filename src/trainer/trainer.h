/* trainer -- the optimizer-step loop: micro-batches, loss normalisation, clipping, schedule, AdamW.
 *
 * Owns one training run's state (model, workspace, optimizer, sampler position) on one rank. A step's
 * global batch is the next ranks x per-device batch x gradient_accumulation_steps samples of the sampler's
 * stream (one shuffle per epoch from seed + epoch; an epoch's last global batch is completed from the next
 * epoch's shuffle, so every sample is used exactly once per epoch across all ranks). Rank r takes the
 * contiguous slice [r * B * accum, (r + 1) * B * accum) of it. The loss is normalised by the trained tokens
 * of the whole global batch, counted (and summed over ranks) before any forward pass, so how the batch is
 * split into ranks and micro-batches does not change the update. Gradients are exchanged once per step
 * (grad_sync.h); every rank then applies the identical update. */
#ifndef TN_TRAINER_H
#define TN_TRAINER_H

#include "comm/comm.h"
#include "config/train_config.h"
#include "data/dataset.h"
#include "model/model.h"
#include "trainer/optimizer.h"
#include "trainer/zero.h"

typedef struct {
    const tn_train_config *cfg;
    tn_model *model;
    tn_acts *acts;
    tn_adamw *opt;
    const tn_dataset *data;
    tn_comm *comm;           /* NULL: one process */
    int rank, world;
    struct tn_grad_sync *sync;
    int zero_stage;          /* ZeRO stage in effect (0: plain data parallelism, or one rank) */
    tn_zero *zero;           /* stage >= 1, from tn_trainer_shard on */
    tn_sampler sampler;
    int micro_batch, accum;  /* per-device batch, gradient accumulation steps */
    int total_steps, warmup_steps;
    int step;                /* optimizer steps done */
    int64_t samples_seen;
    int32_t *ids, *labels;   /* [accum, micro_batch, S] host staging of one step's batches */
    int *lens;               /* [accum] padded length of each micro-batch (<= S) */
    int fault_nan_from, fault_nan_to; /* $TANDEM_FAULT_NAN_STEPS=A[-B]: rank 0 puts a NaN into its gradient on
                                       * steps A..B (fault-injection tests of the non-finite-step path) */
} tn_trainer;

typedef struct {
    double loss;       /* mean over trained tokens of the step */
    double grad_norm;  /* before clipping */
    double lr;
    int64_t tokens;    /* trained tokens (targets) of the global batch */
    int64_t seen;      /* tokens processed by all ranks (incl. prompt and padding) */
    double comm_wait;  /* seconds waited for the gradient exchange after backward */
} tn_step_stats;

/* Steps: max_steps if > 0, else ceil(num_train_epochs * n / global batch). */
int tn_trainer_total_steps(const tn_train_config *cfg, int n_samples, int world);
/* comm may be NULL (one process). NULL with tn_err on a bad bucket size. With cfg->zero_stage >= 1 on
 * several ranks the AdamW moments cover this rank's shard only (zero.h). */
tn_trainer *tn_trainer_create(const tn_train_config *cfg, tn_model *model, const tn_dataset *data, tn_comm *comm);
/* Sharded runs: once every rank holds the same whole model (after the start-up broadcast), shard it
 * (stage 3 keeps only this rank's parameters from here on). Nothing for stage 0. */
void tn_trainer_shard(tn_trainer *t);
void tn_trainer_free(tn_trainer *t);
/* Mean loss over every trained token of `eval` (no dropout, no update), the samples shared out over the
 * ranks (sample i on rank i mod world) and summed; collective. NAN with tn_err on failure. */
double tn_trainer_eval(tn_trainer *t, const tn_dataset *eval);
/* One optimizer step; 0 ok, -1 on a non-finite loss/gradient (step skipped, tn_err set). */
int tn_trainer_step(tn_trainer *t, tn_step_stats *st);

#endif
