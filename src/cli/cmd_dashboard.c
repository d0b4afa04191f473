/* cmd_dashboard.c -- `tandem dashboard DIR [DIR...] [--host HOST] [--port PORT]`: serves the dashboard
 * (serve/dashboard.h) of finished or running output folders, their curves overlaid, until Ctrl-C. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/core.h"
#include "outputs/rank_log.h"
#include "serve/dashboard.h"

static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) { stop_signal = sig; }

static int usage_error(const char *what) {
    fprintf(stderr, "tandem: error: dashboard: %s (usage: tandem dashboard DIR [DIR...] [--host HOST] [--port PORT])\n", what);
    return 1;
}

int tn_cmd_dashboard(int argc, char **argv) {
    const char *host = NULL;
    int port = 0, n = 0;
    const char **dirs = tn_xcalloc((size_t)argc + 1, sizeof *dirs);
    char msg[4300];
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--host") == 0 && i + 1 < argc) {
            host = argv[++i];
        } else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
            char *end;
            long p = strtol(argv[++i], &end, 10);
            if (!*argv[i] || *end || p < 0 || p > 65535) {
                snprintf(msg, sizeof msg, "--port '%s': expected a TCP port, 0-65535 (0: a free one)", argv[i]);
                free(dirs);
                return usage_error(msg);
            }
            port = (int)p;
        } else if (argv[i][0] == '-') {
            snprintf(msg, sizeof msg, "unknown option '%s' (expected --host HOST, --port PORT)", argv[i]);
            free(dirs);
            return usage_error(msg);
        } else {
            struct stat st;
            if (stat(argv[i], &st) != 0 || !S_ISDIR(st.st_mode)) {
                snprintf(msg, sizeof msg, "%s is not a folder (expected a run's output_dir)", argv[i]);
                free(dirs);
                return usage_error(msg);
            }
            dirs[n++] = argv[i];
        }
    }
    if (n == 0) {
        free(dirs);
        return usage_error("no output folder given");
    }
    for (int i = 0; i < n; i++) {
        char *a = tn_path_join(dirs[i], "trainer_log.jsonl"), *b = tn_path_join(dirs[i], TN_RANK_LOG_NAME);
        if (!tn_file_exists(a) && !tn_file_exists(b))
            printf("tandem dashboard: note: %s has no trainer_log.jsonl yet: it shows once a run writes there\n", dirs[i]);
        free(a), free(b);
    }
    /* Ctrl-C and SIGTERM reach this thread only (the dashboard's threads inherit the block), in sigsuspend */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    tn_dash_opts o = {.host = host, .port = port, .dirs = dirs, .n_dirs = n};
    tn_dash *d = tn_dash_start(&o);
    if (!d) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        free(dirs);
        return 1;
    }
    printf("tandem dashboard: %d run(s) at %s (Ctrl-C to stop)\n", n, tn_dash_url(d));
    if (!tn_dash_has_charts(d))
        printf("tandem dashboard: note: no charts without uPlot: scripts/install-deps.sh installs it (npm, into "
               "deps/node_modules); the rest of the page works\n");
    fflush(stdout);
    while (!stop_signal) sigsuspend(&old);
    tn_dash_stop(d);
    printf("tandem dashboard: stopped\n");
    free(dirs);
    return 0;
}
