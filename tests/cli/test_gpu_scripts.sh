#!/bin/sh
# test_gpu_scripts -- what the GPU scripts assume about the GPU machine, checked without one: its interpreter with
# PyTorch is the first python3 on PATH (no script of tests/gpu, bench/bench_gpu.* or scripts/gpu_verify.sh names
# /usr/bin/python3, which there is a bare system Python), and compute-sanitizer refusing to run (sandboxed machines)
# is told apart from a sanitizer run that found errors or did not finish (tests/gpu/sanitizer_refusal.sh): the first
# is a skip with its reason, the others stay failures.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
ROOT=$(cd "$TANDEM_TESTS_DIR/.." && pwd)
. "$ROOT/tests/gpu/sanitizer_refusal.sh"
T=$(mktemp -d /tmp/tandem-gpuscripts-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0

hard=$(grep -ln "/usr/bin/python" "$ROOT"/tests/gpu/* "$ROOT"/bench/bench_gpu.sh "$ROOT"/bench/bench_gpu.py \
  "$ROOT"/scripts/gpu_verify.sh 2>/dev/null)
check '[ -z "$hard" ]' || echo "  hard-coded /usr/bin/python3 in: $hard"

# refused: the sanitizer's own error, no ERROR SUMMARY
printf '%s\n' "========= COMPUTE-SANITIZER" "========= Error: Debugger interface initialization failed" >"$T/refused1"
printf '%s\n' "========= Internal Sanitizer Error: The Sanitizer API returned an error (SANITIZER_ERROR_NOT_SUPPORTED)" \
  "========= Target application returned an error" >"$T/refused2"
check 'why=$(sanitizer_refused "$T/refused1") && [ "$why" = "Error: Debugger interface initialization failed" ]'
check 'why=$(sanitizer_refused "$T/refused2") && echo "$why" | grep -q "^Internal Sanitizer Error: The Sanitizer API"'
# ran: clean, or with errors (a failure, not a skip), or cut short with no sanitizer message (a timeout: failure)
printf '%s\n' "========= COMPUTE-SANITIZER" "tandem: step 1/1 loss 5.5" "========= ERROR SUMMARY: 0 errors" >"$T/clean"
printf '%s\n' "========= Invalid __global__ read of size 4 bytes" "=========     at k_rope+0x1d0" \
  "========= Error: process didn't terminate successfully" "========= ERROR SUMMARY: 3 errors" >"$T/errors"
printf '%s\n' "========= COMPUTE-SANITIZER" "tandem: step 1/1" >"$T/cut"
check '! sanitizer_refused "$T/clean" >/dev/null'
check '! sanitizer_refused "$T/errors" >/dev/null'
check '! sanitizer_refused "$T/cut" >/dev/null'
# the sanitizer test uses both (and skips, 77, rather than fails where it is missing or refused)
S=$ROOT/tests/gpu/test_gpu_sanitizer.sh
check 'grep -q "sanitizer_refused" "$S" && grep -q "find_sanitizer" "$S" && grep -q "exit 77" "$S"'
check 'sh -n "$S" && sh -n "$ROOT/tests/gpu/test_gpu_train.sh" && sh -n "$ROOT/scripts/gpu_verify.sh"'
echo "test_gpu_scripts: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
