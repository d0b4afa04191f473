#!/bin/sh
# test_profile -- TANDEM_PROFILE=1 (backend_profile.h): a profiled run trains exactly as an unprofiled one (the
# same losses to the last printed digit: every call goes to the same kernel with the same arguments), prints the
# table of backend calls and matrix-product shapes at exit, and a value other than 0 or 1 is one line naming it.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=$TANDEM_TESTS_DIR/../examples
T=$(mktemp -d /tmp/tandem-profile-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0

"$BIN" train "$EX/demo_addition.yaml" max_steps=6 logging_steps=1 output_dir="$T/plain" >"$T/plain.log" 2>&1
rc_plain=$?
check '[ $rc_plain -eq 0 ]'
TANDEM_PROFILE=1 "$BIN" train "$EX/demo_addition.yaml" max_steps=6 logging_steps=1 output_dir="$T/prof" \
  >"$T/prof.log" 2>&1
rc_prof=$?
check '[ $rc_prof -eq 0 ]'
grep -o "loss [0-9.]*" "$T/plain.log" >"$T/plain.loss"
grep -o "loss [0-9.]*" "$T/prof.log" >"$T/prof.loss"
check '[ "$(wc -l <"$T/plain.loss")" -ge 6 ] && cmp -s "$T/plain.loss" "$T/prof.loss"'
check 'grep -q "^tandem: profile (TANDEM_PROFILE=1; cpu backend" "$T/prof.log"'
check 'grep -q "^  matmul " "$T/prof.log" && grep -q "^  adamw " "$T/prof.log" && grep -q "matrix products by shape" "$T/prof.log"'
check '! grep -q "tandem: profile" "$T/plain.log"'
TANDEM_PROFILE=yes "$BIN" train "$EX/demo_addition.yaml" max_steps=1 output_dir="$T/bad" >"$T/bad.log" 2>&1
rc_bad=$?
check '[ $rc_bad -ne 0 ] && grep -q "TANDEM_PROFILE=.yes.: expected 1" "$T/bad.log" && [ "$(grep -c . "$T/bad.log")" -le 2 ]'
[ "$fails" -eq 0 ] || { echo "== profiled run"; tail -30 "$T/prof.log"; }
echo "test_profile: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
