/* balance.c -- see balance.h. */
#include "trainer/balance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define MIN_GAIN 0.97    /* change only when the predicted step shrinks by >= 3% */
#define MAX_MOVE 0.25    /* of a rank's current share per decision (at least one sample) */

double tn_balance_predict(int world, const double *fixed, const double *per, const int64_t *share) {
    double t = 0;
    for (int r = 0; r < world; r++) {
        double tr = fixed[r] + per[r] * (double)share[r];
        t = tr > t ? tr : t;
    }
    return t;
}

int tn_balance_split(int world, int64_t global, const double *fixed, const double *per, const int64_t *cur,
                     int64_t *out) {
    memcpy(out, cur, (size_t)world * sizeof *out);
    if (world < 2 || global < world) return 0;
    for (int r = 0; r < world; r++)
        if (!(per[r] > 0) || !isfinite(per[r]) || !(fixed[r] >= 0) || !isfinite(fixed[r])) return 0;
    /* ideal: fixed + per x = T for every rank, sum x = global; a rank whose fixed time alone exceeds T keeps
     * one sample and the others share the rest (solved again without it) */
    double *x = tn_xmalloc((size_t)world * sizeof *x);
    unsigned char *pinned = tn_xcalloc((size_t)world, 1);
    for (int pass = 0; pass < world; pass++) {
        double inv = 0, fixed_over = 0, left = (double)global;
        for (int r = 0; r < world; r++)
            if (pinned[r]) left -= 1;
            else inv += 1 / per[r], fixed_over += fixed[r] / per[r];
        double T = (left + fixed_over) / inv;
        int again = 0;
        for (int r = 0; r < world; r++) {
            if (pinned[r]) {
                x[r] = 1;
                continue;
            }
            x[r] = (T - fixed[r]) / per[r];
            if (x[r] < 1) pinned[r] = 1, again = 1;
        }
        if (!again) break;
    }
    /* bounded move: the same fraction a of the way to the ideal for every rank keeps the sum, and a is the
     * largest that moves no rank by more than its bound */
    double a = 1;
    for (int r = 0; r < world; r++) {
        double bound = fmax(1.0, MAX_MOVE * (double)cur[r]), d = fabs(x[r] - (double)cur[r]);
        if (d > bound) a = fmin(a, bound / d);
    }
    /* whole samples: floors, then the remainder to the largest fractions (lowest rank first on ties) */
    int64_t sum = 0;
    double *frac = tn_xmalloc((size_t)world * sizeof *frac);
    for (int r = 0; r < world; r++) {
        double y = (double)cur[r] + a * (x[r] - (double)cur[r]);
        y = y < 1 ? 1 : y;
        out[r] = (int64_t)floor(y);
        frac[r] = y - (double)out[r];
        sum += out[r];
    }
    while (sum < global) {
        int best = 0;
        for (int r = 1; r < world; r++)
            if (frac[r] > frac[best]) best = r;
        out[best]++, frac[best] = -1, sum++;
    }
    while (sum > global) { /* only after clamping to 1: take from the largest share */
        int best = 0;
        for (int r = 1; r < world; r++)
            if (out[r] > out[best]) best = r;
        out[best]--, sum--;
    }
    free(x), free(pinned), free(frac);
    int changed = memcmp(out, cur, (size_t)world * sizeof *out) != 0;
    if (changed && tn_balance_predict(world, fixed, per, out) > MIN_GAIN * tn_balance_predict(world, fixed, per, cur)) {
        memcpy(out, cur, (size_t)world * sizeof *out);
        changed = 0;
    }
    return changed;
}
