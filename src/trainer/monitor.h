/* monitor -- what each rank's steps cost, gathered on rank 0 into tandem_ranks.jsonl (outputs/rank_log.h) for the
 * dashboard and `tandem dashboard`. Every rank, after each step, puts its step's phases (tn_step_times), its
 * samples, now and then its memory (every 2 s) and, on the first rank of each machine, that machine's link
 * traffic (every 0.5 s, from /proc/net/dev), into a note of about 50 bytes that goes to rank 0 over the comm layer
 * without being waited for (comm.h: notes to rank 0). Rank 0 writes one line per step once every rank's note for
 * it is in (or, when one is lost, 64 steps later with that rank's entry null). No collective runs after the
 * start: a slow rank 0 drops notes, it never holds a step back.
 *
 * Cost: the time spent in these calls is kept on every rank (tn_monitor_cost) and reported with the run. */
#ifndef TN_MONITOR_H
#define TN_MONITOR_H

#include "trainer/trainer.h"

typedef struct tn_monitor tn_monitor;

/* Collective, once training is about to start (every rank, after the start-up broadcast): each rank's host,
 * threads and device are gathered; with topology, each machine's first rank runs `tandem topo` and rank 0 gets
 * the reports. Rank 0 opens output_dir/tandem_ranks.jsonl (kept up to the trainer's step on a resume) and writes
 * the job line. NULL + tn_err (every rank: the gather failed; rank 0: the file). */
tn_monitor *tn_monitor_start(const tn_trainer *t, tn_comm *comm, int topology);
/* When training started (tn_now()): the lines' "time" counts from it. */
void tn_monitor_clock(tn_monitor *m, double t0);
/* Every rank, after each tn_trainer_step that returned 0 or -1 (st from it); steps between two step lines (more
 * than 16 ranks) cost nothing. Never waits for another rank. */
void tn_monitor_step(tn_monitor *m, const tn_step_stats *st);
/* Rank 0: a logging step's numbers that trainer_log.jsonl has no key for; a checkpoint written; the end. */
void tn_monitor_log(tn_monitor *m, int step, double grad_norm, double tokens_per_s);
void tn_monitor_checkpoint(tn_monitor *m, int step, const char *dir);
void tn_monitor_end(tn_monitor *m, int failed);
/* Seconds this rank spent in the monitor so far; rank 0: also the largest any rank reported (*worst, may be
 * NULL), and the mean step time it saw. */
double tn_monitor_cost(const tn_monitor *m, double *worst);
void tn_monitor_free(tn_monitor *m);

#endif
