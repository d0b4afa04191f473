/* rank_watch.c -- see rank_watch.h. */
#include "launch/rank_watch.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "launch/proc_identity.h"

static atomic_int saving;
static char launcher[TN_IDENTITY_MAX];
static int watch_launcher, watch_parent;
static pid_t parent0;

static void *watch(void *arg) {
    (void)arg;
    char gone[TN_IDENTITY_MAX + 64] = "";
    while (!gone[0]) {
        nanosleep(&(struct timespec){0, 200000000L}, NULL);
        char host[256];
        pid_t pid = 0;
        unsigned long long start;
        if (watch_launcher && tn_identity_alive(launcher) == 0) {
            tn_identity_parse(launcher, host, &pid, &start);
            snprintf(gone, sizeof gone, "its launcher (tandem launch, pid %d)", (int)pid);
        } else if (watch_parent && getppid() != parent0) {
            snprintf(gone, sizeof gone, "its parent (mpirun or orted, pid %d)", (int)parent0);
        }
    }
    signal(SIGPIPE, SIG_IGN); /* whoever read our stderr may be gone too: the save below must not die on it */
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    fprintf(stderr, "tandem: error: rank %s on host %s: %s is gone: stopping this rank\n", rank ? rank : "0", me, gone);
    for (double t0 = tn_now(); atomic_load(&saving) && tn_now() - t0 < TN_WATCH_SAVE_GRACE_S;)
        nanosleep(&(struct timespec){0, 50000000L}, NULL);
    _exit(1);
    return NULL;
}

void tn_rank_watch_start(void) {
    const char *l = getenv("TANDEM_LAUNCHER");
    /* only a launcher this rank can see alive now: on another machine (or pid namespace) it cannot be watched */
    if (l && strlen(l) < sizeof launcher && tn_identity_alive(l) == 1) {
        snprintf(launcher, sizeof launcher, "%s", l);
        watch_launcher = 1;
    }
    if (getenv("OMPI_COMM_WORLD_SIZE")) {
        parent0 = getppid();
        watch_parent = parent0 > 1;
    }
    if (!watch_launcher && !watch_parent) return;
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, watch, NULL) != 0)
        fprintf(stderr, "tandem: warning: cannot start the thread that watches the launcher: this rank will not stop "
                        "by itself if the launcher dies\n");
    pthread_attr_destroy(&at);
}

void tn_rank_watch_saving(int on) { atomic_store(&saving, on); }
