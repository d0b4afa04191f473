/* test_hooks -- the faults the tests inject into a training run, read from the environment in one place.
 *
 * Owns the one structure that carries them (the trainer only ever sees its fields) and the environment's
 * spelling of each:
 *   TANDEM_FAULT_NAN_STEPS=A[-B]          rank 0 puts a NaN into its gradient on steps A..B (counted from 1):
 *                                         the non-finite-step path (skip, max_bad_steps)
 *   TANDEM_FAULT_SLOW=RANK:STEP:FACTOR    from STEP on, rank RANK takes FACTOR times as long for each
 *                                         forward+backward (balance_ranks, the slow-rank warning)
 * A value that does not parse injects nothing (as before: the tests set well-formed ones). */
#ifndef TN_TEST_HOOKS_H
#define TN_TEST_HOOKS_H

typedef struct {
    int nan_from, nan_to;  /* NaN steps (0, 0: none) */
    int slow_rank;         /* -1: nobody is slowed */
    int slow_from;
    double slow_factor;
} tn_test_hooks;

/* Nothing injected. */
tn_test_hooks tn_test_hooks_none(void);
/* What the environment asks for. */
tn_test_hooks tn_test_hooks_from_env(void);
/* Does `rank` put a NaN into its gradient on step `step` (counted from 1)? */
int tn_test_hooks_nan(const tn_test_hooks *h, int rank, int step);
/* The slowdown factor of `rank` on step `step` (1: none). */
double tn_test_hooks_slow(const tn_test_hooks *h, int rank, int step);

#endif
