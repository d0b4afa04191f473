/* dash_tee.c -- see dash_tee.h. */
#include "serve/dash_tee.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "core/core.h"

struct tn_tee {
    tn_tee_fn fn;
    void *ctx;
    int saved[2];         /* the original 1 and 2 */
    int pipe_rd[2];
    char line[2][TN_TEE_LINE];
    size_t used[2];
    pthread_t thread;
    atomic_int stopping; /* a copy of a pipe's write end kept elsewhere (a child) must not hold the stop up */
};

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return; /* the terminal is gone: the lines still reach the dashboard */
        p += k, n -= (size_t)k;
    }
}

static void split(tn_tee *t, int i, const char *p, size_t n) {
    for (size_t k = 0; k < n; k++) {
        if (p[k] == '\n' || p[k] == '\r') {
            if (t->used[i]) t->fn(t->ctx, t->line[i], t->used[i], i == 1);
            t->used[i] = 0;
        } else if (t->used[i] < TN_TEE_LINE) {
            t->line[i][t->used[i]++] = p[k];
        }
    }
}

static void *pump(void *arg) {
    tn_tee *t = arg;
    prctl(PR_SET_NAME, "tandem-dash", 0, 0, 0); /* the dashboard's threads, for its CPU account */
    int open_fds = 2;
    while (open_fds > 0) {
        struct pollfd p[2] = {{.fd = t->pipe_rd[0], .events = POLLIN}, {.fd = t->pipe_rd[1], .events = POLLIN}};
        int ready = poll(p, 2, t->stopping ? 100 : 500);
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0 || (ready == 0 && t->stopping)) break;
        for (int i = 0; i < 2; i++) {
            if (t->pipe_rd[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[8192];
            ssize_t k = read(t->pipe_rd[i], buf, sizeof buf);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) {
                close(t->pipe_rd[i]);
                t->pipe_rd[i] = -1, open_fds--;
                continue;
            }
            write_all(t->saved[i], buf, (size_t)k);
            split(t, i, buf, (size_t)k);
        }
    }
    for (int i = 0; i < 2; i++)
        if (t->used[i]) t->fn(t->ctx, t->line[i], t->used[i], i == 1);
    return NULL;
}

tn_tee *tn_tee_start(tn_tee_fn fn, void *ctx) {
    tn_tee *t = tn_xcalloc(1, sizeof *t);
    t->fn = fn, t->ctx = ctx;
    int fds[2][2] = {{-1, -1}, {-1, -1}};
    fflush(stdout), fflush(stderr);
    for (int i = 0; i < 2; i++) {
        if (pipe(fds[i]) != 0 || (t->saved[i] = dup(i + 1)) < 0) {
            tn_err("dashboard: cannot pass the log through a pipe: %s", strerror(errno));
            for (int k = 0; k <= i; k++) {
                if (fds[k][0] >= 0) close(fds[k][0]), close(fds[k][1]);
                if (k < i) close(t->saved[k]);
            }
            free(t);
            return NULL;
        }
    }
    for (int i = 0; i < 2; i++) {
        dup2(fds[i][1], i + 1);
        close(fds[i][1]);
        t->pipe_rd[i] = fds[i][0];
    }
    if (pthread_create(&t->thread, NULL, pump, t) != 0) { /* put everything back */
        for (int i = 0; i < 2; i++) dup2(t->saved[i], i + 1), close(t->saved[i]), close(t->pipe_rd[i]);
        free(t);
        tn_err("dashboard: cannot start the log thread");
        return NULL;
    }
    return t;
}

void tn_tee_stop(tn_tee *t) {
    if (!t) return;
    fflush(stdout), fflush(stderr);
    for (int i = 0; i < 2; i++) dup2(t->saved[i], i + 1); /* the pipes' last writers close: the thread sees the end */
    t->stopping = 1;
    pthread_join(t->thread, NULL);
    for (int i = 0; i < 2; i++) {
        close(t->saved[i]);
        if (t->pipe_rd[i] >= 0) close(t->pipe_rd[i]);
    }
    free(t);
}
