/* plan_check -- the plan beside the measurement: once a multi-rank run has timed its first steps, rank 0 prints
 * the step it measured next to what the plan (plan.h) predicts for this config on these machines, and warns when
 * another strategy is predicted more than twice as fast ("this run is link-bound: ..."). The link is what
 * `tandem bench allreduce` recorded between these machines (outputs/link_capacity.h); without a record the line
 * says so and predicts nothing. The prediction is also written to output_dir/tandem_plan.json for the dashboard. */
#ifndef TN_PLAN_CHECK_H
#define TN_PLAN_CHECK_H

#include <stdio.h>

#include "comm/comm.h"
#include "config/train_config.h"
#include "trainer/plan.h"

/* Rank 0, after the window of steps: step_s the mean step, compute_s the mean of its time not spent waiting for
 * an exchange, seq the mean tokens of a sequence. Prints one or two lines to out. */
void tn_plan_check(const tn_train_config *cfg, const tn_comm *comm, double step_s, double compute_s, double seq,
                   FILE *out);

/* The lines themselves, from predicted rows: the config's own prediction, and the warning when the best is more
 * than twice as fast as step_s ("link-bound" when the step waited longer than it computed). */
void tn_plan_verdict(const tn_train_config *cfg, const tn_plan_row rows[TN_PLAN_N], double step_s, double compute_s,
                     FILE *out);

#endif
