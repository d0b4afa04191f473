/* frozen_ranges -- how a float range [p, p + n) of the CUDA backend's memory splits into pieces that are plain fp32
 * memory or lie inside one frozen (bf16-only) weight range (backend.h alloc_params: the frozen part's fp32 addresses
 * are reserved, not backed). Every transfer and copy walks these pieces, so a range that starts trainable and runs
 * into the frozen tail never reads unmapped fp32 space. Plain C, shared by cuda_backend.cu and the CPU test
 * (test_unit_frozen_ranges). */
#ifndef TN_FROZEN_RANGES_H
#define TN_FROZEN_RANGES_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uintptr_t lo, hi; /* [lo, hi): float addresses held in bf16 only */
} tn_frozen_range;

/* The first piece of the n floats at address p: its length in floats (n when n is 0), and *which = the index of the
 * frozen range holding it, or -1 for plain fp32 memory. */
static inline size_t tn_frozen_piece(const tn_frozen_range *r, int nr, uintptr_t p, size_t n, int *which) {
    uintptr_t end = p + n * sizeof(float);
    *which = -1;
    for (int i = 0; i < nr; i++)
        if (p >= r[i].lo && p < r[i].hi) {
            size_t left = (size_t)(r[i].hi - p) / sizeof(float);
            *which = i;
            return n < left ? n : left;
        }
    size_t k = n;
    for (int i = 0; i < nr; i++)
        if (r[i].lo > p && r[i].lo < end && (size_t)(r[i].lo - p) / sizeof(float) < k)
            k = (size_t)(r[i].lo - p) / sizeof(float);
    return k;
}

/* 1 when any float of [p, p + n) is frozen */
static inline int tn_frozen_touches(const tn_frozen_range *r, int nr, uintptr_t p, size_t n) {
    int which;
    return n && (tn_frozen_piece(r, nr, p, n, &which) != n || which >= 0);
}

#endif
