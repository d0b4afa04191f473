/* quiet_watch -- no command stays silent through more than a few seconds of work.
 *
 * A loop that may run long without showing anything (generation whose tokens print nothing yet, say) calls
 * tn_quiet_tick after each unit of work, saying whether the user saw something from it. When nothing was shown
 * for `every` seconds the tick returns 1: the caller prints one progress line, which counts as shown. */
#ifndef TN_QUIET_WATCH_H
#define TN_QUIET_WATCH_H

#define TN_QUIET_SECONDS 3.0 /* the default: what "a few seconds" means */

typedef struct {
    double every, last_shown;
} tn_quiet;

/* every <= 0 or not finite: TN_QUIET_SECONDS. now: tn_now(). */
void tn_quiet_start(tn_quiet *q, double every, double now);
/* 1 when a progress line is due now (and then counts it as shown); shown: this unit of work showed something. */
int tn_quiet_tick(tn_quiet *q, double now, int shown);
/* Seconds since the user last saw something. */
double tn_quiet_for(const tn_quiet *q, double now);

#endif
