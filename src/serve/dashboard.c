/* dashboard.c -- see dashboard.h. Threads: libmicrohttpd's (one per connection: answer, or stream events from the
 * store), one file thread (reads the runs' files every POLL_MS, moves the output lines in, commits), and in live
 * mode the output tee's. */
#include "serve/dashboard.h"

#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "outputs/pyfmt.h"
#include "serve/dash_assets.h"
#include "serve/dash_store.h"
#include "serve/dash_tee.h"
#include "serve/dash_view.h"
#include "serve/http.h"

#ifndef TANDEM_UPLOT_DIR
#define TANDEM_UPLOT_DIR "deps/node_modules/uplot/dist"
#endif

#define POLL_MS 500          /* the files are read, and viewers woken, twice a second, */
#define POLL_MS_CROWD 2000   /* every 2 s with more than CROWD viewers (each costs a wake-up and a write) */
#define CROWD 8
#define LINES_KEPT 200         /* output lines the page shows */
#define LINE_QUEUE 256         /* lines waiting for the file thread; more are dropped */
#define MAX_VIEWERS 128        /* connections at once */
#define KEEPALIVE_S 15.0
#define VIEWER_WAIT_MS 5000    /* a viewer with no event wakes this often to check its client (and the keep-alive):
                                * shorter than the polls, it would wake between every two events for nothing */
#define TOKEN_MIN 16
#define CPU_TIDS 4096
#define DRAIN_S 2.0            /* at the stop, how long viewers may take to receive the last events */

typedef struct {
    char *data;
    size_t n;
} blob;

struct tn_dash {
    tn_http *http;
    tn_store *store;
    tn_view **views;
    int n_views, live, loopback;
    char url[320], token[256];
    blob uplot_js, uplot_css;
    /* the file thread */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;        /* the line queue, stop, the CPU account */
    pthread_cond_t cv;
    int stop;
    char *lines[LINE_QUEUE];
    int n_lines;
    uint64_t lines_dropped;
    tn_tee *tee;
    /* CPU of the threads named "tandem-dash": the last reading of each (a thread that ended keeps its last) */
    int tids[CPU_TIDS];
    double tid_cpu[CPU_TIDS];
    int n_tids;
    atomic_int streams;        /* event streams open */
};

/* ---- the dashboard's own CPU */

static void name_thread(void) { prctl(PR_SET_NAME, "tandem-dash", 0, 0, 0); }

/* A thread's CPU time in seconds to the nanosecond, -1 when the kernel refuses. Its clock is named the way
 * pthread_getcpuclockid names it (the kernel's posix-cpu-timers encoding: ~tid << 3, per-thread, sched clock),
 * because libmicrohttpd's threads are known here only by their ids. /proc's ticks (10 ms) are the fallback: the
 * threads use less than a tick in a short run, which says only that they used under 10 ms. */
static double thread_cpu(int tid) {
    clockid_t clock = (clockid_t)((~(unsigned)tid << 3) | 4u | 2u);
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0) return -1;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void account_cpu(tn_dash *d) {
    DIR *dir = opendir("/proc/self/task");
    if (!dir) return;
    long tick = sysconf(_SC_CLK_TCK);
    struct dirent *e;
    while ((e = readdir(dir))) {
        int tid = atoi(e->d_name);
        if (tid <= 0) continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = 0;
        char *open = strchr(buf, '('), *close = strrchr(buf, ')');
        if (!open || !close || strncmp(open + 1, "tandem-dash", 11) != 0) continue;
        double cpu = thread_cpu(tid);
        unsigned long long ut = 0, st = 0; /* fields 14 and 15, counted after the name: whole clock ticks */
        if (cpu < 0 && sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
            continue;
        if (cpu < 0) cpu = (double)(ut + st) / (double)(tick > 0 ? tick : 100);
        pthread_mutex_lock(&d->mu);
        int i = 0;
        while (i < d->n_tids && d->tids[i] != tid) i++;
        if (i == d->n_tids && d->n_tids < CPU_TIDS) d->tids[d->n_tids++] = tid;
        if (i < d->n_tids && cpu > d->tid_cpu[i]) d->tid_cpu[i] = cpu;
        pthread_mutex_unlock(&d->mu);
    }
    closedir(dir);
}

double tn_dash_cpu(tn_dash *d) {
    account_cpu(d);
    double s = 0;
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < d->n_tids; i++) s += d->tid_cpu[i];
    pthread_mutex_unlock(&d->mu);
    return s;
}

/* ---- output lines (live) */

static void on_line(void *ctx, const char *line, size_t n, int is_stderr) {
    tn_dash *d = ctx;
    (void)is_stderr;
    pthread_mutex_lock(&d->mu);
    if (d->n_lines == LINE_QUEUE) {
        d->lines_dropped++;
    } else {
        char *s = tn_xmalloc(n + 1);
        memcpy(s, line, n);
        s[n] = 0;
        d->lines[d->n_lines++] = s;
    }
    pthread_mutex_unlock(&d->mu);
}

/* A line as the page's item: its text and level (warnings and errors are highlighted), with the time it came. */
static char *line_item(const char *s) {
    tn_strbuf b = {0};
    const char *level = strstr(s, "error") ? "error" : strstr(s, "warning") || strstr(s, "WARNING") ? "warning" : "info";
    tn_sb_printf(&b, "{\"time\": %.3f, \"level\": \"%s\", \"text\": \"", (double)time(NULL), level);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') tn_sb_printf(&b, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f) tn_sb_printf(&b, "\\u%04x", *p);
        else if (*p < 0x80) tn_sb_putn(&b, (const char *)p, 1);
        else { /* UTF-8 as it is when it is valid; any other byte becomes U+FFFD */
            int len = (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : (*p & 0xF8) == 0xF0 ? 4 : 0, ok = len > 0;
            for (int k = 1; k < len && ok; k++) ok = (p[k] & 0xC0) == 0x80;
            if (ok) tn_sb_putn(&b, (const char *)p, (size_t)len), p += len - 1;
            else tn_sb_puts(&b, "\\ufffd");
        }
    }
    tn_sb_puts(&b, "\"}");
    return b.s;
}

static void move_lines(tn_dash *d) {
    char *taken[LINE_QUEUE];
    pthread_mutex_lock(&d->mu);
    int n = d->n_lines;
    memcpy(taken, d->lines, (size_t)n * sizeof *taken);
    d->n_lines = 0;
    pthread_mutex_unlock(&d->mu);
    if (!n) return;
    char *items[LINE_QUEUE];
    for (int i = 0; i < n; i++) items[i] = line_item(taken[i]), free(taken[i]);
    tn_store_append(d->store, 0, "lines", (const char *const *)items, n, LINES_KEPT);
    for (int i = 0; i < n; i++) free(items[i]);
}

/* ---- the file thread */

static void poll_all(tn_dash *d) {
    for (int i = 0; i < d->n_views; i++) tn_view_poll(d->views[i]);
    if (d->live) move_lines(d);
    tn_store_commit(d->store);
}

static void *file_thread(void *arg) {
    tn_dash *d = arg;
    name_thread();
    int rounds = 0;
    pthread_mutex_lock(&d->mu);
    while (!d->stop) {
        pthread_mutex_unlock(&d->mu);
        poll_all(d);
        if (++rounds % 8 == 0) account_cpu(d); /* every 4-8 s: reading each thread's stat costs too */
        pthread_mutex_lock(&d->mu);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (atomic_load(&d->streams) > CROWD ? POLL_MS_CROWD : POLL_MS) * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L, until.tv_nsec %= 1000000000L;
        if (!d->stop) pthread_cond_timedwait(&d->cv, &d->mu, &until);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- requests */

static const char *const SECURITY[] = {"X-Content-Type-Options: nosniff", "X-Frame-Options: DENY",
                                       "Referrer-Policy: no-referrer", "Cache-Control: no-store",
                                       "Content-Security-Policy: default-src 'self'; img-src 'self' data:; "
                                       "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
                                       NULL};

static void respond(tn_http_req *r, int status, const char *type, const char *body, size_t n, const char *cookie) {
    const char *h[8];
    int k = 0;
    for (; SECURITY[k]; k++) h[k] = SECURITY[k];
    h[k++] = cookie;
    h[k] = NULL;
    tn_http_respond(r, status, type, body, n, h);
}

static void refuse(tn_http_req *r, int status, const char *type, const char *message) {
    tn_http_respond_error(r, status, type, NULL, message, SECURITY);
}

/* Equal strings, in time that does not depend on where they differ. */
static int same_secret(const char *a, const char *b) {
    size_t n = strlen(a);
    if (n != strlen(b)) return 0;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

/* The value of cookie `name` in a Cookie header into out (cap bytes); 0 when absent. */
static int cookie_value(const char *header, const char *name, char *out, size_t cap) {
    size_t nl = strlen(name);
    for (const char *p = header; p && *p;) {
        p += strspn(p, " ;");
        const char *end = p + strcspn(p, ";");
        if ((size_t)(end - p) > nl && !strncmp(p, name, nl) && p[nl] == '=') {
            size_t n = (size_t)(end - p) - nl - 1;
            if (n >= cap) return 0;
            memcpy(out, p + nl + 1, n);
            out[n] = 0;
            return 1;
        }
        p = end;
    }
    return 0;
}

/* 1: the request may be answered (*set_cookie: it brought the token as ?token=). */
static int authorized(const tn_dash *d, tn_http_req *r, int *set_cookie) {
    *set_cookie = 0;
    if (!d->token[0]) return 1;
    const char *auth = tn_http_header(r, "Authorization"), *q = tn_http_query(r, "token");
    char c[256];
    if (auth && !strncmp(auth, "Bearer ", 7) && same_secret(auth + 7, d->token)) return 1;
    if (cookie_value(tn_http_header(r, "Cookie"), "tandem_token", c, sizeof c) && same_secret(c, d->token)) return 1;
    if (q && same_secret(q, d->token)) return *set_cookie = 1;
    return 0;
}

/* Without a token, only a Host that names the loopback (DNS rebinding: another site's name pointed at 127.0.0.1). */
static int host_allowed(const tn_dash *d, tn_http_req *r) {
    if (d->token[0] || !d->loopback) return 1;
    const char *h = tn_http_header(r, "Host");
    if (!h) return 1; /* HTTP/1.0 */
    char name[256];
    size_t n = h[0] == '[' ? strcspn(h, "]") + 1 : strcspn(h, ":");
    if (n >= sizeof name) return 0;
    memcpy(name, h, n);
    name[n] = 0;
    if (h[0] == '[' && n >= 2) memmove(name, name + 1, n - 2), name[n - 2] = 0;
    return tn_http_is_loopback(name);
}

typedef struct {
    tn_dash *d;
    uint64_t seq;
    char *pending;
    size_t n, off;
    double last;
    int opened;
} viewer;

static ssize_t viewer_next(void *ctx, char *buf, size_t max) {
    viewer *v = ctx;
    if (!v->pending) {
        static const char hello[] = "retry: 3000\n\n", resync[] = "event: resync\ndata: {}\n\n", ping[] = ": ping\n\n";
        const char *fixed = NULL;
        if (!v->opened) {
            v->opened = 1, fixed = hello;
        } else {
            int rc = tn_store_next(v->d->store, &v->seq, &v->pending, &v->n, VIEWER_WAIT_MS); /* then: the client */
            if (rc == -2) return -1;
            if (rc == -1) fixed = resync;
            if (rc == 0 && tn_now() - v->last > KEEPALIVE_S) fixed = ping;
            if (rc == 0 && !fixed) return 0;
        }
        if (fixed) v->pending = tn_xstrdup(fixed), v->n = strlen(fixed);
        v->off = 0;
    }
    size_t k = v->n - v->off < max ? v->n - v->off : max;
    memcpy(buf, v->pending + v->off, k);
    v->off += k;
    if (v->off == v->n) free(v->pending), v->pending = NULL;
    v->last = tn_now();
    return (ssize_t)k;
}

static void viewer_done(void *ctx, int gone) {
    (void)gone;
    viewer *v = ctx;
    atomic_fetch_sub(&v->d->streams, 1);
    free(v->pending);
    free(v);
}

static const tn_dash_asset *asset(const char *path) {
    if (!strcmp(path, "/")) path = "/index.html";
    for (const tn_dash_asset *a = tn_dash_assets; a->path; a++)
        if (!strcmp(a->path, path)) return a;
    return NULL;
}

static void handle(void *ctx, tn_http_req *r) {
    tn_dash *d = ctx;
    name_thread();
    const char *m = tn_http_method(r), *path = tn_http_path(r);
    if (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0) {
        const char *h[] = {"Allow: GET, HEAD", NULL};
        tn_http_respond_error(r, 405, "invalid_request_error", NULL, "the dashboard is read-only: GET or HEAD", h);
        return;
    }
    if (!host_allowed(d, r)) {
        refuse(r, 403, "permission_error", "the Host header names no loopback address; open the dashboard at its "
              "printed URL (or set TANDEM_DASHBOARD_TOKEN)");
        return;
    }
    int set_cookie;
    if (!authorized(d, r, &set_cookie)) {
        refuse(r, 401, "authentication_error", "this dashboard needs its token: open it with ?token=TOKEN once, or "
              "send 'Authorization: Bearer TOKEN' (TANDEM_DASHBOARD_TOKEN)");
        return;
    }
    char cookie[400];
    snprintf(cookie, sizeof cookie, "Set-Cookie: tandem_token=%s; Path=/; HttpOnly; SameSite=Strict", d->token);
    const tn_dash_asset *a = asset(path);
    if (a && set_cookie && !strcmp(a->path, "/index.html")) { /* the page again without the token in its address */
        const char *h[] = {cookie, "Location: /", "Cache-Control: no-store", NULL};
        tn_http_respond(r, 303, "text/plain", "", 0, h);
    } else if (a) {
        respond(r, 200, a->type, (const char *)a->data, a->size, set_cookie ? cookie : NULL);
    } else if (!strcmp(path, "/uplot/uPlot.iife.min.js") || !strcmp(path, "/uplot/uPlot.min.css")) {
        int js = !strcmp(path, "/uplot/uPlot.iife.min.js");
        const blob *b = js ? &d->uplot_js : &d->uplot_css;
        if (!b->data) refuse(r, 404, "not_found_error", "uPlot is not installed: scripts/install-deps.sh installs it");
        else respond(r, 200, js ? "text/javascript" : "text/css", b->data, b->n, set_cookie ? cookie : NULL);
    } else if (!strcmp(path, "/api/state")) {
        uint64_t seq;
        size_t n;
        char *s = tn_store_snapshot(d->store, &seq, &n);
        respond(r, 200, "application/json", s, n, set_cookie ? cookie : NULL);
        free(s);
    } else if (!strcmp(path, "/api/events")) {
        const char *since = tn_http_query(r, "since");
        char *end = NULL;
        unsigned long long q = since ? strtoull(since, &end, 10) : 0;
        if (since && (!*since || *end || q > tn_store_seq(d->store))) {
            refuse(r, 400, "invalid_request_error", "since: the number of an event this dashboard has sent (/api/state's seq)");
            return;
        }
        viewer *v = tn_xcalloc(1, sizeof *v);
        v->d = d, v->seq = since ? q : tn_store_seq(d->store), v->last = tn_now();
        atomic_fetch_add(&d->streams, 1);
        tn_http_stream(r, viewer_next, viewer_done, v);
    } else {
        refuse(r, 404, "not_found_error", "no such page: the dashboard serves /, /app.js, /app.css, /uplot/..., "
              "/api/state and /api/events");
    }
}

/* ---- start and stop */

static void load_blob(const char *dir, const char *name, blob *b) {
    char *p = tn_path_join(dir, name);
    b->data = tn_file_exists(p) ? tn_read_file(p, &b->n, (size_t)4 << 20) : NULL;
    free(p);
}

static int check_token(const char *t) {
    size_t n = strlen(t);
    if (n < TOKEN_MIN || n >= 200) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)t[i]) && !strchr("._~-", t[i])) return 0;
    return 1;
}

static const char *run_name(const char *dir, char *buf, size_t n) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/') start--;
    snprintf(buf, n, "%.*s", (int)(len - start), dir + start);
    return buf;
}

tn_dash *tn_dash_start(const tn_dash_opts *o) {
    const char *host = o->host && *o->host ? o->host : "127.0.0.1", *token = getenv("TANDEM_DASHBOARD_TOKEN");
    if (token && *token && !check_token(token)) {
        tn_err("TANDEM_DASHBOARD_TOKEN must be %d to 199 characters of letters, digits, '.', '_', '~' or '-'", TOKEN_MIN);
        return NULL;
    }
    int loopback = tn_http_is_loopback(host);
    if (!loopback && !(token && *token)) {
        tn_err("dashboard: %s would answer beyond this machine without a token: set TANDEM_DASHBOARD_TOKEN (viewers "
               "then open the page with ?token=TOKEN), or leave the host out for 127.0.0.1", host);
        return NULL;
    }
    tn_dash *d = tn_xcalloc(1, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(d->token, sizeof d->token, "%s", token ? token : "");
    d->live = o->live, d->loopback = loopback;
    const char *env = getenv("TANDEM_UPLOT_DIR"), *udir = env && *env ? env : TANDEM_UPLOT_DIR;
    load_blob(udir, "uPlot.iife.min.js", &d->uplot_js);
    load_blob(udir, "uPlot.min.css", &d->uplot_css);
    d->store = tn_store_new(o->n_dirs, o->live ? "live" : "files");
    d->views = tn_xcalloc((size_t)o->n_dirs, sizeof *d->views);
    for (int i = 0; i < o->n_dirs; i++) {
        char name[256];
        d->views[i] = tn_view_new(d->store, i, o->dirs[i], run_name(o->dirs[i], name, sizeof name), o->live && i == 0);
    }
    d->n_views = o->n_dirs;
    tn_http_opts ho = {.host = host, .port = o->port, .max_body = 1024, .max_connections = MAX_VIEWERS,
                       .authenticated = d->token[0] != 0};
    if (o->port < 0 || o->port > 65535) {
        tn_err("dashboard: port %d is not a TCP port (0-65535)", o->port);
    } else if ((d->http = tn_http_start(&ho, handle, d))) {
        char me[256] = "localhost";
        int any = !strcmp(host, "0.0.0.0") || !strcmp(host, "::");
        if (any) gethostname(me, sizeof me - 1);
        const char *shown = any ? me : host;
        snprintf(d->url, sizeof d->url, strchr(shown, ':') ? "http://[%s]:%d/" : "http://%s:%d/", shown,
                 tn_http_port(d->http));
        poll_all(d); /* the first state before the first viewer */
        if (o->live && !(d->tee = tn_tee_start(on_line, d))) {
            tn_dash_stop(d);
            return NULL;
        }
        if (pthread_create(&d->thread, NULL, file_thread, d) == 0) return d->thread_started = 1, d;
        tn_err("dashboard: cannot start its thread");
        tn_tee_stop(d->tee), d->tee = NULL;
    }
    tn_dash_stop(d);
    return NULL;
}

const char *tn_dash_url(const tn_dash *d) { return d->url; }
int tn_dash_has_charts(const tn_dash *d) { return d->uplot_js.data && d->uplot_css.data; }

void tn_dash_stop(tn_dash *d) {
    if (!d) return;
    tn_tee_stop(d->tee); /* the last lines first */
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    if (d->thread_started) pthread_join(d->thread, NULL);
    if (d->http) poll_all(d); /* what was written last */
    tn_store_stop(d->store);
    /* the viewers send what is left, then their streams end; one that does not read is not waited for long */
    for (double t0 = tn_now(); atomic_load(&d->streams) > 0 && tn_now() - t0 < DRAIN_S;)
        nanosleep(&(struct timespec){0, 20000000L}, NULL);
    tn_http_stop(d->http);
    for (int i = 0; i < d->n_views; i++) tn_view_free(d->views[i]);
    for (int i = 0; i < d->n_lines; i++) free(d->lines[i]);
    free(d->views);
    tn_store_free(d->store);
    free(d->uplot_js.data), free(d->uplot_css.data);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}
