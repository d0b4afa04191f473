/* proc_identity -- naming a process so that another process can tell whether it is still the same one.
 *
 * An identity is "HOST PID START": the host name, the pid and the process's start time in clock ticks since
 * boot (/proc/PID/stat field 22), so a pid reused by another process is not mistaken for the original. The
 * launcher exports its own as TANDEM_LAUNCHER; ranks watch it (rank_watch.h) and rank 0 accepts the
 * output_dir lock held under it (output_lock.h). Linux (/proc). */
#ifndef TN_PROC_IDENTITY_H
#define TN_PROC_IDENTITY_H

#include <stddef.h>
#include <sys/types.h>

#define TN_IDENTITY_MAX 320

/* This process's identity into out. */
void tn_identity_self(char out[static TN_IDENTITY_MAX]);
/* Parses "HOST PID START"; 0 ok, -1 when malformed. host: at least 256 bytes. */
int tn_identity_parse(const char *id, char *host, pid_t *pid, unsigned long long *start);
/* 1: the process is alive on this machine (running, sleeping or stopped; not a zombie); 0: it is gone;
 * -1: it cannot be seen from here (another host, or another pid namespace). */
int tn_identity_alive(const char *id);
/* Start time (field 22 of /proc/PID/stat) and state letter of pid; 0 ok, -1 when there is no such process. */
int tn_proc_stat(pid_t pid, unsigned long long *start, char *state, pid_t *ppid);

#endif
