/* link_capacity -- what `tandem bench allreduce` measured between a set of machines, kept so that a later job on
 * the same machines can set its traffic beside it (the dashboard's links panel). One JSON line per measurement
 * in $TANDEM_BENCH_LOG, default ~/.cache/tandem/bench_allreduce.jsonl:
 *   {"hosts": [sorted machine names], "ranks": N, "bytes": B, "seconds": S, "machine_Bps": R, "time": UNIX}
 * machine_Bps is what tandem's all-reduce pushed through each machine's link: its leader sends 2 (M-1) / M of
 * the B bytes per call over M machines (and receives as much), in S seconds. One machine has no such link:
 * nothing is recorded. */
#ifndef TN_LINK_CAPACITY_H
#define TN_LINK_CAPACITY_H

#include <stddef.h>

/* hosts: each rank's machine name (duplicates fold). 0, or -1 + tn_err. */
int tn_link_capacity_record(const char *const *hosts, int n_ranks, double bytes, double seconds);
/* The newest measurement between exactly these machines: 1 with *machine_Bps and its time (UNIX seconds), 0
 * when there is none (or the file is absent). */
int tn_link_capacity_find(const char *const *hosts, int n_ranks, double *machine_Bps, double *when);
/* The file's path (malloc'ed). */
char *tn_link_capacity_path(void);

#endif
