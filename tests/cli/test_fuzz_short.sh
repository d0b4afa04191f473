#!/bin/sh
# Short fuzzing run of every parser (about a minute in all, after the build): scripts/fuzz.sh builds the
# libFuzzer targets of fuzz/ with clang (ASan + UBSan) into build-fuzz/ and runs each for a few
# seconds, seeds first (fuzz/corpus/ holds the reproducers of every bug fixed so far, so this is also
# their regression test). Any crash, leak, UB or broken error contract fails the test and prints the
# reproducer's path. Skipped (77) without clang, unless CI=true. Long runs: make fuzz.
set -u
ROOT=$(cd "${TANDEM_TESTS_DIR:?}/.." && pwd)
if ! command -v clang >/dev/null 2>&1; then
    echo "test_fuzz_short: clang not found (scripts/install-deps.sh installs it)"
    [ "${CI:-}" = true ] && exit 1
    exit 77
fi
n=$(ls "$ROOT"/fuzz/fuzz_*.c | wc -l)
[ "$n" -gt 0 ] || { echo "test_fuzz_short: no fuzz targets in $ROOT/fuzz"; exit 1; }
per=$(( (60 + n - 1) / n ))   # about 60 s of fuzzing in all
out=$("$ROOT/scripts/fuzz.sh" --seconds-per-target "$per" 2>&1)
rc=$?
echo "$out"
ran=$(echo "$out" | grep -c ': ok$')
echo "test_fuzz_short: $n targets, $ran ran clean for $per s each"
[ "$rc" -eq 0 ] && [ "$ran" -eq "$n" ]
