/* generate.c -- greedy decoding with the full-forward model (no KV cache: the demo's sequences are
 * short, and one code path for training and inference keeps them in agreement). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/generate.h"

int tn_generate_greedy(tn_model *m, tn_acts *a, int32_t *ids, int *lens, int B, int S, int max_new, int eos,
                       int pad) {
    float *logits = tn_xmalloc((size_t)B * S * m->V * sizeof *logits);
    int *done = tn_xcalloc((size_t)B, sizeof *done);
    for (int b = 0; b < B; b++)
        for (int s = lens[b]; s < S; s++) ids[(size_t)b * S + s] = pad;
    int steps = 0;
    for (; steps < max_new; steps++) {
        int active = 0;
        for (int b = 0; b < B; b++) active += !done[b] && lens[b] < S;
        if (!active) break;
        tn_model_logits(m, a, ids, B, S, logits);
        for (int b = 0; b < B; b++) {
            if (done[b] || lens[b] >= S) continue;
            const float *row = logits + ((size_t)b * S + lens[b] - 1) * m->V;
            int best = 0;
            for (int v = 1; v < m->V; v++) best = row[v] > row[best] ? v : best;
            ids[(size_t)b * S + lens[b]++] = best;
            done[b] = best == eos;
        }
    }
    free(logits);
    free(done);
    return steps;
}

/* One draw from logits row[V] under sp (greedy when not sampling). work: V floats + V ints. */
static int32_t pick(const float *row, int V, const tn_sampling *sp, tn_rng *rng, float *prob, int *idx) {
    int best = 0;
    for (int v = 1; v < V; v++) best = row[v] > row[best] ? v : best;
    if (!sp->do_sample || sp->temperature <= 0) return best;
    /* softmax of row / T over the top_k tokens, most likely first. Without top_k the 1024 most likely
     * stand in for the whole vocabulary (only top_p = 1 would notice the tail's missing mass). */
    int k = sp->top_k > 0 ? sp->top_k : 1024;
    k = k < V ? k : V;
    for (int v = 0; v < V; v++) idx[v] = v;
    for (int i = 0; i < k; i++) { /* partial selection sort: the top k in front (k is 50 by default) */
        int m = i;
        for (int v = i + 1; v < V; v++) m = row[idx[v]] > row[idx[m]] ? v : m;
        int t = idx[i];
        idx[i] = idx[m], idx[m] = t;
    }
    double sum = 0, mx = row[idx[0]];
    for (int i = 0; i < k; i++) sum += prob[i] = (float)exp((row[idx[i]] - mx) / sp->temperature);
    double keep = 0;
    int n = 0;
    while (n < k && (n == 0 || keep < sp->top_p * sum)) keep += prob[n++];
    double u = (double)(tn_rng_next(rng) >> 11) * 0x1.0p-53 * keep, acc = 0;
    for (int i = 0; i < n; i++)
        if ((acc += prob[i]) >= u) return idx[i];
    return idx[n - 1];
}

int tn_generate(tn_model *m, tn_acts *a, int32_t *ids, int len, int S, const tn_sampling *sp, const int32_t *eos,
                int n_eos) {
    float *logits = tn_xmalloc((size_t)S * m->V * sizeof *logits), *prob = tn_xmalloc((size_t)m->V * sizeof *prob);
    int *idx = tn_xmalloc((size_t)m->V * sizeof *idx);
    tn_rng rng;
    tn_rng_seed(&rng, sp->seed);
    int added = 0;
    for (int s = len; s < S; s++) ids[s] = 0;
    while (added < sp->max_new && len + added < S) {
        tn_model_logits(m, a, ids, 1, S, logits);
        int V = sp->n_vocab > 0 && sp->n_vocab < m->V ? sp->n_vocab : m->V;
        int32_t t = pick(logits + (size_t)(len + added - 1) * m->V, V, sp, &rng, prob, idx);
        int stop = 0;
        for (int e = 0; e < n_eos; e++) stop |= t == eos[e];
        if (stop) break;
        ids[len + added++] = t;
    }
    free(logits), free(prob), free(idx);
    return added;
}
