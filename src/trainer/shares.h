/* shares -- each rank's share of a step's global batch: equal, or following the ranks' measured speed
 * (balance_ranks: true; the model and its rules are balance.h's). A property of the training loop that any
 * sync strategy may allow (DiLoCo: each machine steps on its ranks' shares, and its pseudo-gradient counts by
 * the samples it trained, diloco.h).
 *
 * Owns the shares, the measurement window and the speed exchange every BALANCE_WINDOW steps, and their place
 * in a checkpoint (sync_state.h's "balance.shares", so a resumed run goes on with the same split). */
#ifndef TN_SHARES_H
#define TN_SHARES_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "trainer/sync_state.h"

typedef struct tn_shares tn_shares;

/* per_rank samples each (ranks x per_rank the global batch); balance: follow the measured speeds. */
tn_shares *tn_shares_create(tn_comm *c, int world, int64_t per_rank, int balance);
void tn_shares_free(tn_shares *s);
int tn_shares_balancing(const tn_shares *s);
/* Rank r's share, and the samples of the global batch before it. */
int64_t tn_shares_of(const tn_shares *s, int r);
int64_t tn_shares_first(const tn_shares *s, int r);
/* The most samples a rank can be given (its staging room). */
int64_t tn_shares_most(const tn_shares *s);
/* After step `step` (counted from 1) when balancing: this rank's seconds of fixed work (batch assembly,
 * clipping, the optimizer) and of forward+backward, and its samples. Every BALANCE_WINDOW steps the ranks'
 * costs are gathered (collective) and every rank derives the same new shares; a change is said in *note. 0,
 * or -1 + tn_err. */
int tn_shares_measure(tn_shares *s, int step, double fixed, double fb, int64_t samples, char *note, size_t n);
/* Checkpoints: the shares into job's list (when balancing); back from it when they fit this run. */
void tn_shares_save(const tn_shares *s, tn_state *job);
void tn_shares_load(tn_shares *s, const tn_state *job);

#endif
