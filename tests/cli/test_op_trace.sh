#!/bin/sh
# `tandem bench train --dist --trace`'s op timeline (comm.h: tn_comm_trace_ops): every collective prints one line as
# it finishes, "rank R step S: op K NAME of F floats: queued Q, started B, done D ms". The docs' step timelines
# (where a step's link time and idle gaps go) are read from these lines, so they must account for every byte:
#  1. DDP, 2 ranks on 2 faked machines: each step's all-reduces cover the trainable parameters exactly once.
#  2. ZeRO-2, 3 ranks, balanced and contiguous shards (whose gathers are cut at the shard edges): the second step's
#     reduce-scatters cover them once, and so do the parameter all-gathers issued after the first step's update (the
#     ops numbered before the second step's first reduce-scatter: stage 2 gathers nothing before the first step).
#     By number, not by the step a line is labelled with: a gather may finish before the next step starts.
#  3. DiLoCo H 2: the round's exchange of all parameters runs in the background, once a round.
#  4. Every line: queued <= started <= done; every rank reports; without --trace no op line at all.
# The sums are checked against the trainable count of the run's own JSON line, not a number from this machine;
# a planted bug (a range op that reports its end offset, not its length: tests/mutants) fails here.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
need_mpirun test_op_trace
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tandem-optrace-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0

bench() { # name ranks faked-machines(0|1) bench-args...: stdout (the JSON) to name.json, stderr to name.err
  name=$1 n=$2 fake=$3; shift 3
  timeout 300 mpirun -n "$n" --oversubscribe --bind-to none -x OMP_NUM_THREADS -x FAKE="$fake" \
    sh -c '[ "$FAKE" = 1 ] && export TANDEM_NODE_NAME=fake$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' \
    "$BIN" bench train --preset tiny --batch 2 --steps 2 --warmup 0 --dist "$@" >"$T/$name.json" 2>"$T/$name.err" ||
    { echo "run $name failed:"; tail -n 20 "$T/$name.err"; }
}
trainable() { sed -n 's/.*"trainable":\([0-9]*\).*/\1/p' "$T/$1.json"; }

# covers NAME RANKS STEP OP [before]: every rank's ops named OP that finished in STEP (with "before": those numbered
# before the first reduce-scatter that finished in STEP, whatever step they finished in) sum to the trainable count,
# and every op line of the run is ordered in time
covers() {
  awk -v N="$2" -v S="$3" -v OP="$4" -v BEFORE="${5:-}" -v P="$(trainable "$1")" '
    /^rank [0-9]+ step [0-9]+: op [0-9]+ / {
      r = $2; st = $4; sub(":", "", st); k = $6
      line = $0; sub(/.*: op [0-9]+ /, "", line); name = line; sub(/ of [0-9]+ floats.*/, "", name)
      f = line; sub(/.* of /, "", f); sub(/ floats.*/, "", f)
      q = line; sub(/.*queued /, "", q); sub(/,.*/, "", q)
      b = line; sub(/.*started /, "", b); sub(/,.*/, "", b)
      d = line; sub(/.*done /, "", d); sub(/ ms.*/, "", d)
      if (q + 0 > b + 0 || b + 0 > d + 0) { printf "    out of order: %s\n", $0; bad = 1 }
      if (BEFORE == "" && st == S && name == OP) sum[r] += f
      if (BEFORE != "" && name == OP) { n_op[r]++; seq[r, n_op[r]] = k; fl[r, n_op[r]] = f }
      if (BEFORE != "" && st == S && name == "reduce-scatter" && (!(r in first) || k + 0 < first[r])) first[r] = k + 0
    }
    END {
      for (r = 0; r < N && BEFORE != ""; r++)
        for (i = 1; i <= n_op[r]; i++) if (seq[r, i] + 0 < first[r]) sum[r] += fl[r, i]
      for (r = 0; r < N; r++) { printf "    rank %d: %s floats in step %s: %d of %d\n", r, OP, S, sum[r], P; bad = bad || sum[r] != P }
      exit !(P > 0 && !bad)
    }' "$T/$1.err"
}

bench ddp 2 1 --zero 0 --trace
echo "DDP, 2 ranks on 2 faked machines:"
check 'covers ddp 2 0 allreduce && covers ddp 2 1 allreduce'
check 'grep -q "\"nodes\":2" "$T/ddp.json"'

bench zero2 3 0 --zero 2 --zero-layout balanced --trace
echo "ZeRO-2, balanced shards, 3 ranks:"
check 'covers zero2 3 1 reduce-scatter && covers zero2 3 1 all-gather before'

bench zero2c 3 0 --zero 2 --zero-layout contiguous --trace
echo "ZeRO-2, contiguous shards (pieces cut at the shard edges), 3 ranks:"
check 'covers zero2c 3 1 reduce-scatter && covers zero2c 3 1 all-gather before'

bench diloco 2 1 --diloco 2 --compress int8 --trace
echo "DiLoCo H 2, int8, 2 ranks on 2 faked machines:"
check 'covers diloco 2 1 "exchange (background)"'

bench quiet 2 1 --zero 0
check '[ -s "$T/quiet.json" ] && ! grep -q ": op [0-9]" "$T/quiet.err"'

echo "test_op_trace: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
