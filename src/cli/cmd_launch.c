/* cmd_launch.c -- `tandem launch [-n N | --hostfile FILE] CONFIG.yaml [key=value ...]`.
 *
 * Starts the ranks of one data-parallel run through Open MPI's mpirun: N local workers, or every machine
 * of a hostfile (DeepSpeed's `host slots=N`, also Open MPI's) from this one, over passwordless SSH (or the
 * agent in OMPI_MCA_plm_rsh_agent). Before handing over to mpirun it checks what would otherwise fail late
 * or hang: the config (parsed here, one error line), every host of the hostfile (resolves, answers the
 * agent within a timeout), and the rank count. Threads: each local worker gets cores / workers threads and
 * is pinned to its own cores; on a hostfile run every rank divides its machine's cores by the ranks there
 * (cmd_train.c). The mpirun command line is printed first, so it can be rerun or adapted by hand. */
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "config/train_config.h"
#include "core/core.h"
#include "launch/hostfile.h"

#define HOST_CHECK_TIMEOUT_S 15

typedef struct {
    int n;                 /* ranks; 0 = from the hostfile's slots */
    const char *hostfile;
    int dry_run, no_bind;
    int cfg_argc;
    char **cfg_argv;       /* CONFIG.yaml key=value ... */
} launch_opts;

static int is_local_host(const char *h) {
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    return strcmp(h, "localhost") == 0 || strcmp(h, "127.0.0.1") == 0 || strcmp(h, me) == 0;
}

/* Runs `AGENT HOST true` (AGENT = Open MPI's rsh agent, ssh by default) with a timeout. 0 if it answered. */
static int check_host_reachable(const tn_hostfile *hf, const tn_host *h) {
    struct addrinfo *ai = NULL, hints = {.ai_socktype = SOCK_STREAM};
    int gai = getaddrinfo(h->name, NULL, &hints, &ai);
    if (gai != 0) return tn_err("%s:%d: host '%s' does not resolve (%s)", hf->path, h->line, h->name, gai_strerror(gai));
    freeaddrinfo(ai);
    const char *env = getenv("OMPI_MCA_plm_rsh_agent");
    char agent[1024];
    snprintf(agent, sizeof agent, "%s", env && *env ? env : "ssh");
    char *colon = strchr(agent, ':'); /* "ssh : rsh": Open MPI tries the first one that exists */
    if (colon) *colon = '\0';
    char *argv[16];
    int argc = 0;
    for (char *save = NULL, *t = strtok_r(agent, " \t", &save); t && argc < 10; t = strtok_r(NULL, " \t", &save))
        argv[argc++] = t;
    if (argc == 0) return tn_err("OMPI_MCA_plm_rsh_agent is empty");
    int is_ssh = strcmp(argv[0], "ssh") == 0;
    if (is_ssh) {
        argv[argc++] = "-o";
        argv[argc++] = "BatchMode=yes";
        argv[argc++] = "-o";
        argv[argc++] = "ConnectTimeout=10";
    }
    argv[argc++] = (char *)h->name;
    argv[argc++] = "true";
    argv[argc] = NULL;
    int errpipe[2];
    if (pipe(errpipe) != 0) return tn_err("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) return tn_err("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(errpipe[1], 2);
        dup2(errpipe[1], 1);
        close(errpipe[0]);
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(errpipe[1]);
    int status = 0, done = 0;
    for (int waited_ms = 0; waited_ms < HOST_CHECK_TIMEOUT_S * 1000; waited_ms += 20) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            done = 1;
            break;
        }
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    char msg[512] = "";
    ssize_t got = read(errpipe[0], msg, sizeof msg - 1);
    close(errpipe[0]);
    msg[got > 0 ? got : 0] = '\0';
    msg[strcspn(msg, "\r\n")] = '\0';
    if (!done)
        return tn_err("%s:%d: host '%s' did not answer '%s %s true' within %d s (is it up, and is passwordless "
                      "SSH set up?)", hf->path, h->line, h->name, argv[0], h->name, HOST_CHECK_TIMEOUT_S);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return tn_err("%s:%d: host '%s' is unreachable: '%s %s true' failed%s%s", hf->path, h->line, h->name,
                      argv[0], h->name, msg[0] ? ": " : "", msg);
    return 0;
}

static int parse_args(int argc, char **argv, launch_opts *o) {
    memset(o, 0, sizeof *o);
    const char *np = getenv("NPROC_PER_NODE"); /* LLaMA-Factory / torchrun's variable */
    if (np && *np) o->n = atoi(np);
    int i = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if ((strcmp(argv[i], "-n") == 0 || strcmp(argv[i], "--nproc") == 0) && i + 1 < argc) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > 65536) return tn_err("launch: -n '%s': expected a number of ranks >= 1", argv[i]);
            o->n = (int)n;
        } else if (strcmp(argv[i], "--hostfile") == 0 && i + 1 < argc) {
            o->hostfile = argv[++i];
        } else if (strcmp(argv[i], "--dry-run") == 0) {
            o->dry_run = 1;
        } else if (strcmp(argv[i], "--no-bind") == 0) {
            o->no_bind = 1;
        } else {
            return tn_err("launch: unknown option '%s' (expected -n N, --hostfile FILE, --no-bind, --dry-run)", argv[i]);
        }
    }
    if (i >= argc) return tn_err("launch needs a config file: tandem launch [-n N | --hostfile FILE] CONFIG.yaml [key=value ...]");
    o->cfg_argc = argc - i;
    o->cfg_argv = argv + i;
    if (!o->hostfile && o->n == 0) o->n = 1;
    return 0;
}

/* The same validation `tandem train` does, here, before any process starts. */
static int check_config(const launch_opts *o) {
    static tn_train_config cfg;
    if (tn_train_config_load(o->cfg_argv[0], &cfg) != 0) return -1;
    for (int i = 1; i < o->cfg_argc; i++) {
        if (!strchr(o->cfg_argv[i], '=')) return tn_err("command line: '%s' is not key=value", o->cfg_argv[i]);
        if (tn_train_config_override(&cfg, o->cfg_argv[i]) != 0) return -1;
    }
    return tn_train_config_finish(&cfg);
}

static void push(char ***v, int *n, int *cap, const char *s) {
    if (*n + 2 > *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *v = tn_xrealloc(*v, (size_t)*cap * sizeof **v);
    }
    (*v)[(*n)++] = tn_xstrdup(s);
    (*v)[*n] = NULL;
}

int tn_cmd_launch(int argc, char **argv) {
    launch_opts o;
    tn_hostfile hf = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc == 0) rc = check_config(&o);
    if (rc == 0 && o.hostfile) {
        rc = tn_hostfile_load(o.hostfile, &hf);
        for (int i = 0; rc == 0 && i < hf.n; i++)
            if (!is_local_host(hf.hosts[i].name)) rc = check_host_reachable(&hf, &hf.hosts[i]);
    }
    if (rc != 0) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        tn_hostfile_free(&hf);
        return 1;
    }
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        fprintf(stderr, "tandem: error: /proc/self/exe: cannot find this program's path\n");
        return 1;
    }
    exe[len] = '\0';
    char **v = NULL, num[64];
    int n = 0, cap = 0;
    push(&v, &n, &cap, "mpirun");
    push(&v, &n, &cap, "-q"); /* tandem prints one line per failure; mpirun's banners would bury it */
    if (getuid() == 0) push(&v, &n, &cap, "--allow-run-as-root");
    int ranks = o.n ? o.n : hf.total_slots;
    snprintf(num, sizeof num, "%d", ranks);
    push(&v, &n, &cap, "-n");
    push(&v, &n, &cap, num);
    if (o.hostfile) {
        push(&v, &n, &cap, "--hostfile");
        push(&v, &n, &cap, o.hostfile);
        push(&v, &n, &cap, "--bind-to");
        push(&v, &n, &cap, "none");
    } else {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int per = cores > 0 ? (int)(cores / ranks) : 0;
        if (!getenv("OMP_NUM_THREADS")) {
            snprintf(num, sizeof num, "%d", per > 0 ? per : 1);
            setenv("OMP_NUM_THREADS", num, 1);
        }
        if (per >= 1 && !o.no_bind) { /* each worker on its own cores: no migrations, no shared L2 thrash */
            snprintf(num, sizeof num, "slot:PE=%d", per);
            push(&v, &n, &cap, "--map-by");
            push(&v, &n, &cap, num);
            push(&v, &n, &cap, "--bind-to");
            push(&v, &n, &cap, "core");
        } else {
            push(&v, &n, &cap, "--oversubscribe");
            push(&v, &n, &cap, "--bind-to");
            push(&v, &n, &cap, "none");
        }
    }
    /* forward what a run needs: threads, tandem's own variables, library paths */
    const char *fwd[] = {"OMP_NUM_THREADS", "PATH", "LD_LIBRARY_PATH", NULL};
    for (int i = 0; fwd[i]; i++)
        if (getenv(fwd[i])) {
            push(&v, &n, &cap, "-x");
            push(&v, &n, &cap, fwd[i]);
        }
    extern char **environ;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "TANDEM_", 7) == 0) {
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(*e, "="), *e);
            push(&v, &n, &cap, "-x");
            push(&v, &n, &cap, name);
        }
    push(&v, &n, &cap, exe);
    push(&v, &n, &cap, "train");
    for (int i = 0; i < o.cfg_argc; i++) push(&v, &n, &cap, o.cfg_argv[i]);
    printf("tandem launch:");
    for (int i = 0; i < n; i++) printf(" %s", v[i]);
    printf("\n");
    fflush(stdout);
    tn_hostfile_free(&hf);
    if (o.dry_run) {
        for (int i = 0; i < n; i++) free(v[i]);
        free(v);
        return 0;
    }
    execvp("mpirun", v);
    fprintf(stderr, "tandem: error: cannot run mpirun: %s (scripts/install-deps.sh installs openmpi-bin)\n",
            strerror(errno));
    return 1;
}
