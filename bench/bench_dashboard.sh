#!/bin/sh
# bench_dashboard.sh -- what watching a run costs, in the training's own step times: the bundled demo on 2 ranks
# (`tandem launch -n 2`) without the dashboard (off), with it and nobody watching (on), and with 50 viewers on its
# event stream plus 10 hostile connections (viewers; tests/tools/dashboard_http.py viewers).
#
# So that 1% can be resolved, the training and the viewers do not share cores: both ranks (one OpenMP thread
# each, Open MPI told to yield while it waits) run on --train-cores, and everything else this script starts --
# the viewers, the port probe, the statistics -- on --viewer-cores. The dashboard's own threads live in rank 0
# and so run on the training cores: their cost is in the step times, which is what is measured. The three modes
# run in many short rounds in rotating order (round r starts with mode r mod 3), so slow drift of the machine
# falls on all three alike. Per run: ms per step from the run's own tandem_ranks.jsonl (the "time" of each step
# line on rank 0; the first --warmup steps left out), mean and median, and the CPU seconds of the whole job (both
# ranks, mpirun and the launcher: /usr/bin/time; time taken from the job by other processes on the training core
# is not in it, time the ranks spin waiting for each other is); per round the ratio of on and viewers to
# the same round's off; over rounds the median ratio, min-max and a 90% bootstrap interval of the mean ratio.
# The run's own account is printed too (the job monitor's share of the step time on every rank, the dashboard
# threads' CPU against rank 0's, and against the job's, which is all the training core worked for it): it bounds
# the dashboard's cost independently of the wall clock's noise. The monitor (the per-step notes to rank 0) runs in
# every mode, so the ratios do not contain it; it times itself on the training thread in wall time, which on a core
# the two ranks share also counts the other rank's compute whenever the scheduler switches inside a monitor call
# (Open MPI yields in every probe for notes): a last run, each rank on a core of its own (launch's default
# binding), gives its figure without that.
# docs/performance.md, "Dashboard", has the figures and the command.
#   bench/bench_dashboard.sh [--rounds R] [--steps N] [--warmup W] [--train-cores LIST] [--viewer-cores LIST]
#   (defaults 9, 140, 20, 0, 1)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TANDEM_BIN:-$ROOT/build/tandem}
ROUNDS=9 STEPS=140 WARMUP=20 TRAIN=0 VIEW=1
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --train-cores) TRAIN=$2; shift 2 ;;
    --viewer-cores) VIEW=$2; shift 2 ;;
    *) echo "bench_dashboard: unknown option $1"; exit 1 ;;
  esac
done
[ "$WARMUP" -lt "$((STEPS - 10))" ] || { echo "bench_dashboard: --warmup $WARMUP leaves under 10 of $STEPS steps"; exit 1; }
command -v taskset >/dev/null || { echo "bench_dashboard: needs taskset (util-linux) to keep viewers off the training cores"; exit 1; }
# this shell and all it starts but the training: on the viewers' cores
taskset -cp "$VIEW" $$ >/dev/null || { echo "bench_dashboard: cannot pin to --viewer-cores $VIEW"; exit 1; }
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1} # two ranks on one core: a waiting rank yields
T=$(mktemp -d /tmp/tandem-benchdash-XXXXXX)
trap 'rm -rf "$T"' EXIT
trap 'exit 1' INT TERM
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# one MODE ROUND: one run; appends "ROUND MODE mean_ms median_ms job_cpu_s monitor% dash% viewers dash_s" to $T/runs
# (the run's figures, "-" where the mode has none)
one() {
  mode=$1 port=$(free_port) extra="" vpid="" seen=-
  [ "$mode" = off ] || extra="dashboard=127.0.0.1:$port"
  rm -rf "$T/run"
  if [ "$mode" = viewers ]; then
    /usr/bin/python3 "$ROOT/tests/tools/dashboard_http.py" viewers "$port" 50 3600 >"$T/viewers.out" 2>&1 &
    vpid=$!
  fi
  if ! taskset -c "$TRAIN" /usr/bin/time -f "%U %S" -o "$T/time" "$BIN" launch --no-bind -n 2 \
      "$ROOT/examples/demo_addition.yaml" output_dir="$T/run" max_steps="$STEPS" logging_steps=50 $extra \
      >"$T/run.log" 2>&1; then
    echo "bench_dashboard: the $mode run of round $2 failed:"; tail -5 "$T/run.log"
    [ -z "$vpid" ] || kill "$vpid" 2>/dev/null || true
    exit 1
  fi
  if [ -n "$vpid" ]; then
    wait "$vpid" || true
    seen=$(sed -n 's/.*"with_events": \([0-9]*\),.*/\1/p' "$T/viewers.out")
  fi
  mon=$(sed -n 's/.*at most \([0-9.]*\)% on any rank.*/\1/p' "$T/run.log")
  cpu=$(sed -n 's/.* of CPU, \([0-9.]*\)% of this process.*/\1/p' "$T/run.log")
  dash=$(sed -n 's/.*threads used \([0-9.]*\) s of CPU.*/\1/p' "$T/run.log")
  /usr/bin/python3 - "$T/run/tandem_ranks.jsonl" "$WARMUP" "$2 $mode" "$(awk '{ print $1 + $2 }' "$T/time")" \
    "${mon:--} ${cpu:--} ${seen:--} ${dash:--}" \
    >>"$T/runs" <<'EOF'
import json, statistics, sys
t = [json.loads(l)["time"] for l in open(sys.argv[1]) if '"kind": "step"' in l[:24]]
d = [1000 * (b - a) for a, b in zip(t, t[1:])][int(sys.argv[2]):]
print(sys.argv[3], "%.2f %.2f %.2f" % (statistics.mean(d), statistics.median(d), float(sys.argv[4])), sys.argv[5])
EOF
  tail -1 "$T/runs"
}

lscpu | grep -E "Model name|^CPU\(s\)" | sed 's/  */ /g'
echo "# $STEPS steps of the demo on 2 ranks (first $WARMUP left out), $ROUNDS rounds; training on cores $TRAIN," \
  "viewers and this script on $VIEW; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# round mode mean_ms/step median_ms/step job_cpu_s monitor_max% dash_cpu% viewers_with_events dash_cpu_s"
: >"$T/runs"
for r in $(seq 1 "$ROUNDS"); do
  case $((r % 3)) in 1) order="off on viewers" ;; 2) order="on viewers off" ;; *) order="viewers off on" ;; esac
  for mode in $order; do one "$mode" "$r"; done
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
all=0-$(($(getconf _NPROCESSORS_ONLN) - 1))
rm -rf "$T/run"
taskset -c "$all" "$BIN" launch -n 2 "$ROOT/examples/demo_addition.yaml" output_dir="$T/run" max_steps="$STEPS" \
  logging_steps=50 dashboard=127.0.0.1:0 >"$T/run.log" 2>&1 || { echo "bench_dashboard: the monitor's run failed"; exit 1; }
echo "# each rank on its own core (cores $all), dashboard on: $(sed -n 's/.*dashboard: \(the job monitor took .*\)/\1/p' "$T/run.log")"
/usr/bin/python3 - "$T/runs" <<'EOF'
import random, statistics, sys
runs = {}
for l in open(sys.argv[1]):
    f = l.split()
    runs[(f[0], f[1])] = f
rounds = sorted({k[0] for k in runs}, key=int)
random.seed(1)
for col, what in ((2, "per-step mean"), (3, "per-step median"), (4, "job's CPU s")):
    for mode in ("on", "viewers"):
        r = [float(runs[(k, mode)][col]) / float(runs[(k, "off")][col]) for k in rounds]
        boot = sorted(statistics.mean(random.choices(r, k=len(r))) for _ in range(2000))
        print("%-7s vs off, %-15s: median %.4f, min-max %.4f-%.4f, mean %.4f (90%% bootstrap %.4f-%.4f), "
              "%d rounds" % (mode, what, statistics.median(r), min(r), max(r), statistics.mean(r), boot[100],
                             boot[1899], len(r)))
for mode in ("on", "viewers"):
    cpu = [float(runs[(k, mode)][6]) for k in rounds if runs[(k, mode)][6] != "-"]
    mon = [float(runs[(k, mode)][5]) for k in rounds if runs[(k, mode)][5] != "-"]
    core = [100 * float(runs[(k, mode)][8]) / float(runs[(k, mode)][4]) for k in rounds if runs[(k, mode)][8] != "-"]
    if cpu:
        print("%-7s dashboard threads' CPU: %.3f-%.3f%% of rank 0's, %.3f-%.3f%% of the job's (all the training core "
              "ran for it); monitor, max share of a step (any rank): %.3f-%.3f%%"
              % (mode, min(cpu), max(cpu), min(core), max(core), min(mon), max(mon)))
EOF
