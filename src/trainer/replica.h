/* replica -- what makes the data-parallel ranks replicas of one run.
 *
 * Owns the start-up agreement: every rank belongs to the same job (its secret), runs the same build (hash
 * of the executable) with the same config (hash of the YAML bytes and command-line overrides), checked before any training, with one error
 * line naming the first rank and host that differs; every rank starts from rank 0's trainable parameters
 * (broadcast) and holds the same frozen weights (hash compared, so a machine with another model file is
 * named rather than silently training a different model); and every rank learns whether any rank failed
 * a local step (reading its files), so nobody waits on a rank that has already given up. */
#ifndef TN_REPLICA_H
#define TN_REPLICA_H

#include <stdint.h>

#include "comm/comm.h"
#include "model/model.h"
#include "trainer/optimizer.h"

/* Hash of /proc/self/exe: two ranks with equal values run the same binary. 0 + tn_err if unreadable. */
uint64_t tn_build_fingerprint(void);
/* Compare (build, config, job secret) with every rank; -1 + tn_err naming the first mismatching rank and
 * host. The secret is a hash of $TANDEM_JOB_SECRET, which `tandem launch` draws at random per job. */
int tn_replica_check_fingerprints(tn_comm *c, uint64_t build, uint64_t config, uint64_t secret);
/* Broadcast rank 0's trainable parameters; compare the frozen ones' hash. -1 + tn_err on a mismatch. */
int tn_replica_sync_params(tn_comm *c, tn_model *m);
/* Broadcast rank 0's position and, with moments, its optimizer moments (after a resume on rank 0; cheap
 * when nothing was resumed: the moments are then zero everywhere, and only the position is sent). Sharded
 * runs pass moments = 0: each rank gets its own shard (zero.h). */
int tn_replica_sync_position(tn_comm *c, tn_adamw *opt, int *step, int64_t *samples_seen, int moments);
/* Collective: ok = 0 on this rank's success. Returns the lowest failing rank, or -1 when all succeeded. */
int tn_replica_first_failure(tn_comm *c, int failed);
/* Collective, after a local step that may fail (rc != 0): 0 when every rank succeeded, else -1 on the lowest
 * failing rank (it reports its tn_err) and -2 on the others, so that no rank goes on to wait for one that has
 * stopped. */
int tn_replica_agree(tn_comm *c, int rc);

#endif
