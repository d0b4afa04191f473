/* rank_log -- tandem_ranks.jsonl, tandem's own log beside LLaMA-Factory's trainer_log.jsonl: what the
 * trainer's log has no key for, for `tandem dashboard` and the live dashboard (serve/dashboard.h) to show.
 * Written by rank 0 (trainer/monitor.c builds the lines), one JSON object a line, flushed line by line; every
 * line has "kind" and "step":
 *   job         the job's shape when training starts (step: the step it starts from): ranks, machines, each
 *               rank's host, threads and device, ZeRO stage and formula, the strategy's bytes per step, the
 *               link capacity `tandem bench allreduce` measured, each machine's `tandem topo` report
 *   step        one optimizer step (every step up to 16 ranks; beyond, every ceil(ranks / 16)th, so that the
 *               log grows by about 16 ranks' worth a step): "time" (seconds since training started), "ranks":
 *               per rank [data, compute, wait, optimizer] seconds and its samples, or null when its note did
 *               not arrive; now and then
 *               "memory" (per rank [parameters, gradients, optimizer state, resident] bytes or null) and
 *               "links" (per machine [bytes/s in, bytes/s out] or null)
 *   log         a logging step: "time", "grad_norm", "tokens_per_s" (trainer_log.jsonl has the loss and lr)
 *   checkpoint  a checkpoint written: "time", "dir"
 *   end         "status": finished or failed
 * A resumed run keeps the lines up to the step it resumes from (as trainer_log.jsonl does) and goes on. */
#ifndef TN_RANK_LOG_H
#define TN_RANK_LOG_H

typedef struct tn_rank_log tn_rank_log;

#define TN_RANK_LOG_NAME "tandem_ranks.jsonl"

/* Opens output_dir/tandem_ranks.jsonl: resume_step > 0 keeps its lines with "step" <= resume_step (a torn last
 * line is dropped), otherwise it starts empty. NULL + tn_err. */
tn_rank_log *tn_rank_log_open(const char *output_dir, int resume_step);
/* Appends one line (a JSON object without its newline) and flushes. 0 or -1 + tn_err. */
int tn_rank_log_line(tn_rank_log *l, const char *json);
void tn_rank_log_close(tn_rank_log *l);

#endif
