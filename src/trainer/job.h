/* job -- one `tandem train` run end to end: config -> data -> model -> trainer -> outputs.
 * Everything the run prints goes to stdout (progress) or stderr (the one error line). */
#ifndef TN_JOB_H
#define TN_JOB_H

#include "config/train_config.h"

int tn_job_train(const tn_train_config *cfg);

#endif
