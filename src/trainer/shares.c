/* shares.c -- see shares.h. */
#include "trainer/shares.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "trainer/balance.h"

#define BALANCE_WINDOW 4 /* steps between two measurements of the ranks' speeds */

struct tn_shares {
    tn_comm *c;
    int world, balance;
    int64_t global;
    int64_t *share;                        /* [world] */
    double fixed, fb, samples;             /* this rank's seconds (fixed, forward+backward) and samples, window */
    int steps;
};

tn_shares *tn_shares_create(tn_comm *c, int world, int64_t per_rank, int balance) {
    tn_shares *s = tn_xcalloc(1, sizeof *s);
    s->c = c, s->world = world, s->balance = balance, s->global = (int64_t)world * per_rank;
    s->share = tn_xmalloc((size_t)world * sizeof *s->share);
    for (int r = 0; r < world; r++) s->share[r] = per_rank;
    return s;
}

void tn_shares_free(tn_shares *s) {
    if (!s) return;
    free(s->share);
    free(s);
}

int tn_shares_balancing(const tn_shares *s) { return s->balance; }
int64_t tn_shares_of(const tn_shares *s, int r) { return s->share[r]; }

int64_t tn_shares_first(const tn_shares *s, int r) {
    int64_t first = 0;
    for (int q = 0; q < r; q++) first += s->share[q];
    return first;
}

/* with balancing up to the whole global batch less one sample per other rank */
int64_t tn_shares_most(const tn_shares *s) { return s->balance ? s->global - (s->world - 1) : s->global / s->world; }

/* The line saying who computes how fast and the new shares. */
static void say(const tn_shares *s, int step, const double *per, const int64_t *next, char *note, size_t n) {
    int slow = 0, fast = 0;
    for (int r = 1; r < s->world; r++) {
        if (per[r] > per[slow]) slow = r;
        if (per[r] < per[fast]) fast = r;
    }
    int k = snprintf(note, n, "balance: step %d: rank %d on host %s computes %.2fx as fast as rank %d; samples per "
                     "step by rank now", step, slow, tn_comm_host_of(s->c, slow), per[fast] / per[slow], fast);
    for (int r = 0; r < s->world && k > 0 && (size_t)k < n; r++)
        k += snprintf(note + k, n - (size_t)k, " %lld", (long long)next[r]);
    if (k > 0 && (size_t)k < n) snprintf(note + k, n - (size_t)k, " (global batch %lld)", (long long)s->global);
}

/* The ranks' measured costs, gathered; every rank derives the same new shares. */
static int rebalance(tn_shares *s, int step, char *note, size_t n) {
    double mine[2] = {s->fixed / s->steps, s->samples > 0 ? s->fb / s->samples : 0};
    s->fixed = s->fb = s->samples = 0, s->steps = 0;
    double *all = tn_xmalloc((size_t)s->world * sizeof mine), *fixed = tn_xmalloc((size_t)s->world * sizeof *fixed);
    double *per = tn_xmalloc((size_t)s->world * sizeof *per);
    int64_t *next = tn_xmalloc((size_t)s->world * sizeof *next);
    int rc = tn_comm_allgather(s->c, mine, sizeof mine, all);
    if (rc == 0) {
        for (int r = 0; r < s->world; r++) fixed[r] = all[2 * r], per[r] = all[2 * r + 1];
        if (tn_balance_split(s->world, s->global, fixed, per, s->share, next)) {
            say(s, step, per, next, note, n);
            memcpy(s->share, next, (size_t)s->world * sizeof *next);
        }
    }
    free(all), free(fixed), free(per), free(next);
    return rc ? tn_err("step %d: speed exchange failed: %s", step, tn_errmsg()) : 0;
}

int tn_shares_measure(tn_shares *s, int step, double fixed, double fb, int64_t samples, char *note, size_t n) {
    if (!s->balance) return 0;
    s->fixed += fixed, s->fb += fb, s->samples += (double)samples;
    return ++s->steps == BALANCE_WINDOW ? rebalance(s, step, note, n) : 0;
}

void tn_shares_save(const tn_shares *s, tn_state *job) {
    if (s->balance) tn_state_put(job, "balance.shares", ST_I64, s->share, (size_t)s->world);
}

void tn_shares_load(tn_shares *s, const tn_state *job) {
    size_t got = 0;
    const int64_t *sh = tn_state_get(job, "balance.shares", ST_I64, &got);
    if (!s->balance || !sh || got != (size_t)s->world) return;
    int64_t sum = 0, ok = 1;
    for (int q = 0; q < s->world; q++) sum += sh[q], ok &= sh[q] >= 1;
    if (ok && sum == s->global) memcpy(s->share, sh, (size_t)s->world * sizeof *sh);
}
