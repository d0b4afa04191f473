/* rendezvous -- the per-node launch's agents finding each other (torchrun's rendezvous, on MPI).
 *
 * Every machine runs one agent (`tandem launch`, or `tandem train` with FORCE_TORCHRUN) with the
 * variables of pernode.h. Node 0's agent listens on MASTER_PORT and starts the job's ompi-server
 * (ompi_server.h); the others connect to MASTER_ADDR:MASTER_PORT (retrying until node 0 is up) and
 * present NODE_RANK, NNODES, NPROC_PER_NODE, their build fingerprint, a hash of TANDEM_JOB_SECRET when
 * set, --max-restarts and the command. Node 0 refuses, with one line on both sides, a node that differs
 * (another build, NNODES, secret, restarts or command) or takes a NODE_RANK already taken, and waits for the
 * missing ones until TANDEM_RDZV_TIMEOUT, then names them. When all are there it hands each the round:
 * world size, ompi-server URI, the name under which its ranks publish their MPI port, the job secret it
 * drew (when none was set) and the extra overrides of this round (resume_from_checkpoint after a restart,
 * chosen from node 0's output_dir). Each agent then runs its local `mpirun`; the ranks join through
 * src/comm/comm_join.c.
 *
 * While the job runs the connections stay open: an agent whose local job ends reports its exit status;
 * when one fails, or an agent disappears, node 0 tells every agent to stop its job. Afterwards node 0
 * sends the outcome: the job's status and whether to restart (node 0's failure count against
 * --max-restarts, which every node must share, as torchrun's elastic agents restart all workers
 * together). A restart is a new round on fresh connections.
 *
 * Protocol: text lines over TCP (IPv4), "tandem-rdzv 1 ..." first. No authentication beyond the secret
 * hash, as torchrun's store has none: run it on a network that only the job's machines reach. */
#ifndef TN_RENDEZVOUS_H
#define TN_RENDEZVOUS_H

#include <signal.h>
#include <stdint.h>

#include "launch/pernode.h"

#define TN_RDZV_MAX_EXTRA 4
#define TN_RDZV_ARG_MAX 1200

typedef struct {
    uint64_t build;     /* tn_build_fingerprint() */
    uint64_t secret_fp; /* hash of the TANDEM_JOB_SECRET the user set; 0 when none */
    int nproc;          /* ranks on this machine */
    int max_restarts;
    const char *command; /* "train", "env" or "bench" */
    const volatile sig_atomic_t *interrupted; /* the launcher's Ctrl-C / kill flag: waiting stops when set */
} tn_rdzv_self;

typedef struct {
    int round, world;        /* restart count; ranks of the whole job */
    char uri[1024];          /* ompi-server */
    char service[64];        /* TANDEM_JOIN_SERVICE */
    char secret[80];         /* the job secret node 0 drew; "" when the user set TANDEM_JOB_SECRET */
    int n_extra;             /* overrides for this round, the same on every node */
    char extra[TN_RDZV_MAX_EXTRA][TN_RDZV_ARG_MAX];
} tn_rdzv_job;

typedef struct tn_rdzv tn_rdzv;

/* Node 0: binds MASTER_PORT and starts ompi-server on `net` ("" = Open MPI's choice). Others: nothing yet.
 * NULL + tn_err. */
tn_rdzv *tn_rdzv_open(const tn_pernode *p, const tn_rdzv_self *me, const char *net);
/* One round. Node 0: job->extra/n_extra are this round's overrides on entry; waits for every node, then
 * fills the rest. Others: connect, present themselves, receive everything. 0 or -1 + tn_err. */
int tn_rdzv_round(tn_rdzv *r, tn_rdzv_job *job);
/* While the local job runs (called every ~200 ms): 1 when the job must stop (another node failed or left). */
int tn_rdzv_poll(void *r);
/* After the local job ended with `status` (`interrupted`: by Ctrl-C / kill, never restarted): exchanges the
 * outcome. Returns the job's status (0 only when every node succeeded); *restart = 1 when every node now
 * starts round + 1. */
int tn_rdzv_finish(tn_rdzv *r, int status, int interrupted, int *restart);
void tn_rdzv_close(tn_rdzv *r); /* stops ompi-server; NULL is fine */

#endif
