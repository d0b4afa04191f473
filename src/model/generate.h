/* generate -- greedy completion of prompts with a tn_model. */
#ifndef TN_GENERATE_H
#define TN_GENERATE_H

#include "model/model.h"

/* ids [B, S] holds prompts of lengths lens[b]; appends up to max_new greedy tokens per row (stopping a
 * row at eos or S), updating lens. a must be a workspace of exactly B x S. Returns decoding steps run. */
int tn_generate_greedy(tn_model *m, tn_acts *a, int32_t *ids, int *lens, int B, int S, int max_new, int eos,
                       int pad);

/* Sampling as HF's generate does it (LLaMA-Factory's chat defaults: do_sample, temperature 0.95, top_p 0.7,
 * top_k 50): logits / temperature, keep the top_k, keep the smallest set whose probability reaches top_p,
 * draw. temperature <= 0 or !do_sample: greedy. One sequence; stops at any of eos[0..n_eos) (not appended) or
 * after max_new tokens or at S. Returns the number of tokens appended to ids (after len).
 * n_vocab: the tokenizer's size. Checkpoints pad the embedding beyond it (Qwen: 151936 rows for 151669
 * tokens); ids >= n_vocab have no text, so they are never drawn (0: every row of the model may be). */
typedef struct {
    int do_sample, top_k, max_new, n_vocab;
    double temperature, top_p;
    uint64_t seed;
} tn_sampling;
int tn_generate(tn_model *m, tn_acts *a, int32_t *ids, int len, int S, const tn_sampling *sp, const int32_t *eos,
                int n_eos);

#endif
