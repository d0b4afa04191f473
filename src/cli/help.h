/* help -- what `tandem --help`, `tandem help [COMMAND]`, `tandem COMMAND --help` and `tandem version` print:
 * every command's usage and options, in one table so that the overview and the pages agree. */
#ifndef TN_HELP_H
#define TN_HELP_H

#include <stdio.h>

#define TN_VERSION "0.1.0"

/* The overview: every command with its arguments, launch's flags, where to read more. */
void tn_cli_usage(FILE *f);
/* The page of COMMAND (SUB: bench's train|sgemm|allreduce, or NULL) on stdout; 0, or 1 with a line on
 * stderr when there is no such command. */
int tn_cli_help(const char *command, const char *sub);
/* "tandem VERSION (build FINGERPRINT)": the same fingerprint every rank compares at start-up. */
int tn_cli_version(void);
/* Whether argv[0..argc) asks for help (--help or -h anywhere). */
int tn_cli_wants_help(int argc, char **argv);

#endif
