#!/bin/sh
# Out of memory says out of memory, naming what was being loaded (issue 24, item 6): `tandem tokenize` of the real
# Qwen3 tokenizer.json (11 MB of JSON) under `ulimit -v` limits from the least the process starts with up to the
# first that loads it, 8 MB apart. Every run either prints the ids or ends with exactly one error line that says
# "out of memory" and names tokenizer.json, never "invalid JSON" (the file is valid: cJSON returns NULL for both,
# and tandem once reported the byte where the parser stopped). The sweep must reach the parser's failure, not only
# the reading of the file, or it proves nothing.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
need_shared test_oom_messages
TOK=$SHARED/data/tokenizers/qwen3/tokenizer.json
T=$(mktemp -d /tmp/tandem-oom-XXXXXX)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
fails=0 checks=0

# tok KB FILE: tandem tokenize FILE under ulimit -v KB (OpenBLAS spins in its start-up below some limit: the
# timeout ends that); output in $T/out, status in rc
tok() { (ulimit -v "$1" && exec timeout "${3:-5}" "$BIN" tokenize "$2" --text hello) >"$T/out" 2>&1; rc=$?; }

# the least limit the process starts under: a small tokenizer loads (binary search, 1 MB apart)
lo=32768 hi=4194304
tok $hi "$TD/fixtures/lf_data/tok_q/tokenizer.json"
check '[ $rc -eq 0 ]'
while [ $((hi - lo)) -gt 1024 ]; do
  mid=$(((lo + hi) / 2))
  tok $mid "$TD/fixtures/lf_data/tok_q/tokenizer.json"
  if [ $rc -eq 0 ]; then hi=$mid; else lo=$mid; fi
done
echo "test_oom_messages: a small tokenizer loads from ulimit -v ${hi} KB"

kb=$hi parse_oom=0 loaded=0 runs=0
while [ $kb -le $((hi + 1048576)) ] && [ $loaded -eq 0 ]; do
  tok $kb "$TOK" 30
  runs=$((runs + 1))
  if [ $rc -eq 0 ]; then
    loaded=1
    echo "test_oom_messages: loaded at ${kb} KB"
  else
    line=$(grep 'tandem: error:' "$T/out")
    before=$fails
    check '[ $rc -eq 1 ] && [ "$(grep -c "tandem: error:" "$T/out")" -eq 1 ] && echo "$line" | grep -q "out of memory" &&
      echo "$line" | grep -q "tokenizer.json" && ! grep -q "invalid JSON" "$T/out"'
    [ $fails -eq $before ] || echo "  at ${kb} KB: exit $rc: $(tail -2 "$T/out")"
    echo "$line" | grep -q "while parsing" && parse_oom=$((parse_oom + 1))
  fi
  kb=$((kb + 8192))
done
echo "test_oom_messages: $runs runs, $parse_oom out of memory in the JSON parser"
check '[ $loaded -eq 1 ] && [ $parse_oom -ge 2 ]'
echo "test_oom_messages: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
