/* trainer -- the optimizer-step loop: micro-batches, loss normalisation, clipping, schedule, AdamW.
 *
 * Owns one training run's state (model, workspace, optimizer, sampler position) on one rank. A step's
 * global batch is the next ranks x per-device batch x gradient_accumulation_steps samples of the sampler's
 * stream (one shuffle per epoch from seed + epoch; an epoch's last global batch is completed from the next
 * epoch's shuffle, so every sample is used exactly once per epoch across all ranks). Rank r takes the
 * contiguous slice [r * B * accum, (r + 1) * B * accum) of it. The loss is normalised by the trained tokens
 * of the whole global batch, counted (and summed over ranks) before any forward pass, so how the batch is
 * split into ranks and micro-batches does not change the update. Gradients are exchanged once per step
 * (grad_sync.h, compressed between machines with comm_compression); every rank then applies the identical
 * update. With balance_ranks the ranks' shares of the global batch follow their measured speed (balance.h):
 * rank r then takes the share[r] samples after those of ranks 0..r-1. With sync_mode: diloco (diloco.h) the
 * gradients are summed inside each machine only, the loss is normalised by the machine's trained tokens,
 * each machine steps alone and the machines meet every diloco_inner_steps steps; the numbers the log shows
 * are then summed over machines when that exchange completes (tn_trainer_next_logged). */
#ifndef TN_TRAINER_H
#define TN_TRAINER_H

#include "comm/comm.h"
#include "config/train_config.h"
#include "data/dataset.h"
#include "model/model.h"
#include "trainer/optimizer.h"
#include "trainer/sync_state.h"
#include "trainer/test_hooks.h"
#include "trainer/zero.h"

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
    tn_step_times times; /* this rank's step by phase (tn_trainer_step only; zero from tn_trainer_next_logged) */
    int64_t samples;   /* this rank's share of the global batch (tn_trainer_step only) */
} tn_step_stats;

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
    struct tn_diloco *diloco; /* sync_mode: diloco on several ranks */
    int codec;               /* tn_codec of the exchange between machines (0: fp32) */
    int64_t *share;          /* [world] samples of the global batch per rank (balance.h) */
    int balance;             /* balance_ranks on several ranks */
    double bal_fixed, bal_fb, bal_samples; /* this rank's seconds (fixed, forward+backward) and samples, window */
    int bal_steps;
    char note[512];          /* a line for the log (balance changes), printed and cleared by the caller */
    int has_final;           /* final: the last step's numbers (not DiLoCo, where they come later) */
    tn_step_stats final;
    tn_sampler sampler;
    int micro_batch, accum;  /* per-device batch, gradient accumulation steps */
    int total_steps, warmup_steps;
    int step;                /* optimizer steps done */
    int64_t samples_seen;
    int32_t *ids, *labels;   /* [micro-batches, micro_batch, S] host staging of this rank's share of a step */
    int *lens, *rows;        /* per micro-batch: padded length (<= S), samples (<= micro_batch) */
    tn_mm_buf mm;            /* the images of the micro-batch about to run (vision-language data) */
    tn_test_hooks hooks;     /* the faults a test injects (test_hooks.h) */
    double slow_last;        /* seconds the last micro-batch computed (before the injected slowdown) */
} tn_trainer;

/* Steps: max_steps if > 0, else ceil(num_train_epochs * n / global batch). */
int tn_trainer_total_steps(const tn_train_config *cfg, int n_samples, int world);
/* comm may be NULL (one process). NULL with tn_err on a bad bucket size. With cfg->zero_stage >= 1 on
 * several ranks the AdamW moments cover this rank's shard only (zero.h). hooks: the faults to inject (copied;
 * NULL: none). */
tn_trainer *tn_trainer_create(const tn_train_config *cfg, tn_model *model, const tn_dataset *data, tn_comm *comm,
                              const tn_test_hooks *hooks);
/* Sharded runs: once every rank holds the same whole model (after the start-up broadcast), shard it
 * (stage 3 keeps only this rank's parameters from here on). Nothing for stage 0. */
void tn_trainer_shard(tn_trainer *t);
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
/* After the start-up broadcast (every rank holds the same parameters): DiLoCo takes them as its consensus. */
void tn_trainer_start(tn_trainer *t);
/* Checkpoints, collective: the exchange's state (sync_state.h) into dir (rank 0), and the parameters to save
 * in place until tn_trainer_save_end (DiLoCo: the consensus). */
int tn_trainer_save_begin(tn_trainer *t, const char *dir);
void tn_trainer_save_end(tn_trainer *t);
/* Collective, after tn_trainer_start on a resumed run: restores that state from dir (rank 0's); a line for
 * what could not be restored exactly goes into t->note. 0 or -1 + tn_err. */
int tn_trainer_load_state(tn_trainer *t, const char *dir);
/* Bytes this machine sends to the network per optimizer step (averaged over a DiLoCo round). */
double tn_trainer_bytes_per_step(const tn_trainer *t);

#endif
