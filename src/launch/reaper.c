/* reaper.c -- see reaper.h. */
#include "launch/reaper.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "launch/proc_identity.h"

int tn_reaper_become(void) { return prctl(PR_SET_CHILD_SUBREAPER, 1) == 0 ? 0 : -1; }

void tn_reaper_child_setup(pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1); /* the launcher died before the line above: nobody to serve */
}

static pid_t spared[8];

void tn_reaper_spare(pid_t pid) {
    for (int i = 0; i < 8; i++)
        if (!spared[i]) {
            spared[i] = pid;
            return;
        }
}

static int is_spared(pid_t p) {
    for (int i = 0; i < 8; i++)
        if (spared[i] == p) return 1;
    return 0;
}

/* Live (not zombie) descendants of this process, spared helpers and theirs left out, into pids (at most
 * max); their number. */
static int descendants(pid_t *pids, int max) {
    enum { CAP = 65536 };
    static pid_t all[CAP], parent[CAP];
    static char state[CAP];
    int n = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d)) && n < CAP;) {
        char *end;
        long p = strtol(e->d_name, &end, 10);
        if (*end || p <= 0) continue;
        if (tn_proc_stat((pid_t)p, NULL, &state[n], &parent[n]) == 0) all[n++] = (pid_t)p;
    }
    if (d) closedir(d);
    /* breadth-first from this process; a descendant is newer than its parent but pids wrap, so iterate */
    int found = 0;
    static pid_t queue[CAP];
    int head = 0, tail = 0;
    queue[tail++] = getpid();
    while (head < tail) {
        pid_t q = queue[head++];
        for (int i = 0; i < n; i++)
            if (parent[i] == q && tail < CAP && !is_spared(all[i])) {
                queue[tail++] = all[i];
                if (state[i] != 'Z' && state[i] != 'X' && found < max) pids[found++] = all[i];
            }
    }
    return found;
}

int tn_reaper_signal_all(int sig) {
    static pid_t p[4096];
    int n = descendants(p, 4096);
    for (int i = 0; i < n; i++) {
        kill(p[i], sig);
        if (sig != SIGKILL) kill(p[i], SIGCONT);
    }
    return n;
}

int tn_reaper_live(void) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    static pid_t p[4096];
    return descendants(p, 4096);
}

int tn_reaper_drain(double grace_s, double kill_s) {
    int first = tn_reaper_live(), termed = 0, killed = 0, left;
    for (double t0 = tn_now(); (left = tn_reaper_live()) > 0;) {
        double waited = tn_now() - t0;
        if (!termed && waited >= grace_s) termed = 1, tn_reaper_signal_all(SIGTERM);
        if (!killed && waited >= grace_s + kill_s) killed = 1, tn_reaper_signal_all(SIGKILL);
        if (waited >= grace_s + kill_s + 10) { /* SIGKILL cannot end a process stuck in the kernel (a dead NFS server) */
            fprintf(stderr, "tandem launch: warning: %d process(es) of the job survive SIGKILL (stuck in the kernel?)\n", left);
            break;
        }
        nanosleep(&(struct timespec){0, 50000000L}, NULL);
    }
    return first;
}
