/* ifname -- NCCL_SOCKET_IFNAME read as NCCL reads it, turned into the interface list Open MPI's TCP takes.
 *
 * A launch that names NCCL's interface (`NCCL_SOCKET_IFNAME=ens1f0`, as LLaMA-Factory users do for NCCL)
 * means the job's traffic goes there; tandem's gradients cross machines through MPI, so the same choice
 * goes to Open MPI's btl_tcp_if_include and oob_tcp_if_include. NCCL's rules: a comma-separated list of
 * name prefixes ("eth" matches eth0 and eth1); a leading '=' makes them exact names; a leading '^' makes the
 * list one of interfaces NOT to use (and "^=" both); a ":port" after a name is ignored. Open MPI takes
 * exact names only, so the list is resolved against this machine's interfaces (those with an IPv4
 * address) into the names that match. A '^' list leaves loopback out unless nothing else is left, as
 * Open MPI leaves it out of its TCP by default (a peer's 127.0.0.1 is never the peer). */
#ifndef TN_IFNAME_H
#define TN_IFNAME_H

#include <stddef.h>

/* Does interface `name` pass the NCCL list `spec`? 1 yes, 0 no. */
int tn_ifname_match(const char *spec, const char *name);
/* The names of `ifs` (n_ifs of them, this machine's interfaces) that `spec` selects, comma-separated, into
 * out. Returns how many, or -1 + tn_err (no interface matches: the error names the spec and what exists;
 * out too small). */
int tn_ifname_select(const char *spec, const char *const *ifs, int n_ifs, char *out, size_t n);
/* The same over this machine's interfaces (getifaddrs, IPv4 ones). */
int tn_ifname_resolve(const char *spec, char *out, size_t n);

#endif
