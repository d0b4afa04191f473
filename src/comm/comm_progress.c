/* comm_progress.c -- the progress thread and the op queue.
 *
 * MPI moves a non-blocking transfer only while some thread calls into it, and the compute threads sit in
 * BLAS, so one background thread per rank steps the queued ops in submission order (the next one as soon
 * as the one before only drains, see TN_COMM_LANES, so the link does not idle between buckets; range
 * collectives of different shards side by side, see tn_comm_op.shards). It must not burn a
 * core (two ranks share a 2-core machine): it calls MPI_Testsome and, when nothing moved, sleeps with
 * exponential backoff (up to tune.poll_max_us; a TCP socket buffer drains slowly at 100 Mbit/s, so a
 * millisecond of sleep costs no bandwidth). With no op queued it sleeps on a condition variable. Background
 * ops (a machine-level exchange that spans many steps, exchange.h) are stepped on every round as well, so
 * the queue's ops never wait behind them. A background op alone, that nobody waits for and that has not
 * moved for TN_BG_GRACE_S (at once when its messages are single ring pieces: nothing to keep flowing), waits for
 * a peer that has not started its side (DiLoCo's exchange leaves at each machine's own round end, and the
 * machines drift apart by up to a round): polling it every millisecond woke the thread ~50-120 times a step on
 * the core that computes (issue 27), so the sleeps then grow to tune.bg_poll_max_us, on the condition
 * variable, which a new op or a caller that starts waiting signals. With tn_comm_trace_ops on, each op prints one
 * line as it finishes (queued / first stepped / done), the timeline of a step's link use. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_impl.h"
#include "core/core.h"

/* A ring piece (32 KB) crosses 100 Mbit/s in ~3 ms: a moving exchange completes something well within this. */
#define TN_BG_GRACE_S 0.010

int tn_comm_mpi_err(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    return tn_err("comm: %s failed: %s", what, msg);
}

void tn_comm_backoff(int *us, int max_us) {
    if (*us < 0) { /* a few immediate re-polls first: a reply is often microseconds away */
        (*us)++;
        return;
    }
    if (*us > 0) {
        struct timespec ts = {0, (long)*us * 1000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    *us = *us == 0 ? 2 : (*us * 2 < max_us ? *us * 2 : max_us);
}

int tn_comm_mpi_wait(tn_comm *c, MPI_Request *rq, const char *what) {
    int us = TN_BACKOFF_START, flag = 0;
    double since = tn_now();
    for (;;) {
        int rc = MPI_Test(rq, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, what);
        if (flag) return 0;
        tn_comm_backoff(&us, c->tune.poll_max_us);
        tn_watchdog_check(c, &since, what);
    }
}

/* Under c->mu: one line for a finished op (tn_comm_trace_ops), times from the caller's step start. */
static void trace_locked(const tn_comm *c, const tn_comm_op *op) {
    double e = c->trace_epoch, now = tn_now();
    fprintf(stderr, "rank %d step %d: op %llu %s of %zu floats: queued %.1f, started %.1f, done %.1f ms%s\n",
            c->info.rank, c->trace_step, (unsigned long long)op->seq, op->what ? op->what : "op", op->floats,
            1e3 * (op->t_queued - e), 1e3 * ((op->t_started > 0 ? op->t_started : now) - e), 1e3 * (now - e),
            op->failed ? " (failed)" : "");
}

void tn_comm_trace_ops(tn_comm *c, int step, double epoch) {
    if (!c->thread_started) return;
    pthread_mutex_lock(&c->mu);
    c->trace_ops = 1, c->trace_step = step, c->trace_epoch = epoch;
    pthread_mutex_unlock(&c->mu);
}

/* Under c->mu: op finished; the first unfinished op becomes current (a background op leaves its list). */
static void finish_locked(tn_comm *c, tn_comm_op *op, int failed) {
    op->done = 1, op->failed = failed;
    if (c->trace_ops) trace_locked(c, op);
    if (op->background) {
        tn_comm_op **pp = &c->bg;
        while (*pp && *pp != op) pp = &(*pp)->next;
        if (*pp) *pp = op->next;
        op->next = NULL;
    } else {
        while (c->cur && c->cur->done) c->cur = c->cur->next;
        if (!c->cur) c->busy_s += tn_now() - c->busy_since;
    }
    pthread_cond_broadcast(&c->cv);
}

int tn_comm_pick(tn_comm_op *first, tn_comm_op **run) {
    int n = 0;
    uint64_t held = 0; /* shards of earlier ops that are waiting or still sending: later ops on them wait */
    for (tn_comm_op *op = first; op && op->seq < first->seq + TN_COMM_LANES && held != ~0ull; op = op->next) {
        if (op->done) continue;
        uint64_t mine = op->shards ? op->shards : ~0ull;
        if (op->gated) { /* its input is still being copied out of device memory */
            held |= mine;
            continue;
        }
        if (mine & held) {
            held |= mine; /* a later op on these shards must not overtake this one */
            continue;
        }
        run[n++] = op;
        if (!op->draining || !op->draining(op)) held |= mine;
    }
    return n;
}

/* Under c->mu: the queue's ops to step now (tn_comm_pick) and every background op. */
static int ops_to_step_locked(tn_comm *c, tn_comm_op **run) {
    int n = c->cur ? tn_comm_pick(c->cur, run) : 0;
    for (tn_comm_op *op = c->bg; op && n < 2 * TN_COMM_LANES; op = op->next) run[n++] = op;
    return n;
}

/* Idle: sleep until an op comes, waking every 50 ms to answer the watchdog's pings (comm_watchdog.c). */
static void idle_wait_locked(tn_comm *c) {
    while (!c->cur && !c->bg && !c->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        if (!c->cur && !c->bg && !c->stop) {
            pthread_mutex_unlock(&c->mu);
            tn_watchdog_answer(c);
            pthread_mutex_lock(&c->mu);
        }
    }
}

/* Under c->mu: a background op in flight needs its flow kept moving (more than one ring piece a message). */
static int bg_flows_locked(const tn_comm *c) {
    for (const tn_comm_op *op = c->bg; op; op = op->next)
        if (!op->one_piece) return 1;
    return 0;
}

/* Under c->mu, nothing moved: the next poll after the backoff (this file's header). The long sleeps wait on c->cv,
 * so tn_comm_submit* and a caller entering tn_comm_op_wait* cut them short. */
static void backoff_locked(tn_comm *c, int *us, double since) {
    int bg_idle = !c->cur && c->bg && !c->waiting && (!bg_flows_locked(c) || tn_now() - since >= TN_BG_GRACE_S);
    if (!bg_idle || c->tune.bg_poll_max_us <= c->tune.poll_max_us) {
        pthread_mutex_unlock(&c->mu);
        tn_comm_backoff(us, c->tune.poll_max_us);
        pthread_mutex_lock(&c->mu);
        return;
    }
    int sleep_us = *us < c->tune.poll_max_us ? c->tune.poll_max_us : *us;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)sleep_us * 1000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L, ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    *us = sleep_us * 2 < c->tune.bg_poll_max_us ? sleep_us * 2 : c->tune.bg_poll_max_us;
}

static void *progress_main(void *arg) {
    tn_comm *c = arg;
    int us = TN_BACKOFF_START, broken = 0;
    tn_comm_op *last_cur = NULL, *run[2 * TN_COMM_LANES];
    int rc[2 * TN_COMM_LANES];
    double since = tn_now(); /* last progress of the current ops */
    pthread_mutex_lock(&c->mu);
    for (;;) {
        idle_wait_locked(c);
        if (!c->cur && !c->bg) break;
        if (c->cur != last_cur) last_cur = c->cur, since = tn_now();
        int n = ops_to_step_locked(c, run), progressed = 0;
        c->polls++;
        if (broken) { /* ranks are out of step after a failure: fail the rest rather than hang */
            for (int i = 0; i < n; i++) {
                snprintf(run[i]->err, sizeof run[i]->err, "comm: an earlier operation failed");
                finish_locked(c, run[i], 1);
            }
            continue;
        }
        pthread_mutex_unlock(&c->mu);
        for (int i = 0; i < n; i++) {
            if (run[i]->t_started == 0) run[i]->t_started = tn_now();
            rc[i] = run[i]->step(run[i], &progressed);
            if (rc[i] < 0) snprintf(run[i]->err, sizeof run[i]->err, "%s", tn_errmsg());
        }
        pthread_mutex_lock(&c->mu);
        int finished = 0;
        for (int i = 0; i < n; i++)
            if (rc[i] != 0) {
                broken |= rc[i] < 0;
                finish_locked(c, run[i], rc[i] < 0);
                finished = 1;
            }
        if (finished) {
            us = TN_BACKOFF_START;
            continue;
        }
        pthread_mutex_unlock(&c->mu);
        tn_watchdog_answer(c);
        if (progressed) {
            us = TN_BACKOFF_START;
            since = tn_now();
        } else {
            tn_watchdog_check(c, &since, "the gradient all-reduce");
        }
        pthread_mutex_lock(&c->mu);
        if (!progressed) backoff_locked(c, &us, since);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int tn_comm_progress_start(tn_comm *c) {
    if (pthread_mutex_init(&c->mu, NULL) != 0 || pthread_cond_init(&c->cv, NULL) != 0)
        return tn_err("comm: cannot create the progress thread's lock");
    int rc = pthread_create(&c->thread, NULL, progress_main, c);
    if (rc != 0) return tn_err("comm: cannot start the progress thread: %s", strerror(rc));
    c->thread_started = 1;
    return 0;
}

void tn_comm_progress_stop(tn_comm *c) {
    if (!c->thread_started) return;
    tn_comm_op_wait_all(c);
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    c->thread_started = 0;
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
}

tn_comm_op *tn_comm_submit_background(tn_comm *c, tn_comm_op *op) {
    pthread_mutex_lock(&c->mu);
    op->background = 1, op->t_queued = tn_now();
    op->next = c->bg;
    c->bg = op;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return op;
}

tn_comm_op *tn_comm_submit(tn_comm *c, tn_comm_op *op) {
    pthread_mutex_lock(&c->mu);
    op->next = NULL, op->t_queued = tn_now();
    op->gated = c->gate_next;
    if (c->tail) c->tail->next = op;
    else c->head = op;
    c->tail = op;
    if (!c->cur) c->cur = op, c->busy_since = tn_now();
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return op;
}

/* Under c->mu: remove a finished op from the list and free it; returns whether it had failed. */
static int unlink_free_locked(tn_comm *c, tn_comm_op *op, char *err, size_t errsz) {
    tn_comm_op **pp = &c->head, *prev = NULL;
    while (*pp && *pp != op) prev = *pp, pp = &(*pp)->next;
    if (*pp) {
        *pp = op->next;
        if (c->tail == op) c->tail = prev;
    }
    int failed = op->failed;
    if (failed && err[0] == 0) snprintf(err, errsz, "%s", op->err);
    if (op->release) op->release(op);
    free(op);
    return failed;
}

/* Under c->mu: block until *done, telling the progress thread that a caller waits (backoff_locked). */
static void wait_locked(tn_comm *c, const int *done) {
    if (*done) return;
    c->waiting++;
    pthread_cond_broadcast(&c->cv); /* the progress thread polls fast from now on */
    while (!*done) pthread_cond_wait(&c->cv, &c->mu);
    c->waiting--;
}

int tn_comm_op_wait(tn_comm_op *op) {
    tn_comm *c = op->c;
    char err[256] = "";
    pthread_mutex_lock(&c->mu);
    wait_locked(c, &op->done);
    int failed = unlink_free_locked(c, op, err, sizeof err);
    pthread_mutex_unlock(&c->mu);
    return failed ? tn_err("%s", err) : 0;
}

int tn_comm_op_wait_all(tn_comm *c) {
    char err[256] = "";
    int failed = 0;
    pthread_mutex_lock(&c->mu);
    if (c->cur || c->bg) {
        c->waiting++;
        pthread_cond_broadcast(&c->cv); /* the progress thread polls fast from now on */
        while (c->cur || c->bg) pthread_cond_wait(&c->cv, &c->mu);
        c->waiting--;
    }
    while (c->head) failed |= unlink_free_locked(c, c->head, err, sizeof err);
    pthread_mutex_unlock(&c->mu);
    return failed ? tn_err("%s", err) : 0;
}

void tn_comm_get_stats(const tn_comm *c, tn_comm_stats *s) {
    memset(s, 0, sizeof *s);
    tn_comm *m = (tn_comm *)c; /* the lock is not part of the observable state */
    if (!c->thread_started) return;
    clockid_t cid;
    struct timespec ts;
    if (pthread_getcpuclockid(c->thread, &cid) == 0 && clock_gettime(cid, &ts) == 0)
        s->progress_cpu_s = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    pthread_mutex_lock(&m->mu);
    s->progress_busy_s = c->busy_s + (c->cur ? tn_now() - c->busy_since : 0);
    s->ops = c->op_seq; /* written by the caller's thread, which is the one asking */
    s->polls = c->polls;
    pthread_mutex_unlock(&m->mu);
}
