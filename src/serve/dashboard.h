/* dashboard -- tandem's web page of training runs, on the HTTP module (http.h, libmicrohttpd). Rank 0 of a run
 * serves its own run live (`dashboard: true`, trainer/job.c); `tandem dashboard DIR...` serves finished or running
 * output folders side by side, their curves overlaid. Both read the same files (dash_view.h: trainer_log.jsonl,
 * tandem_ranks.jsonl, tandem_plan.json), so the page shows exactly what the run wrote; the live page also shows the
 * run's newest output lines (dash_tee.h).
 *
 * Routes (GET and HEAD only; anything else 405, an unknown path 404, each with a JSON error body):
 *   /                      the page (src/serve/web/, compiled into the binary)
 *   /app.js, /app.css      its script and style
 *   /uplot/uPlot.iife.min.js, /uplot/uPlot.min.css   the charting library (npm uplot), read at start from
 *                          $TANDEM_UPLOT_DIR or the folder scripts/install-deps.sh installs it into; without it
 *                          these answer 404 and the page says how to get it (and shows everything but the charts)
 *   /api/state             the whole state (dash_store.h's snapshot)
 *   /api/events?since=N    server-sent events after event N (dash_store.h), a keep-alive comment every 15 s
 * No path reaches the file system: the routes are a fixed table.
 *
 * Safety: binds 127.0.0.1 unless told otherwise. TANDEM_DASHBOARD_TOKEN (16 or more of [A-Za-z0-9._~-]), when
 * set, is checked on every request: `Authorization: Bearer TOKEN`, the cookie tandem_token, or ?token=TOKEN once
 * (the answer sets the cookie; the page itself is redirected to drop it from the address); a host beyond the
 * loopback is refused without it. Without a token the Host header must name the loopback (a page elsewhere that
 * points a name at 127.0.0.1 gets 403). Nothing a viewer does reaches the training thread: the files are read by the
 * dashboard's own thread, every viewer reads the store's bounded event ring at its own pace, connections are
 * limited, and the HTTP threads are libmicrohttpd's. */
#ifndef TN_DASHBOARD_H
#define TN_DASHBOARD_H

typedef struct tn_dash tn_dash;

typedef struct {
    const char *host;              /* NULL or "": 127.0.0.1 */
    int port;                      /* 0: a free one */
    const char *const *dirs;       /* output folders, one run each */
    int n_dirs;
    int live;                      /* dirs[0] is the run of this process: its output lines too */
} tn_dash_opts;

/* Starts serving (threads of its own). NULL + tn_err: the bind rule, a bad token, an address in use. */
tn_dash *tn_dash_start(const tn_dash_opts *o);
/* "http://HOST:PORT/" */
const char *tn_dash_url(const tn_dash *d);
/* 1 when the charting library was found (else the page says how to get it). */
int tn_dash_has_charts(const tn_dash *d);
/* Reads the files one last time, ends the viewers' streams and stops. */
void tn_dash_stop(tn_dash *d);
/* CPU seconds the dashboard's threads used so far (its file thread, output tee and connection threads). */
double tn_dash_cpu(tn_dash *d);

#endif
