/* shard_layout -- which values of the trainable slab each rank owns under ZeRO (zero.h), and the units its
 * reduce-scatters and all-gathers run on.
 *
 *   contiguous  one unit, the whole slab: shard s is tn_comm_slice(n, N, s), one range. A bucket or a layer
 *               lies in one or two shards, so its reduce-scatter sends only toward the owner and its
 *               all-gather only away from it: the owner's link carries (N-1) B per unit, the others idle.
 *   balanced    PyTorch FSDP's FlatParameter layout: the units are the model's groups (the embedding, each
 *               layer, the final norm with lm_head), each cut into equal parts of at most `cap` floats (the
 *               gradient bucket size); shard s owns chunk s = tn_comm_slice(unit, N, s) of every unit. Every
 *               reduce-scatter and all-gather moves 1/N of the unit from every rank: (N-1)/N B each way on
 *               every link. Chunks differ by at most one value, which is what FSDP's padding (at most N-1
 *               values a unit) buys with equal ones: comm's range collectives take unequal blocks, so
 *               nothing is padded.
 *               With pages (2 MB of floats on the CPU, whose slabs start on a 2 MB boundary), the whole pages
 *               inside a group are cut into units of N x j pages (j = cap / (N x page), at least 1: a unit
 *               exceeds cap when N pages do, up to 4 cap; beyond that no page alignment), so each chunk is j
 *               whole pages: ZeRO 2-3 release a rank's other chunks every step and write them again (gradients,
 *               stage 3's gathered parameters), and whole 2 MB pages come back as huge pages instead of 512
 *               faults of 4 KB each cleared one by one (0.1-0.2 against 0.6-1 ns a byte, docs/performance.md).
 *               Only a group's ragged ends and fewer than N x j pages left over are cut as above. Nothing is
 *               padded: chunks stay equal, the formulas exact.
 * A collective on unit [lo, hi) runs on the unit as its own slab (comm.h's range collectives with slab + lo
 * and n = hi - lo), so comm's shards of that slab are exactly the chunks. Shard index s is comm's
 * (tn_comm_shard_index: local rank x machines + machine), so each machine's chunks stay adjacent and the
 * exchange stays hierarchical. The layout is chosen by zero_shard_layout (default balanced); contiguous
 * stays for comparison (bench/bench_zero.sh measures both side by side). */
#ifndef TN_SHARD_LAYOUT_H
#define TN_SHARD_LAYOUT_H

#include <stddef.h>

#include "model/model.h"

typedef struct {
    size_t lo, n; /* [lo, lo + n) of the trainable slab */
} tn_span;

typedef struct tn_shard_layout tn_shard_layout;

/* The page ZeRO aligns its units to: 2 MB, a transparent huge page, in floats. */
#define TN_SHARD_PAGE_FLOATS (((size_t)2 << 20) / sizeof(float))

/* size ranks; balanced: the model's groups cut at cap floats (>= 1), their whole pages of page floats (0: none)
 * first into units of N x j pages. */
tn_shard_layout *tn_shard_layout_create(const tn_model *m, int size, int balanced, size_t cap, size_t page);
void tn_shard_layout_free(tn_shard_layout *l);
int tn_shard_layout_balanced(const tn_shard_layout *l);
int tn_shard_layout_units(const tn_shard_layout *l);
void tn_shard_layout_unit(const tn_shard_layout *l, int u, size_t *lo, size_t *hi);
/* The unit holding slab position pos (< n). */
int tn_shard_layout_unit_of(const tn_shard_layout *l, size_t pos);
/* Shard s's chunk of unit u: [*lo, *lo + *n). */
void tn_shard_layout_chunk(const tn_shard_layout *l, int u, int s, size_t *lo, size_t *n);
/* Shard s's spans (its non-empty chunks, slab order) into out (NULL: only count them); the count. */
int tn_shard_layout_spans(const tn_shard_layout *l, int s, tn_span *out);
/* The values of k spans. */
size_t tn_span_total(const tn_span *sp, int k);

#endif
