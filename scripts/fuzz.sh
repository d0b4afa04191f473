#!/bin/sh
# Builds tandem's libFuzzer targets (fuzz/fuzz_*.c) with clang into build-fuzz/ and runs each one for a
# fixed time on its corpus. Prints one line per target (executions, corpus size, result) and exits 1
# when any target crashed, leaked, hit UB or broke its error contract; the reproducer's path is printed.
#
#   scripts/fuzz.sh [--seconds-per-target N] [--build-only] [TARGET...]    (default: 60 s, every target)
#
# Targets are named as the files: fuzz_train_config, fuzz_tokenizer, ... Corpora: fuzz/corpus/TARGET/
# holds the committed seeds (read only); new inputs libFuzzer finds go to build-fuzz/corpus/TARGET/ and
# are reused by the next run. Crash reproducers go to build-fuzz/crashes/. Replay one with
#   build-fuzz/TARGET build-fuzz/crashes/TARGET-crash-...
# Environment: FUZZ_BUILD (build folder, default build-fuzz), FUZZ_JOBS (compile jobs, default 2),
# FUZZ_ARGS (extra libFuzzer flags, e.g. -seed=1).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${FUZZ_BUILD:-$ROOT/build-fuzz}
JOBS=${FUZZ_JOBS:-2}
SECONDS_PER=60
BUILD_ONLY=0
TARGETS=""
while [ $# -gt 0 ]; do
    case $1 in
    --seconds-per-target) SECONDS_PER=${2:?--seconds-per-target needs a number}; shift 2 ;;
    --seconds-per-target=*) SECONDS_PER=${1#*=}; shift ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) TARGETS="$TARGETS ${1%.c}"; shift ;;
    esac
done
case $SECONDS_PER in ''|*[!0-9]*) echo "fuzz.sh: --seconds-per-target wants a whole number, got '$SECONDS_PER'" >&2; exit 2 ;; esac

command -v clang >/dev/null || { echo "fuzz.sh: clang not found (scripts/install-deps.sh installs it)" >&2; exit 2; }
mkdir -p "$BUILD"
if ! { cmake -S "$ROOT/fuzz" -B "$BUILD" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$BUILD/configure.log" 2>&1 &&
       cmake --build "$BUILD" -j "$JOBS" >"$BUILD/build.log" 2>&1; }; then
    echo "fuzz.sh: the fuzz build failed; last lines of $BUILD/configure.log and build.log:" >&2
    tail -n 20 "$BUILD/configure.log" "$BUILD/build.log" >&2
    exit 1
fi
if [ -z "$TARGETS" ]; then
    for f in "$ROOT"/fuzz/fuzz_*.c; do TARGETS="$TARGETS $(basename "$f" .c)"; done
fi
for t in $TARGETS; do
    [ -x "$BUILD/$t" ] || { echo "fuzz.sh: no target '$t' (have: $(cd "$ROOT/fuzz" && ls fuzz_*.c | sed 's/\.c$//' | tr '\n' ' '))" >&2; exit 2; }
done
[ "$BUILD_ONLY" -eq 1 ] && { echo "fuzz.sh: built$TARGETS in $BUILD"; exit 0; }

mkdir -p "$BUILD/crashes" "$BUILD/logs"
# The parsers' scratch files (tmpfs when there is one) live under one folder that is removed at the end.
SCRATCH=$(mktemp -d "$( [ -d /dev/shm ] && echo /dev/shm || echo /tmp )/tandem-fuzz-XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT INT TERM
# Leaks are findings (detect_leaks); only third-party leaks may be suppressed, in fuzz/lsan.supp.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:symbolize=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$ROOT/fuzz/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export OMP_NUM_THREADS=1 TANDEM_FUZZ_TMP="$SCRATCH"

failed=0
for t in $TARGETS; do
    work="$BUILD/corpus/$t"
    seeds="$ROOT/fuzz/corpus/$t"
    mkdir -p "$work" "$seeds"
    dict=""
    [ -f "$ROOT/fuzz/dict/$t.dict" ] && dict="-dict=$ROOT/fuzz/dict/$t.dict"
    log="$BUILD/logs/$t.log"
    # -timeout: one input taking 10 s is a hang; -max_len bounds inputs (the seeds are a few KB).
    # shellcheck disable=SC2086
    if "$BUILD/$t" -max_total_time="$SECONDS_PER" -timeout=10 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
        -artifact_prefix="$BUILD/crashes/$t-" $dict ${FUZZ_ARGS:-} "$work" "$seeds" >"$log" 2>&1; then
        rc=0
    else
        rc=$?
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    corpus=$(ls "$work" | wc -l)
    nseeds=$(ls "$seeds" | wc -l)
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
    cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    corp=$(echo "$last" | sed -n 's/.*corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p')
    if [ "$rc" -eq 0 ]; then
        echo "$t: ${execs:-?} executions in ${SECONDS_PER} s, corpus ${corp:-?} (inputs/bytes; $nseeds seeds, $corpus in the work corpus), coverage ${cov:-?} edges: ok"
    else
        failed=1
        repro=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        echo "$t: FAILED (exit $rc) after ${execs:-?} executions; reproducer: ${repro:-none written}; log: $log"
        grep -E 'ERROR: |runtime error:|fuzz: |SUMMARY:' "$log" | head -n 5 | sed 's/^/    /'
    fi
done
exit "$failed"
