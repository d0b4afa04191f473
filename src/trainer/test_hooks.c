/* test_hooks.c -- see test_hooks.h. */
#include "trainer/test_hooks.h"

#include <stdio.h>
#include <stdlib.h>

tn_test_hooks tn_test_hooks_none(void) { return (tn_test_hooks){.slow_rank = -1}; }

tn_test_hooks tn_test_hooks_from_env(void) {
    tn_test_hooks h = tn_test_hooks_none();
    const char *nan = getenv("TANDEM_FAULT_NAN_STEPS");
    if (nan && sscanf(nan, "%d-%d", &h.nan_from, &h.nan_to) == 1) h.nan_to = h.nan_from;
    const char *slow = getenv("TANDEM_FAULT_SLOW");
    if (slow && sscanf(slow, "%d:%d:%lf", &h.slow_rank, &h.slow_from, &h.slow_factor) != 3) h.slow_rank = -1;
    return h;
}

int tn_test_hooks_nan(const tn_test_hooks *h, int rank, int step) {
    return rank == 0 && step >= h->nan_from && step <= h->nan_to;
}

double tn_test_hooks_slow(const tn_test_hooks *h, int rank, int step) {
    return rank == h->slow_rank && step >= h->slow_from && h->slow_factor > 1 ? h->slow_factor : 1;
}
