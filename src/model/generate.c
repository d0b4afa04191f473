/* generate.c -- greedy decoding with the full-forward model (no KV cache: the demo's sequences are
 * short, and one code path for training and inference keeps them in agreement). */
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
