#!/bin/sh
# Sharded data parallelism across two simulated machines (network namespaces, scripts/netns/netns.sh), two
# ranks on each (and, at stage 3, one on each), launched through the hostfile path: ZeRO stages 1, 2 and 3 take the hierarchical
# collectives (a ring inside each machine, one rail ring per local rank between the machines) and must give
# the parameters of the plain data-parallel run of the same split (relative L2 <= 1e-6, see
# test_dp_split.sh), full fine-tuning and, at stage 3, LoRA; balanced shards (the default) and, at stage 2,
# contiguous ones. The namespaces are removed afterwards.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
KIT=$TANDEM_TESTS_DIR/../scripts/netns
export TANDEM_NETNS=tnzr$$
need_mpirun test_zero_netns
need_netns test_zero_netns "$KIT"
T=$(mktemp -d /tmp/tandem-zeronet-XXXXXX)
trap '"$KIT/netns.sh" down; rm -rf "$T"' EXIT
"$KIT/netns.sh" up --rate 0 || { echo "test_zero_netns: FAIL: netns.sh up failed"; exit 1; }
fails=0 checks=0
sed "s|model_config: demo/config.json|model_config: $EX/demo/config.json|" "$EX/demo_addition.yaml" >"$T/demo.yaml"
COMMON="max_steps=6 logging_steps=100 learning_rate=1e-4 warmup_ratio=0 plot_loss=false per_device_train_batch_size=4"
printf '10.77.0.1 slots=2\n10.77.0.2 slots=2\n' >"$T/hostfile"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$T/hostfile1"

two() { # name key=value... (HOSTFILE: which hostfile, default 2 ranks a machine)
  name=$1; shift
  timeout 300 "$KIT/netns.sh" exec 0 env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_plm_rsh_agent="$KIT/rsh-agent.sh" OMPI_MCA_btl=tcp,self,vader \
    OMPI_MCA_btl_tcp_if_include=10.77.0.0/24 OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 \
    OMPI_MCA_rmaps_base_oversubscribe=1 TANDEM_NETNS="$TANDEM_NETNS" \
    "$BIN" launch --hostfile "${HOSTFILE:-$T/hostfile}" "$T/demo.yaml" $COMMON output_dir="$T/$name" "$@" >"$T/$name.log" 2>&1
  rc=$?
  check '[ $rc -eq 0 ] && grep -q "on 2 machine(s)" "$T/$name.log"'
  [ $rc -eq 0 ] || { echo "run $name exited $rc:"; tail -n 40 "$T/$name.log"; } # the whole story of a failure
}

two s0 zero_stage=0
for s in 1 2 3; do
  two s$s zero_stage=$s
  check 'grep -q "ZeRO stage '$s', 4 rank" "$T/s'$s'.log"'
  d=$(worst "$T/s$s" "$T/s0")
  echo "two machines x 2 ranks, stage $s vs stage 0: worst rel L2 $d"
  check 'within $d 1e-6'
done
# the contiguous layout (zero_shard_layout: contiguous) over the same hierarchical collectives
two c2 zero_stage=2 zero_shard_layout=contiguous
d=$(worst "$T/c2" "$T/s0")
echo "two machines x 2 ranks, stage 2, contiguous shards vs stage 0: worst rel L2 $d"
check 'within $d 1e-6 && grep -q "ZeRO shards contiguous" "$T/c2.log" && grep -q "ZeRO shards balanced" "$T/s2.log"'
two l0 zero_stage=0 finetuning_type=lora lora_rank=4
two l3 zero_stage=3 finetuning_type=lora lora_rank=4
a=$(worst "$T/l3" "$T/l0" '.' 'lora_B') b=$(worst "$T/l3" "$T/l0" 'lora_B')
echo "two machines x 2 ranks, LoRA stage 3 vs stage 0: worst rel L2 $a (lora_B $b)"
m=$(maxdiff "$T/l3" "$T/l0" 'lora_B')
check 'within $a 1e-6 && within $m $(adamw_bound 1e-4 6)'
# one rank a machine: only the rail rings (no machine-local phase)
HOSTFILE=$T/hostfile1 two o0 zero_stage=0
HOSTFILE=$T/hostfile1 two o3 zero_stage=3
d=$(worst "$T/o3" "$T/o0")
echo "two machines x 1 rank, stage 3 vs stage 0: worst rel L2 $d"
check 'within $d 1e-6 && grep -q "ZeRO stage 3, 2 rank" "$T/o3.log"'
[ "$fails" -eq 0 ] || tail -n 5 "$T"/*.log
echo "test_zero_netns: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
