/* cmd_env.c -- `tandem env [--hostfile FILE]`: what `llamafactory-cli env` and `ds_report` print, for every
 * machine of the world. Alone: this machine. Under mpirun, `tandem launch` or a per-node launch: one column
 * per machine (its first rank's view), side by side, rows that differ marked '*' (env_info.h).
 * `tandem env --hostfile FILE` (and any other launch option) and FORCE_TORCHRUN=1 with the per-node
 * variables start that world through `tandem launch`, one rank per machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/env_info.h"
#include "comm/comm.h"
#include "core/core.h"
#include "launch/pernode.h"

typedef struct {
    tn_env_row rows[TN_ENV_MAX_ROWS];
    int n_rows, node, local_rank, pad;
    char host[64];
} report;

/* The row of `col` with `key`, or a placeholder (builds that report other rows). */
static const tn_env_row *find(const report *col, const char *key, tn_env_row *missing) {
    for (int i = 0; i < col->n_rows; i++)
        if (strcmp(col->rows[i].key, key) == 0) return &col->rows[i];
    snprintf(missing->key, sizeof missing->key, "%s", key);
    snprintf(missing->value, sizeof missing->value, "(not reported)");
    return missing;
}

static void print_world(const tn_comm_info *in, const report *all) {
    const report **cols = tn_xcalloc((size_t)in->n_nodes, sizeof *cols);
    for (int r = 0; r < in->size; r++)
        if (all[r].local_rank == 0 && all[r].node >= 0 && all[r].node < in->n_nodes) cols[all[r].node] = &all[r];
    int n_rows = cols[0]->n_rows;
    tn_env_row *aligned = tn_xcalloc((size_t)in->n_nodes * (size_t)n_rows, sizeof *aligned);
    const tn_env_row **colrows = tn_xcalloc((size_t)in->n_nodes, sizeof *colrows);
    char(*titles)[96] = tn_xcalloc((size_t)in->n_nodes, sizeof *titles);
    const char **tp = tn_xcalloc((size_t)in->n_nodes, sizeof *tp);
    for (int c = 0; c < in->n_nodes; c++) {
        for (int r = 0; r < n_rows; r++) {
            tn_env_row missing;
            aligned[(size_t)c * (size_t)n_rows + (size_t)r] = *find(cols[c], cols[0]->rows[r].key, &missing);
        }
        colrows[c] = &aligned[(size_t)c * (size_t)n_rows];
        snprintf(titles[c], sizeof titles[c], "%s", cols[c]->host);
        tp[c] = titles[c];
    }
    printf("tandem env: %d machine(s), %d rank(s)%s\n", in->n_nodes, in->size,
           in->n_nodes > 1 ? "; rows marked * differ between machines" : "");
    tn_env_print_table(stdout, in->n_nodes, tp, colrows, n_rows);
    fflush(stdout);
    free(cols), free(aligned), free(colrows), free(titles), free(tp);
}

int tn_cmd_env(int argc, char **argv) {
    if (argc > 0 || tn_pernode_forced()) return tn_launch(argc, argv, "env"); /* --hostfile, per-node launch */
    tn_comm *c = tn_comm_init(NULL, NULL);
    if (!c) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        return 1;
    }
    const tn_comm_info *in = tn_comm_get_info(c);
    report *mine = tn_xcalloc(1, sizeof *mine), *all = tn_xcalloc((size_t)in->size, sizeof *all);
    mine->n_rows = tn_env_collect(mine->rows);
    mine->node = in->node, mine->local_rank = in->local_rank;
    snprintf(mine->host, sizeof mine->host, "%s", in->host);
    int rc = tn_comm_allgather(c, mine, sizeof *mine, all);
    if (rc != 0) fprintf(stderr, "tandem: error: env: gathering every machine's report failed: %s\n", tn_errmsg());
    else if (in->rank == 0) print_world(in, all);
    free(mine), free(all);
    tn_comm_finalize(c);
    return rc == 0 ? 0 : 1;
}
