/* sampling -- the next token from a row of logits, as transformers' generate() picks it.
 *
 * Order and formulas of HF's logits processors (generation/utils.py _get_logits_processor, logits_process.py):
 *   1. repetition_penalty (when != 1): each distinct id among the sequence so far (prompt + generated) once:
 *      x < 0 ? x * p : x / p, on the raw logits;
 *   then only when do_sample:
 *   2. temperature (when != 1): x / T;
 *   3. top_k (when > 0): k = min(top_k, V); every x below the k-th largest is removed (ties at it stay);
 *   4. top_p (when < 1): ascending order, softmax, cumulative sum; ids whose cumulative mass is <= 1 - top_p are
 *      removed, never the largest: the smallest head holding at least top_p of the mass survives;
 *   5. softmax over what is left and one draw (torch.multinomial); without do_sample: argmax, lowest id on ties.
 * Logits are fp32 as HF casts them; softmax and sums here are in double. Ids >= n_vocab (rows a checkpoint pads
 * its embedding with, beyond the tokenizer: Qwen 151936 rows for 151669 tokens) are never picked: they decode to
 * nothing (HF lets them take part; they carry ~0 mass in a trained model). Draws come from tn_rng: the same seed
 * gives the same tokens, but not torch's. */
#ifndef TN_SAMPLING_H
#define TN_SAMPLING_H

#include <stdint.h>

#include "core/core.h"

typedef struct {
    int do_sample;             /* LF default true */
    double temperature;        /* > 0 (LF 0.95); <= 0 means greedy, as LF's API maps temperature 0 */
    double top_p;              /* (0, 1] (LF 0.7) */
    int top_k;                 /* >= 0, 0 off (LF 50) */
    double repetition_penalty; /* > 0, 1 off (LF 1.0) */
    int max_new;               /* new tokens at most (LF max_new_tokens 1024) */
    int n_vocab;               /* the tokenizer's size; 0: every row of the model */
    uint64_t seed;
} tn_sampling;

/* LLaMA-Factory's generating defaults (do_sample, T 0.95, top_p 0.7, top_k 50, penalty 1, 1024 new tokens). */
tn_sampling tn_sampling_defaults(void);

typedef struct tn_token_sampler tn_token_sampler; /* scratch for a vocabulary of V (one per thread that samples) */
tn_token_sampler *tn_token_sampler_create(int V);
void tn_token_sampler_free(tn_token_sampler *s);

/* The next token after logits[V] for a sequence whose ids so far are seen[0..n_seen). */
int32_t tn_sample(tn_token_sampler *s, const float *logits, int V, const tn_sampling *sp, const int32_t *seen, int n_seen,
                  tn_rng *rng);
/* The distribution tn_sample draws from: probs[V] (0 for removed ids; greedy: 1 at the argmax). For tests. */
void tn_sampling_probs(tn_token_sampler *s, const float *logits, int V, const tn_sampling *sp, const int32_t *seen,
                       int n_seen, double *probs);

#endif
