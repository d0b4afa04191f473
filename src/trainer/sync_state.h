/* sync_state -- the state of the exchange between ranks that a checkpoint must hold to resume exactly:
 * compression residuals (one per rank), the ranks' shares of the global batch, DiLoCo's outer state and each
 * machine's own parameters and optimizer moments.
 *
 * Owns a small list of named arrays (f32, f64, i64) and its files in a checkpoint folder, all written by
 * rank 0 (so one folder is the whole checkpoint, as with ZeRO's shards):
 *   sync-state.safetensors            the job's (rank 0's list: the same on every rank)
 *   sync-rank-<r>-of-<W>.safetensors  rank r's own list, when it is not empty
 * Names starting with "machine." belong to the rank's machine: they are written once, in the file of the
 * machine's first rank, and handed at load to every rank of that machine. A checkpoint taken at another
 * world size has no per-rank files for this one: each rank then loads nothing (its owner starts afresh). */
#ifndef TN_SYNC_STATE_H
#define TN_SYNC_STATE_H

#include <stddef.h>

#include "comm/comm.h"
#include "model/safetensors.h"

typedef struct tn_state tn_state;

tn_state *tn_state_new(void);
void tn_state_free(tn_state *s);
/* Adds a copy of n values of dtype (ST_F32, ST_F64 or ST_I64) under name (replacing one of that name). */
void tn_state_put(tn_state *s, const char *name, st_dtype dtype, const void *data, size_t n);
/* The values stored under name, when their dtype is dtype: *n gets their count. NULL when absent. */
const void *tn_state_get(const tn_state *s, const char *name, st_dtype dtype, size_t *n);
int tn_state_empty(const tn_state *s);

/* Collective (comm NULL: one process). Rank 0 writes the job's list and every rank's (sent to it) into dir;
 * dir matters on rank 0 only. 0, or -1 + tn_err on the rank that failed (rank 0 keeps receiving after a
 * write error, so that nobody waits forever). */
int tn_state_save(tn_comm *c, const char *dir, const tn_state *mine, const tn_state *job);
/* Collective: rank 0 reads dir's files and hands each rank its list (*mine) and everyone the job's (*job);
 * either is an empty list when the checkpoint has none. dir matters on rank 0 only. */
int tn_state_load(tn_comm *c, const char *dir, tn_state **mine, tn_state **job);

#endif
