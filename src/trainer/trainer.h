/* trainer -- the optimizer-step loop: micro-batches, loss normalisation, clipping, schedule, AdamW.
 *
 * Owns one training run's state (workspace, sampler position, the sync strategy and the batch shares) on one
 * rank; opaque outside trainer/ (tn_trainer_get_info says what the job and the monitor may read). A step's
 * global batch is the next ranks x per-device batch x gradient_accumulation_steps samples of the sampler's
 * stream (one shuffle per epoch from seed + epoch; an epoch's last global batch is completed from the next
 * epoch's shuffle, so every sample is used exactly once per epoch across all ranks). Rank r takes the
 * contiguous slice [r * B * accum, (r + 1) * B * accum) of it. The loss is normalised by the trained tokens
 * of the whole global batch, counted (and summed over ranks) before any forward pass, so how the batch is
 * split into ranks and micro-batches does not change the update. How the ranks agree on the step is the sync
 * strategy's (strategy.h: plain data parallelism, ZeRO 1-3, compressed, DiLoCo), chosen from the
 * configuration; the loop only calls its ops. With balance_ranks the ranks' shares of the global batch follow
 * their measured speed (shares.h): rank r then takes the share[r] samples after those of ranks 0..r-1. With
 * sync_mode: diloco the sums cover each machine only, each machine steps alone and the numbers the log shows
 * are summed over machines when the round's exchange completes (tn_trainer_next_logged). */
#ifndef TN_TRAINER_H
#define TN_TRAINER_H

#include <stdio.h>

#include "comm/comm.h"
#include "config/train_config.h"
#include "data/dataset.h"
#include "model/model.h"
#include "trainer/optimizer.h"
#include "trainer/test_hooks.h"

/* Where one rank's step went, in seconds (tn_trainer_step measures it; the job monitor shows it per rank). */
typedef struct {
    double data;       /* assembling this rank's micro-batches */
    double compute;    /* forward and backward (an injected slowdown, test_hooks.h, included) */
    double wait;       /* waiting for the other ranks: token counts, gradient exchange, loss sum, balancing */
    double optimizer;  /* clipping, AdamW, ZeRO's bookkeeping after the update */
} tn_step_times;

typedef struct {
    int step;          /* which step (counted from 1) */
    int skipped;       /* non-finite: skipped (DiLoCo: on this many machines) */
    double loss;       /* mean over trained tokens of the step */
    double grad_norm;  /* before clipping */
    double lr;
    int64_t tokens;    /* trained tokens (targets) of the global batch */
    int64_t seen;      /* tokens processed by all ranks (incl. prompt and padding) */
    double comm_wait;  /* seconds waited for the gradient exchange after backward */
    double first_ready; /* seconds from the last micro-batch's start to its first complete bucket (tn_trainer_step) */
    tn_step_times times; /* this rank's step by phase (tn_trainer_step only; zero from tn_trainer_next_logged) */
    int64_t samples;   /* this rank's share of the global batch (tn_trainer_step only) */
} tn_step_stats;

typedef struct tn_trainer tn_trainer; /* opaque: what the loop needs of it, tn_trainer_get_info says */

/* The run as the job and the monitor see it; step and samples_seen move with each step. */
typedef struct {
    const tn_train_config *cfg;
    tn_model *model;
    const tn_dataset *data;
    tn_comm *comm;           /* NULL: one process */
    int rank, world;
    int micro_batch, accum;  /* per-device batch, gradient accumulation steps */
    int64_t global_batch;    /* world x micro_batch x accum */
    int total_steps, warmup_steps;
    int step;                /* optimizer steps done */
    int64_t samples_seen;
    const char *sync;        /* the sync strategy that runs (strategy.h): "ddp", "zero", "compressed", "diloco" */
    int zero_stage;          /* ZeRO stage in effect (0: no sharding) */
    int balance;             /* balance_ranks in effect */
    int machine_local;       /* each machine steps alone (DiLoCo): a skip is the machine's, the log's numbers
                              * come when the round's exchange completes */
    int round;               /* steps between two exchanges between machines (1: every step) */
} tn_trainer_info;

/* Steps: max_steps if > 0, else ceil(num_train_epochs * n / global batch). */
int tn_trainer_total_steps(const tn_train_config *cfg, int n_samples, int world);
/* comm may be NULL (one process). NULL with tn_err on a bad bucket size. With cfg->zero_stage >= 1 on
 * several ranks the AdamW moments cover this rank's shard only (zero.h). hooks: the faults to inject (copied;
 * NULL: none). */
tn_trainer *tn_trainer_create(const tn_train_config *cfg, tn_model *model, const tn_dataset *data, tn_comm *comm,
                              const tn_test_hooks *hooks);
void tn_trainer_free(tn_trainer *t);
/* Mean loss over every trained token of `eval` (no dropout, no update), the samples shared out over the
 * ranks (sample i on rank i mod world) and summed; collective. NAN with tn_err on failure. */
double tn_trainer_eval(tn_trainer *t, const tn_dataset *eval);
/* One optimizer step; 0 ok, -1 on a non-finite loss/gradient (step skipped, tn_err set), -2 when the
 * exchange between machines failed or the model refused a micro-batch's images (tn_err). Before each
 * micro-batch's forward the model gets that micro-batch's images (tn_acts_set_images). */
int tn_trainer_step(tn_trainer *t, tn_step_stats *st);
/* The next step whose numbers are final for the log (the loss every rank sees): 1 with *st, or 0. Plain data
 * parallelism: the step just done; DiLoCo: the steps of a round once its exchange completed. */
int tn_trainer_next_logged(tn_trainer *t, tn_step_stats *st);
const tn_trainer_info *tn_trainer_get_info(const tn_trainer *t);
/* This rank's optimizer (ZeRO: its shard's moments). */
tn_adamw *tn_trainer_optimizer(const tn_trainer *t);
/* Resuming on rank 0: the position the checkpoint holds. */
void tn_trainer_set_position(tn_trainer *t, int step, int64_t samples_seen);
/* Collective: every rank takes rank 0's position and (unless each rank holds its own shard of them) its
 * optimizer moments. 0, or -1 + tn_err. */
int tn_trainer_sync_position(tn_trainer *t);
/* After the start-up broadcast (every rank holds the same whole model): the strategy starts from it (ZeRO
 * keeps this rank's shard, stage 3 of the parameters too; DiLoCo takes it as its consensus). */
void tn_trainer_start(tn_trainer *t);
/* Collective, after tn_trainer_start on a resumed run: restores from dir (rank 0's) the optimizer shards and
 * the exchange's state (sync_state.h); a line for what could not be restored exactly is kept for
 * tn_trainer_take_note. Agreed over the ranks: 0, -1 (this rank failed, tn_err) or -2 (another did). */
int tn_trainer_load_state(tn_trainer *t, const char *dir);
/* Checkpoints, collective, agreed as load_state (rc: this rank's failure so far, e.g. rank 0's folder): the
 * optimizer's shards (with_opt) and the exchange's state into dir (rank 0), and the parameters to save in place
 * (every one on every rank; DiLoCo: the consensus) until tn_trainer_save_end, which every rank calls. */
int tn_trainer_save_begin(tn_trainer *t, const char *dir, int with_opt, int rc);
void tn_trainer_save_end(tn_trainer *t);
/* The optimizer state to write with the weights (NULL: the ranks' shards, saved by tn_trainer_save_begin). */
const tn_adamw *tn_trainer_saved_optimizer(const tn_trainer *t);
/* Collective, at the end: every parameter on every rank for the final save. 0, or -1 + tn_err. */
int tn_trainer_full(tn_trainer *t);
/* A line for the log (a balance change, what a resume could not restore) once, or NULL. */
const char *tn_trainer_take_note(tn_trainer *t);
/* The banner's lines on the exchange between ranks (several ranks). */
void tn_trainer_describe(const tn_trainer *t, FILE *out);
/* Bytes this machine sends to the network per optimizer step (averaged over a DiLoCo round). */
double tn_trainer_bytes_per_step(const tn_trainer *t);
/* Benchmarks: the most parameter + gradient bytes resident inside the passes since the last call (ZeRO samples
 * them at every gather and release once tracking is on; 0 for the strategies that keep whole replicas), and
 * the activation workspace's bytes. */
void tn_trainer_track_peak(tn_trainer *t, int on);
size_t tn_trainer_peak_bytes(tn_trainer *t);
size_t tn_trainer_acts_bytes(const tn_trainer *t);
/* The sync strategies this build has, by name ("ddp, zero, ..."), for `tandem env`. */
void tn_trainer_strategies(char *out, size_t n);

#endif
