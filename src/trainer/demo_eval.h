/* demo_eval -- what the bundled demo learned: held-out accuracy and sample completions. */
#ifndef TN_DEMO_EVAL_H
#define TN_DEMO_EVAL_H

#include "data/dataset.h"
#include "model/model.h"

/* Greedy-completes every held-out prompt of `eval` and prints accuracy plus `show` examples.
 * Returns the accuracy in [0, 1]. */
double tn_demo_report(tn_model *m, const tn_dataset *eval, int show);

#endif
