#!/bin/sh
# Faults are named, fast, and lose nothing (docs/reliability.md lists what each part measures):
#  - a rank stopped with SIGSTOP: the other reports it by rank and host within peer_timeout (+ the few
#    seconds its probe waits for an answer) and the job exits non-zero, no hang;
#  - two simulated machines whose link is taken down mid-run: a named error within the timeout;
#  - a checkpoint write into a full filesystem (a 10 MB tmpfs): one error line, the earlier checkpoint
#    stays complete and verified, no partial folder left;
#  - a NaN injected into a gradient: that step is skipped and logged, training goes on; N consecutive ones
#    stop the run (max_bad_steps).
# Root is needed for the tmpfs and the namespaces: without it the test FAILS with the reason.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
EX=$TD/../examples
KIT=$TD/../scripts/netns
need_root test_faults "tmpfs mount, network namespaces"
need_mpirun test_faults
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 TANDEM_NETNS=tnflt$$
T=$(mktemp -d /tmp/tandem-faults-XXXXXX)
cleanup() {
  pkill -9 -f "output_dir=$T/" 2>/dev/null
  umount "$T/small" 2>/dev/null
  "$KIT/netns.sh" down 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
fails=0 checks=0
LONG="max_steps=1000000 logging_steps=1000000 peer_timeout=5"

# 1. SIGSTOP
"$BIN" launch -n 2 --no-bind "$EX/demo_addition.yaml" $LONG output_dir="$T/stop" >"$T/stop.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q "data parallel" "$T/stop.log" && break; sleep 0.1; done
sleep 1
victim=$(pgrep -f "tandem train .*output_dir=$T/stop" | tail -1)
t0=$(date +%s)
kill -STOP "$victim"
wait_at_most 60 $pid
took=$(($(date +%s) - t0))
echo "SIGSTOP: $(grep 'tandem: error' "$T/stop.log") [exit $rc after ${took} s]"
check '[ $rc -ne 0 ] && [ $took -le 20 ]'
check '[ "$(grep -c "tandem: error:" "$T/stop.log")" -eq 1 ] && grep -q "rank 1 on host $(hostname) does not answer" "$T/stop.log"'

# 2. link down between two simulated machines
if why=$("$KIT/netns.sh" check 2>&1) && "$KIT/netns.sh" up --rate 0 >/dev/null 2>&1; then
  printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$T/hosts"
  "$KIT/netns.sh" exec 0 env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_plm_rsh_agent="$KIT/rsh-agent.sh" OMPI_MCA_btl=tcp,self,vader OMPI_MCA_btl_tcp_if_include=10.77.0.0/24 \
    OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 TANDEM_NETNS="$TANDEM_NETNS" \
    "$BIN" launch --hostfile "$T/hosts" "$EX/demo_addition.yaml" $LONG output_dir="$T/link" >"$T/link.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do grep -q "data parallel" "$T/link.log" && break; sleep 0.1; done
  sleep 1
  t0=$(date +%s)
  ip -n "${TANDEM_NETNS}1" link set "$(ip -n "${TANDEM_NETNS}1" -o link show | awk -F': ' '$2 ~ /v1/ {print $2}' | cut -d@ -f1)" down
  wait_at_most 90 $pid
  took=$(($(date +%s) - t0))
  echo "link down: $(grep 'tandem: error' "$T/link.log" | head -1) [exit $rc after ${took} s]"
  check '[ $rc -ne 0 ] && [ $took -le 30 ]'
  check 'grep -q "tandem: error: rank . on host tnflt[0-9]*-node. does not answer" "$T/link.log"'
  "$KIT/netns.sh" down
else
  echo "test_faults: FAIL: cannot simulate two machines: $why"
  fails=$((fails + 1))
fi

# 3. disk full during a checkpoint: a 10 MB tmpfs holds one checkpoint (7 MB) but not two
mkdir -p "$T/small"
mount -t tmpfs -o size=10m tmpfs "$T/small" || { echo "test_faults: FAIL: cannot mount a tmpfs"; exit 1; }
"$BIN" train "$EX/demo_addition.yaml" max_steps=20 save_steps=5 overwrite_output_dir=false output_dir="$T/small/run" \
  >"$T/full.log" 2>&1
rc=$?
echo "disk full: $(grep 'tandem: error' "$T/full.log")"
check '[ $rc -ne 0 ] && [ "$(grep -c "tandem: error:" "$T/full.log")" -eq 1 ] && grep -q "No space left on device" "$T/full.log"'
check '[ -d "$T/small/run/checkpoint-5" ] && [ ! -e "$T/small/run/checkpoint-10.partial" ]'
cp -r "$T/small/run/checkpoint-5" "$T/ck5"
check '"$BIN" train "$EX/demo_addition.yaml" max_steps=20 save_steps=5 overwrite_output_dir=false output_dir="$T/ck5-resume" resume_from_checkpoint="$T/ck5" >"$T/full2.log" 2>&1'
check 'grep -q "resuming from .*ck5 (step 5 of 20)" "$T/full2.log"'

# 4. NaN in a gradient (fault injection on rank 0 only: the all-reduce spreads it, every rank skips)
TANDEM_FAULT_NAN_STEPS=3 "$BIN" launch -n 2 --no-bind "$EX/demo_addition.yaml" max_steps=6 logging_steps=2 \
  output_dir="$T/nan" >"$T/nan.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "warning: step 3: non-finite .* step skipped" "$T/nan.log" && grep -q "trained 6 steps" "$T/nan.log"'
TANDEM_FAULT_NAN_STEPS=2-100 "$BIN" train "$EX/demo_addition.yaml" max_steps=50 max_bad_steps=4 output_dir="$T/nan2" \
  >"$T/nan2.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && grep -q "tandem: error: 4 consecutive steps had a non-finite" "$T/nan2.log"'
[ "$fails" -eq 0 ] || tail -n 5 "$T"/*.log
echo "test_faults: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
