#!/bin/sh
# Low-communication training between two simulated machines (network namespaces joined by a veth pair,
# scripts/netns/netns.sh; launched through the hostfile path as test_dp_netns.sh does), two ranks per machine
# so that the machine-local sums, the rail exchange over TCP and the background exchange all run: DiLoCo with
# int8 pseudo-gradients and DP with int8 gradients must give bit-identically the parameters of the same runs
# on machines faked on one host (TANDEM_NODE_NAME per rank, shared memory only): the same bytes are summed
# in the same order whatever carries them. Where namespaces cannot be created the test FAILS with the reason.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
KIT=$TANDEM_TESTS_DIR/../scripts/netns
export TANDEM_NETNS=tnlc$$
need_mpirun test_lowcomm_netns
need_netns test_lowcomm_netns "$KIT"
T=$(mktemp -d /tmp/tandem-lcnetns-XXXXXX)
trap '"$KIT/netns.sh" down; rm -rf "$T"' EXIT
"$KIT/netns.sh" up --rate 0 || { echo "test_lowcomm_netns: FAIL: netns.sh up failed"; exit 1; }
fails=0 checks=0
sed "s|model_config: demo/config.json|model_config: $EX/demo/config.json|" "$EX/demo_addition.yaml" >"$T/demo.yaml"
COMMON="max_steps=10 logging_steps=5 learning_rate=1e-3 warmup_ratio=0 per_device_train_batch_size=4"
printf '10.77.0.1 slots=2\n10.77.0.2 slots=2\n' >"$T/hostfile"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

for mode in "sync_mode=diloco diloco_inner_steps=3 comm_compression=int8" "comm_compression=int8"; do
  tag=$(echo "$mode" | tr ' =' '_-')
  OMP_NUM_THREADS=1 OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 timeout 300 mpirun -n 4 --bind-to none \
    -x OMP_NUM_THREADS sh -c 'export TANDEM_NODE_NAME=m$(( OMPI_COMM_WORLD_RANK / 2 )); exec "$0" "$@"' \
    "$BIN" train "$T/demo.yaml" $COMMON $mode output_dir="$T/faked-$tag" >"$T/faked-$tag.log" 2>&1
  check '[ -s "$T/faked-$tag/model.safetensors" ]'
  timeout 300 "$KIT/netns.sh" exec 0 env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_plm_rsh_agent="$KIT/rsh-agent.sh" OMPI_MCA_btl=tcp,self,vader \
    OMPI_MCA_btl_tcp_if_include=10.77.0.0/24 OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 OMPI_MCA_rmaps_base_oversubscribe=1 \
    TANDEM_NETNS="$TANDEM_NETNS" \
    "$BIN" launch --hostfile "$T/hostfile" "$T/demo.yaml" $COMMON $mode output_dir="$T/two-$tag" >"$T/two-$tag.log" 2>&1
  rc=$?
  check '[ $rc -eq 0 ]'
  check 'grep -q "on 2 machine(s)\|over 2 machine(s)" "$T/two-$tag.log"'
  check 'cmp -s "$T/two-$tag/model.safetensors" "$T/faked-$tag/model.safetensors"'
  echo "$mode: two namespaces vs faked machines: $(cmp -s "$T/two-$tag/model.safetensors" "$T/faked-$tag/model.safetensors" \
    && echo bit-identical || echo DIFFERENT) (exit $rc)"
done
[ "$fails" -eq 0 ] || tail -n 20 "$T"/*.log
echo "test_lowcomm_netns: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
