#!/bin/sh
# The comm layer under mpirun on this host: test_unit_comm (closed-form sums of rank-dependent data, see
# tests/unit/test_unit_comm.c) with 2-4 ranks, on one machine and on 2-4 faked machines (TANDEM_NODE_NAME
# per rank), which drives the hierarchical path: shared memory inside a "machine", ring between them.
# test_unit_diloco (DiLoCo's sample-weighted outer step) on 2-3 faked machines.
# Also checks that a wrong expectation and a bad setting fail (the harness can fail), without hanging.
set -u
BIN=${TANDEM_BIN:?}
TEST=$(dirname "$BIN")/tests/test_unit_comm
T=$(mktemp -d /tmp/tandem-mpi-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

if ! command -v mpirun >/dev/null; then echo "FAIL: mpirun is not installed (scripts/install-deps.sh)"; exit 1; fi
if [ ! -x "$TEST" ]; then echo "FAIL: $TEST is not built"; exit 1; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # harmless when not root

# run NAME NP NODES NODE-EXPR [mpirun args...]: NODE-EXPR is shell arithmetic on r (the rank) giving
# the faked machine of each rank, or "-" for none; NODES is how many machines the comm layer must find.
# UNIT names the unit test to run (default test_unit_comm); each prints "UNIT: size P, M machine(s), backend ...".
run() {
  name=$1 np=$2 nodes=$3 expr=$4 unit=${UNIT:-test_unit_comm}
  shift 4
  checks=$((checks + 1))
  if [ "$expr" = - ]; then setname=""; else setname="export TANDEM_NODE_NAME=fake\$(( $expr ));"; fi
  timeout 300 mpirun -n "$np" --oversubscribe --bind-to none -x TANDEM_TEST_EXPECT_SIZE="$np" \
    -x TANDEM_TEST_EXPECT_NODES="$nodes" "$@" \
    sh -c "r=\$OMPI_COMM_WORLD_RANK; $setname exec \"\$0\"" "$(dirname "$BIN")/tests/$unit" >"$T/out" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "$unit: size $np, $nodes machine(s), backend mpi: [0-9]* checks, 0 failed" "$T/out"; then
    fail "$name (rc=$rc):"
    tail -n 20 "$T/out"
  else
    grep "$unit:" "$T/out" | sed "s/^/  $name: /"
  fi
}

run one-machine-2 2 1 -
run one-machine-3 3 1 -
run one-machine-4 4 1 -
run flat-ring-2x1 2 2 r
run flat-ring-4x1 4 4 r
run hier-2x2 4 2 "r / 2"
run hier-uneven-2+1 3 2 "r / 2"
run hier-interleaved 4 2 "r % 2" # ring order (machine by machine) differs from rank order
# small pieces, window and slots: many segments in flight, window wrap-around, slot reuse across chunks
run hier-2x2-small-pieces 4 2 "r / 2" -x TANDEM_COMM_PIECE_KB=4 -x TANDEM_COMM_WINDOW=3 -x TANDEM_COMM_CHUNK_MB=1

# DiLoCo's outer step over faked machines: the pseudo-gradients' mean weighted by each machine's samples
# (tests/unit/test_unit_diloco.c: the expected consensus written down from the machines' formulas)
UNIT=test_unit_diloco run diloco-2x1 2 2 r
UNIT=test_unit_diloco run diloco-2x2 4 2 "r / 2"
UNIT=test_unit_diloco run diloco-3x1 3 3 r

# the harness must be able to fail: a wrong machine count is reported and fails the run
checks=$((checks + 1))
timeout 120 mpirun -n 2 --oversubscribe --bind-to none -x TANDEM_TEST_EXPECT_NODES=2 "$TEST" >"$T/out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] || ! grep -q "n_nodes 1, expected 2" "$T/out"; then fail "wrong expectation was not detected (rc=$rc)"; tail -n 5 "$T/out"; fi

# a bad setting stops every rank with the same clear line naming it (no hang: rank 0 broadcasts the verdict)
checks=$((checks + 1))
timeout 120 mpirun -n 2 --oversubscribe --bind-to none -x TANDEM_COMM_WINDOW=lots "$TEST" >"$T/out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] || [ "$(grep -c "TANDEM_COMM_WINDOW='lots' is not an integer" "$T/out")" -lt 1 ]; then
  fail "bad TANDEM_COMM_WINDOW (rc=$rc):"
  tail -n 5 "$T/out"
fi

checks=$((checks + 1))
timeout 120 mpirun -n 2 --oversubscribe --bind-to none -x TANDEM_COMM_BACKEND=gloo "$TEST" >"$T/out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] || [ "$(grep -c "TANDEM_COMM_BACKEND='gloo' is not known" "$T/out")" -lt 1 ]; then
  fail "unknown TANDEM_COMM_BACKEND (rc=$rc):"
  tail -n 5 "$T/out"
fi

echo "test_mpi_comm: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
