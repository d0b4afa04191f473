/* demo_eval.c -- see demo_eval.h. */
#include "trainer/demo_eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/generate.h"

#define EVAL_BATCH 50

/* Bytes of ids[from, to) as text (specials dropped). */
static void detok(const int32_t *ids, int from, int to, char *out, size_t cap) {
    size_t n = 0;
    for (int k = from; k < to && n + 1 < cap; k++)
        if (ids[k] < 256) out[n++] = (char)ids[k];
    out[n] = 0;
}

/* The demo writes numbers least significant digit first and zero-padded ("53+27=" is 35+72); shown the usual
 * way round: each run of digits reversed, leading zeros dropped. */
static void usual_order(char *s) {
    char out[64];
    size_t n = 0;
    for (char *p = s; *p && n + 1 < sizeof out;) {
        if (*p < '0' || *p > '9') {
            out[n++] = *p++;
            continue;
        }
        char *e = p;
        while (*e >= '0' && *e <= '9') e++;
        char *q = e - 1;
        while (q > p && *q == '0') q--; /* leading zeros of the usual form */
        for (; q >= p && n + 1 < sizeof out; q--) out[n++] = *q;
        p = e;
    }
    out[n] = 0;
    memcpy(s, out, n + 1);
}

double tn_demo_report(tn_model *m, const tn_dataset *eval, int show) {
    const int S = eval->S;
    tn_acts *a = tn_acts_create(m, EVAL_BATCH, S, 0);
    int32_t *ids = tn_xmalloc((size_t)EVAL_BATCH * S * sizeof *ids);
    int lens[EVAL_BATCH], plen[EVAL_BATCH], correct = 0, total = 0, shown = 0;
    for (int i0 = 0; i0 + EVAL_BATCH <= eval->n; i0 += EVAL_BATCH) {
        for (int b = 0; b < EVAL_BATCH; b++) {
            const int32_t *src = eval->ids + (size_t)(i0 + b) * S, *lab = eval->labels + (size_t)(i0 + b) * S;
            int p = 0;
            while (p < S && lab[p] == -100) p++; /* prompt = the masked prefix */
            memcpy(ids + (size_t)b * S, src, (size_t)p * sizeof *ids);
            lens[b] = plen[b] = p;
        }
        tn_generate_greedy(m, a, ids, lens, EVAL_BATCH, S, S, TN_BYTE_EOS, TN_BYTE_PAD);
        for (int b = 0; b < EVAL_BATCH; b++) {
            const int32_t *want = eval->ids + (size_t)(i0 + b) * S, *got = ids + (size_t)b * S;
            int ok = 1;
            for (int s = plen[b]; s < S && ok; s++) {
                ok = got[s] == want[s];
                if (want[s] == TN_BYTE_EOS) break;
            }
            correct += ok;
            total++;
            if (shown < show) {
                char prompt[64], answer[64], expect[64];
                detok(got, 0, plen[b], prompt, sizeof prompt);
                detok(got, plen[b], lens[b], answer, sizeof answer);
                int e = plen[b];
                while (e < S && want[e] != TN_BYTE_EOS) e++;
                detok(want, plen[b], e, expect, sizeof expect);
                usual_order(prompt);
                usual_order(answer);
                usual_order(expect);
                if (ok)
                    printf("  %-10s %-6s ok\n", prompt, answer);
                else
                    printf("  %-10s %-6s wrong (expected %s)\n", prompt, answer, expect);
                shown++;
            }
        }
    }
    free(ids);
    tn_acts_free(a);
    return total ? (double)correct / total : 0.0;
}
