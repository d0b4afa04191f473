#!/bin/sh
# Help and version: every command answers --help (and -h, and `tandem help COMMAND`) with a page that lists
# every option its parser accepts (read from src/cli/cmd_*.c, so a new flag without help fails here); the
# overview lists every command and launch's flags; `tandem version` and `--version` print the version and the
# build fingerprint; the overview's lines are indented under their headings, and chat/generate/export/api give
# one of their own keys as the override example. The OpenMP wait default: with neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set, the process
# runs with GOMP_SPINCOUNT in its exec-time environment (what libgomp reads); a user's setting is left alone.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
SRC=${TANDEM_TESTS_DIR:?}/../src/cli
T=$(mktemp -d /tmp/tandem-help-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0

# the options a source file's parser compares argv against
options() { grep -o 'strcmp(argv\[i\], "-[-a-z0-9]*")' "$SRC/$1" | grep -o '"-[^"]*"' | tr -d '"' | sort -u; }

for cmd in train launch export chat generate init-model compare tokenize dashboard "bench train" "bench sgemm" "bench allreduce" "bench vl" "bench resnet"; do
  "$BIN" $cmd --help >"$T/page" 2>&1
  rc=$?
  check '[ $rc -eq 0 ] && head -n 1 "$T/page" | grep -q "^usage: tandem $cmd "'
  "$BIN" $cmd -h >"$T/page-h" 2>&1
  "$BIN" help $cmd >"$T/page-help" 2>&1
  check 'cmp -s "$T/page" "$T/page-h" && cmp -s "$T/page" "$T/page-help"'
  # with a config argument before it, too (tandem train x.yaml --help)
  "$BIN" $cmd some.yaml --help >"$T/page-late" 2>&1
  check 'cmp -s "$T/page" "$T/page-late"'
done
for pair in cmd_launch.c:launch cmd_compare.c:compare cmd_tokenize.c:tokenize cmd_chat.c:generate \
  cmd_export.c:init-model cmd_bench.c:bench cmd_bench_allreduce.c:"bench allreduce" cmd_bench_vl.c:"bench vl" cmd_bench_resnet.c:"bench resnet" cmd_topo.c:topo \
  cmd_dashboard.c:dashboard dashboard_flag.c:train dashboard_flag.c:launch; do
  file=${pair%%:*} cmd=${pair#*:}
  "$BIN" $cmd --help >"$T/page" 2>&1
  n=0
  for opt in $(options "$file"); do
    n=$((n + 1))
    check 'grep -q -- "^ *$opt\b\|, $opt\b" "$T/page" || { echo "  $cmd --help lacks $opt"; false; }'
  done
  check '[ $n -gt 0 ]'
done
# the overview: every command, and launch's flags
"$BIN" --help >"$T/top" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
"$BIN" help >"$T/top2" 2>&1
check 'cmp -s "$T/top" "$T/top2"'
for cmd in train launch export chat generate init-model compare tokenize dashboard "bench train" help version; do
  check 'grep -q "tandem $cmd" "$T/top"'
done
for opt in $(options cmd_launch.c); do
  check 'grep -q -- "$opt" "$T/top"'
done
# every line of the overview is a heading at column 0 or indented under one (issue 24, item 12: the
# continuation lines of env and topo started at column 0)
check '! grep -v "^  \|^$\|^usage: \|^commands:$\|^launch options: \|^README.md: " "$T/top"'
# commands that do not train give a key they read as their override example
for cmd in chat generate export api; do
  "$BIN" $cmd --help >"$T/page" 2>&1
  check '! grep -q "learning_rate" "$T/page"'
done
"$BIN" >/dev/null 2>"$T/none"
rc=$?
check '[ $rc -ne 0 ] && grep -q "^usage: tandem" "$T/none"'
"$BIN" help nosuch >"$T/nosuch" 2>&1
rc=$?
check '[ $rc -ne 0 ] && [ "$(grep -c . "$T/nosuch")" -eq 1 ] && grep -q "no command .nosuch." "$T/nosuch"'
# version
v1=$("$BIN" version) v2=$("$BIN" --version)
check 'echo "$v1" | grep -Eq "^tandem [0-9]+\.[0-9]+\.[0-9]+ \(build [0-9a-f]{16}\)$" && [ "$v1" = "$v2" ]'

# OpenMP wait policy: the default reaches the exec-time environment; a user's choice is kept as it is
waits_of() { # waits_of ENV... : the OpenMP variables a running tandem was exec'd with
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$@" OMP_NUM_THREADS=1 "$BIN" bench train --steps 1000 --warmup 0 >/dev/null 2>&1 &
  pid=$!
  # Wait until env has exec'd tandem and tandem has had time to re-exec itself (a fixed 2 s read env's own
  # environment on a loaded machine): first the binary, then a settled environment.
  bin=$(readlink -f "$BIN") n=0
  while [ "$(readlink -f /proc/$pid/exe 2>/dev/null)" != "$bin" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
  n=0
  while ! grep -qzE "^(OMP_WAIT_POLICY|GOMP_SPINCOUNT)=" /proc/$pid/environ 2>/dev/null && [ $n -lt 100 ]; do
    sleep 0.1; n=$((n + 1))
  done
  sleep 1
  tr '\0' '\n' </proc/$pid/environ | grep -E "^(OMP_WAIT_POLICY|GOMP_SPINCOUNT)=" | sort | tr '\n' ' '
  kill $pid 2>/dev/null
  wait $pid 2>/dev/null
}
check '[ "$(waits_of)" = "GOMP_SPINCOUNT=1000 " ]'
check '[ "$(waits_of OMP_WAIT_POLICY=ACTIVE)" = "OMP_WAIT_POLICY=ACTIVE " ]'
check '[ "$(waits_of GOMP_SPINCOUNT=300000)" = "GOMP_SPINCOUNT=300000 " ]'
echo "test_cli_help: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
