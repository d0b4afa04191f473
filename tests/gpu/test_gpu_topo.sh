#!/bin/sh
# `tandem topo` on a GPU machine: the nvidia-smi-style matrix (one row per GPU, X on the diagonal), the legend, and
# the placement of the local ranks (rank r on cuda:r mod N); with --ranks above the GPU count, the note that NCCL
# cannot share a GPU. Compared with `nvidia-smi topo -m` where that is installed (the same link types).
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
T=$(mktemp -d /tmp/tandem-gtopo-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
"$BIN" topo >"$T/out" 2>&1
rc=$?
if grep -q "no GPU topology" "$T/out"; then echo "test_gpu_topo: skipped: $(cat "$T/out")"; exit 77; fi
cat "$T/out"
n=$(grep -c "^GPU[0-9]" "$T/out")
check '[ $rc -eq 0 ] && [ "$n" -ge 1 ] && grep -q "^Legend: X = self" "$T/out"'
check 'grep -q "local rank 0   -> cuda:0 = GPU" "$T/out"'
"$BIN" topo --ranks $((n + 1)) >"$T/more" 2>&1
check 'grep -q "share .* GPU(s): NCCL refuses" "$T/more" && grep -q "local rank $n .*-> cuda:0 " "$T/more"'
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi topo -m >"$T/smi" 2>&1 && cat "$T/smi"
  # the diagonal and every NV# count as nvidia-smi reports them, row by row
  for i in $(seq 0 $((n - 1))); do
    ours=$(grep "^GPU$i " "$T/out" | awk -v k="$n" '{ for (j = 2; j <= k + 1; j++) printf "%s ", $j }')
    theirs=$(grep "^GPU$i" "$T/smi" | awk -v k="$n" '{ for (j = 2; j <= k + 1; j++) printf "%s ", $j }')
    check '[ "$ours" = "$theirs" ]'
  done
fi
echo "test_gpu_topo: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
