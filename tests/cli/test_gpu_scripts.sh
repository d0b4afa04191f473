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
# racecheck ends with its own summary (a run, not a refusal); races only in cuBLASLt's kernels are told apart from
# one in a tandem kernel, a memcheck finding in a library kernel, and a racecheck cut short
printf '%s\n' "========= COMPUTE-SANITIZER" \
  "========= Error: Race reported between Read access at nvjet_sm90_tss_64x24_64x16_1x2_h_bz_splitK_NNT+0xb20" \
  "=========     and Write access at nvjet_sm90_tss_64x24_64x16_1x2_h_bz_splitK_NNT+0xc40 [128 hazards]" \
  "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)" >"$T/race_lib"
sed 's/and Write access at nvjet_sm90_tss_64x24_64x16_1x2_h_bz_splitK_NNT+0xc40/and Write access at k_att_fwd(float const*, int)+0x90/' \
  "$T/race_lib" >"$T/race_ours"
grep -v SUMMARY "$T/race_lib" >"$T/race_cut"
printf '%s\n' "========= Invalid __global__ read of size 16 bytes" "=========     at nvjet_sm90_tss_64x24+0x1d0" \
  "========= ERROR SUMMARY: 1 error" >"$T/mem_lib"
printf '%s\n' "========= COMPUTE-SANITIZER" "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" >"$T/race_clean"
check '! sanitizer_refused "$T/race_lib" >/dev/null && ! sanitizer_refused "$T/race_ours" >/dev/null'
check '! sanitizer_refused "$T/race_clean" >/dev/null && ! sanitizer_refused "$T/race_cut" >/dev/null'
check 'libs=$(sanitizer_foreign_races "$T/race_lib") && [ "$libs" = "nvjet_sm90_tss_64x24_64x16_1x2_h_bz_splitK_NNT" ]'
check '! sanitizer_foreign_races "$T/race_ours" >/dev/null'
check '! sanitizer_foreign_races "$T/race_cut" >/dev/null && ! sanitizer_foreign_races "$T/mem_lib" >/dev/null'
check '! sanitizer_foreign_races "$T/race_clean" >/dev/null && ! sanitizer_foreign_races "$T/errors" >/dev/null'
check '[ "$(sanitizer_kernels "$T/race_ours" | tr "\n" " ")" = "k_att_fwd nvjet_sm90_tss_64x24_64x16_1x2_h_bz_splitK_NNT " ]'
# the sanitizer test uses both (and skips, 77, rather than fails where it is missing or refused)
S=$ROOT/tests/gpu/test_gpu_sanitizer.sh
check 'grep -q "sanitizer_refused" "$S" && grep -q "find_sanitizer" "$S" && grep -q "exit 77" "$S"'
check 'grep -q "sanitizer_foreign_races" "$S"'
check 'sh -n "$S" && sh -n "$ROOT/tests/gpu/test_gpu_train.sh" && sh -n "$ROOT/scripts/gpu_verify.sh"'
echo "test_gpu_scripts: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
