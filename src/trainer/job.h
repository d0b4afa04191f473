/* job -- one `tandem train` run end to end: config -> data -> model -> trainer -> outputs.
 * Everything the run prints goes to stdout (progress) or stderr (the one error line). */
#ifndef TN_JOB_H
#define TN_JOB_H

#include "comm/comm.h"
#include <stdint.h>

#include "config/train_config.h"

/* Runs on every rank of comm (one rank when not launched by mpirun). 0 ok; -1 failed, this rank reports
 * tn_errmsg(); -2 failed on another rank, which reports it. */
int tn_job_train(const tn_train_config *cfg, tn_comm *comm, uint64_t config_fingerprint);

#endif
