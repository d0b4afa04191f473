/* comm_join.c -- one world out of local jobs started separately on each machine (the per-node launch,
 * src/launch/rendezvous.h). Each machine's agent runs its own `mpirun -n NPROC_PER_NODE`, all of them
 * pointed at the ompi-server that node 0's agent started, with
 *   TANDEM_JOIN_SERVICE  name under which node 0 publishes its MPI port (unique per job and round)
 *   TANDEM_JOIN_NODE     this machine's NODE_RANK
 *   TANDEM_JOIN_WORLD    ranks of the whole job (sum of every node's NPROC_PER_NODE)
 *   TANDEM_JOIN_TIMEOUT  seconds a node waits for node 0's port to be published (default 60)
 * Node 0's local job opens a port and accepts, collectively, until the world is complete; every other
 * local job looks the port up, connects, and takes part in the remaining accepts. The merged communicator
 * is then ordered by (NODE_RANK, local rank), so world ranks follow the node ranks as torchrun's do, and
 * everything built on the world (machine split, hierarchical all-reduce, fingerprints) works as under
 * one mpirun. Connected jobs are only freed, never MPI_Comm_disconnect'ed: Open MPI 4.1 hangs in
 * disconnect across jobs, while MPI_Finalize after MPI_Comm_free ends cleanly (measured). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_impl.h"
#include "core/core.h"

static int env_long(const char *name, long lo, long hi, long dflt, long *out) {
    const char *s = getenv(name);
    if (!s || !*s) {
        if (dflt < 0) return tn_err("comm: $%s is not set (the per-node launch sets it)", name);
        *out = dflt;
        return 0;
    }
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) return tn_err("comm: $%s='%s' is not an integer in [%ld, %ld]", name, s, lo, hi);
    *out = v;
    return 0;
}

/* Replace *cur by the merge of *cur with the group at the other end of `inter`. */
static int merge_into(MPI_Comm *cur, MPI_Comm inter, int high) {
    MPI_Comm merged;
    int rc = MPI_Intercomm_merge(inter, high, &merged);
    MPI_Comm_free(&inter);
    if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Intercomm_merge");
    MPI_Comm_free(cur);
    *cur = merged;
    MPI_Comm_set_errhandler(*cur, MPI_ERRORS_RETURN);
    return 0;
}

/* Rank 0 of node k > 0: node 0's port, published under `service` once node 0's ranks are up. */
static int look_up(const char *service, double timeout, char *port) {
    double deadline = tn_now() + timeout;
    for (;;) {
        if (MPI_Lookup_name(service, MPI_INFO_NULL, port) == MPI_SUCCESS) return 0;
        if (tn_now() > deadline)
            return tn_err("comm: node 0 did not publish its MPI port '%s' on the ompi-server within %.0f s", service,
                          timeout);
        usleep(100000);
    }
}

int tn_comm_join_world(MPI_Comm *world) {
    const char *service = getenv("TANDEM_JOIN_SERVICE");
    int rc;
    if (!service || !*service) {
        if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, world)) != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Comm_dup");
        return 0;
    }
    long node = 0, total = 0, timeout = 60;
    if (env_long("TANDEM_JOIN_NODE", 0, 65535, -1, &node) != 0 || env_long("TANDEM_JOIN_WORLD", 1, 1L << 24, -1, &total) != 0 ||
        env_long("TANDEM_JOIN_TIMEOUT", 1, 86400, 60, &timeout) != 0)
        return -1;
    /* errors of the name service are raised on these, not on a communicator of ours */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int lrank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &lrank);
    MPI_Comm cur;
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &cur)) != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Comm_dup");
    MPI_Comm_set_errhandler(cur, MPI_ERRORS_RETURN);
    char port[MPI_MAX_PORT_NAME] = "";
    int bad = 0;
    if (node == 0) {
        if (lrank == 0 && ((rc = MPI_Open_port(MPI_INFO_NULL, port)) != MPI_SUCCESS ||
                           (rc = MPI_Publish_name(service, MPI_INFO_NULL, port)) != MPI_SUCCESS))
            bad = tn_comm_mpi_err(rc, "MPI_Open_port / MPI_Publish_name (is the ompi-server reachable?)");
    } else {
        bad = lrank == 0 ? look_up(service, (double)timeout, port) : 0;
    }
    /* one verdict for the whole local job, so that no rank enters a collective connect alone */
    int any_bad = bad != 0;
    MPI_Allreduce(MPI_IN_PLACE, &any_bad, 1, MPI_INT, MPI_MAX, cur);
    if (any_bad) {
        if (!bad) tn_err("comm: local rank 0 could not reach node 0's MPI port (see its error)");
        MPI_Comm_free(&cur);
        return -1;
    }
    if (node != 0) {
        MPI_Comm inter;
        if ((rc = MPI_Comm_connect(port, MPI_INFO_NULL, 0, cur, &inter)) != MPI_SUCCESS) {
            MPI_Comm_free(&cur);
            return tn_comm_mpi_err(rc, "MPI_Comm_connect to node 0");
        }
        if (merge_into(&cur, inter, 1) != 0) return -1;
    }
    /* node 0's rank 0 stays rank 0 of every merge (its group merges low), so it roots every accept */
    for (MPI_Comm_size(cur, &size); size < total; MPI_Comm_size(cur, &size)) {
        MPI_Comm inter;
        if ((rc = MPI_Comm_accept(port, MPI_INFO_NULL, 0, cur, &inter)) != MPI_SUCCESS) {
            MPI_Comm_free(&cur);
            return tn_comm_mpi_err(rc, "MPI_Comm_accept");
        }
        if (merge_into(&cur, inter, 0) != 0) return -1;
    }
    if (size != total) {
        MPI_Comm_free(&cur);
        return tn_err("comm: the joined world has %d ranks, the launch expected %ld", size, total);
    }
    if (node == 0 && lrank == 0) {
        MPI_Unpublish_name(service, MPI_INFO_NULL, port);
        MPI_Close_port(port);
    }
    rc = MPI_Comm_split(cur, 0, (int)(node << 16) + lrank, world);
    MPI_Comm_free(&cur);
    if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Comm_split (world by node rank)");
    /* the machine rule (comm.h) groups by node name: without one, a node's local job is its own machine,
     * also when two per-node launches share a host */
    if (!getenv("TANDEM_NODE_NAME")) {
        char host[64] = "", name[96];
        gethostname(host, sizeof host - 1);
        snprintf(name, sizeof name, "%.48s/node%ld", host, node);
        setenv("TANDEM_NODE_NAME", name, 1);
    }
    return 0;
}
