#!/bin/sh
# Two simulated machines (network namespaces joined by a veth pair, scripts/netns/netns.sh): one run
# launched across both through the hostfile path (`tandem launch --hostfile`, Open MPI's plm_rsh_agent
# pointed at scripts/netns/rsh-agent.sh, which runs `ip netns exec` instead of ssh), two ranks per machine
# so the hierarchical reduction is used, must give the parameters of the same global batch trained in one
# process (relative L2 <= 1e-6, see test_dp_split.sh). The namespaces are removed afterwards. Where they
# cannot be created (not root, no CAP_NET_ADMIN) the test FAILS with the reason.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
KIT=$TANDEM_TESTS_DIR/../scripts/netns
export TANDEM_NETNS=tndp$$
need_mpirun test_dp_netns
need_netns test_dp_netns "$KIT"
T=$(mktemp -d /tmp/tandem-netns-XXXXXX)
trap '"$KIT/netns.sh" down; rm -rf "$T"' EXIT
"$KIT/netns.sh" up --rate 0 || { echo "test_dp_netns: FAIL: netns.sh up failed"; exit 1; }
fails=0 checks=0
sed "s|model_config: demo/config.json|model_config: $EX/demo/config.json|" "$EX/demo_addition.yaml" >"$T/demo.yaml"
COMMON="max_steps=6 logging_steps=100 learning_rate=1e-4 warmup_ratio=0"
printf '10.77.0.1 slots=2\n10.77.0.2 slots=2\n' >"$T/hostfile"

OMP_NUM_THREADS=1 "$BIN" train "$T/demo.yaml" $COMMON per_device_train_batch_size=8 output_dir="$T/single" \
  >"$T/single.log" 2>&1
start=$(date +%s)
timeout 300 "$KIT/netns.sh" exec 0 env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_plm_rsh_agent="$KIT/rsh-agent.sh" OMPI_MCA_btl=tcp,self,vader \
  OMPI_MCA_btl_tcp_if_include=10.77.0.0/24 OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 OMPI_MCA_rmaps_base_oversubscribe=1 \
  TANDEM_NETNS="$TANDEM_NETNS" \
  "$BIN" launch --hostfile "$T/hostfile" "$T/demo.yaml" $COMMON per_device_train_batch_size=2 \
  output_dir="$T/two" >"$T/two.log" 2>&1
rc=$?
echo "two machines x 2 ranks: exit $rc in $(($(date +%s) - start)) s"
check '[ $rc -eq 0 ]'
check 'grep -q "data parallel over 4 rank(s) on 2 machine(s)" "$T/two.log"'
check 'grep -q "rsh-agent.sh\\|--hostfile" "$T/two.log"'
"$BIN" compare "$T/two" "$T/single" >"$T/cmp.log" 2>&1
tail -1 "$T/cmp.log"
check '"$BIN" compare "$T/two" "$T/single" --quiet --max-rel-l2 1e-6 >/dev/null'
[ "$fails" -eq 0 ] || cat "$T/single.log" "$T/two.log"
echo "test_dp_netns: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
