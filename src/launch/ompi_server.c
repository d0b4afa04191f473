/* ompi_server.c -- see ompi_server.h. */
#include "launch/ompi_server.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "launch/reaper.h"

#define START_TIMEOUT_S 20

int tn_ompi_server_start(const char *net, char *uri, size_t n, pid_t *pid) {
    char uri_path[64], log_path[64];
    snprintf(uri_path, sizeof uri_path, "/tmp/tandem-ompi-server-%d.uri", (int)getpid());
    snprintf(log_path, sizeof log_path, "/tmp/tandem-ompi-server-%d.log", (int)getpid());
    unlink(uri_path);
    pid_t p = fork();
    if (p < 0) return tn_err("fork: %s", strerror(errno));
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlives the launch */
        setpgid(0, 0);                    /* Ctrl-C reaches the launch, which stops the job first */
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
        if (getuid() == 0) { /* as for mpirun --allow-run-as-root */
            setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
            setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
        }
        char *argv[] = {"ompi-server", "--no-daemonize", "-r", uri_path, "--mca", "oob_tcp_if_include", (char *)net, NULL};
        if (!net || !*net) argv[4] = NULL;
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run ompi-server: %s (scripts/install-deps.sh installs openmpi-bin)\n", strerror(errno));
        _exit(127);
    }
    char *text = NULL;
    int exited = 0;
    for (double deadline = tn_now() + START_TIMEOUT_S; tn_now() < deadline && !exited;) {
        nanosleep(&(struct timespec){0, 20000000}, NULL);
        exited = waitpid(p, NULL, WNOHANG) == p;
        size_t len = 0;
        text = tn_file_exists(uri_path) ? tn_read_file(uri_path, &len, 1 << 16) : NULL;
        if (text && strchr(text, '\n')) break; /* written whole */
        free(text);
        text = NULL;
    }
    unlink(uri_path);
    if (text) text[strcspn(text, "\r\n")] = '\0';
    if (text && !exited && strstr(text, "tcp://") && strlen(text) < n) {
        snprintf(uri, n, "%s", text);
        free(text);
        unlink(log_path);
        *pid = p;
        tn_reaper_spare(p); /* it serves every round: the drain after a round must leave it running */
        return 0;
    }
    free(text);
    if (!exited) tn_ompi_server_stop(p);
    size_t len = 0;
    char *log = tn_read_file(log_path, &len, 1 << 16);
    unlink(log_path);
    char line[300] = "";
    if (log) {
        char *s = log + strspn(log, "-\n \t");
        snprintf(line, sizeof line, "%.*s", (int)strcspn(s, "\n"), s);
        free(log);
    }
    return tn_err("ompi-server (needed to join the nodes' jobs) %s%s%s", exited ? "ended at start" : "reported no URI",
                  line[0] ? ": " : "", line);
}

void tn_ompi_server_stop(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 50; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) return;
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}
