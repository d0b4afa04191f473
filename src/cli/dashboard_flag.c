/* dashboard_flag.c -- `--dashboard [HOST:]PORT` on the command lines of `tandem train` and `tandem launch`, turned
 * into the config override both read (its own file so that neither command imports the other for it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/core.h"

/* The argument arrays tn_cli_dashboard_flag makes live as long as the process (the config points into them); held
 * here so that a leak checker sees them in use at exit */
static char **volatile kept_argv[4];
static int n_kept_argv;

/* `--dashboard [HOST:]PORT` anywhere on the line becomes the override dashboard=[HOST:]PORT after the other
 * arguments, so the config file stays first whether the flag came before it or after it. */
int tn_cli_dashboard_flag(int *pargc, char ***pargv) {
    int argc = *pargc, n = 0, n_flags = 0;
    char **argv = *pargv, **out = tn_xcalloc((size_t)argc + 1, sizeof *out);
    const char **flags = tn_xcalloc((size_t)argc + 1, sizeof *flags); /* each --dashboard's value, in order */
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--dashboard") != 0) {
            out[n++] = argv[i];
            continue;
        }
        if (i + 1 >= argc || argv[i + 1][0] == '-' || strchr(argv[i + 1], '=')) {
            free(out), free(flags);
            return tn_err("--dashboard needs where to listen: [HOST:]PORT (0: a free port), or the key dashboard=true");
        }
        flags[n_flags++] = argv[++i];
    }
    for (int k = 0; k < n_flags; k++) {
        size_t len = strlen(flags[k]) + sizeof "dashboard=";
        out[n] = tn_xmalloc(len); /* lives as long as the process: the config keeps pointing at argv */
        snprintf(out[n++], len, "dashboard=%s", flags[k]);
    }
    free(flags);
    if (n_kept_argv < 4) kept_argv[n_kept_argv++] = out;
    *pargc = n, *pargv = out;
    return 0;
}
