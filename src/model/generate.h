/* generate -- greedy completion of prompts with a tn_model. */
#ifndef TN_GENERATE_H
#define TN_GENERATE_H

#include "model/model.h"

/* ids [B, S] holds prompts of lengths lens[b]; appends up to max_new greedy tokens per row (stopping a
 * row at eos or S), updating lens. a must be a workspace of exactly B x S. Returns decoding steps run. */
int tn_generate_greedy(tn_model *m, tn_acts *a, int32_t *ids, int *lens, int B, int S, int max_new, int eos,
                       int pad);

#endif
