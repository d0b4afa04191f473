/* link_capacity -- what `tandem bench allreduce` measured between a set of machines, kept so that a later job on
 * the same machines can set its traffic beside it (the dashboard's links panel). One JSON line per measurement
 * in $TANDEM_BENCH_LOG, default ~/.cache/tandem/bench_allreduce.jsonl:
 *   {"hosts": [sorted machine names], "ranks": N, "bytes": B, "seconds": S, "machine_Bps": R, "time": UNIX,
 *    "link_cpu_ns": C}
 * machine_Bps is what tandem's all-reduce pushed through each machine's link: its leader sends 2 (M-1) / M of
 * the B bytes per call over M machines (and receives as much), in S seconds. link_cpu_ns: the CPU a machine
 * spent per byte it moved each way (processes + the kernel's interrupts; `tandem plan --link-cpu`), absent when
 * not measured. One machine has no such link: nothing is recorded. */
#ifndef TN_LINK_CAPACITY_H
#define TN_LINK_CAPACITY_H

#include <stddef.h>

/* hosts: each rank's machine name (duplicates fold); cpu_s_per_byte 0: not measured. 0, or -1 + tn_err. */
int tn_link_capacity_record(const char *const *hosts, int n_ranks, double bytes, double seconds, double cpu_s_per_byte);
/* The newest measurement between exactly these machines: 1 with *machine_Bps, its time (UNIX seconds) and, when
 * cpu_s_per_byte is not NULL, its CPU per byte (0 where that record has none); 0 when there is none (or the file
 * is absent). */
int tn_link_capacity_find(const char *const *hosts, int n_ranks, double *machine_Bps, double *when,
                          double *cpu_s_per_byte);
/* The file's path (malloc'ed). */
char *tn_link_capacity_path(void);

#endif
