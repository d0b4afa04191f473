#!/bin/sh
# scripts/pin-rank.sh: rank r runs on the (r mod n)-th core this process may use, whatever OMP_NUM_THREADS says
# (the benchmarks set it to 1, and a pin computed from `nproc` then put every rank on core 0). The expected cores
# come from Python's os.sched_getaffinity, not from the script's own parsing.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
ROOT=$(cd "$TANDEM_TESTS_DIR/.." && pwd)
PIN=$ROOT/scripts/pin-rank.sh
fails=0 checks=0
command -v taskset >/dev/null || { echo "test_pin_rank: skipped (no taskset)"; exit 77; }
cores=$(python3 -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))')
n=$(echo "$cores" | wc -w)
ran_on() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status; }
for r in 0 1 2 3; do
  want=$(echo "$cores" | cut -d' ' -f$((r % n + 1)))
  got=$(OMP_NUM_THREADS=1 OMPI_COMM_WORLD_RANK=$r "$PIN" sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  check '[ "$got" = "$want" ]'
done
# PMI_RANK when Open MPI's variable is absent; the affinity list of a restricted process, not every core
last=$(echo "$cores" | cut -d' ' -f"$n")
got=$(env -u OMPI_COMM_WORLD_RANK PMI_RANK=1 taskset -c "$last" "$PIN" sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
check '[ "$got" = "$last" ]'
# an explicit list, ranges expanded: "last,first-first" -> rank 1 is the first core
first=$(echo "$cores" | cut -d' ' -f1)
got=$(TANDEM_PIN_CORES="$last,$first-$first" OMPI_COMM_WORLD_RANK=1 "$PIN" sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
check '[ "$got" = "$first" ]'
# bad input: one line naming it, exit 2, the command not run
OMPI_COMM_WORLD_RANK=x "$PIN" echo RAN_CMD >"/tmp/test_pin_rank.$$" 2>&1
rc=$?
check '[ $rc -eq 2 ] && grep -q "rank .x. is not a number" "/tmp/test_pin_rank.$$" && ! grep -q RAN_CMD "/tmp/test_pin_rank.$$"'
TANDEM_PIN_CORES=none "$PIN" echo RAN_CMD >"/tmp/test_pin_rank.$$" 2>&1
rc=$?
check '[ $rc -eq 2 ] && grep -q "cannot read a core list from .none." "/tmp/test_pin_rank.$$"'
rm -f "/tmp/test_pin_rank.$$"
echo "test_pin_rank: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
