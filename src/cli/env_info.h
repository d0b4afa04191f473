/* env_info -- what `tandem env` reports (tandem's `llamafactory-cli env` / `ds_report`): the build, the
 * libraries that decide speed and the last bits of results (OpenBLAS and its kernel, OpenMP, Open MPI,
 * NCCL/CUDA when present) and the machine (CPU, cores, memory, NUMA), as rows of (key, value); and the
 * side-by-side table of several machines' rows, rows that differ marked with '*'. */
#ifndef TN_ENV_INFO_H
#define TN_ENV_INFO_H

#include <stdio.h>

#define TN_ENV_MAX_ROWS 40

typedef struct {
    char key[32];
    char value[224];
} tn_env_row;

/* This process's rows (MPI may or may not be initialised); the number of rows. */
int tn_env_collect(tn_env_row rows[TN_ENV_MAX_ROWS]);

/* One column per machine (titles[i], its rows cols[i][0..n_rows), the same keys in the same order). Values
 * wider than the column wrap onto further lines. With two or more columns, a row whose values are not all
 * equal starts with '*', and a last line names those rows (or says that all machines agree). Returns the
 * number of rows that differ. */
int tn_env_print_table(FILE *f, int n_cols, const char *const *titles, const tn_env_row *const *cols, int n_rows);

#endif
