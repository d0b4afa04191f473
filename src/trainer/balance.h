/* balance -- each rank's share of the global batch, following its measured speed (balance_ranks: true).
 *
 * The global batch stays ranks x per_device_train_batch_size x gradient_accumulation_steps samples; rank r
 * takes share[r] of them (the contiguous slice after the shares of ranks 0..r-1), in micro-batches of at
 * most per_device_train_batch_size. The loss is normalised by the global batch's trained tokens and dropout
 * masks are drawn per global row, so the update does not depend on the split (up to the rounding of a
 * different summation order, the bound of tests/cli/test_dp_split.sh).
 *
 * Model of one step on rank r: fixed[r] (batch assembly, clipping, the optimizer: the same work whatever the
 * share) + per[r] x share[r] (forward and backward per sample). The exchange starts when the last rank is
 * done, so the step takes max_r(fixed[r] + per[r] share[r]); the shares that equalise the ranks solve
 * fixed[r] + per[r] share[r] = T with sum share = global. Every `window` steps the ranks' measured times are
 * gathered and every rank computes the same new shares from the same numbers. A change is made only when
 * it shortens the predicted step by at least 3%, and moves each share by at most a quarter of itself (at
 * least one sample) per window, so one noisy window cannot swing the split; a rank keeps >= 1 sample. */
#ifndef TN_BALANCE_H
#define TN_BALANCE_H

#include <stdint.h>

/* Pure: the next shares from the measured fixed and per-sample seconds of each rank and the current shares
 * (summing to global). Writes out (sums to global) and returns 1 when they change, else copies cur and
 * returns 0. A rank with no measurement (per <= 0) keeps its share's cost unknown: nothing changes. */
int tn_balance_split(int world, int64_t global, const double *fixed, const double *per, const int64_t *cur,
                     int64_t *out);
/* The step time max_r(fixed[r] + per[r] share[r]) the model predicts. */
double tn_balance_predict(int world, const double *fixed, const double *per, const int64_t *share);

#endif
