/* comm_log.c -- tandem's communication log, on with NCCL_DEBUG=INFO (or TRACE), as NCCL's own log is: the
 * variable a LLaMA-Factory user already sets to see how the job's ranks found each other. Every rank writes
 * to stderr, prefixed as NCCL prefixes its lines ("host:pid [rank] tandem INFO ..."): at init its place in
 * the job (machine, local rank, backend, the TCP interfaces MPI was given), and rank 0 the machines with
 * their ranks and the ring tuning; at finalize how many collectives it ran and how long the progress thread was
 * busy with them. Anything else (unset, WARN, VERSION): silent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "comm/comm_impl.h"

int tn_comm_log_on(void) {
    const char *v = getenv("NCCL_DEBUG");
    return v && (strcasecmp(v, "INFO") == 0 || strcasecmp(v, "TRACE") == 0);
}

/* One whole line per write, so the lines of ranks sharing a terminal do not interleave. */
static void say(const tn_comm *c, const char *fmt, const char *a, const char *b) {
    char host[64] = "?", line[1024];
    gethostname(host, sizeof host - 1);
    int n = snprintf(line, sizeof line, "%s:%d [%d] tandem INFO ", host, (int)getpid(), c->info.rank);
    if (n < 0 || (size_t)n >= sizeof line) return;
    snprintf(line + n, sizeof line - (size_t)n, fmt, a, b);
    size_t len = strlen(line);
    if (len < sizeof line - 1) line[len++] = '\n';
    fwrite(line, 1, len, stderr);
}

static const char *env_or(const char *name, const char *dflt) {
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

void tn_comm_log_init(const tn_comm *c) {
    if (!tn_comm_log_on()) return;
    const tn_comm_info *i = &c->info;
    char line[512];
    snprintf(line, sizeof line, "rank %d of %d: machine %d of %d (%s%s%s), local rank %d of %d, backend %s", i->rank,
             i->size, i->node, i->n_nodes, i->host, getenv("TANDEM_NODE_NAME") ? ", node name " : "",
             env_or("TANDEM_NODE_NAME", ""), i->local_rank, i->local_size, c->be->name);
    say(c, "%s%s", line, "");
    snprintf(line, sizeof line, "MPI transports %s; TCP interfaces %s (oob %s)", env_or("OMPI_MCA_btl", "Open MPI's choice"),
             env_or("OMPI_MCA_btl_tcp_if_include", env_or("OMPI_MCA_btl_tcp_if_exclude", "Open MPI's choice")),
             env_or("OMPI_MCA_oob_tcp_if_include", env_or("OMPI_MCA_oob_tcp_if_exclude", "Open MPI's choice")));
    say(c, "%s%s", line, "");
    if (i->rank != 0) return;
    snprintf(line, sizeof line, "ring pieces %zu KB, %d in flight, shared-memory slot %zu KB, poll up to %d us (%d us "
             "while only a background exchange waits for its peers)", c->tune.piece * 4 / 1024, c->tune.window,
             c->tune.chunk * 4 / 1024, c->tune.poll_max_us, c->tune.bg_poll_max_us);
    say(c, "%s%s", line, "");
}

void tn_comm_log_machines(const tn_comm *c, const int *node_of) {
    if (!tn_comm_log_on() || c->info.rank != 0) return;
    for (int nd = 0; nd < c->info.n_nodes; nd++) {
        char line[512];
        size_t used = (size_t)snprintf(line, sizeof line, "machine %d:", nd);
        const char *host = "?";
        for (int r = 0, first = 1; r < c->info.size && used < sizeof line; r++) {
            if (node_of[r] != nd) continue;
            host = c->hosts[r];
            used += (size_t)snprintf(line + used, sizeof line - used, "%s%d", first ? " ranks " : ",", r);
            first = 0;
        }
        say(c, "%s on %s", line, host);
    }
}

void tn_comm_log_finalize(tn_comm *c) {
    if (!tn_comm_log_on()) return;
    char line[256];
    pthread_mutex_lock(&c->mu); /* busy_s is the progress thread's */
    double busy = c->busy_s;
    pthread_mutex_unlock(&c->mu);
    snprintf(line, sizeof line, "finalize: %llu collective op(s) run, progress thread busy %.3f s",
             (unsigned long long)c->op_seq, busy);
    say(c, "%s%s", line, "");
}
