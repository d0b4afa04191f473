/* reaper -- a launcher owns the processes it starts.
 *
 * `tandem launch` runs mpirun, which starts the ranks. For the launcher to return only once every rank has
 * stopped, whatever mpirun does: the launcher is the child subreaper of its process tree (prctl
 * PR_SET_CHILD_SUBREAPER: ranks that outlive mpirun become its children, not init's); mpirun gets SIGTERM
 * when the launcher dies (PR_SET_PDEATHSIG, so it takes the job down); and after mpirun the launcher
 * drains its descendants, escalating SIGTERM -> SIGKILL within bounded times. Descendants are found in
 * /proc (ranks sit in process groups of their own, so a group signal would miss them). Linux only. */
#ifndef TN_REAPER_H
#define TN_REAPER_H

#include <sys/types.h>

/* Makes this process the subreaper of its descendants. 0 or -1 (then only direct children are drained). */
int tn_reaper_become(void);
/* In a forked child before exec: SIGTERM when `parent` dies (exits at once if it already has). */
void tn_reaper_child_setup(pid_t parent);
/* A helper that outlives the job's rounds (a per-node launch's ompi-server): never signalled or waited
 * for here, nor its descendants; the caller ends it itself. */
void tn_reaper_spare(pid_t pid);
/* Sends sig (and SIGCONT, so a stopped process acts on it) to every live descendant; the number signalled. */
int tn_reaper_signal_all(int sig);
/* Reaps exited children (never blocks) and returns the number of live descendants left. Call only when no
 * specific child's status is still wanted (it reaps any child). */
int tn_reaper_live(void);
/* Waits until no descendant is left: after grace_s seconds SIGTERM to each, kill_s seconds later SIGKILL.
 * Returns how many were still alive when it started. */
int tn_reaper_drain(double grace_s, double kill_s);

#endif
