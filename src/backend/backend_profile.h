/* backend_profile -- where a step's time goes, kernel by kernel, on any backend (TANDEM_PROFILE=1).
 *
 * Owns: a copy of a backend's table whose every compute and copy entry times the call and then waits for the
 * device (inner->sync), so a GPU's asynchronous kernels are charged to the call that queued them. That wait removes
 * the overlap of host and device (the profiled step is slower than a real one), but every kernel's share is its own:
 * the breakdown the first GPU measurement lacked (docs/performance.md). Matrix products are also kept by shape
 * (op, M, N, K) with their achieved FLOP rate. The table is printed to stderr when the process exits. */
#ifndef TN_BACKEND_PROFILE_H
#define TN_BACKEND_PROFILE_H

#include <stdio.h>

#include "backend/backend.h"

/* inner, profiled (one profiled backend per process: a second call with another inner is fatal). */
const tn_backend *tn_backend_profiled(const tn_backend *inner);
/* 1 when $TANDEM_PROFILE asks for it ("1"); anything else but unset or "0" is one line and exit. */
int tn_backend_profile_wanted(void);
/* The table so far: ops by total time, then the 12 costliest matrix-product shapes. */
void tn_backend_profile_report(FILE *f);
/* Calls and seconds charged to one op by name ("matmul", "attention_forward", ...); 0 when none. For tests. */
long tn_backend_profile_calls(const char *op, double *seconds);

#endif
