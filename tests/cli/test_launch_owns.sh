#!/bin/sh
# One job per output_dir, and a launcher that owns its ranks (issue 15, items 1 and 2):
#  - while `tandem launch` runs, a second `tandem train` or `tandem launch` into the same output_dir stops at
#    once with one line naming the holder (pid, host); a job killed with -9 leaves no stale lock;
#  - Ctrl-C (SIGINT) on `tandem launch --max-restarts 2`: exit 130, reported as an interrupt (no restart, no
#    "restarts used up"), and when the launcher returns no process of the job is left and output_dir no
#    longer changes;
#  - kill -9 of the launcher: mpirun (parent-death signal) and the ranks end within seconds;
#  - mpirun stopped (SIGSTOP), then SIGTERM to the launcher: it returns within its bounded escalation
#    (exit 143) and leaves no process; mpirun stopped, then kill -9 of the launcher: the ranks see their
#    launcher gone and stop themselves;
#  - plain `mpirun -n 2 tandem train`, mpirun killed with -9: the ranks stop themselves.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
need_mpirun test_launch_owns
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tandem-owns-XXXXXX)
trap 'pkill -9 -f "output_dir=$T/" 2>/dev/null; rm -rf "$T"' EXIT
fails=0 checks=0
LONG="max_steps=1000000 logging_steps=1000000 save_steps=200 overwrite_output_dir=false"
HOST=$(hostname)

# procs NAME: the processes of job NAME still alive (launcher, mpirun, ranks: output_dir is their last argument)
procs() { pgrep -f "output_dir=$T/$1\$" | while read -r p; do [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] && echo "$p"; done; }
ranks() { pgrep -f "tandem train .*output_dir=$T/$1\$" | while read -r p; do ps -o args= -p "$p" | grep -q '^mpirun' || echo "$p"; done; }
# launch NAME [options]: tandem launch -n 2 in the background, returned once it trains; sets lp, mp
launch() {
  name=$1; shift
  "$BIN" launch -n 2 --no-bind "$@" "$EX/demo_addition.yaml" $LONG output_dir="$T/$name" >"$T/$name.log" 2>&1 &
  lp=$!
  for _ in $(seq 1 300); do grep -q "data parallel" "$T/$name.log" && break; sleep 0.1; done
  sleep 1
  mp=$(ps -o pid= --ppid "$lp" | tr -d ' ')
}
# gone_within SECONDS NAME [ranks]: true once no process (or no rank) of NAME is left, checked every 0.1 s
gone_within() {
  for _ in $(seq 1 $(($1 * 10))); do [ -z "$(${3:-procs} "$2")" ] && return 0; sleep 0.1; done
  return 1
}
snapshot() { find "$T/$1" -exec stat -c '%n %s %Y' {} + 2>/dev/null | sort; }

# 1. the lock: a second job into the same output_dir stops at once, naming the launcher that holds it
launch one --max-restarts 2
check '[ -n "$mp" ] && [ -n "$(ranks one)" ]'
"$BIN" train "$EX/demo_addition.yaml" max_steps=5 output_dir="$T/one" >"$T/second.log" 2>&1
rc=$?
cat "$T/second.log" | grep "tandem: error"
check '[ $rc -eq 1 ] && [ "$(grep -c "tandem: error:" "$T/second.log")" -eq 1 ]'
check 'grep -q "output_dir $T/one is in use by another tandem job (pid $lp on host $HOST)" "$T/second.log"'
"$BIN" launch -n 1 "$EX/demo_addition.yaml" max_steps=5 output_dir="$T/one" >"$T/second-launch.log" 2>&1
rc=$?
check '[ $rc -eq 1 ] && grep -q "is in use by another tandem job (pid $lp on host $HOST)" "$T/second-launch.log"'

# 2. Ctrl-C: exit 130 as an interrupt; nothing of the job left once the launcher returns; output_dir still
kill -INT "$lp"
wait_at_most 30 "$lp"
left=$(procs one)
before=$(snapshot one)
echo "SIGINT: exit $rc, left: '${left}'; $(grep "interrupted" "$T/one.log")"
check '[ $rc -eq 130 ] && grep -q "tandem launch: interrupted (SIGINT)" "$T/one.log"'
check '! grep -q "restart" "$T/one.log" && [ -z "$left" ]'
sleep 2
check '[ "$before" = "$(snapshot one)" ]'
# ... and the lock went with it: a new job takes the folder (and resumes the checkpoint there, if any)
"$BIN" train "$EX/demo_addition.yaml" max_steps=5 overwrite_output_dir=true output_dir="$T/one" >"$T/after.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]'

# 3. kill -9 of the launcher: mpirun and the ranks end within seconds
launch nine
kill -9 "$lp"
t0=$(date +%s)
gone_within 10 nine
rc=$?
echo "kill -9 of the launcher: job gone after $(($(date +%s) - t0)) s"
check '[ $rc -eq 0 ]'

# 4. mpirun stopped + SIGTERM to the launcher: bounded, nothing left
launch stopped
kill -STOP "$mp"
t0=$(date +%s)
kill -TERM "$lp"
wait_at_most 40 "$lp"
took=$(($(date +%s) - t0))
echo "mpirun stopped, SIGTERM to the launcher: exit $rc after $took s, left: '$(procs stopped)'"
check '[ $rc -eq 143 ] && [ $took -le 20 ] && [ -z "$(procs stopped)" ]'

# 5. mpirun stopped + kill -9 of the launcher: the ranks stop themselves (mpirun stays stopped: ours to kill)
launch orphan
kill -STOP "$mp"
kill -9 "$lp"
t0=$(date +%s)
gone_within 10 orphan ranks
rc=$?
echo "mpirun stopped, launcher killed: ranks gone after $(($(date +%s) - t0)) s"
check '[ $rc -eq 0 ]'
kill -9 "$mp" 2>/dev/null

# 6. plain mpirun killed with -9: the ranks stop themselves
mpirun -n 2 "$BIN" train "$EX/demo_addition.yaml" $LONG output_dir="$T/plain" >"$T/plain.log" 2>&1 &
mp=$!
for _ in $(seq 1 300); do grep -q "data parallel" "$T/plain.log" && break; sleep 0.1; done
sleep 1
check '[ -n "$(ranks plain)" ]'
kill -9 "$mp"
t0=$(date +%s)
gone_within 10 plain ranks
rc=$?
echo "plain mpirun killed: ranks gone after $(($(date +%s) - t0)) s"
check '[ $rc -eq 0 ]'

# 7. a job killed with -9 leaves no stale lock
"$BIN" train "$EX/demo_addition.yaml" $LONG output_dir="$T/solo" >"$T/solo.log" 2>&1 &
sp=$!
for _ in $(seq 1 300); do grep -q "steps of" "$T/solo.log" && break; sleep 0.1; done
"$BIN" train "$EX/demo_addition.yaml" max_steps=5 output_dir="$T/solo" >"$T/solo2.log" 2>&1
rc=$?
check '[ $rc -eq 1 ] && grep -q "in use by another tandem job (pid $sp on host $HOST)" "$T/solo2.log"'
kill -9 "$sp"
wait "$sp" 2>/dev/null
"$BIN" train "$EX/demo_addition.yaml" max_steps=5 overwrite_output_dir=true output_dir="$T/solo" >"$T/solo3.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "saved model" "$T/solo3.log"'

[ "$fails" -eq 0 ] || tail -n 5 "$T"/*.log
echo "test_launch_owns: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
