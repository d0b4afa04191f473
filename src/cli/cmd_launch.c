/* cmd_launch.c -- `tandem launch [-n N | --hostfile FILE] CONFIG.yaml [key=value ...]`.
 *
 * Starts the ranks of one data-parallel run through Open MPI's mpirun: N local workers, or every machine
 * of a hostfile (DeepSpeed's `host slots=N`, also Open MPI's) from this one, over passwordless SSH (or the
 * agent in OMPI_MCA_plm_rsh_agent). Before handing over to mpirun it checks what would otherwise fail late
 * or hang: the config (parsed here, one error line), every host of the hostfile (resolves, answers the
 * agent within a timeout), and the rank count. Threads: each local worker gets cores / workers threads and
 * is pinned to its own cores; on a hostfile run every rank divides its machine's cores by the ranks there
 * (cmd_train.c). The mpirun command line is printed first, so it can be rerun or adapted by hand.
 * With NNODES > 1 (launch/pernode.h) it is one machine's part of a torchrun-style launch: it meets the other
 * machines' launchers (launch/rendezvous.h), runs this machine's ranks as a one-machine launch pointed at
 * node 0's ompi-server, and stops and restarts together with the others. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
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
#include "core/shell_quote.h"
#include "launch/accelerate_config.h"
#include "launch/hostfile.h"
#include "launch/ifname.h"
#include "launch/pernode.h"
#include "launch/proc_identity.h"
#include "launch/reaper.h"
#include "launch/rendezvous.h"
#include "outputs/output_lock.h"
#include "trainer/checkpoint.h"
#include "trainer/replica.h"

#define HOST_CHECK_TIMEOUT_S 15

typedef struct {
    int n;                 /* ranks; 0 = from the hostfile's slots */
    const char *hostfile;
    int dry_run, no_bind;
    int max_restarts;      /* restart from the newest complete checkpoint after a failure, this many times */
    int drop_dead_hosts;   /* on restart, leave out hosts that no longer answer; keep the global batch */
    int cfg_argc;
    char **cfg_argv;       /* CONFIG.yaml key=value ... */
    const char *command;   /* what every rank runs: "train" (CONFIG.yaml ...), "env", "bench" (its arguments) */
    int pernode;           /* NNODES > 1: this machine's part of a per-node launch (launch/rendezvous.h) */
    tn_pernode pn;
    const char *accelerate; /* --config_file: an accelerate config (its processes and sharding) */
    tn_accelerate_config acc;
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

/* The devices CUDA_VISIBLE_DEVICES lists (0 when it is unset or empty). As CUDA reads it, an entry that is
 * neither an index nor a GPU-/MIG- UUID ends the list (CUDA_VISIBLE_DEVICES=-1 hides every device). */
static int visible_devices(void) {
    const char *s = getenv("CUDA_VISIBLE_DEVICES");
    int k = 0;
    for (const char *p = s ? s : ""; *p; k++) {
        size_t len = strcspn(p, ",");
        int index = len > 0 && strspn(p, "0123456789") >= len;
        if (!index && strncmp(p, "GPU-", 4) != 0 && strncmp(p, "MIG-", 4) != 0) break;
        p += len + (p[len] == ',');
    }
    if (k > 0) printf("tandem launch: %d rank(s) on this machine, one per device of CUDA_VISIBLE_DEVICES=%s "
                      "(NPROC_PER_NODE is not set)\n", k, s);
    return k;
}

static int parse_args(int argc, char **argv, const char *command, launch_opts *o) {
    memset(o, 0, sizeof *o);
    o->command = command;
    if ((o->pernode = tn_pernode_from_env(&o->pn)) < 0) return -1;
    char *dashboard = NULL; /* --dashboard [HOST:]PORT, as the override dashboard=... */
    const char *np = getenv("NPROC_PER_NODE"); /* LLaMA-Factory / torchrun's variable */
    if (np && *np) o->n = atoi(np);
    int i = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--") == 0) { /* the command's own arguments follow */
            i++;
            break;
        }
        if ((strcmp(argv[i], "-n") == 0 || strcmp(argv[i], "--nproc") == 0) && i + 1 < argc) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > 65536) return tn_err("launch: -n '%s': expected a number of ranks in 1..65536", argv[i]);
            o->n = (int)n;
        } else if (strcmp(argv[i], "--hostfile") == 0 && i + 1 < argc) {
            o->hostfile = argv[++i];
        } else if (strcmp(argv[i], "--dry-run") == 0) {
            o->dry_run = 1;
        } else if (strcmp(argv[i], "--no-bind") == 0) {
            o->no_bind = 1;
        } else if (strcmp(argv[i], "--max-restarts") == 0 && i + 1 < argc) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 0 || n > 1000) return tn_err("launch: --max-restarts '%s': expected an integer in 0..1000", argv[i]);
            o->max_restarts = (int)n;
        } else if (strcmp(argv[i], "--drop-dead-hosts") == 0) {
            o->drop_dead_hosts = 1;
        } else if (strcmp(argv[i], "--dashboard") == 0 && i + 1 < argc) {
            size_t len = strlen(argv[++i]) + sizeof "dashboard=";
            dashboard = tn_xmalloc(len);
            snprintf(dashboard, len, "dashboard=%s", argv[i]);
        } else if (strcmp(argv[i], "--config_file") == 0 && i + 1 < argc) {
            o->accelerate = argv[++i];
            if (tn_accelerate_config_load(o->accelerate, &o->acc) != 0) return -1;
        } else {
            return tn_err("launch: unknown option '%s' (expected -n N, --hostfile FILE, --max-restarts N, "
                          "--drop-dead-hosts, --no-bind, --dry-run, --config_file FILE, --dashboard [HOST:]PORT)", argv[i]);
        }
    }
    if (o->n == 0 && !o->hostfile && !o->accelerate && strcmp(command, "env") != 0)
        o->n = visible_devices(); /* no NPROC_PER_NODE, no -n: LLaMA-Factory's device count, one rank per GPU */
    if (o->pernode && o->hostfile)
        return tn_err("launch: NNODES=%d (a per-node launch) and --hostfile exclude each other: unset NNODES, or start "
                      "the command on every machine without --hostfile", o->pn.nnodes);
    if (o->pernode && o->drop_dead_hosts)
        return tn_err("launch: --drop-dead-hosts needs --hostfile; in a per-node launch, restart the remaining nodes with "
                      "a smaller NNODES");
    if (strcmp(command, "env") == 0) {
        if (i < argc) return tn_err("env: unexpected argument '%s'", argv[i]);
        o->n = o->hostfile && !o->pernode ? 0 : 1; /* one report per machine */
        return 0;
    }
    if (strcmp(command, "train") != 0) { /* passed through as they are */
        o->cfg_argc = argc - i;
        o->cfg_argv = argv + i;
        if (!o->hostfile && o->n == 0) o->n = 1;
        return 0;
    }
    if (i >= argc) return tn_err("launch needs a config file: tandem launch [-n N | --hostfile FILE] CONFIG.yaml [key=value ...]");
    o->cfg_argc = argc - i;
    o->cfg_argv = argv + i;
    if (dashboard) { /* --dashboard before the config: an override after it */
        static char **args; /* for the process's lifetime, as argv */
        args = tn_xcalloc((size_t)o->cfg_argc + 2, sizeof *args);
        memcpy(args, o->cfg_argv, (size_t)o->cfg_argc * sizeof *args);
        args[o->cfg_argc++] = dashboard;
        o->cfg_argv = args;
    }
    if (tn_cli_dashboard_flag(&o->cfg_argc, &o->cfg_argv) != 0) return -1;
    if (o->accelerate) { /* accelerate's processes, and its sharding as the first override (the user's own win) */
        if (!o->hostfile && o->n == 0) o->n = o->acc.num_processes;
        if (o->acc.zero_stage >= 0) {
            static char stage[32], **args;
            snprintf(stage, sizeof stage, "zero_stage=%d", o->acc.zero_stage);
            args = tn_xcalloc((size_t)o->cfg_argc + 2, sizeof *args);
            args[0] = o->cfg_argv[0], args[1] = stage;
            for (int k = 1; k < o->cfg_argc; k++) args[k + 1] = o->cfg_argv[k];
            o->cfg_argv = args, o->cfg_argc++;
        }
        fputs(o->acc.notes, stdout);
    }
    if (!o->hostfile && o->n == 0) o->n = 1;
    return 0;
}

/* The same validation `tandem train` does, here, before any process starts. */
static int check_config(const launch_opts *o, tn_train_config *cfg) {
    if (tn_train_config_load(o->cfg_argv[0], cfg) != 0) return -1;
    for (int i = 1; i < o->cfg_argc; i++) {
        if (!strchr(o->cfg_argv[i], '=')) return tn_err("command line: '%s' is not key=value", o->cfg_argv[i]);
        if (tn_train_config_override(cfg, o->cfg_argv[i]) != 0) return -1;
    }
    return tn_train_config_finish(cfg);
}

static void push(char ***v, int *n, int *cap, const char *s) {
    if (*n + 2 > *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *v = tn_xrealloc(*v, (size_t)*cap * sizeof **v);
    }
    (*v)[(*n)++] = tn_xstrdup(s);
    (*v)[*n] = NULL;
}

static void free_argv(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* The local network (a.b.c.d/len) through which this machine reaches `host`, or 0 when no local interface's
 * subnet holds its address (then Open MPI keeps its own choice). Keeps a multi-machine job's TCP to the
 * one network it needs instead of every interface. */
static int network_towards(const char *host, char *cidr, size_t n) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, NULL, &hints, &ai) != 0) return 0;
    uint32_t want = ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr);
    freeaddrinfo(ai);
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) return 0;
    int found = 0;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || !i->ifa_netmask || i->ifa_addr->sa_family != AF_INET) continue;
        uint32_t a = ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
        uint32_t m = ntohl(((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr);
        if ((a & m) != (want & m) || (a >> 24) == 127) continue;
        int len = 0;
        for (uint32_t b = m; b & 0x80000000u; b <<= 1) len++;
        uint32_t net = a & m;
        snprintf(cidr, n, "%u.%u.%u.%u/%d", net >> 24, (net >> 16) & 255, (net >> 8) & 255, net & 255, len);
        found = 1;
    }
    freeifaddrs(ifs);
    return found;
}

/* NCCL_SOCKET_IFNAME, when set, resolved against this machine's interfaces (launch/ifname.h) into `out`,
 * with one line saying where MPI's TCP goes; "" when it is not set. 0, or -1 + tn_err. */
static int socket_ifname(char *out, size_t n) {
    const char *spec = getenv("NCCL_SOCKET_IFNAME");
    out[0] = '\0';
    if (!spec || !*spec) return 0;
    if (tn_ifname_resolve(spec, out, n) < 0) return -1;
    int btl = !getenv("OMPI_MCA_btl_tcp_if_include") && !getenv("OMPI_MCA_btl_tcp_if_exclude");
    int oob = !getenv("OMPI_MCA_oob_tcp_if_include") && !getenv("OMPI_MCA_oob_tcp_if_exclude");
    printf("tandem launch: NCCL_SOCKET_IFNAME=%s: MPI's TCP (%s%s%s) uses %s%s\n", spec, btl ? "btl_tcp_if_include" : "",
           btl && oob ? ", " : "", oob ? "oob_tcp_if_include" : "", out,
           btl && oob ? "" : " (your OMPI_MCA_*_tcp_if_* setting wins for the other)");
    return 0;
}

/* mpirun's command line for `ranks` ranks (on hostfile when given), then `tandem train CONFIG overrides...`
 * and the extra overrides. */
/* Limits Open MPI's TCP (ranks and daemons) to the network `net`, unless the user chose otherwise. */
static void push_network(const char *net, char ***v, int *n, int *cap) {
    const char *keys[2] = {"btl_tcp_if_include", "oob_tcp_if_include"};
    for (int k = 0; k < 2 && net && *net; k++) {
        char env[64], ex[64];
        snprintf(env, sizeof env, "OMPI_MCA_%s", keys[k]);
        snprintf(ex, sizeof ex, "OMPI_MCA_%.*s_exclude", (int)(strlen(keys[k]) - strlen("_include")), keys[k]);
        if (getenv(env) || getenv(ex)) continue; /* the user's choice wins (Open MPI refuses include with exclude) */
        push(v, n, cap, "--mca");
        push(v, n, cap, keys[k]);
        push(v, n, cap, net);
    }
}

static void build_command(const launch_opts *o, const char *hostfile, const char *net, int ranks, const char *exe,
                          const tn_rdzv_job *job, char **extra, int n_extra, char ***v, int *n) {
    char num[64];
    int cap = 0;
    *v = NULL, *n = 0;
    push(v, n, &cap, "mpirun");
    push(v, n, &cap, "-q"); /* tandem prints one line per failure; mpirun's banners would bury it */
    if (getuid() == 0) push(v, n, &cap, "--allow-run-as-root");
    snprintf(num, sizeof num, "%d", ranks);
    push(v, n, &cap, "-n");
    push(v, n, &cap, num);
    if (hostfile) {
        push(v, n, &cap, "--hostfile");
        push(v, n, &cap, hostfile);
        push(v, n, &cap, "--bind-to");
        push(v, n, &cap, "none");
        if (strcmp(o->command, "env") == 0) { /* one report per machine */
            push(v, n, &cap, "--map-by");
            push(v, n, &cap, "ppr:1:node");
        }
        push_network(net, v, n, &cap);
    } else if (job) {
        /* this machine's ranks of a per-node launch: they join the other machines' through node 0's ompi-server */
        push(v, n, &cap, "--ompi-server");
        push(v, n, &cap, job->uri);
        if (!getenv("OMPI_MCA_btl")) {
            push(v, n, &cap, "--mca");
            push(v, n, &cap, "btl");
            push(v, n, &cap, "tcp,self,vader");
        }
        push_network(net, v, n, &cap);
    }
    if (!hostfile) {
        /* one machine: ranks talk through shared memory, and nothing listens beyond the loopback device */
        if (!job && !getenv("OMPI_MCA_btl")) {
            push(v, n, &cap, "--mca");
            push(v, n, &cap, "btl");
            push(v, n, &cap, "self,vader");
        }
        if (!job && !getenv("OMPI_MCA_oob_tcp_if_include")) {
            push(v, n, &cap, "--mca");
            push(v, n, &cap, "oob_tcp_if_include");
            push(v, n, &cap, "lo");
        }
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int per = cores > 0 ? (int)(cores / ranks) : 0;
        const char *omp = getenv("OMP_NUM_THREADS");
        if (!omp) {
            snprintf(num, sizeof num, "%d", per > 0 ? per : 1);
            setenv("OMP_NUM_THREADS", num, 1);
        } else if (atoi(omp) * ranks > cores && cores > 0) {
            fprintf(stderr, "tandem launch: note: OMP_NUM_THREADS=%s x %d ranks is more threads than this machine's %ld "
                            "cores; unset it to share the cores out\n", omp, ranks, cores);
        }
        if (per >= 1 && !o->no_bind) { /* each worker on its own cores: no migrations, no shared L2 thrash */
            snprintf(num, sizeof num, "slot:PE=%d", per);
            push(v, n, &cap, "--map-by");
            push(v, n, &cap, num);
            push(v, n, &cap, "--bind-to");
            push(v, n, &cap, "core");
        } else {
            push(v, n, &cap, "--oversubscribe");
            push(v, n, &cap, "--bind-to");
            push(v, n, &cap, "none");
        }
    }
    /* forward what a run needs: threads, tandem's own variables, library paths */
    const char *fwd[] = {"OMP_NUM_THREADS", "PATH", "LD_LIBRARY_PATH", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", NULL};
    for (int i = 0; fwd[i]; i++)
        if (getenv(fwd[i])) {
            push(v, n, &cap, "-x");
            push(v, n, &cap, fwd[i]);
        }
    extern char **environ;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "TANDEM_", 7) == 0) {
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(*e, "="), *e);
            push(v, n, &cap, "-x");
            push(v, n, &cap, name);
        }
    push(v, n, &cap, exe);
    push(v, n, &cap, o->command);
    for (int i = 0; i < o->cfg_argc; i++) push(v, n, &cap, o->cfg_argv[i]);
    for (int i = 0; i < n_extra; i++) push(v, n, &cap, extra[i]);
}

/* Runs argv (mpirun ...) to completion and returns its exit status (128 + signal when killed). Its stderr
 * is relayed line by line; once a rank has reported a fatal error ("tandem: error: ..."), mpirun gets
 * ABORT_GRACE_S to take the job down, then it is killed: across a cut link mpirun itself can wait for a
 * machine it cannot reach, and the launch must not hang. An interrupt (Ctrl-C, SIGTERM) goes to mpirun
 * (with SIGCONT, in case it is stopped); INTERRUPT_TERM_S later every process of the job gets SIGTERM,
 * INTERRUPT_KILL_S later SIGKILL. It returns only when no process of the job is left (reaper.h). */
#define ABORT_GRACE_S 10
#define INTERRUPT_TERM_S 5
#define INTERRUPT_KILL_S 10
static volatile sig_atomic_t child_pgid, interrupted;

static void forward_signal(int sig) { /* Ctrl-C / kill reach the job, and end the launch (no restart) */
    if (!interrupted) interrupted = sig;
    if (child_pgid > 0) kill(-child_pgid, sig), kill(-child_pgid, SIGCONT);
}

/* stop(arg), when given, is asked every 200 ms whether the job must end (a per-node launch's other machine
 * failed): then mpirun gets SIGTERM and, like after an error line, ABORT_GRACE_S before SIGKILL. */
static int run_child(char **argv, int (*stop)(void *), void *arg) {
    int errp[2];
    if (pipe(errp) != 0) {
        fprintf(stderr, "tandem: error: pipe: %s\n", strerror(errno));
        return 127;
    }
    pid_t launcher = getpid(), pid = fork();
    if (pid < 0) {
        fprintf(stderr, "tandem: error: fork: %s\n", strerror(errno));
        return 127;
    }
    if (pid == 0) {
        tn_reaper_child_setup(launcher); /* mpirun ends the job when the launcher dies */
        setpgid(0, 0); /* its own group: killed as a whole below */
        dup2(errp[1], 2);
        close(errp[0]), close(errp[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "tandem: error: cannot run %s: %s (scripts/install-deps.sh installs openmpi-bin)\n", argv[0],
                strerror(errno));
        _exit(127);
    }
    close(errp[1]);
    child_pgid = pid;
    struct sigaction sa = {.sa_handler = forward_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    fcntl(errp[0], F_SETFL, O_NONBLOCK);
    char buf[4096], line[8192];
    size_t used = 0;
    double fatal_at = 0, interrupted_at = 0;
    int status = 0, open_pipe = 1, escalated = 0;
    for (;;) {
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        if (interrupted && !interrupted_at) interrupted_at = tn_now();
        if (interrupted_at && escalated < 2 && tn_now() - interrupted_at > (escalated ? INTERRUPT_KILL_S : INTERRUPT_TERM_S)) {
            fprintf(stderr, "tandem launch: the job has not ended %d s after the interrupt: %s to every process of it\n",
                    escalated ? INTERRUPT_KILL_S : INTERRUPT_TERM_S, escalated ? "SIGKILL" : "SIGTERM");
            tn_reaper_signal_all(escalated++ ? SIGKILL : SIGTERM);
        }
        struct pollfd p = {.fd = errp[0], .events = POLLIN};
        if (open_pipe && poll(&p, 1, 200) > 0) {
            ssize_t got = read(errp[0], buf, sizeof buf);
            if (got == 0) open_pipe = 0;
            for (ssize_t i = 0; i < got; i++) {
                if (used < sizeof line - 1) line[used++] = buf[i];
                if (buf[i] != '\n') continue;
                line[used] = '\0';
                fputs(line, stderr);
                if (!fatal_at && strstr(line, "tandem: error:")) fatal_at = tn_now();
                used = 0;
            }
        } else if (!open_pipe) {
            nanosleep(&(struct timespec){0, 200000000L}, NULL);
        }
        if (stop && stop(arg)) {
            if (!fatal_at) kill(-pid, SIGTERM);
            if (!fatal_at) fatal_at = tn_now();
            stop = NULL;
        }
        if (fatal_at && tn_now() - fatal_at > ABORT_GRACE_S) {
            fprintf(stderr, "tandem launch: mpirun has not ended %d s after the error above: stopping it\n", ABORT_GRACE_S);
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
        }
    }
    if (used) fwrite(line, 1, used, stderr);
    close(errp[0]);
    child_pgid = 0;
    /* ranks that outlived mpirun are ours now (subreaper): none may go on writing once the launch returns */
    int left = interrupted ? tn_reaper_drain(2, 3) : tn_reaper_drain(5, 5);
    if (left) fprintf(stderr, "tandem launch: %d process(es) of the job outlived mpirun; all have ended now\n", left);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* An interrupt ends the launch as an interrupt: one line, and 128 + the signal (130 for Ctrl-C), as a shell
 * reports it. */
static int report_interrupt(void) {
    fprintf(stderr, "tandem launch: interrupted (%s): the job is stopped and every rank has ended\n",
            interrupted == SIGINT ? "SIGINT" : interrupted == SIGTERM ? "SIGTERM" : "a signal");
    return 128 + interrupted;
}

/* Micro-batch and accumulation for `ranks` ranks keeping the global batch: the largest micro-batch
 * <= max_micro dividing global / ranks. 0 when ranks does not divide the global batch. */
static int keep_global_batch(int64_t global, int ranks, int max_micro, int *micro, int *accum) {
    if (ranks < 1 || global % ranks) return 0;
    int64_t per = global / ranks;
    for (int64_t b = max_micro < per ? max_micro : per; b >= 1; b--)
        if (per % b == 0) {
            *micro = (int)b, *accum = (int)(per / b);
            return 1;
        }
    return 0;
}

/* Writes the hosts that still answer into path; the number of slots they have (0: none). */
static int write_live_hostfile(const tn_hostfile *hf, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    int slots = 0;
    for (int i = 0; i < hf->n; i++) {
        if (!is_local_host(hf->hosts[i].name) && check_host_reachable(hf, &hf->hosts[i]) != 0) {
            fprintf(stderr, "tandem launch: leaving out host %s: %s\n", hf->hosts[i].name, tn_errmsg());
            continue;
        }
        fprintf(f, "%s slots=%d\n", hf->hosts[i].name, hf->hosts[i].slots);
        slots += hf->hosts[i].slots;
    }
    return fclose(f) == 0 ? slots : 0;
}

int tn_cmd_launch(int argc, char **argv) { return tn_launch(argc, argv, "train"); }

int tn_launch(int argc, char **argv, const char *command) {
    launch_opts o;
    tn_hostfile hf = {0};
    static tn_train_config cfg;
    int rc = parse_args(argc, argv, command, &o);
    const int is_env = strcmp(command, "env") == 0;
    if (rc == 0 && o.pernode && o.pn.note[0]) printf("tandem launch: %s\n", o.pn.note);
    if (rc == 0 && o.pernode && strcmp(o.pn.rank_from, "RANK") == 0)
        printf("tandem launch: this machine is node %d of %d (RANK=%d; NODE_RANK is not set)\n", o.pn.node_rank,
               o.pn.nnodes, o.pn.node_rank);
    if (rc == 0 && strcmp(command, "train") == 0) rc = check_config(&o, &cfg);
    if (rc == 0 && o.hostfile) {
        rc = tn_hostfile_load(o.hostfile, &hf);
        for (int i = 0; rc == 0 && i < hf.n; i++)
            if (!is_local_host(hf.hosts[i].name)) rc = check_host_reachable(&hf, &hf.hosts[i]);
    }
    char if_net[256] = ""; /* NCCL_SOCKET_IFNAME, as the interfaces Open MPI's TCP takes */
    if (rc == 0 && (o.pernode || o.hostfile)) rc = socket_ifname(if_net, sizeof if_net); /* a job across machines */
    char exe[4096];
    ssize_t len = rc == 0 ? readlink("/proc/self/exe", exe, sizeof exe - 1) : 0;
    if (rc == 0 && len <= 0) rc = tn_err("/proc/self/exe: cannot find this program's path");
    if (rc != 0) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        tn_hostfile_free(&hf);
        return 1;
    }
    exe[len] = '\0';
    setenv("TANDEM_TTY", isatty(fileno(stdout)) ? "1" : "0", 1); /* progress bar or plain lines (job.c) */
    const char *user_secret = getenv("TANDEM_JOB_SECRET");
    const uint64_t secret_fp = user_secret ? tn_hash64(user_secret, strlen(user_secret), 0x5EC12E8) | 1 : 0;
    if (!getenv("TANDEM_JOB_SECRET")) { /* who may join: every rank must present this job's secret */
        unsigned char rnd[16];
        char hex[33];
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(rnd, 1, sizeof rnd, f) != sizeof rnd) {
            fprintf(stderr, "tandem: error: /dev/urandom: cannot draw the job secret\n");
            if (f) fclose(f);
            return 1;
        }
        fclose(f);
        for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
        setenv("TANDEM_JOB_SECRET", hex, 1); /* forwarded with the other TANDEM_* variables */
    }
    /* the job holds output_dir (its rank 0 recognises this launcher as the holder), and owns its processes */
    tn_output_lock *lock = NULL;
    if (!o.dry_run) {
        char me[TN_IDENTITY_MAX];
        tn_identity_self(me);
        setenv("TANDEM_LAUNCHER", me, 1); /* forwarded with the other TANDEM_* variables */
        /* a per-node launch: node 0 writes (its rank 0), so its launcher alone holds output_dir */
        int writes = strcmp(command, "train") == 0 && (!o.pernode || o.pn.node_rank == 0);
        if (writes && !(lock = tn_output_lock_take(cfg.output_dir, NULL, cfg.source_path))) {
            fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
            tn_hostfile_free(&hf);
            return 1;
        }
        tn_reaper_become();
    }
    tn_rdzv *rdzv = NULL;
    char pn_net[256] = "";
    if (o.pernode) { /* this machine's part of a per-node launch: find the other machines first */
        if (if_net[0]) /* NCCL_SOCKET_IFNAME: the user's interface */
            snprintf(pn_net, sizeof pn_net, "%s", if_net);
        else if (!network_towards(o.pn.master_addr, pn_net, sizeof pn_net)) { /* node 0 is this machine: stay on lo */
            struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
            if (getaddrinfo(o.pn.master_addr, NULL, &hints, &ai) == 0) {
                if (ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr) >> 24 == 127) snprintf(pn_net, sizeof pn_net, "lo");
                freeaddrinfo(ai);
            }
        }
        tn_rdzv_self me = {.build = tn_build_fingerprint(), .secret_fp = secret_fp, .nproc = o.n,
                           .max_restarts = o.max_restarts, .command = command, .interrupted = &interrupted};
        if (!me.build || (!o.dry_run && !(rdzv = tn_rdzv_open(&o.pn, &me, pn_net)))) {
            fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
            return 1;
        }
        char secs[32];
        snprintf(secs, sizeof secs, "%.0f", o.pn.timeout_s);
        setenv("TANDEM_JOIN_TIMEOUT", secs, 1);
    }
    const int ranks0 = o.n ? o.n : is_env ? hf.n : hf.total_slots;
    const int64_t global = (int64_t)ranks0 * cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps;
    int ranks = ranks0;
    char live_hostfile[64] = "";
    for (int attempt = 0;; attempt++) {
        if (interrupted) { /* between two attempts: none is started */
            rc = report_interrupt();
            break;
        }
        char resume[TN_PATH_MAX + 64], extra[TN_RDZV_MAX_EXTRA][TN_RDZV_ARG_MAX];
        char *xp[TN_RDZV_MAX_EXTRA] = {extra[0], extra[1], extra[2], extra[3]};
        int n_extra = 0;
        /* a restart resumes from the newest complete checkpoint, whatever overwrite_output_dir says */
        if (attempt && tn_checkpoint_latest(cfg.output_dir, resume, sizeof resume))
            snprintf(extra[n_extra++], sizeof extra[0], "resume_from_checkpoint=%s", resume);
        if (ranks != ranks0) {
            int micro = 1, accum = 1;
            keep_global_batch(global, ranks, cfg.per_device_train_batch_size, &micro, &accum);
            snprintf(extra[n_extra++], sizeof extra[0], "per_device_train_batch_size=%d", micro);
            snprintf(extra[n_extra++], sizeof extra[0], "gradient_accumulation_steps=%d", accum);
            printf("tandem launch: continuing on %d rank(s): %d x %d x %d keeps the global batch of %lld\n", ranks,
                   ranks, micro, accum, (long long)global);
        }
        static tn_rdzv_job job; /* a per-node launch: this round, as node 0 hands it out */
        if (o.pernode && !rdzv) { /* --dry-run: what would run once the nodes have met */
            snprintf(job.uri, sizeof job.uri, "<node 0's ompi-server>");
        } else if (rdzv) {
            job.n_extra = n_extra;
            memcpy(job.extra, extra, sizeof extra);
            if (tn_rdzv_round(rdzv, &job) != 0) {
                fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
                rc = 1;
                break;
            }
            n_extra = job.n_extra; /* node 0's choice, the same on every node (the config fingerprint covers it) */
            memcpy(extra, job.extra, sizeof extra);
            char num[32];
            if (job.secret[0]) setenv("TANDEM_JOB_SECRET", job.secret, 1);
            setenv("TANDEM_JOIN_SERVICE", job.service, 1);
            snprintf(num, sizeof num, "%d", o.pn.node_rank);
            setenv("TANDEM_JOIN_NODE", num, 1);
            snprintf(num, sizeof num, "%d", job.world);
            setenv("TANDEM_JOIN_WORLD", num, 1);
        }
        char **v;
        int n;
        char net[256] = "";
        for (int i = 0; o.hostfile && !if_net[0] && i < hf.n && !net[0]; i++)
            if (!is_local_host(hf.hosts[i].name)) network_towards(hf.hosts[i].name, net, sizeof net);
        if (if_net[0]) snprintf(net, sizeof net, "%s", if_net);
        if (o.pernode) snprintf(net, sizeof net, "%s", pn_net);
        build_command(&o, live_hostfile[0] ? live_hostfile : o.hostfile, net, ranks, exe, o.pernode ? &job : NULL, xp,
                      n_extra, &v, &n);
        printf("tandem launch: "); /* copy-paste safe: every word as sh reads it back */
        tn_sh_print_argv(stdout, v, n);
        printf("\n");
        fflush(stdout);
        if (o.dry_run) {
            free_argv(v, n);
            break;
        }
        int status = run_child(v, rdzv ? tn_rdzv_poll : NULL, rdzv), restart = 0;
        free_argv(v, n);
        if (rdzv) status = tn_rdzv_finish(rdzv, status, interrupted, &restart); /* every node's outcome */
        if (status == 0) break;
        if (interrupted) { /* not a failure of the run: no restart, and said as what it is */
            rc = report_interrupt();
            break;
        }
        if (rdzv ? !restart : attempt >= o.max_restarts) {
            if (o.max_restarts)
                fprintf(stderr, "tandem: error: the run failed (exit %d) and its %d restart(s) are used up\n", status,
                        o.max_restarts);
            rc = status ? status : 1;
            break;
        }
        fprintf(stderr, "tandem launch: the run failed (exit %d); restart %d of %d from the newest complete checkpoint\n",
                status, attempt + 1, o.max_restarts);
        if (o.hostfile && o.drop_dead_hosts) {
            snprintf(live_hostfile, sizeof live_hostfile, "/tmp/tandem-hosts-%d", (int)getpid());
            int slots = write_live_hostfile(&hf, live_hostfile), micro, accum;
            if (slots < 1) {
                fprintf(stderr, "tandem: error: no host of %s answers any more\n", o.hostfile);
                rc = 1;
                break;
            }
            if (!keep_global_batch(global, slots, cfg.per_device_train_batch_size, &micro, &accum)) {
                fprintf(stderr, "tandem: error: %d remaining rank(s) cannot keep the global batch of %lld: restart "
                                "without --drop-dead-hosts, or choose a batch they divide\n", slots, (long long)global);
                rc = 1;
                break;
            }
            ranks = slots;
        }
    }
    if (live_hostfile[0]) unlink(live_hostfile);
    tn_output_lock_release(lock);
    tn_hostfile_free(&hf);
    tn_rdzv_close(rdzv);
    return rc;
}
