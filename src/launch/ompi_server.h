/* ompi_server -- Open MPI's name server for joining separately started jobs (MPI_Comm_connect/accept
 * across mpiruns needs it in Open MPI 4.1: without it, MPI_Comm_join and MPI_Comm_accept stop with
 * "spans multiple invocations of mpirun ... requires the support of the ompi-server tool").
 * Node 0 of a per-node launch starts one for the whole job and hands its URI to every node's mpirun
 * (`mpirun --ompi-server URI`). */
#ifndef TN_OMPI_SERVER_H
#define TN_OMPI_SERVER_H

#include <sys/types.h>

/* Starts `ompi-server --no-daemonize`, listening on the network `net` (a.b.c.d/len, or "" for Open MPI's
 * choice), and waits for its URI. 0 with *pid and uri, or -1 + tn_err. It dies with the calling process. */
int tn_ompi_server_start(const char *net, char *uri, size_t n, pid_t *pid);
void tn_ompi_server_stop(pid_t pid); /* SIGTERM, then SIGKILL; reaps it */

#endif
