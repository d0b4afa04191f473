/* pernode.c -- see pernode.h. */
#include "launch/pernode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"

static int env_int(const char *name, long lo, long hi, long dflt, int *out) {
    const char *s = getenv(name);
    *out = (int)dflt;
    if (!s || !*s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) return tn_err("%s='%s': expected an integer in %ld..%ld", name, s, lo, hi);
    *out = (int)v;
    return 0;
}

static int set(const char *name) {
    const char *s = getenv(name);
    return s && *s;
}

/* NODE_RANK, or RANK where NODE_RANK is not set: older LLaMA-Factory versions read RANK as the machine's
 * index, and their users still type it. Both set and different: NODE_RANK (what torchrun and current
 * LLaMA-Factory read) wins, and one line says so. */
static int node_rank(tn_pernode *p) {
    const char *name = set("NODE_RANK") || !set("RANK") || p->nnodes < 2 ? "NODE_RANK" : "RANK";
    if (env_int(name, 0, p->nnodes - 1, 0, &p->node_rank) != 0)
        return tn_err("%s='%s': expected an integer in 0..%d (NNODES=%d)", name, getenv(name), p->nnodes - 1, p->nnodes);
    p->rank_from = name;
    if (strcmp(name, "NODE_RANK") == 0 && set("RANK") && p->nnodes > 1) {
        char *end;
        long r = strtol(getenv("RANK"), &end, 10);
        if (*end || r != p->node_rank)
            snprintf(p->note, sizeof p->note, "NODE_RANK=%d and RANK=%s differ: this machine is node %d (NODE_RANK; RANK "
                     "is read only where NODE_RANK is not set)", p->node_rank, getenv("RANK"), p->node_rank);
    }
    return 0;
}

int tn_pernode_from_env(tn_pernode *p) {
    memset(p, 0, sizeof *p);
    int timeout;
    if (env_int("NNODES", 1, 4096, 1, &p->nnodes) != 0 || env_int("MASTER_PORT", 1, 65535, 29500, &p->master_port) != 0 ||
        env_int("TANDEM_RDZV_TIMEOUT", 1, 86400, 600, &timeout) != 0)
        return -1;
    if (node_rank(p) != 0) return -1;
    p->timeout_s = timeout;
    const char *addr = getenv("MASTER_ADDR");
    p->addr_given = addr && *addr;
    if (p->addr_given && strlen(addr) >= sizeof p->master_addr) return tn_err("MASTER_ADDR is longer than 255 characters");
    snprintf(p->master_addr, sizeof p->master_addr, "%s", p->addr_given ? addr : "127.0.0.1");
    return p->nnodes > 1;
}

int tn_pernode_forced(void) {
    const char *f = getenv("FORCE_TORCHRUN"), *nn = getenv("NNODES");
    int forced = f && (strcmp(f, "1") == 0 || strcasecmp(f, "true") == 0 || strcasecmp(f, "y") == 0 ||
                       strcasecmp(f, "yes") == 0);
    int several = nn && atoi(nn) > 1; /* a job of several machines: training one of them alone would mislead */
    /* a rank of a job (the launch's own mpirun, or mpirun / srun by hand) trains; it does not launch again */
    return (forced || several) && !getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK") && !getenv("PMI_RANK");
}
