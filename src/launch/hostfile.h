/* hostfile -- the machines of a multi-node launch.
 *
 * Owns parsing and checking a hostfile in DeepSpeed's format, which is also Open MPI's: one machine per
 * line, `HOST slots=N` (Open MPI's `max_slots=M` is accepted and ignored; a bare `HOST` means one slot),
 * `#` comments and blank lines ignored. Every problem is one error naming the file, line and what was
 * expected; a host listed twice is an error (DeepSpeed refuses it too). */
#ifndef TN_HOSTFILE_H
#define TN_HOSTFILE_H

typedef struct {
    char name[256];
    int slots;
    int line;
} tn_host;

typedef struct {
    char path[4096];
    int n;
    tn_host *hosts;
    int total_slots;
} tn_hostfile;

int tn_hostfile_load(const char *path, tn_hostfile *hf);   /* 0, or -1 + tn_err("FILE:LINE: ...") */
int tn_hostfile_parse(const char *text, const char *path_for_errors, tn_hostfile *hf);
void tn_hostfile_free(tn_hostfile *hf);

#endif
