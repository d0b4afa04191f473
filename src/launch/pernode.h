/* pernode -- the variables of a torchrun-style launch, typed on every machine with only NODE_RANK changed:
 *
 *   FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=0|1 MASTER_ADDR=host0 MASTER_PORT=29500 NPROC_PER_NODE=2 \
 *     tandem train x.yaml        (or: tandem launch x.yaml; tandem env)
 *
 * Owns reading and checking them (one error line naming the variable) and deciding whether a command is
 * such a launch. LLaMA-Factory's defaults: NNODES 1, NODE_RANK 0, MASTER_ADDR 127.0.0.1, NPROC_PER_NODE 1
 * here (no GPUs to count); MASTER_PORT 29500 as torchrun's. TANDEM_RDZV_TIMEOUT (seconds, default 600 as
 * torchrun's join timeout) bounds how long node 0 waits for the others and the others for node 0.
 * RANK stands for NODE_RANK where NODE_RANK is not set, as older LLaMA-Factory versions read it
 * (`FORCE_TORCHRUN=1 NNODES=2 RANK=1 ...`); where both are set and differ, NODE_RANK wins and the launch says so. */
#ifndef TN_PERNODE_H
#define TN_PERNODE_H

typedef struct {
    int nnodes, node_rank, nproc;
    char master_addr[256];
    int master_port;
    double timeout_s;
    int addr_given; /* MASTER_ADDR was set (the default only reaches this machine) */
    const char *rank_from; /* "NODE_RANK", or "RANK" (older LLaMA-Factory) where NODE_RANK is not set */
    char note[192];        /* NODE_RANK and RANK both set and different: which one was used ("" otherwise) */
} tn_pernode;

/* Reads the variables. Returns 1 when NNODES > 1 (a per-node launch), 0 when not, -1 + tn_err on a bad
 * value. NPROC_PER_NODE is read by the launcher itself (`-n` overrides it). */
int tn_pernode_from_env(tn_pernode *p);
/* `tandem train` / `tandem env` started by hand, outside any MPI job, with FORCE_TORCHRUN on (1, true, y, yes)
 * or NNODES > 1: they hand over to `tandem launch`, as llamafactory-cli hands over to torchrun. */
int tn_pernode_forced(void);

#endif
