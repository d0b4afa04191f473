/* nlg_metrics -- LLaMA-Factory's ComputeSimilarity (train/sft/metric.py), the scores of predict_results.json.
 *
 * Per example, on the decoded prediction and label (special tokens skipped):
 *  - BLEU-4 over characters (Python's list(str): code points, spaces and newlines included) as nltk 3.8's
 *    sentence_bleu([list(label)], list(pred), smoothing_function=SmoothingFunction().method3) with weights 0.25 x 4:
 *    p_n = clipped n-gram matches / max(1, hypothesis n-grams); 0 when no unigram matches; method3 replaces the
 *    k-th zero p_n (k = 1, 2, ...) by 1 / (2^k denominator); brevity penalty 1 if c > r, 0 if c = 0, else
 *    exp(1 - r / c); score = bp exp(sum 0.25 log p_n).
 *  - ROUGE-1, -2, -L f-scores as rouge-chinese (a fork of pltrdy/rouge, rouge_score.py) computes them on the words
 *    joined by spaces: ROUGE-N counts DISTINCT n-grams of the whole text (sentences concatenated), P = overlap /
 *    hypothesis n-grams, R = overlap / reference n-grams, f = 2 P R / (P + R + 1e-8) (0 when a count is 0);
 *    ROUGE-L is the summary-level union LCS: for each reference sentence and each hypothesis sentence the LCS
 *    is reconstructed (walking back from the end: a match goes diagonally, else up when the cell above is
 *    strictly larger, else left) and its WORDS are collected in one set over all pairs; llcs = |set|,
 *    m and n = distinct words of reference and hypothesis, f = 2 P R / (P + R + 1e-8) with P = llcs / n,
 *    R = llcs / m. If either side has no word, all three are 0 (LF's rule).
 *  - each score x 100, rounded to 4 decimals (Python's round), per example.
 * Where tandem differs (README "Predict"): the words. LF segments with jieba (a dictionary of ~350k Chinese
 * words plus an HMM), which C does not have; tandem_words() below takes each Han character as a word, a run of
 * ASCII letters and digits (with a ".digits" fraction and a "%", as jieba's HMM keeps "3.14" and "50%") as one,
 * every other non-space character as one, and drops whitespace. Sentences (ROUGE-L) end after 。！？!? and at
 * newlines, as rouge-chinese splits on Chinese punctuation (its README; the exact rule of rouge-chinese 1.0.3
 * could not be consulted); pltrdy splits at "." only. */
#ifndef TN_NLG_METRICS_H
#define TN_NLG_METRICS_H

#include <stddef.h>

typedef struct {
    double bleu4, rouge1, rouge2, rougel; /* x 100, rounded to 4 decimals */
} tn_nlg_scores;

void tn_nlg_score(const char *pred, const char *label, tn_nlg_scores *out);

/* Unrounded scores in [0, 1] (for tests). */
double tn_bleu4_chars(const char *pred, const char *label);
void tn_rouge_words(const char *pred, const char *label, double *r1, double *r2, double *rl);

/* tandem's segmentation: the words of text, each a malloc'd string in *words[0..n) (free each and the array);
 * sentence_end[i] = 1 when a sentence ends after word i. Returns n. */
int tn_nlg_words(const char *text, char ***words, unsigned char **sentence_end);

#endif
