/* diloco -- DiLoCo between machines (sync_mode: diloco): local training in rounds, outer steps on
 * pseudo-gradients, the exchange overlapped with the next round.
 *
 * Inside a machine the ranks stay in step: their gradients are summed every step through shared memory
 * (grad_sync.h's machine-local mode) and all run the same AdamW update, so they hold the same parameters x
 * and the same moments; AdamW's state never leaves the machine. Between machines nothing moves during a
 * round of H = diloco_inner_steps steps. At a round's end the machine's pseudo-gradient D = s - x (s: its
 * parameters at the round's start) is averaged over the machines (exchange.h: fp32, or bf16 / int8 / int4 with
 * error feedback) and the outer optimizer, SGD with Nesterov momentum as in the DiLoCo paper, moves the
 * consensus g, which every machine holds bit-identical:
 *   v = mu v + D_mean;  g -= lr_outer (D_mean + mu v)    (without Nesterov: g -= lr_outer v)
 * (lr_outer 1, mu 0, tandem's defaults: g moves by the mean progress, local SGD's averaging.)
 * Overlap (diloco_overlap: true, the default; "one round late" as streaming / eager DiLoCo apply it): at the
 * end of round k each machine starts D_k's exchange in the background, applies round k-1's mean (whose
 * exchange ran during round k) to g, and goes on from x = g - D_k: the agreed parameters plus its own progress
 * that is not agreed yet, which the mean replaces at the next round's end. So the link is never waited on as
 * long as one exchange takes less than a round of compute. Without overlap every machine waits for the mean
 * and restarts from x = g. With one machine, lr_outer 1 and momentum 0, both reduce to plain training.
 * Weights (balance_ranks, shares.h): when the machines' shares of the global batch differ, D_mean is the
 * average weighted by the samples each machine trained in the round, sum_m (n_m / n) D_m, as data parallelism
 * weights every sample alike: each machine sends M (n_m / n) D_m to the exchange's mean (error feedback keeps
 * what its codec lost of that). Equal shares leave D exactly as it is.
 * The last step of training ends with a synchronous exchange: every machine finishes with the same g.
 *
 * The loss every rank sees: each step's loss sum, token counts and gradient norm per machine travel with the
 * round's exchange and come back summed over machines, so the logged loss of a step (tn_diloco_pop) is the
 * mean over all machines' trained tokens, as in data parallelism, available when that exchange completes.
 * A machine that skips a step (non-finite loss) says so in the same numbers; round boundaries fall on the same
 * steps on every machine whatever each skipped.
 * Parameter loops run on host memory (the CPU backend). */
#ifndef TN_DILOCO_H
#define TN_DILOCO_H

#include <stddef.h>

#include "comm/comm.h"
#include "comm/compress.h"
#include "model/model.h"
#include "trainer/optimizer.h"
#include "trainer/sync_state.h"

typedef struct tn_diloco tn_diloco;

typedef struct {
    int inner_steps;                /* H */
    double outer_lr, outer_momentum;
    int nesterov, overlap;
    tn_codec codec;
} tn_diloco_config;

/* One step's numbers: the machine's (tn_diloco_step_done), or summed over machines (tn_diloco_pop). */
typedef struct {
    int step;
    double loss_sum, tokens, seen; /* loss summed over trained tokens; trained tokens; tokens processed */
    double grad_norm;              /* pop: the mean over the machines that did not skip */
    int skipped;                   /* pop: machines that skipped the step */
    double samples, batch;         /* step_done: the machine's samples, of the global batch (0, 0: unknown) */
} tn_diloco_step;

/* NULL + tn_err when the machines' rank counts differ. */
tn_diloco *tn_diloco_create(tn_comm *c, tn_model *m, const tn_diloco_config *cfg);
void tn_diloco_free(tn_diloco *d);
/* Every rank holds the same trainable parameters (after the start-up broadcast, or after the synchronous
 * steps of diloco_sync_steps): they become g and the round's start, the outer momentum is zero. Rounds end at
 * the steps first + k H (first: diloco_sync_steps, the steps before the rounds; 0 without). */
void tn_diloco_start(tn_diloco *d, int first);
/* After the machine's step s->step (counted from 1; skipped: the parameters did not move). Ends the round at
 * (s->step - first) % H == 0 or when last. 0, or -1 + tn_err when the exchange failed. */
int tn_diloco_step_done(tn_diloco *d, const tn_diloco_step *s, int last);
/* The next step whose numbers are summed over machines: 1 with *out, or 0. */
int tn_diloco_pop(tn_diloco *d, tn_diloco_step *out);
/* Swaps the parameters x and the consensus g (twice: back): evaluation and saving see the consensus. */
void tn_diloco_swap(tn_diloco *d);
/* The outer steps skipped because a mean pseudo-gradient was not finite (reset by reading). */
int tn_diloco_take_skipped_outer(tn_diloco *d);
/* Bytes this machine sends per round (0 with one machine). */
size_t tn_diloco_round_bytes(const tn_diloco *d);
/* Checkpoints (collective through sync_state.h): save waits for an exchange in flight (not applied); load
 * restores the state of a checkpoint taken with the same machines, ranks, H, compression and first (rounds
 * aligned alike) and returns 1,
 * or starts afresh from the loaded (consensus) parameters and returns 0 with *why saying what differs.
 * opt: this rank's AdamW (each machine's moments and step count are its own). */
int tn_diloco_save(tn_diloco *d, const tn_adamw *opt, tn_state *mine, tn_state *job);
int tn_diloco_load(tn_diloco *d, tn_adamw *opt, const tn_state *mine, const tn_state *job, char *why, size_t n);

#endif
