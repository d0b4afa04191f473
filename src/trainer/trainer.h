/* trainer -- the optimizer-step loop: micro-batches, loss normalisation, clipping, schedule, AdamW.
 *
 * Owns one training run's state (model, workspace, optimizer, sampler position). The loss of a step is
 * normalised by the trained tokens of the whole (global) batch, counted before any forward pass, so
 * how the batch is split into micro-batches does not change the update. */
#ifndef TN_TRAINER_H
#define TN_TRAINER_H

#include "config/train_config.h"
#include "data/dataset.h"
#include "model/model.h"
#include "trainer/optimizer.h"

typedef struct {
    const tn_train_config *cfg;
    tn_model *model;
    tn_acts *acts;
    tn_adamw *opt;
    const tn_dataset *data;
    tn_sampler sampler;
    int micro_batch, accum;  /* per-device batch, gradient accumulation steps */
    int total_steps, warmup_steps;
    int step;                /* optimizer steps done */
    int64_t samples_seen;
    int32_t *ids, *labels;   /* [accum, micro_batch, S] host staging of one step's batches */
} tn_trainer;

typedef struct {
    double loss;       /* mean over trained tokens of the step */
    double grad_norm;  /* before clipping */
    double lr;
    int64_t tokens;    /* trained tokens (targets) */
    int64_t seen;      /* tokens processed (incl. prompt and padding) */
} tn_step_stats;

/* Steps: max_steps if > 0, else ceil(num_train_epochs * n / global batch). */
int tn_trainer_total_steps(const tn_train_config *cfg, int n_samples);
tn_trainer *tn_trainer_create(const tn_train_config *cfg, tn_model *model, const tn_dataset *data);
void tn_trainer_free(tn_trainer *t);
/* One optimizer step; 0 ok, -1 on a non-finite loss/gradient (step skipped, tn_err set). */
int tn_trainer_step(tn_trainer *t, tn_step_stats *st);

#endif
