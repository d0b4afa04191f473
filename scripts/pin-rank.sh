#!/bin/sh
# pin-rank.sh CMD [ARGS...] -- run CMD pinned to one core, as a rank under mpirun that should have a core of its
# own (benchmarks that simulate machines on one host: bench/plan_fresh.py). The core is the (rank mod n)-th of the
# n cores this process may run on (its affinity list), rank from $OMPI_COMM_WORLD_RANK ($PMI_RANK, else 0).
# Not `nproc`: GNU nproc prints $OMP_NUM_THREADS when it is set, and benchmarks set OMP_NUM_THREADS=1, which put
# every rank on core 0 (docs/performance.md, "Validation in one invocation"). $TANDEM_PIN_CORES (e.g. "0,1")
# overrides the list.
set -eu
[ $# -ge 1 ] || { echo "pin-rank.sh: usage: pin-rank.sh CMD [ARGS...]" >&2; exit 2; }
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
case $rank in '' | *[!0-9]*) echo "pin-rank.sh: rank '$rank' is not a number" >&2; exit 2 ;; esac
list=${TANDEM_PIN_CORES:-$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)}
# "0-3,8,10-11" -> the rank's core
core=$(printf '%s\n' "$list" | awk -v r="$rank" -F, '{
  n = 0
  for (i = 1; i <= NF; i++) {
    if (split($i, ab, "-") == 2) { for (c = ab[1]; c <= ab[2]; c++) cores[n++] = c }
    else if ($i ~ /^[0-9]+$/) cores[n++] = $i
  }
  if (n == 0) exit 1
  print cores[r % n]
}') || { echo "pin-rank.sh: cannot read a core list from '$list'" >&2; exit 2; }
exec taskset -c "$core" "$@"
