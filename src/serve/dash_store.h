/* dash_store -- the dashboard's state and the events that change it.
 *
 * State: for each run shown, named parts ("job", "points", ...), each either one JSON value (set) or a list of
 * JSON values (append; the oldest dropped past the list's cap). The changes made between two commits become one
 * event, numbered from 1, kept in a ring of at most STORE_EVENTS events and STORE_EVENT_BYTES bytes that every
 * viewer reads at its own pace: a viewer that falls behind (its next event overwritten) is told to reload the
 * whole state, so no viewer, however slow, makes the store hold more. One event per commit keeps a viewer's cost
 * to one wake-up and one write per commit, however many parts changed.
 *
 * Threads: any; one mutex. Viewers copy an event out under it and send it without it; a snapshot is built once
 * per state and copied to every viewer that asks for that state. */
#ifndef TN_DASH_STORE_H
#define TN_DASH_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct tn_store tn_store;

/* mode: "live" (a run in progress, served by itself) or "files" (`tandem dashboard DIR...`). */
tn_store *tn_store_new(int n_runs, const char *mode);
void tn_store_free(tn_store *s);

/* part = json (a JSON value, copied). */
void tn_store_set(tn_store *s, int run, const char *part, const char *json);
/* Appends n JSON values (copied) to the list part, keeping its newest cap; one event for all n. */
void tn_store_append(tn_store *s, int run, const char *part, const char *const *items, int n, int cap);
/* Forgets everything of run (its files were rewritten: a resumed run starts them over). */
void tn_store_reset(tn_store *s, int run);
/* The changes since the last commit as one event; wakes the viewers (nothing when nothing changed). */
void tn_store_commit(tn_store *s);
/* Ends every viewer's wait: tn_store_next returns -2 from now on. */
void tn_store_stop(tn_store *s);

/* {"mode": M, "seq": N, "runs": [{part: value or [values], ...}, ...]} with N the last event it reflects
 * (changes not yet committed are committed first; malloc'ed; *n its length). */
char *tn_store_snapshot(tn_store *s, uint64_t *seq, size_t *n);
/* The event after *seq as server-sent-event bytes ("id: N\ndata: {"seq": N, "ops": [{"run", "part", "op": set |
 * append | reset, "data"}, ...]}\n\n", malloc'ed into *text) and *seq moves on: 1. 0: none came within wait_ms.
 * -1: *seq fell out of the ring (the viewer must reload the state; *seq is now the newest event). -2: the store
 * has stopped and every event was read. */
int tn_store_next(tn_store *s, uint64_t *seq, char **text, size_t *n, int wait_ms);
/* Events made so far, and the number of viewers' reads that fell behind (for tests and the report). */
uint64_t tn_store_seq(tn_store *s);
uint64_t tn_store_behind(tn_store *s);

#endif
