#!/bin/sh
# The per-node launch (torchrun style, src/launch/rendezvous.h) on two simulated machines (network
# namespaces, scripts/netns/netns.sh), 2 ranks each, no ssh and no hostfile: node 0 types
# `FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=0 MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 NPROC_PER_NODE=2 tandem train`,
# node 1 the same through `tandem launch`. Checked:
#  - the job ends with parameters bit-identical to the hostfile launch of the same job (same 4 ranks, same
#    hierarchical reduction), and the ranks see 4 ranks on 2 machines;
#  - a rank killed on node 1 after a checkpoint: with --max-restarts 1 on both nodes, both agents restart
#    together from node 0's newest complete checkpoint and the final model is bit-identical again;
#  - node 0 alone names the missing NODE_RANK within TANDEM_RDZV_TIMEOUT; node 1 alone names node 0;
#  - a node running another build (a copy of the binary with one byte appended) is refused with one line,
#    and node 0 names the refusal when it gives up; a different job secret is refused the same way;
#  - a node started with another config is stopped by the ranks' fingerprint check, as under a hostfile.
# The namespaces are removed afterwards. Where they cannot be created the test FAILS with the reason.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
KIT=$TANDEM_TESTS_DIR/../scripts/netns
export TANDEM_NETNS=tnpn$$
need_mpirun test_dp_pernode
need_netns test_dp_pernode "$KIT"
T=$(mktemp -d /tmp/tandem-pernode-XXXXXX)
trap '"$KIT/netns.sh" down; rm -rf "$T"' EXIT
"$KIT/netns.sh" up --rate 0 || { echo "test_dp_pernode: FAIL: netns.sh up failed"; exit 1; }
fails=0 checks=0
sed "s|model_config: demo/config.json|model_config: $EX/demo/config.json|" "$EX/demo_addition.yaml" >"$T/demo.yaml"
ARGS="max_steps=120 save_steps=40 logging_steps=40 per_device_train_batch_size=8 overwrite_output_dir=false"
printf '10.77.0.1 slots=2\n10.77.0.2 slots=2\n' >"$T/hostfile"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
PN="NNODES=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 NPROC_PER_NODE=2"

# node I CMD...: run CMD on simulated machine I
node() { i=$1; shift; "$KIT/netns.sh" exec "$i" env TANDEM_NETNS="$TANDEM_NETNS" "$@"; }

# the reference: the hostfile launch of the same job
timeout 300 "$KIT/netns.sh" exec 0 env OMPI_MCA_plm_rsh_agent="$KIT/rsh-agent.sh" OMPI_MCA_btl=tcp,self,vader \
  OMPI_MCA_btl_tcp_if_include=10.77.0.0/24 OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 TANDEM_NETNS="$TANDEM_NETNS" \
  "$BIN" launch --hostfile "$T/hostfile" "$T/demo.yaml" $ARGS output_dir="$T/hf" >"$T/hf.log" 2>&1
check '[ -s "$T/hf/model.safetensors" ]'

# 1. the per-node launch: `tandem train` with FORCE_TORCHRUN on node 0, `tandem launch` on node 1
start=$(date +%s)
node 0 env $PN NODE_RANK=0 FORCE_TORCHRUN=1 TANDEM_RDZV_TIMEOUT=60 \
  timeout 300 "$BIN" train "$T/demo.yaml" $ARGS output_dir="$T/pn" >"$T/pn0.log" 2>&1 &
p0=$!
node 1 env $PN NODE_RANK=1 TANDEM_RDZV_TIMEOUT=60 \
  timeout 300 "$BIN" launch "$T/demo.yaml" $ARGS output_dir="$T/pn" >"$T/pn1.log" 2>&1
rc1=$?
wait $p0
rc0=$?
echo "per-node launch, 2 machines x 2 ranks: exit $rc0 / $rc1 in $(($(date +%s) - start)) s"
check '[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]'
check 'grep -q "all 2 nodes joined; 4 ranks" "$T/pn0.log"'
check 'grep -q "node 1 joined node 0 at 10.77.0.1:29500: 4 ranks" "$T/pn1.log"'
check 'grep -q "data parallel over 4 rank(s) on 2 machine(s) (hierarchical" "$T/pn0.log"'
check 'grep -q -- "--ompi-server" "$T/pn1.log"'
"$BIN" compare "$T/pn" "$T/hf" >"$T/cmp.log" 2>&1
tail -1 "$T/cmp.log"
check '"$BIN" compare "$T/pn" "$T/hf" --quiet --max-rel-l2 0 >/dev/null'
check 'cmp -s "$T/pn/model.safetensors" "$T/hf/model.safetensors"'

# 2. restarts per node: kill -9 one of node 1's ranks once checkpoint-40 is complete
node 0 env $PN NODE_RANK=0 TANDEM_RDZV_TIMEOUT=60 \
  timeout 300 "$BIN" launch --max-restarts 1 "$T/demo.yaml" $ARGS output_dir="$T/re" >"$T/re0.log" 2>&1 &
p0=$!
node 1 env $PN NODE_RANK=1 TANDEM_RDZV_TIMEOUT=60 \
  timeout 300 "$BIN" launch --max-restarts 1 "$T/demo.yaml" $ARGS output_dir="$T/re" >"$T/re1.log" 2>&1 &
p1=$!
for _ in $(seq 1 1200); do [ -f "$T/re/checkpoint-40/tandem_manifest.json" ] && break; sleep 0.1; done
victim=
for p in $(pgrep -f "tandem train .*output_dir=$T/re"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx TANDEM_JOIN_NODE=1 && victim=$p
done
check '[ -n "$victim" ]'
[ -n "$victim" ] && kill -9 "$victim"
wait $p0
rc0=$?
wait $p1
rc1=$?
echo "kill -9 of node 1's rank $victim: exit $rc0 / $rc1; final model $(cmp -s "$T/re/model.safetensors" "$T/pn/model.safetensors" && echo bit-identical || echo DIFFERENT)"
check '[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]'
check 'grep -q "stopping the job on every node: node 1 .* failed" "$T/re0.log"'
check 'grep -q "restart 1 of 1 from the newest complete checkpoint" "$T/re0.log"'
check 'grep -q "restart 1 of 1 from the newest complete checkpoint" "$T/re1.log"'
check 'grep -q "all 2 nodes joined; 4 ranks (round 1)" "$T/re0.log"'
check 'grep -q "resuming from .*checkpoint-" "$T/re0.log"'
check 'cmp -s "$T/re/model.safetensors" "$T/pn/model.safetensors"'

# 3. a node that never comes is named within the timeout, on both sides
start=$(date +%s)
node 0 env $PN NODE_RANK=0 TANDEM_RDZV_TIMEOUT=3 timeout 60 "$BIN" train "$T/demo.yaml" $ARGS \
  output_dir="$T/miss" >"$T/miss0.log" 2>&1
rc=$? took=$(($(date +%s) - start))
echo "node 0 alone: exit $rc after $took s: $(grep error "$T/miss0.log")"
check '[ $rc -ne 0 ] && [ $took -le 15 ]'
check 'grep -q "tandem: error: rendezvous at 10.77.0.1:29500: NODE_RANK 1 of NNODES=2 did not join within 3 s" "$T/miss0.log"'
check '[ "$(grep -c "tandem: error" "$T/miss0.log")" -eq 1 ]'
check '[ ! -e "$T/miss" ]'
start=$(date +%s)
node 1 env $PN NODE_RANK=1 TANDEM_RDZV_TIMEOUT=3 timeout 60 "$BIN" train "$T/demo.yaml" $ARGS \
  output_dir="$T/miss" >"$T/miss1.log" 2>&1
rc=$? took=$(($(date +%s) - start))
check '[ $rc -ne 0 ] && [ $took -le 15 ]'
check 'grep -q "tandem: error: node 0 at 10.77.0.1:29500 did not answer within 3 s" "$T/miss1.log"'

# 4. another build is refused (both sides say so); so is another job secret
cp "$BIN" "$T/other-build" && printf 'x' >>"$T/other-build"
node 0 env $PN NODE_RANK=0 TANDEM_RDZV_TIMEOUT=4 timeout 60 "$BIN" train "$T/demo.yaml" $ARGS \
  output_dir="$T/ob" >"$T/ob0.log" 2>&1 &
p0=$!
node 1 env $PN NODE_RANK=1 TANDEM_RDZV_TIMEOUT=4 timeout 60 "$T/other-build" train "$T/demo.yaml" $ARGS \
  output_dir="$T/ob" >"$T/ob1.log" 2>&1
rc1=$?
wait $p0
rc0=$?
echo "another build on node 1: $(grep error "$T/ob1.log")"
check '[ $rc0 -ne 0 ] && [ $rc1 -ne 0 ]'
check 'grep -q "tandem: error: node 0 at 10.77.0.1:29500 refused this node (NODE_RANK=1 on .*): it runs another tandem build" "$T/ob1.log"'
check '[ "$(grep -c "tandem: error" "$T/ob1.log")" -eq 1 ]'
check 'grep -q "refused NODE_RANK=1 from host $TANDEM_NETNS-node1: it runs another tandem build" "$T/ob0.log"'
check 'grep -q "did not join within 4 s.*node 1 from host $TANDEM_NETNS-node1 was refused: it runs another tandem build" "$T/ob0.log"'
node 0 env $PN NODE_RANK=0 TANDEM_RDZV_TIMEOUT=3 TANDEM_JOB_SECRET=s3cret timeout 60 "$BIN" train "$T/demo.yaml" \
  $ARGS output_dir="$T/sec" >"$T/sec0.log" 2>&1 &
p0=$!
node 1 env $PN NODE_RANK=1 TANDEM_RDZV_TIMEOUT=3 TANDEM_JOB_SECRET=other timeout 60 "$BIN" train "$T/demo.yaml" \
  $ARGS output_dir="$T/sec" >"$T/sec1.log" 2>&1
rc1=$?
wait $p0
check '[ $rc1 -ne 0 ] && grep -q "refused this node .*TANDEM_JOB_SECRET differs" "$T/sec1.log"'

# 5. another config on node 1: the ranks' fingerprint check stops the job, naming the rank and host
node 0 env $PN NODE_RANK=0 TANDEM_RDZV_TIMEOUT=30 timeout 120 "$BIN" train "$T/demo.yaml" $ARGS \
  output_dir="$T/cfg" >"$T/cfg0.log" 2>&1 &
p0=$!
node 1 env $PN NODE_RANK=1 TANDEM_RDZV_TIMEOUT=30 timeout 120 "$BIN" train "$T/demo.yaml" $ARGS learning_rate=3e-3 \
  output_dir="$T/cfg" >"$T/cfg1.log" 2>&1
rc1=$?
wait $p0
rc0=$?
echo "another config on node 1: exit $rc0 / $rc1: $(grep "tandem: error" "$T/cfg0.log" | head -1)"
check '[ $rc0 -ne 0 ] && [ $rc1 -ne 0 ]'
check 'grep -q "tandem: error: rank 2 on host $TANDEM_NETNS-node1 was started with a different config than rank 0" "$T/cfg0.log"'

[ "$fails" -eq 0 ] || tail -n 15 "$T"/*.log
echo "test_dp_pernode: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
