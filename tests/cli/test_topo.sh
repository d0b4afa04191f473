#!/bin/sh
# `tandem topo` where there is no GPU or NVIDIA driver (CI, this machine's kind): one line saying so, exit 0,
# nothing else; bad arguments are one error line. (With a GPU, tests/gpu/test_gpu_topo.sh checks the table.)
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
T=$(mktemp -d /tmp/tandem-topo-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
if [ -e /dev/nvidiactl ] || ldconfig -p 2>/dev/null | grep -q libnvidia-ml.so.1; then
  echo "test_topo: skipped: this machine has an NVIDIA driver (tests/gpu/test_gpu_topo.sh covers it)"
  exit 77
fi
"$BIN" topo >"$T/out" 2>&1
rc=$?
check '[ $rc -eq 0 ] && [ "$(wc -l <"$T/out")" -eq 1 ] && grep -q "^tandem topo: no GPU topology on .*: NVML" "$T/out"'
"$BIN" topo --ranks 0 >"$T/bad" 2>&1
rc=$?
check '[ $rc -eq 1 ] && [ "$(wc -l <"$T/bad")" -eq 1 ] && grep -q "error: --ranks expects an integer" "$T/bad"'
"$BIN" topo --frobnicate >"$T/bad2" 2>&1
rc=$?
check '[ $rc -eq 1 ] && grep -q "unexpected argument" "$T/bad2"'
"$BIN" topo --help >"$T/help" 2>&1
check 'grep -q "usage: tandem topo" "$T/help"'
echo "test_topo: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
