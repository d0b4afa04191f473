#!/bin/sh
# Elastic restart on the machines that remain: two simulated machines (network namespaces, one rank each)
# train under `tandem launch --hostfile --max-restarts 1 --drop-dead-hosts`; once checkpoint-80 is complete,
# machine 1 dies (every process in its namespace killed, then the namespace deleted, so the rsh agent can
# no longer reach it). The launcher must leave that host out, say so, and continue from the newest
# complete checkpoint on the 1 rank left with gradient accumulation 2, keeping the global batch of 2 x 32.
#  - bit-identical to `tandem train` resumed from the checkpoint the restart used, as 1 x 32 x 2: the
#    restart did exactly what it announced;
#  - equal within the data-parallel split bound (rel L2 1e-6, see test_dp_split.sh) to an uninterrupted
#    2-rank run: the global batch was kept (a global batch of 32 instead of 64 is far outside it, checked).
#    Learning rate 1e-4 as in test_dp_split: at the demo's 3e-3 the splits' fp32 rounding differences are
#    amplified chaotically over the 120 steps after the restart (measured: rel L2 0.4, as far as a halved batch).
# TANDEM_TEST_KEYS (CTest's test_drop_hosts_zero3 sets zero_stage=3) adds keys to every run: under ZeRO the
# checkpoint holds one optimizer shard per rank and the restart on fewer ranks re-shards it.
# Root is needed for the namespaces: without it the test FAILS with the reason.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
EX=$TD/../examples
KIT=$TD/../scripts/netns
need_root test_drop_hosts "network namespaces"
need_mpirun test_drop_hosts
need_netns test_drop_hosts "$KIT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 TANDEM_NETNS=tndrop$$
T=$(mktemp -d /tmp/tandem-drop-XXXXXX)
cleanup() {
  pkill -9 -f "output_dir=$T/" 2>/dev/null
  "$KIT/netns.sh" down 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
fails=0 checks=0
ARGS="max_steps=200 save_steps=40 logging_steps=40 per_device_train_batch_size=32 overwrite_output_dir=false learning_rate=1e-4 warmup_ratio=0
      peer_timeout=5 ${TANDEM_TEST_KEYS:-}"

"$KIT/netns.sh" up --rate 0 >/dev/null || { echo "test_drop_hosts: FAIL: netns.sh up failed"; exit 1; }
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$T/hosts"
"$KIT/netns.sh" exec 0 env OMPI_MCA_plm_rsh_agent="$KIT/rsh-agent.sh" OMPI_MCA_btl=tcp,self,vader \
  "$BIN" launch --hostfile "$T/hosts" --max-restarts 1 --drop-dead-hosts "$EX/demo_addition.yaml" $ARGS \
  output_dir="$T/run" >"$T/run.log" 2>&1 &
launcher=$!
for _ in $(seq 1 900); do [ -f "$T/run/checkpoint-80/tandem_manifest.json" ] && break; sleep 0.1; done
check '[ -f "$T/run/checkpoint-80/tandem_manifest.json" ]'
# machine 1 dies: its processes go, then the machine itself (the namespace and its end of the link)
t0=$(date +%s)
ip netns pids "${TANDEM_NETNS}1" | xargs -r kill -9
ip netns del "${TANDEM_NETNS}1"
wait_at_most 180 $launcher
took=$(($(date +%s) - t0))
echo "machine 1 removed after checkpoint-80: launcher exit $rc after ${took} s"
grep -E "leaving out|continuing on|restart 1 of 1|resuming from|trained [0-9]+ steps" "$T/run.log"
check '[ $rc -eq 0 ]'
check 'grep -q "tandem launch: leaving out host 10.77.0.2: " "$T/run.log"'
check 'grep -q "tandem launch: continuing on 1 rank(s): 1 x 32 x 2 keeps the global batch of 64" "$T/run.log"'
check 'grep -q "resuming from .*checkpoint-[0-9]* (step [0-9]* of 200)" "$T/run.log"'
check '[ -s "$T/run/model.safetensors" ] && grep -q "\"global_step\": 200" "$T/run/trainer_state.json"'
case "${TANDEM_TEST_KEYS:-}" in *zero_stage=3*) # sharded before the drop (2 optimizer shards), 1 rank's state after it
  check '[ -n "$(ls "$T"/run/checkpoint-80/optimizer-*-of-00002.safetensors 2>/dev/null)" ] && [ -f "$T/run/checkpoint-120/optimizer.safetensors" ]' ;;
esac

# the restart, redone by hand: 1 process, micro-batch 32, accumulation 2, from the checkpoint it used
ck=$(sed -n 's/.*resuming from \(.*checkpoint-[0-9]*\) (step.*/\1/p' "$T/run.log" | tail -1)
check '[ -n "$ck" ] && [ -d "$ck" ]'
"$BIN" train "$EX/demo_addition.yaml" $ARGS gradient_accumulation_steps=2 resume_from_checkpoint="$ck" \
  output_dir="$T/redo" >"$T/redo.log" 2>&1
check 'cmp -s "$T/run/model.safetensors" "$T/redo/model.safetensors"'

# an uninterrupted 2-rank run of the same config: same global batch, so equal within the split bound
"$BIN" launch -n 2 --no-bind "$EX/demo_addition.yaml" $ARGS output_dir="$T/whole" >"$T/whole.log" 2>&1
"$BIN" launch -n 1 --no-bind "$EX/demo_addition.yaml" $ARGS output_dir="$T/half" >"$T/half.log" 2>&1
d=$(worst "$T/run" "$T/whole") h=$(worst "$T/half" "$T/whole")
echo "after the drop vs uninterrupted 2 ranks: worst rel L2 $d (global batch 32 instead of 64: $h)"
check 'within $d 1e-6'
check 'within 1e-4 $h'
[ "$fails" -eq 0 ] || tail -n 20 "$T"/*.log
echo "test_drop_hosts: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
