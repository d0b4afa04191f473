/* quiet_watch.c -- see quiet_watch.h. */
#include "outputs/quiet_watch.h"

#include <math.h>

void tn_quiet_start(tn_quiet *q, double every, double now) {
    q->every = every > 0 && isfinite(every) ? every : TN_QUIET_SECONDS;
    q->last_shown = now;
}

int tn_quiet_tick(tn_quiet *q, double now, int shown) {
    if (shown || now - q->last_shown >= q->every) {
        int due = !shown;
        q->last_shown = now;
        return due;
    }
    return 0;
}

double tn_quiet_for(const tn_quiet *q, double now) { return now - q->last_shown; }
