/* dash_view -- one run's output folder as the dashboard shows it. Follows trainer_log.jsonl (LLaMA-Factory's log:
 * the loss and eval loss points, exactly as written), tandem_ranks.jsonl (outputs/rank_log.h: the job's shape, each
 * step's time per rank, memory, links, checkpoints, the end) and tandem_plan.json (`tandem plan`'s prediction, when
 * a run has one) as they grow, and turns what is new into the store's parts for that run:
 *   info         {name, dir, live, status: running | finished | failed, updated: UNIX time of the last change}
 *   points       trainer_log's training lines {step, loss, lr, epoch, elapsed}; evals: {step, eval_loss, epoch, elapsed}
 *   extras       per logging step {step, time, grad_norm, tokens_per_s}
 *   job          the job line as written
 *   steps        the newest STEPS_KEPT step lines as written
 *   ranks        each rank's mean step over the newest RANK_WINDOW complete steps {from, to, ranks: [{rank, data,
 *                compute, wait, optimizer, samples, per_sample}]}
 *   straggler    {rank, host, ratio, since} when one rank has been the slowest per sample, by STRAGGLER_RATIO or
 *                more over the median, for STRAGGLER_WINDOWS windows of STRAGGLER_STEPS steps in a row; rank -1 (and
 *                the last window's ratio) otherwise
 *   memory, links  the newest of each {step, ranks | machines}; eta {step, total, time, step_s, remaining_s}
 *   checkpoints  {step, time, dir}; plan: tandem_plan.json's object, or null
 * A file that was rewritten (a resumed run starts its logs over) resets the run and is read again. */
#ifndef TN_DASH_VIEW_H
#define TN_DASH_VIEW_H

#include "serve/dash_store.h"

#define STEPS_KEPT 300
#define RANK_WINDOW 20
#define STRAGGLER_STEPS 10
#define STRAGGLER_WINDOWS 3
#define STRAGGLER_RATIO 1.15

typedef struct tn_view tn_view;

/* name: how the run is labelled (its folder's name). live: the run in progress that serves the page. */
tn_view *tn_view_new(tn_store *s, int run, const char *dir, const char *name, int live);
/* Reads what the files gained since the last call into the store (not committed). */
void tn_view_poll(tn_view *v);
void tn_view_free(tn_view *v);

#endif
