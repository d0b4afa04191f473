/* dash_store.c -- see dash_store.h. */
#include "serve/dash_store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "outputs/pyfmt.h"

#define STORE_EVENTS 1024
#define STORE_EVENT_BYTES ((size_t)16 << 20)

typedef struct {
    char name[32];
    int is_list;
    char *value;      /* set */
    char **items;     /* list: a ring of cap values, oldest at head */
    int head, n, cap;
} part;

typedef struct {
    part *parts;
    int n;
} run_state;

typedef struct {
    char *text;
    size_t n;
} event;

struct tn_store {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char mode[16];
    run_state *runs;
    int n_runs;
    event ring[STORE_EVENTS];
    uint64_t next;         /* number of the next event (the first is 1) */
    uint64_t first;        /* the oldest event still in the ring */
    size_t bytes;          /* of the events in the ring */
    uint64_t behind;
    tn_strbuf batch;       /* the changes since the last commit, as ops */
    int stop;
    char *snap;            /* the snapshot of state `snap_seq` */
    size_t snap_n;
    uint64_t snap_seq;
};

tn_store *tn_store_new(int n_runs, const char *mode) {
    tn_store *s = tn_xcalloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(s->mode, sizeof s->mode, "%s", mode);
    s->runs = tn_xcalloc((size_t)(n_runs > 0 ? n_runs : 1), sizeof *s->runs);
    s->n_runs = n_runs;
    s->next = s->first = 1;
    return s;
}

static void clear_part(part *p) {
    free(p->value);
    for (int i = 0; i < p->n; i++) free(p->items[(p->head + i) % p->cap]);
    free(p->items);
}

void tn_store_free(tn_store *s) {
    if (!s) return;
    for (int r = 0; r < s->n_runs; r++) {
        for (int i = 0; i < s->runs[r].n; i++) clear_part(&s->runs[r].parts[i]);
        free(s->runs[r].parts);
    }
    free(s->runs);
    for (uint64_t q = s->first; q < s->next; q++) free(s->ring[q % STORE_EVENTS].text);
    free(s->snap);
    tn_sb_free(&s->batch);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static part *find(tn_store *s, int run, const char *name, int is_list) {
    run_state *rs = &s->runs[run];
    for (int i = 0; i < rs->n; i++)
        if (strcmp(rs->parts[i].name, name) == 0) return &rs->parts[i];
    rs->parts = tn_xrealloc(rs->parts, (size_t)(rs->n + 1) * sizeof *rs->parts);
    part *p = &rs->parts[rs->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->is_list = is_list;
    return p;
}

/* Under mu: one change into the batch that the next commit makes an event of. */
static void add_op(tn_store *s, int run, const char *part_name, const char *op, const char *data, size_t data_n) {
    tn_sb_printf(&s->batch, "%s{\"run\": %d, \"part\": \"%s\", \"op\": \"%s\", \"data\": ", s->batch.n ? ", " : "", run,
                 part_name, op);
    tn_sb_putn(&s->batch, data, data_n);
    tn_sb_puts(&s->batch, "}");
}

/* Under mu: the batch as one event into the ring, dropping the oldest past the ring's bounds. */
static void push_event(tn_store *s) {
    tn_strbuf b = {0};
    uint64_t seq = s->next;
    tn_sb_printf(&b, "id: %llu\ndata: {\"seq\": %llu, \"ops\": [", (unsigned long long)seq, (unsigned long long)seq);
    tn_sb_putn(&b, s->batch.s, s->batch.n);
    tn_sb_puts(&b, "]}\n\n");
    s->batch.n = 0;
    while (s->next - s->first >= STORE_EVENTS || (s->next > s->first && s->bytes + b.n > STORE_EVENT_BYTES)) {
        event *old = &s->ring[s->first % STORE_EVENTS];
        s->bytes -= old->n;
        free(old->text);
        old->text = NULL;
        s->first++;
    }
    event *e = &s->ring[seq % STORE_EVENTS];
    e->text = b.s, e->n = b.n;
    s->bytes += b.n;
    s->next++;
}

void tn_store_set(tn_store *s, int run, const char *part_name, const char *json) {
    if (run < 0 || run >= s->n_runs) return;
    pthread_mutex_lock(&s->mu);
    part *p = find(s, run, part_name, 0);
    free(p->value);
    p->value = tn_xstrdup(json);
    add_op(s, run, part_name, "set", json, strlen(json));
    pthread_mutex_unlock(&s->mu);
}

void tn_store_append(tn_store *s, int run, const char *part_name, const char *const *items, int n, int cap) {
    if (run < 0 || run >= s->n_runs || n <= 0 || cap <= 0) return;
    tn_strbuf data = {0};
    tn_sb_puts(&data, "[");
    for (int i = 0; i < n; i++) {
        if (i) tn_sb_puts(&data, ",");
        tn_sb_puts(&data, items[i]);
    }
    tn_sb_puts(&data, "]");
    pthread_mutex_lock(&s->mu);
    part *p = find(s, run, part_name, 1);
    if (!p->items) p->items = tn_xcalloc((size_t)cap, sizeof *p->items), p->cap = cap;
    for (int i = 0; i < n; i++) {
        if (p->n == p->cap) { /* full: the oldest goes */
            free(p->items[p->head]);
            p->head = (p->head + 1) % p->cap;
            p->n--;
        }
        p->items[(p->head + p->n) % p->cap] = tn_xstrdup(items[i]);
        p->n++;
    }
    add_op(s, run, part_name, "append", data.s, data.n);
    pthread_mutex_unlock(&s->mu);
    tn_sb_free(&data);
}

void tn_store_reset(tn_store *s, int run) {
    if (run < 0 || run >= s->n_runs) return;
    pthread_mutex_lock(&s->mu);
    run_state *rs = &s->runs[run];
    for (int i = 0; i < rs->n; i++) clear_part(&rs->parts[i]);
    free(rs->parts);
    rs->parts = NULL, rs->n = 0;
    add_op(s, run, "*", "reset", "null", 4);
    pthread_mutex_unlock(&s->mu);
}

void tn_store_commit(tn_store *s) {
    pthread_mutex_lock(&s->mu);
    if (s->batch.n) {
        push_event(s);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

void tn_store_stop(tn_store *s) {
    pthread_mutex_lock(&s->mu);
    if (s->batch.n) push_event(s);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Under mu: the whole state as JSON. */
static void build_snapshot(tn_store *s) {
    tn_strbuf b = {0};
    tn_sb_printf(&b, "{\"mode\": \"%s\", \"seq\": %llu, \"runs\": [", s->mode, (unsigned long long)(s->next - 1));
    for (int r = 0; r < s->n_runs; r++) {
        const run_state *rs = &s->runs[r];
        tn_sb_puts(&b, r ? ", {" : "{");
        for (int i = 0; i < rs->n; i++) {
            const part *p = &rs->parts[i];
            tn_sb_printf(&b, "%s\"%s\": ", i ? ", " : "", p->name);
            if (!p->is_list) {
                tn_sb_puts(&b, p->value ? p->value : "null");
                continue;
            }
            tn_sb_puts(&b, "[");
            for (int k = 0; k < p->n; k++) {
                if (k) tn_sb_puts(&b, ",");
                tn_sb_puts(&b, p->items[(p->head + k) % p->cap]);
            }
            tn_sb_puts(&b, "]");
        }
        tn_sb_puts(&b, "}");
    }
    tn_sb_puts(&b, "]}");
    free(s->snap);
    s->snap = b.s, s->snap_n = b.n, s->snap_seq = s->next - 1;
}

char *tn_store_snapshot(tn_store *s, uint64_t *seq, size_t *n) {
    pthread_mutex_lock(&s->mu);
    if (s->batch.n) { /* the state includes them: so must the events before the snapshot's number */
        push_event(s);
        pthread_cond_broadcast(&s->cv);
    }
    if (!s->snap || s->snap_seq != s->next - 1) build_snapshot(s);
    char *copy = tn_xmalloc(s->snap_n + 1);
    memcpy(copy, s->snap, s->snap_n + 1);
    *n = s->snap_n, *seq = s->snap_seq;
    pthread_mutex_unlock(&s->mu);
    return copy;
}

int tn_store_next(tn_store *s, uint64_t *seq, char **text, size_t *n, int wait_ms) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    until.tv_sec += wait_ms / 1000 + until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    while (!s->stop && *seq + 1 >= s->next)
        if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT) break;
    if (*seq + 1 < s->first) {
        *seq = s->next - 1, rc = -1;
        s->behind++;
    } else if (*seq + 1 < s->next) {
        const event *e = &s->ring[(*seq + 1) % STORE_EVENTS];
        *text = tn_xmalloc(e->n + 1);
        memcpy(*text, e->text, e->n + 1);
        *n = e->n;
        (*seq)++;
        rc = 1;
    } else if (s->stop) { /* every event sent: the stream ends */
        rc = -2;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

uint64_t tn_store_seq(tn_store *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t q = s->next - 1;
    pthread_mutex_unlock(&s->mu);
    return q;
}

uint64_t tn_store_behind(tn_store *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t q = s->behind;
    pthread_mutex_unlock(&s->mu);
    return q;
}
