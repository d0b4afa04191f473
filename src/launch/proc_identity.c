/* proc_identity.c -- see proc_identity.h. */
#include "launch/proc_identity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tn_proc_stat(pid_t pid, unsigned long long *start, char *state, pid_t *ppid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "PID (COMM) S PPID ..." -- COMM may hold spaces and ')', so fields are counted after the last ')' */
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    char st = 0;
    int pp = 0;
    unsigned long long t = 0;
    /* after ')': state(3) ppid(4), then fields 5..21 skipped, starttime(22) */
    if (sscanf(p + 1, " %c %d %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu", &st, &pp, &t) != 3)
        return -1;
    if (start) *start = t;
    if (state) *state = st;
    if (ppid) *ppid = pp;
    return 0;
}

void tn_identity_self(char out[static TN_IDENTITY_MAX]) {
    char host[256] = "";
    unsigned long long start = 0;
    gethostname(host, sizeof host - 1);
    for (char *c = host; *c; c++)
        if (*c == ' ' || (unsigned char)*c < 0x20) *c = '_';
    tn_proc_stat(getpid(), &start, NULL, NULL);
    snprintf(out, TN_IDENTITY_MAX, "%s %d %llu", host[0] ? host : "?", (int)getpid(), start);
}

int tn_identity_parse(const char *id, char *host, pid_t *pid, unsigned long long *start) {
    int p = 0, used = 0;
    if (!id || sscanf(id, "%255s %d %llu%n", host, &p, start, &used) != 3 || p <= 0 || id[used] != '\0') return -1;
    *pid = p;
    return 0;
}

int tn_identity_alive(const char *id) {
    char host[256], me[256] = "";
    pid_t pid;
    unsigned long long start, now;
    char state;
    if (tn_identity_parse(id, host, &pid, &start) != 0) return -1;
    gethostname(me, sizeof me - 1);
    for (char *c = me; *c; c++)
        if (*c == ' ' || (unsigned char)*c < 0x20) *c = '_';
    if (strcmp(host, me) != 0) return -1;
    if (tn_proc_stat(pid, &now, &state, NULL) != 0 || now != start) return 0; /* gone, or the pid reused */
    return state == 'Z' || state == 'X' ? 0 : 1;
}
