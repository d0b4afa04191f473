/* rendezvous.c -- see rendezvous.h. */
#include "launch/rendezvous.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "launch/ompi_server.h"

#define PROTO "tandem-rdzv 1"
#define HELLO_TIMEOUT_S 10.0  /* a connection must present itself this fast */
#define FINISH_TIMEOUT_S 60.0 /* stopped jobs end within the launcher's grace; then their agents report */
#define MAX_PENDING 32

typedef struct {
    int fd;          /* -1: none */
    char host[64];
    int nproc;
    char in[4096];   /* received, not yet consumed */
    size_t used;
    double hello_by; /* pending connections: deadline of the first line */
    int done, status, interrupted;
} conn;

/* The launcher was told to stop (Ctrl-C, kill) while waiting for the other nodes. */
#define STOPPED(r) ((r)->me.interrupted && *(r)->me.interrupted)

struct tn_rdzv {
    tn_pernode p;
    tn_rdzv_self me;
    char host[64];
    int listen_fd;
    pid_t server_pid;
    char uri[1024];
    char job_id[17];
    int round;
    int stop;
    conn *nodes;                 /* node 0: index = NODE_RANK; others: nodes[0] is node 0 */
    conn pending[MAX_PENDING];   /* node 0: connected, not yet presented */
    char (*refused)[320];        /* node 0: why each NODE_RANK was last refused ("" none) */
};

static void conn_close(conn *c) {
    if (c->fd >= 0) close(c->fd);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

/* Reads what has arrived. -1 on end of stream or error. */
static int conn_recv(conn *c) {
    for (;;) {
        if (c->used == sizeof c->in) return 0; /* a full buffer without a newline is not ours: see conn_line */
        ssize_t got = recv(c->fd, c->in + c->used, sizeof c->in - c->used, MSG_DONTWAIT);
        if (got > 0) {
            c->used += (size_t)got;
            continue;
        }
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (got < 0 && errno == EINTR) continue;
        return -1;
    }
}

/* Takes one complete line out of the buffer. 1 when one was there. */
static int conn_line(conn *c, char *line, size_t n) {
    char *nl = memchr(c->in, '\n', c->used);
    if (!nl) {
        if (c->used == sizeof c->in) { /* overlong: drop it, the parser will refuse what follows */
            snprintf(line, n, "overlong");
            c->used = 0;
            return 1;
        }
        return 0;
    }
    size_t len = (size_t)(nl - c->in);
    snprintf(line, n, "%.*s", (int)len, c->in);
    memmove(c->in, nl + 1, c->used - len - 1);
    c->used -= len + 1;
    return 1;
}

static int conn_send(conn *c, const char *fmt, ...) TN_PRINTF(2, 3);
static int conn_send(conn *c, const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (c->fd < 0 || len < 0 || (size_t)len >= sizeof buf) return -1;
    for (size_t off = 0; off < (size_t)len;) {
        ssize_t put = send(c->fd, buf + off, (size_t)len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (put > 0) {
            off += (size_t)put;
        } else if (put < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd pf = {.fd = c->fd, .events = POLLOUT};
            if (poll(&pf, 1, 5000) <= 0) return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Waits for the next line until `deadline`: 1 line, 0 timed out (or interrupted: Ctrl-C reaches the
 * launcher's handler), -1 connection gone. */
static int conn_wait_line(conn *c, char *line, size_t n, double deadline) {
    for (;;) {
        if (conn_line(c, line, n)) return 1;
        double left = deadline - tn_now();
        if (left <= 0) return 0;
        struct pollfd pf = {.fd = c->fd, .events = POLLIN};
        int ms = left > 0.5 ? 500 : (int)(left * 1000) + 1, got = poll(&pf, 1, ms);
        if (got < 0 && errno == EINTR) return 0;
        if (got > 0 && conn_recv(c) != 0 && !memchr(c->in, '\n', c->used)) return -1;
    }
}

static void set_socket_options(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    fcntl(fd, F_SETFD, FD_CLOEXEC); /* not inherited by mpirun and the ranks */
}

static void draw_job_id(char out[17]) {
    unsigned char rnd[8] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(rnd, 1, sizeof rnd, f) != sizeof rnd) { /* unique enough: names one job's MPI port */
        uint64_t t = (uint64_t)(tn_now() * 1e9) ^ ((uint64_t)getpid() << 32);
        memcpy(rnd, &t, sizeof rnd);
    }
    if (f) fclose(f);
    for (int i = 0; i < 8; i++) snprintf(out + 2 * i, 3, "%02x", rnd[i]);
}

tn_rdzv *tn_rdzv_open(const tn_pernode *p, const tn_rdzv_self *me, const char *net) {
    tn_rdzv *r = tn_xcalloc(1, sizeof *r);
    r->p = *p;
    r->me = *me;
    r->listen_fd = -1;
    gethostname(r->host, sizeof r->host - 1);
    int n = p->node_rank == 0 ? p->nnodes : 1;
    r->nodes = tn_xcalloc((size_t)n, sizeof *r->nodes);
    for (int i = 0; i < n; i++) r->nodes[i].fd = -1;
    for (int i = 0; i < MAX_PENDING; i++) r->pending[i].fd = -1;
    if (p->node_rank != 0) return r;
    r->refused = tn_xcalloc((size_t)p->nnodes, sizeof *r->refused);
    draw_job_id(r->job_id);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->master_port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        tn_err("rendezvous: socket: %s", strerror(errno));
        goto fail;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    set_socket_options(fd);
    /* on MASTER_ADDR only, when it is an address of this machine; else (NAT, or MASTER_ADDR left unset here)
     * on every interface, as torchrun's store */
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (p->addr_given && getaddrinfo(p->master_addr, NULL, &hints, &ai) == 0) {
        struct sockaddr_in own = a;
        own.sin_addr = ((struct sockaddr_in *)ai->ai_addr)->sin_addr;
        freeaddrinfo(ai);
        if (bind(fd, (struct sockaddr *)&own, sizeof own) == 0) a = own;
    }
    if ((a.sin_addr.s_addr == htonl(INADDR_ANY) && bind(fd, (struct sockaddr *)&a, sizeof a) != 0) || listen(fd, 64) != 0) {
        tn_err("MASTER_PORT=%d: node 0 cannot listen on it: %s (another job on this port? choose another MASTER_PORT "
               "on every node)", p->master_port, strerror(errno));
        close(fd);
        goto fail;
    }
    r->listen_fd = fd;
    if (tn_ompi_server_start(net, r->uri, sizeof r->uri, &r->server_pid) != 0) goto fail;
    return r;
fail:
    tn_rdzv_close(r);
    return NULL;
}

void tn_rdzv_close(tn_rdzv *r) {
    if (!r) return;
    int n = r->p.node_rank == 0 ? r->p.nnodes : 1;
    for (int i = 0; r->nodes && i < n; i++) conn_close(&r->nodes[i]);
    for (int i = 0; i < MAX_PENDING; i++)
        if (r->pending[i].fd >= 0) conn_close(&r->pending[i]);
    if (r->listen_fd >= 0) close(r->listen_fd);
    tn_ompi_server_stop(r->server_pid);
    free(r->nodes), free(r->refused), free(r);
}

/* ---- node 0 ---- */

/* Checks a node's first line: *k = the NODE_RANK it presents (-1: unreadable); why = "" when it may join,
 * else why not (for both sides' lines). */
static void judge_hello(tn_rdzv *r, const char *line, conn *c, int *k, char *why, size_t n) {
    int node = -1, nnodes = 0, nproc = 0, restarts = -1;
    char build[17] = "", secret[17] = "", command[16] = "", host[64] = "";
    *k = -1;
    why[0] = '\0';
    int got = sscanf(line, PROTO " node=%d nnodes=%d nproc=%d build=%16s secret=%16s restarts=%d command=%15s host=%63s",
                     &node, &nnodes, &nproc, build, secret, &restarts, command, host);
    if (got != 8) {
        snprintf(why, n, "it does not speak this rendezvous (%s); is it tandem of the same build?", PROTO);
        return;
    }
    snprintf(c->host, sizeof c->host, "%s", host);
    c->nproc = nproc;
    char mine[17];
    snprintf(mine, sizeof mine, "%016" PRIx64, r->me.build);
    uint64_t sfp = strtoull(secret, NULL, 16);
    if (nnodes != r->p.nnodes)
        snprintf(why, n, "it was started with NNODES=%d, node 0 with NNODES=%d", nnodes, r->p.nnodes);
    else if (node < 1 || node >= r->p.nnodes)
        snprintf(why, n, "NODE_RANK=%d is not one of 1..%d (node 0 is %s)", node, r->p.nnodes - 1, r->host);
    else if (r->nodes[node].fd >= 0)
        snprintf(why, n, "NODE_RANK=%d has already joined from host %s", node, r->nodes[node].host);
    else if (strcmp(build, mine) != 0)
        snprintf(why, n, "it runs another tandem build (fingerprint %s; node 0 runs %s): install the same binary on "
                 "every machine", build, mine);
    else if (sfp != r->me.secret_fp)
        snprintf(why, n, "its TANDEM_JOB_SECRET differs from node 0's (or is set on one side only)");
    else if (restarts != r->me.max_restarts)
        snprintf(why, n, "it was started with --max-restarts %d, node 0 with %d: give every node the same value", restarts,
                 r->me.max_restarts);
    else if (strcmp(command, r->me.command) != 0)
        snprintf(why, n, "it runs `tandem %s`, node 0 `tandem %s`", command, r->me.command);
    else if (nproc < 1)
        snprintf(why, n, "NPROC_PER_NODE=%d", nproc);
    *k = node;
    if (why[0] && node >= 1 && node < r->p.nnodes)
        snprintf(r->refused[node], sizeof r->refused[node], "node %d from host %s was refused: %.140s", node, host, why);
}

static void missing_list(const tn_rdzv *r, char *out, size_t n) {
    size_t used = 0;
    out[0] = '\0';
    for (int k = 1; k < r->p.nnodes && used + 16 < n; k++)
        if (r->nodes[k].fd < 0) used += (size_t)snprintf(out + used, n - used, "%s%d", used ? ", " : "", k);
}

static void accept_pending(tn_rdzv *r) {
    for (;;) {
        int fd = accept(r->listen_fd, NULL, NULL);
        if (fd < 0) return;
        set_socket_options(fd);
        conn *slot = NULL;
        for (int i = 0; i < MAX_PENDING && !slot; i++)
            if (r->pending[i].fd < 0) slot = &r->pending[i];
        if (!slot) {
            close(fd);
            continue;
        }
        conn_close(slot);
        slot->fd = fd;
        slot->hello_by = tn_now() + HELLO_TIMEOUT_S;
    }
}

static int server_round(tn_rdzv *r, tn_rdzv_job *job) {
    fcntl(r->listen_fd, F_SETFL, O_NONBLOCK);
    int need = r->p.nnodes - 1, joined = 0;
    for (int k = 1; k < r->p.nnodes; k++) r->refused[k][0] = '\0';
    double deadline = tn_now() + r->p.timeout_s;
    printf("tandem launch: node 0 of %d (%s) waits for NODE_RANK 1..%d at %s:%d (TANDEM_RDZV_TIMEOUT %.0f s)\n",
           r->p.nnodes, r->host, r->p.nnodes - 1, r->p.master_addr, r->p.master_port, r->p.timeout_s);
    fflush(stdout);
    char line[4096], why[400];
    while (joined < need) {
        if (STOPPED(r)) {
            tn_err("interrupted while node 0 waited for NODE_RANK 1..%d", r->p.nnodes - 1);
            for (int k = 1; k < r->p.nnodes; k++) {
                conn_send(&r->nodes[k], "abort node 0 was interrupted\n");
                conn_close(&r->nodes[k]);
            }
            return -1;
        }
        if (tn_now() > deadline) {
            char missing[512], refused[1024] = "";
            missing_list(r, missing, sizeof missing);
            for (int k = 1; k < r->p.nnodes; k++)
                if (r->nodes[k].fd < 0 && r->refused[k][0] && strlen(refused) + 330 < sizeof refused)
                    snprintf(refused + strlen(refused), sizeof refused - strlen(refused), "; %s", r->refused[k]);
            tn_err("rendezvous at %s:%d: NODE_RANK %s of NNODES=%d did not join within %.0f s (start the same "
                   "command there with its NODE_RANK)%s", r->p.master_addr, r->p.master_port, missing, r->p.nnodes,
                   r->p.timeout_s, refused);
            for (int k = 1; k < r->p.nnodes; k++) {
                conn_send(&r->nodes[k], "abort %s\n", tn_errmsg());
                conn_close(&r->nodes[k]);
            }
            return -1;
        }
        struct pollfd pf[1 + MAX_PENDING + 4096];
        int np = 0;
        pf[np++] = (struct pollfd){.fd = r->listen_fd, .events = POLLIN};
        for (int i = 0; i < MAX_PENDING; i++) pf[np++] = (struct pollfd){.fd = r->pending[i].fd, .events = POLLIN};
        for (int k = 1; k < r->p.nnodes && np < (int)(sizeof pf / sizeof *pf); k++)
            pf[np++] = (struct pollfd){.fd = r->nodes[k].fd, .events = POLLIN};
        poll(pf, (nfds_t)np, 200);
        accept_pending(r);
        for (int i = 0; i < MAX_PENDING; i++) {
            conn *c = &r->pending[i];
            if (c->fd < 0) continue;
            int gone = conn_recv(c) != 0;
            if (conn_line(c, line, sizeof line)) {
                int k;
                judge_hello(r, line, c, &k, why, sizeof why);
                if (why[0]) {
                    fprintf(stderr, "tandem launch: refused NODE_RANK=%d from host %s: %s\n", k, c->host[0] ? c->host : "?",
                            why);
                    conn_send(c, "refused %s\n", why);
                    conn_close(c);
                    continue;
                }
                r->nodes[k] = *c;
                c->fd = -1;
                conn_close(c);
                joined++;
                printf("tandem launch: node %d (%s, %d rank(s)) joined: %d of %d nodes\n", k, r->nodes[k].host,
                       r->nodes[k].nproc, joined + 1, r->p.nnodes);
                fflush(stdout);
            } else if (gone || tn_now() > c->hello_by) {
                conn_close(c);
            }
        }
        for (int k = 1; k < r->p.nnodes; k++) { /* a node that gives up before the start leaves its place free */
            conn *c = &r->nodes[k];
            if (c->fd >= 0 && conn_recv(c) != 0) {
                fprintf(stderr, "tandem launch: node %d (%s) left before the job started\n", k, c->host);
                conn_close(c);
                joined--;
            }
        }
    }
    job->round = r->round;
    job->world = r->me.nproc;
    for (int k = 1; k < r->p.nnodes; k++) job->world += r->nodes[k].nproc;
    snprintf(job->uri, sizeof job->uri, "%s", r->uri);
    snprintf(job->service, sizeof job->service, "tandem-%s-%d", r->job_id, r->round);
    const char *secret = getenv("TANDEM_JOB_SECRET");
    snprintf(job->secret, sizeof job->secret, "%s", !r->me.secret_fp && secret ? secret : "");
    for (int k = 1; k < r->p.nnodes; k++) {
        conn *c = &r->nodes[k];
        int bad = conn_send(c, "go round=%d world=%d\nuri %s\nservice %s\n", job->round, job->world, job->uri, job->service);
        if (!bad && job->secret[0]) bad = conn_send(c, "secret %s\n", job->secret);
        for (int i = 0; i < job->n_extra && !bad; i++) bad = conn_send(c, "extra %s\n", job->extra[i]);
        if (!bad) bad = conn_send(c, "end\n");
        if (bad) {
            tn_err("rendezvous: node %d (%s) was lost as the job started", k, c->host);
            for (int j = 1; j < r->p.nnodes; j++) {
                conn_send(&r->nodes[j], "abort %s\n", tn_errmsg());
                conn_close(&r->nodes[j]);
            }
            return -1;
        }
    }
    printf("tandem launch: all %d nodes joined; %d ranks (round %d)\n", r->p.nnodes, job->world, job->round);
    fflush(stdout);
    return 0;
}

static void stop_all(tn_rdzv *r, const char *why) {
    if (r->stop) return;
    r->stop = 1;
    fprintf(stderr, "tandem launch: stopping the job on every node: %s\n", why);
    for (int k = 1; k < r->p.nnodes; k++)
        if (r->nodes[k].fd >= 0 && !r->nodes[k].done) conn_send(&r->nodes[k], "stop %s\n", why);
}

/* Node 0: reads what the other agents report; returns 1 once every agent reported or left. */
static int server_collect(tn_rdzv *r) {
    char line[4096], why[400];
    int all = 1;
    for (int k = 1; k < r->p.nnodes; k++) {
        conn *c = &r->nodes[k];
        if (c->fd < 0 || c->done) continue;
        int gone = conn_recv(c) != 0;
        while (!c->done && conn_line(c, line, sizeof line)) {
            int s, intr;
            if (sscanf(line, "done status=%d interrupted=%d", &s, &intr) != 2) continue;
            c->done = 1, c->status = s, c->interrupted = intr;
            if (s != 0) {
                snprintf(why, sizeof why, "node %d (%s) %s (exit %d)", k, c->host, intr ? "was interrupted" : "failed", s);
                stop_all(r, why);
            }
        }
        if (gone && !c->done) {
            snprintf(why, sizeof why, "node %d (%s) is gone (its launcher ended or the network failed)", k, c->host);
            c->done = 1, c->status = 1;
            conn_close(c);
            stop_all(r, why);
        }
        all = all && c->done;
    }
    return all;
}

/* ---- the other nodes ---- */

/* Copies a received field; -1 when it does not fit (never cut a path short). */
static int take(char *dst, size_t n, const char *src) {
    size_t len = strlen(src);
    if (len >= n) return -1;
    memcpy(dst, src, len + 1);
    return 0;
}

/* Connects to node 0, retrying until `deadline`. fd or -1 + tn_err. */
static int dial(const tn_rdzv *r, double deadline) {
    char port[16], last[200] = "no answer";
    snprintf(port, sizeof port, "%d", r->p.master_port);
    int said = 0;
    while (tn_now() < deadline && !STOPPED(r)) {
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
        int gai = getaddrinfo(r->p.master_addr, port, &hints, &ai);
        if (gai == 0) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            if (fd >= 0) {
                set_socket_options(fd);
                fcntl(fd, F_SETFL, O_NONBLOCK);
                int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
                if (rc != 0 && errno == EINPROGRESS) {
                    struct pollfd pf = {.fd = fd, .events = POLLOUT};
                    int err = ETIMEDOUT;
                    socklen_t len = sizeof err;
                    if (poll(&pf, 1, 1000) > 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
                    rc = err ? -1 : 0;
                    errno = err;
                }
                if (rc == 0) {
                    freeaddrinfo(ai);
                    return fd;
                }
                snprintf(last, sizeof last, "%s", strerror(errno));
                close(fd);
            }
            freeaddrinfo(ai);
        } else {
            snprintf(last, sizeof last, "%.100s does not resolve: %s", r->p.master_addr, gai_strerror(gai));
        }
        if (!said++) {
            printf("tandem launch: node %d waits for node 0 at %s:%d (TANDEM_RDZV_TIMEOUT %.0f s)\n", r->p.node_rank,
                   r->p.master_addr, r->p.master_port, r->p.timeout_s);
            fflush(stdout);
        }
        nanosleep(&(struct timespec){0, 300000000}, NULL);
    }
    if (STOPPED(r)) return tn_err("interrupted while waiting for node 0 at %s:%d", r->p.master_addr, r->p.master_port);
    return tn_err("node 0 at %s:%d did not answer within %.0f s (%s): start it with NODE_RANK=0%s", r->p.master_addr,
                  r->p.master_port, r->p.timeout_s, last,
                  r->p.addr_given ? "" : "; MASTER_ADDR is not set here, so only this machine was tried");
}

static int client_round(tn_rdzv *r, tn_rdzv_job *job) {
    conn *c = &r->nodes[0];
    conn_close(c);
    if ((c->fd = dial(r, tn_now() + r->p.timeout_s)) < 0) return -1;
    char where[300], line[4096];
    snprintf(where, sizeof where, "node 0 at %s:%d", r->p.master_addr, r->p.master_port);
    if (conn_send(c, PROTO " node=%d nnodes=%d nproc=%d build=%016" PRIx64 " secret=%016" PRIx64
                 " restarts=%d command=%s host=%s\n", r->p.node_rank, r->p.nnodes, r->me.nproc, r->me.build,
                 r->me.secret_fp, r->me.max_restarts, r->me.command, r->host[0] ? r->host : "?") != 0)
        return tn_err("%s: the connection failed", where);
    /* node 0 may wait its whole timeout for the others; a little more, then this node gives up too */
    double deadline = tn_now() + r->p.timeout_s + 30;
    int got;
    while ((got = conn_wait_line(c, line, sizeof line, deadline)) == 0 && tn_now() < deadline && !STOPPED(r)) {
    }
    if (got != 1 && STOPPED(r)) return tn_err("interrupted while waiting for node 0 to start the job");
    if (got == 1 && strncmp(line, "refused ", 8) == 0)
        return tn_err("%s refused this node (NODE_RANK=%d on %s): %s", where, r->p.node_rank, r->host, line + 8);
    if (got == 1 && strncmp(line, "abort ", 6) == 0) return tn_err("%s gave up: %s", where, line + 6);
    memset(job, 0, sizeof *job);
    if (got != 1 || sscanf(line, "go round=%d world=%d", &job->round, &job->world) != 2)
        return tn_err("%s %s", where, got == 0 ? "accepted this node but did not start the job in time"
                                                : "closed the connection before the job started");
    int bad = 0;
    while ((got = conn_wait_line(c, line, sizeof line, tn_now() + HELLO_TIMEOUT_S)) == 1 && strcmp(line, "end") != 0) {
        if (strncmp(line, "uri ", 4) == 0) bad |= take(job->uri, sizeof job->uri, line + 4);
        else if (strncmp(line, "service ", 8) == 0) bad |= take(job->service, sizeof job->service, line + 8);
        else if (strncmp(line, "secret ", 7) == 0) bad |= take(job->secret, sizeof job->secret, line + 7);
        else if (strncmp(line, "extra ", 6) == 0)
            bad |= job->n_extra == TN_RDZV_MAX_EXTRA || take(job->extra[job->n_extra++], sizeof job->extra[0], line + 6);
    }
    if (got != 1 || bad || !job->uri[0] || !job->service[0])
        return tn_err("%s sent an incomplete job description", where);
    r->round = job->round;
    printf("tandem launch: node %d joined %s: %d ranks (round %d)\n", r->p.node_rank, where, job->world, job->round);
    fflush(stdout);
    return 0;
}

/* ---- both ---- */

int tn_rdzv_round(tn_rdzv *r, tn_rdzv_job *job) {
    r->stop = 0;
    return r->p.node_rank == 0 ? server_round(r, job) : client_round(r, job);
}

int tn_rdzv_poll(void *arg) {
    tn_rdzv *r = arg;
    if (r->p.node_rank == 0) {
        for (;;) { /* the job is complete: latecomers are told so at once */
            int fd = accept(r->listen_fd, NULL, NULL);
            if (fd < 0) break;
            conn late = {.fd = fd};
            conn_send(&late, "refused the job of %d nodes is already running (round %d)\n", r->p.nnodes, r->round);
            close(fd);
        }
        server_collect(r);
        return r->stop;
    }
    conn *c = &r->nodes[0];
    char line[4096];
    if (!r->stop && c->fd >= 0) {
        int gone = conn_recv(c) != 0;
        while (!r->stop && conn_line(c, line, sizeof line))
            if (strncmp(line, "stop ", 5) == 0) {
                fprintf(stderr, "tandem launch: stopping this node's ranks: %s\n", line + 5);
                r->stop = 1;
            }
        if (gone && !r->stop) {
            fprintf(stderr, "tandem launch: stopping this node's ranks: node 0's launcher is gone\n");
            conn_close(c);
            r->stop = 1;
        }
    }
    return r->stop;
}

int tn_rdzv_finish(tn_rdzv *r, int status, int interrupted, int *restart) {
    *restart = 0;
    int job_status = status;
    if (r->p.node_rank == 0) {
        if (status != 0) {
            char why[64];
            snprintf(why, sizeof why, "node 0 %s (exit %d)", interrupted ? "was interrupted" : "failed", status);
            stop_all(r, why);
        }
        double deadline = tn_now() + FINISH_TIMEOUT_S;
        while (!server_collect(r)) {
            if (tn_now() > deadline) {
                for (int k = 1; k < r->p.nnodes; k++)
                    if (r->nodes[k].fd >= 0 && !r->nodes[k].done) {
                        fprintf(stderr, "tandem launch: node %d (%s) did not report the end of its ranks within %.0f s\n",
                                k, r->nodes[k].host, FINISH_TIMEOUT_S);
                        r->nodes[k].done = 1, r->nodes[k].status = 1;
                    }
                break;
            }
            nanosleep(&(struct timespec){0, 50000000}, NULL);
        }
        int any_interrupted = interrupted;
        for (int k = 1; k < r->p.nnodes; k++) {
            if (!job_status) job_status = r->nodes[k].status;
            any_interrupted |= r->nodes[k].interrupted;
        }
        *restart = job_status != 0 && !any_interrupted && r->round < r->me.max_restarts;
        for (int k = 1; k < r->p.nnodes; k++) {
            conn_send(&r->nodes[k], "result status=%d restart=%d\n", job_status, *restart);
            conn_close(&r->nodes[k]);
        }
    } else {
        conn *c = &r->nodes[0];
        char line[4096];
        /* node 0's rank 0 ends last (final evaluation, saving): wait as long as node 0's launcher is there */
        double deadline = tn_now() + 7 * 86400.0;
        int s = -1, again = 0;
        if (conn_send(c, "done status=%d interrupted=%d\n", status, interrupted) == 0) {
            for (int got; (got = conn_wait_line(c, line, sizeof line, deadline)) != -1;) {
                if (got == 0 && (STOPPED(r) || tn_now() >= deadline)) break;
                if (got == 1 && sscanf(line, "result status=%d restart=%d", &s, &again) == 2) break;
                s = -1; /* "stop" lines may come first */
            }
        }
        if (s < 0) {
            fprintf(stderr, "tandem launch: %s; no restart\n",
                    STOPPED(r) ? "interrupted while waiting for node 0's outcome" : "node 0 did not report how the job ended");
            job_status = status ? status : 1;
        } else {
            job_status = s;
            *restart = again && !interrupted;
        }
        conn_close(c);
    }
    if (*restart) r->round++;
    return job_status;
}
