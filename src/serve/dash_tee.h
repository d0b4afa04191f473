/* dash_tee -- this process's standard output and error, passed on unchanged and also handed, line by line, to a
 * callback (the dashboard's newest log lines are the lines the user's terminal shows). A thread of its own reads
 * two pipes put in place of file descriptors 1 and 2; it writes to the original descriptors first, so the tee
 * never makes output wait longer than the terminal (or mpirun) already does. Lines are split at \n and \r (a
 * progress bar's updates); a line longer than TN_TEE_LINE bytes is cut there. */
#ifndef TN_DASH_TEE_H
#define TN_DASH_TEE_H

#include <stddef.h>

#define TN_TEE_LINE 2048

typedef void (*tn_tee_fn)(void *ctx, const char *line, size_t n, int is_stderr);
typedef struct tn_tee tn_tee;

/* NULL + tn_err when the pipes cannot be set up (then nothing was changed). */
tn_tee *tn_tee_start(tn_tee_fn fn, void *ctx);
/* Flushes stdout and stderr, puts the original descriptors back and waits for the thread to pass on the rest. */
void tn_tee_stop(tn_tee *t);

#endif
