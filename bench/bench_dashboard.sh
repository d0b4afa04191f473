#!/bin/sh
# bench_dashboard.sh -- what watching a run costs: the bundled demo on 2 ranks (`tandem launch -n 2`) without the
# dashboard, with it and nobody watching, and with 50 viewers on its event stream plus 10 hostile connections
# (tests/tools/dashboard_http.py viewers), in rounds that alternate the three, so that each round's ratios compare
# runs made minutes apart on the same machine. Per run: ms per step (the run's "trained N steps in S s" line) and the
# run's own account (the job monitor's share of the step time on every rank, the dashboard threads' share of rank
# 0's CPU). docs/performance.md, "Dashboard", has the figures and the command.
#   bench/bench_dashboard.sh [--rounds R] [--steps N]     (defaults 3, 600)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TANDEM_BIN:-$ROOT/build/tandem}
ROUNDS=3 STEPS=600
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    *) echo "bench_dashboard: unknown option $1"; exit 1 ;;
  esac
done
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=$(mktemp -d /tmp/tandem-benchdash-XXXXXX)
trap 'rm -rf "$T"' EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# one MODE: prints "MODE ms_per_step monitor% dashcpu%"
one() {
  mode=$1 port=$(free_port) extra=""
  [ "$mode" = off ] || extra="dashboard=127.0.0.1:$port"
  vpid=""
  if [ "$mode" = viewers ]; then
    /usr/bin/python3 "$ROOT/tests/tools/dashboard_http.py" viewers "$port" 50 3600 >"$T/viewers.out" 2>&1 &
    vpid=$!
  fi
  "$BIN" launch -n 2 "$ROOT/examples/demo_addition.yaml" output_dir="$T/run" max_steps="$STEPS" logging_steps=50 \
    $extra >"$T/run.log" 2>&1
  [ -z "$vpid" ] || wait "$vpid"
  s=$(sed -n 's/.*trained \([0-9]*\) steps in \([0-9.]*\) s.*/\2/p' "$T/run.log")
  mon=$(sed -n 's/.*at most \([0-9.]*\)% on any rank.*/\1/p' "$T/run.log")
  cpu=$(sed -n 's/.* of CPU, \([0-9.]*\)% of this process.*/\1/p' "$T/run.log")
  echo "$mode $(awk -v s="$s" -v n="$STEPS" 'BEGIN { printf "%.2f", 1000 * s / n }') ${mon:--} ${cpu:--}"
}

lscpu | grep -E "Model name|^CPU\(s\)" | sed 's/  */ /g'
echo "# $STEPS steps of the demo on 2 ranks, $ROUNDS rounds; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-6s %-8s %10s %8s %12s %12s\n" round mode ms/step vs_off monitor_max% dash_cpu%
for r in $(seq 1 "$ROUNDS"); do
  base=""
  for mode in off on viewers; do
    set -- $(one "$mode")
    [ "$mode" = off ] && base=$2
    printf "%-6s %-8s %10s %8s %12s %12s\n" "$r" "$1" "$2" "$(awk -v a="$2" -v b="$base" 'BEGIN { printf "%.3f", a / b }')" "$3" "$4"
  done
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
