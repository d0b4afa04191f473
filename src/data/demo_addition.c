/* demo_addition.c -- the bundled demo task: integer addition, byte-level tokens. See dataset.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/dataset.h"

#define EVAL_PER_MILLE 50 /* 5% of all problems are held out */

/* x as exactly `width` decimal digits, least significant first, zero-padded: 35 at width 3 is "530". */
static void digits_lsd_first(int x, int width, char *out) {
    for (int i = 0; i < width; i++, x /= 10) out[i] = (char)('0' + x % 10);
    out[width] = 0;
}

static int is_held_out(int a, int b) {
    return (int)(tn_hash_uniform(0x5EEDull, (uint64_t)a * 1000003u + (uint64_t)b) * 1000.0f) < EVAL_PER_MILLE;
}

int tn_demo_encode_prompt(const char *text, int32_t *ids, int cap) {
    int n = 0;
    if (cap > 0) ids[n++] = TN_BYTE_BOS;
    for (const unsigned char *p = (const unsigned char *)text; *p && n < cap; p++) ids[n++] = *p;
    return n;
}

int tn_demo_addition(int digits, int n, int which, uint64_t seed, int S, tn_dataset *d) {
    if (digits < 1 || digits > 6) return tn_err("demo_addition: digits must be 1..6, got %d", digits);
    int need = 1 + 2 * digits + 2 + (digits + 1) + 1; /* BOS a + b = sum EOS (every number fixed-width) */
    if (S < need) return tn_err("demo_addition: cutoff_len %d is shorter than a %d-digit problem (%d tokens)", S, digits, need);
    int limit = 1;
    for (int i = 0; i < digits; i++) limit *= 10;
    memset(d, 0, sizeof *d);
    d->n = n, d->S = S;
    d->ids = tn_xmalloc((size_t)n * S * sizeof *d->ids);
    d->labels = tn_xmalloc((size_t)n * S * sizeof *d->labels);
    tn_rng rng;
    tn_rng_seed(&rng, seed ^ (which ? 0xE7A1ull : 0x7A1Dull));
    for (int i = 0; i < n; i++) {
        int a, b;
        do {
            a = (int)(tn_rng_next(&rng) % (uint64_t)limit);
            b = (int)(tn_rng_next(&rng) % (uint64_t)limit);
        } while (is_held_out(a, b) != which);
        char prompt[32], da[8], db[8], answer[8];
        digits_lsd_first(a, digits, da);
        digits_lsd_first(b, digits, db);
        digits_lsd_first(a + b, digits + 1, answer);
        snprintf(prompt, sizeof prompt, "%s+%s=", da, db);
        int32_t *ids = d->ids + (size_t)i * S, *lab = d->labels + (size_t)i * S;
        int len = tn_demo_encode_prompt(prompt, ids, S);
        for (int j = 0; j < len; j++) lab[j] = -100; /* prompt is not trained */
        for (const char *p = answer; *p; p++, len++) ids[len] = lab[len] = (unsigned char)*p;
        ids[len] = lab[len] = TN_BYTE_EOS;
        len++;
        for (; len < S; len++) ids[len] = TN_BYTE_PAD, lab[len] = -100;
    }
    return 0;
}
