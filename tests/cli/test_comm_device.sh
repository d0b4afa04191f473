#!/bin/sh
# Collectives on device buffers through the MPI backend's host staging (comm_device.c), without a GPU:
# test_unit_comm_device's fake device keeps its buffers PROT_NONE outside its own copies, so the comm layer must
# stage every device buffer (a direct touch crashes), and the results must be test_unit_comm's closed-form sums.
# 2-4 ranks on one machine and on faked machines (hierarchical path), with $TANDEM_COMM_BACKEND=mpi and unset
# (then NCCL is tried where built, and without a GPU the staging carries on).
set -u
BIN=${TANDEM_BIN:?}
TEST=$(dirname "$BIN")/tests/test_unit_comm_device
T=$(mktemp -d /tmp/tandem-commdev-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

if ! command -v mpirun >/dev/null; then echo "FAIL: mpirun is not installed (scripts/install-deps.sh)"; exit 1; fi
if [ ! -x "$TEST" ]; then echo "FAIL: $TEST is not built"; exit 1; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# run NAME NP NODES NODE-EXPR [mpirun args...]
run() {
  name=$1 np=$2 nodes=$3 expr=$4
  shift 4
  checks=$((checks + 1))
  if [ "$expr" = - ]; then setname=""; else setname="export TANDEM_NODE_NAME=fake\$(( $expr ));"; fi
  timeout 300 mpirun -n "$np" --oversubscribe --bind-to none "$@" \
    sh -c "r=\$OMPI_COMM_WORLD_RANK; $setname exec \"\$0\"" "$TEST" >"$T/out" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "size $np, $nodes machine(s), backend mpi: [0-9]* checks, 0 failed" "$T/out"; then
    fail "$name (rc=$rc):"
    tail -n 20 "$T/out"
  else
    grep "test_unit_comm_device:" "$T/out" | sed "s/^/  $name: /"
  fi
}

run one-machine-2 2 1 - -x TANDEM_COMM_BACKEND=mpi
run one-machine-3 3 1 - -x TANDEM_COMM_BACKEND=mpi
run hier-2x2 4 2 "r / 2" -x TANDEM_COMM_BACKEND=mpi
run flat-ring-3x1 3 3 r -x TANDEM_COMM_BACKEND=mpi
run backend-unset-2 2 1 -

echo "test_comm_device: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
