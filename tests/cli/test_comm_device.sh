#!/bin/sh
# Collectives on device buffers through the MPI backend's host staging (comm_device.c), without a GPU:
# test_unit_comm_device's fake device keeps its buffers PROT_NONE outside its own copies, so the comm layer must
# stage every device buffer (a direct touch crashes), and the results must be test_unit_comm's closed-form sums.
# 2-4 ranks on one machine and on faked machines (hierarchical path), with $TANDEM_COMM_BACKEND=mpi and unset
# (then NCCL is tried where built, and without a GPU the staging carries on). test_unit_sync_device runs the same
# way: every gradient sync mode and DiLoCo's rounds on fake-device parameters and gradients. The fake device copies
# out asynchronously (its copies land on the third poll; the host buffer is NaN until then), as the CUDA backend
# does, so an all-reduce that started before its copy landed would sum NaN; one run uses the blocking copy instead.
set -u
BIN=${TANDEM_BIN:?}
TESTS=$(dirname "$BIN")/tests
T=$(mktemp -d /tmp/tandem-commdev-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

if ! command -v mpirun >/dev/null; then echo "FAIL: mpirun is not installed (scripts/install-deps.sh)"; exit 1; fi
for t in test_unit_comm_device test_unit_sync_device; do
  if [ ! -x "$TESTS/$t" ]; then echo "FAIL: $TESTS/$t is not built"; exit 1; fi
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# run TEST NAME NP NODES NODE-EXPR [mpirun args...]
run() {
  test=$1 name=$2 np=$3 nodes=$4 expr=$5
  shift 5
  checks=$((checks + 1))
  if [ "$expr" = - ]; then setname=""; else setname="export TANDEM_NODE_NAME=fake\$(( $expr ));"; fi
  timeout 300 mpirun -n "$np" --oversubscribe --bind-to none "$@" \
    sh -c "r=\$OMPI_COMM_WORLD_RANK; $setname exec \"\$0\"" "$TESTS/$test" >"$T/out" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "size $np, $nodes machine(s), backend mpi: [0-9]* checks, 0 failed" "$T/out"; then
    fail "$test $name (rc=$rc):"
    tail -n 20 "$T/out"
  else
    grep "$test:" "$T/out" | sed "s/^/  $name: /"
  fi
}

for t in test_unit_comm_device test_unit_sync_device; do
  run $t one-machine-2 2 1 - -x TANDEM_COMM_BACKEND=mpi
  run $t one-machine-3 3 1 - -x TANDEM_COMM_BACKEND=mpi
  run $t hier-2x2 4 2 "r / 2" -x TANDEM_COMM_BACKEND=mpi
  run $t flat-ring-3x1 3 3 r -x TANDEM_COMM_BACKEND=mpi
  run $t backend-unset-2 2 1 -
done
# a device without the asynchronous copy out: every staged all-reduce waits for its copy (the path before overlap)
run test_unit_comm_device sync-staging-2x2 4 2 "r / 2" -x TANDEM_COMM_BACKEND=mpi -x TANDEM_TEST_STAGING=sync

echo "test_comm_device: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
