#!/bin/sh
# The comm layer across two simulated machines: scripts/netns builds two network namespaces joined by a
# shaped veth pair, Open MPI starts the second machine's ranks through the netns rsh agent, and
# test_unit_comm (closed-form sums, see tests/unit/test_unit_comm.c) must find 2 machines and pass with
# 1 and 2 ranks per machine. The namespaces are removed on every exit path, which is checked too.
# Where namespaces cannot be created (not root, no CAP_NET_ADMIN) this test FAILS with the reason: it
# must never pass without having run.
set -u
BIN=${TANDEM_BIN:?}
TEST=$(dirname "$BIN")/tests/test_unit_comm
NETNS=${TANDEM_TESTS_DIR:?}/../scripts/netns/netns.sh
export TANDEM_NETNS=tnt$$ # own namespaces: other runs of the kit may be up at the same time
T=$(mktemp -d /tmp/tandem-netns-XXXXXX)
trap '"$NETNS" down; rm -rf "$T"' EXIT
trap 'exit 130' INT TERM
fails=0 checks=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

if [ ! -x "$TEST" ]; then echo "FAIL: $TEST is not built"; exit 1; fi
command -v mpirun >/dev/null || { echo "FAIL: mpirun is not installed (scripts/install-deps.sh)"; exit 1; }
if ! "$NETNS" check 2>"$T/why"; then
  echo "FAIL: cannot simulate two machines here: $(cat "$T/why")"
  exit 1
fi
if ! "$NETNS" up --rate 1gbit 2>"$T/why"; then
  echo "FAIL: netns.sh up: $(cat "$T/why")"
  exit 1
fi

# run NAME NP MAP: test_unit_comm across the namespaces, expecting NP ranks on 2 machines
run() {
  name=$1 np=$2 map=$3
  checks=$((checks + 1))
  timeout 300 "$NETNS" mpirun -n "$np" --map-by "$map" -x TANDEM_TEST_EXPECT_SIZE="$np" \
    -x TANDEM_TEST_EXPECT_NODES=2 "$TEST" >"$T/out" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "size $np, 2 machine(s), backend mpi: [0-9]* checks, 0 failed" "$T/out"; then
    fail "$name (rc=$rc):"
    tail -n 20 "$T/out"
  else
    grep "test_unit_comm:" "$T/out" | sed "s/^/  $name: /"
  fi
}

run "1 rank per machine" 2 node
run "2 ranks per machine" 4 ppr:2:node

checks=$((checks + 1))
"$NETNS" down
if ip netns list | grep -q "^$TANDEM_NETNS[01]\b"; then fail "namespaces $TANDEM_NETNS* left behind"; fi

echo "test_netns_comm: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
