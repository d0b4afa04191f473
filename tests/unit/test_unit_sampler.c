/* Distributed sampler: for world sizes that do and do not divide the dataset, every sample is used
 * exactly once per epoch across all ranks, global batches are disjoint slices of the stream, and each
 * epoch is a fresh permutation (independent counting, not the sampler's own bookkeeping). */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/dataset.h"
#include "testlib.h"

static void check_split(int n, int world, int B, int accum) {
    tn_sampler s;
    tn_sampler_init(&s, n, 1234);
    const int64_t G = (int64_t)world * accum * B, epochs = 3;
    const int64_t steps = (epochs * n + G - 1) / G;
    /* used[e][i]: how often sample i was drawn during epoch e, where draws are numbered in the order
     * rank 0 .. world-1 consume them and epoch e owns draws [e n, (e + 1) n) */
    int *used = calloc((size_t)(epochs + 1) * n, sizeof *used);
    int64_t *seen = calloc((size_t)steps * G, sizeof *seen);
    int64_t *first_epoch_order = calloc((size_t)n, sizeof *first_epoch_order);
    for (int64_t step = 0; step < steps; step++)
        for (int r = 0; r < world; r++)
            for (int a = 0; a < accum; a++)
                for (int b = 0; b < B; b++) {
                    int64_t pos = tn_dist_position(step * G, r, accum, B, a, b);
                    CHECK(pos >= step * G && pos < (step + 1) * G);
                    seen[pos]++;
                    int i = tn_sampler_get(&s, pos);
                    CHECK(i >= 0 && i < n);
                    if (pos < epochs * n) used[(pos / n) * n + i]++;
                    if (pos < n) first_epoch_order[pos] = i;
                }
    for (int64_t p = 0; p < steps * G; p++) CHECKF(seen[p] == 1, "n %d world %d: position %lld drawn %d times", n, world, (long long)p, (int)seen[p]);
    for (int e = 0; e < epochs; e++)
        for (int i = 0; i < n; i++)
            CHECKF(used[e * n + i] == 1, "n %d world %d B %d accum %d: sample %d used %d times in epoch %d", n, world,
                   B, accum, i, used[e * n + i], e);
    int identity = 1;
    for (int i = 0; i < n; i++) identity &= first_epoch_order[i] == i;
    CHECK(!identity); /* shuffled */
    CHECK(tn_sampler_get(&s, 0) != tn_sampler_get(&s, n) || tn_sampler_get(&s, 1) != tn_sampler_get(&s, n + 1));
    free(used), free(seen), free(first_epoch_order);
    tn_sampler_free(&s);
}

int main(void) {
    const int worlds[] = {1, 2, 3, 4, 7};
    for (int w = 0; w < 5; w++) {
        check_split(24, worlds[w], 2, 1);  /* 24: divisible by 1,2,3,4 (x2), not by 7 x 2 */
        check_split(17, worlds[w], 2, 1);  /* prime: never divides a global batch > 1 */
        check_split(17, worlds[w], 1, 3);  /* with accumulation */
    }
    /* the same seed gives the same stream, another seed another */
    tn_sampler a, b, c;
    tn_sampler_init(&a, 50, 7), tn_sampler_init(&b, 50, 7), tn_sampler_init(&c, 50, 8);
    int same = 1, differ = 0;
    for (int k = 0; k < 150; k++) {
        same &= tn_sampler_get(&a, k) == tn_sampler_get(&b, k);
        differ |= tn_sampler_get(&a, k) != tn_sampler_get(&c, k);
    }
    CHECK(same && differ);
    tn_sampler_free(&a), tn_sampler_free(&b), tn_sampler_free(&c);
    return tl_done("test_unit_sampler");
}
