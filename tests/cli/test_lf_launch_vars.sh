#!/bin/sh
# The launch of issue 25 as its user types it, with `tandem train` for `llamafactory-cli train`, run as two
# nodes on this one machine (MASTER_ADDR=127.0.0.1; the nodes are told apart by the variables only):
#   CUDA_VISIBLE_DEVICES=6,7 NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo FORCE_TORCHRUN=1 NNODES=2 RANK=0 MASTER_ADDR=.. MASTER_PORT=..
#   CUDA_VISIBLE_DEVICES=1,6 ... RANK=1 ...
# Checked: RANK stands for NODE_RANK (older LLaMA-Factory), so the two commands form one job of 4 ranks on 2
# machines (two devices each, NPROC_PER_NODE unset) whose parameters match `tandem launch -n 4` of the same
# global batch (relative L2 <= 1e-6: only the summation order of the reduction differs, see test_dp_split.sh);
# NCCL_SOCKET_IFNAME reaches mpirun as btl_tcp_if_include / oob_tcp_if_include; NCCL_DEBUG=INFO gives every
# rank's communication log, and without it there is none. With --dry-run: NODE_RANK and RANK both set and
# different are one line naming the one used; a RANK beyond NNODES, or an interface this machine lacks, is
# one error line naming the variable, before anything starts; RANK without NNODES is not read;
# CUDA_VISIBLE_DEVICES=-1 (no device) is one rank; a hostfile launch gets the same interfaces and forwards
# NCCL_DEBUG, and the user's own OMPI_MCA_btl_tcp_if_exclude wins.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
need_mpirun test_lf_launch_vars
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tandem-lf-launch-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
sed "s|model_config: demo/config.json|model_config: $EX/demo/config.json|" "$EX/demo_addition.yaml" >"$T/a.yaml"
ARGS="max_steps=5 logging_steps=100 per_device_train_batch_size=4 warmup_ratio=0"
one_error() { # log pattern: exactly one "tandem: error:" line, and it matches pattern
  [ "$(grep -c 'tandem: error:' "$1")" -eq 1 ] && grep 'tandem: error:' "$1" | grep -Eq -e "$2"
}
PORT=$((20000 + $$ % 10000))
LF="NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo FORCE_TORCHRUN=1 NNODES=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT"
env $LF CUDA_VISIBLE_DEVICES=1,6 RANK=1 TANDEM_RDZV_TIMEOUT=60 timeout 180 "$BIN" train "$T/a.yaml" $ARGS \
  output_dir="$T/pn" >"$T/n1.log" 2>&1 &
p1=$!
env $LF CUDA_VISIBLE_DEVICES=6,7 RANK=0 TANDEM_RDZV_TIMEOUT=60 timeout 180 "$BIN" train "$T/a.yaml" $ARGS \
  output_dir="$T/pn" >"$T/n0.log" 2>&1
rc0=$?
wait $p1
rc1=$?
check '[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]'
check 'grep -q "this machine is node 0 of 2 (RANK=0; NODE_RANK is not set)" "$T/n0.log"'
check 'grep -q "this machine is node 1 of 2 (RANK=1; NODE_RANK is not set)" "$T/n1.log"'
check 'grep -q "2 rank(s) on this machine, one per device of CUDA_VISIBLE_DEVICES=1,6" "$T/n1.log"'
check 'grep -q "data parallel over 4 rank(s) on 2 machine(s)" "$T/n0.log"'
for f in n0 n1; do
  check 'grep -q "mpirun .* -n 2 .*--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo" "$T/$f.log"'
done
# the communication log: each rank its place (ranks 2 and 3 on node 1's machine 1), rank 0 the machines
for r in 0 1; do check 'grep -q "\[$r\] tandem INFO rank $r of 4: machine 0 of 2" "$T/n0.log"'; done
for r in 2 3; do check 'grep -q "\[$r\] tandem INFO rank $r of 4: machine 1 of 2" "$T/n1.log"'; done
check 'grep -q "\[2\] tandem INFO MPI transports tcp,self,vader; TCP interfaces lo (oob lo)" "$T/n1.log"'
check 'grep -q "\[0\] tandem INFO machine 1: ranks 2,3 on" "$T/n0.log"'
check '[ "$(grep -c "tandem INFO finalize" "$T/n1.log")" -eq 2 ]'
# the same global batch (4 x 4) on one machine: the same parameters up to the reduction's summation order
timeout 180 "$BIN" launch -n 4 "$T/a.yaml" $ARGS output_dir="$T/one" >"$T/one.log" 2>&1
check '"$BIN" compare "$T/pn" "$T/one" --quiet --max-rel-l2 1e-6 >/dev/null'
check '! grep -q "tandem INFO" "$T/one.log"'   # no NCCL_DEBUG: no log

# --dry-run: what node 1 would run, nothing started
dry() { # name vars...: tandem launch --dry-run under the variables, into $T/name.log; its exit code
  _n=$1; shift
  env "$@" timeout 30 "$BIN" launch --dry-run "$T/a.yaml" >"$T/$_n.log" 2>&1
}
dry both NNODES=2 NODE_RANK=1 RANK=0 MASTER_ADDR=127.0.0.1
rc=$?
check '[ $rc -eq 0 ] && grep -q "NODE_RANK=1 and RANK=0 differ: this machine is node 1 (NODE_RANK" "$T/both.log"'
dry same NNODES=2 NODE_RANK=1 RANK=1 MASTER_ADDR=127.0.0.1
rc=$?
check '[ $rc -eq 0 ] && ! grep -q "differ" "$T/same.log"'
dry big NNODES=2 RANK=2 MASTER_ADDR=127.0.0.1
rc=$?
check '[ $rc -ne 0 ] && one_error "$T/big.log" "RANK=.2.: expected an integer in 0..1 \\(NNODES=2\\)"'
dry noif NNODES=2 RANK=1 MASTER_ADDR=127.0.0.1 NCCL_SOCKET_IFNAME=tnoif9
rc=$?
check '[ $rc -ne 0 ] && one_error "$T/noif.log" "NCCL_SOCKET_IFNAME=.tnoif9.: no network interface of this machine matches \\(it has lo"'
dry prefix NNODES=2 RANK=1 MASTER_ADDR=127.0.0.1 NCCL_SOCKET_IFNAME==lo:29500
rc=$?
check '[ $rc -eq 0 ] && grep -q "btl_tcp_if_include lo --mca oob_tcp_if_include lo" "$T/prefix.log"'
dry single RANK=3 NPROC_PER_NODE=2   # one machine: RANK is not this launch's
rc=$?
check '[ $rc -eq 0 ] && grep -q "mpirun .* -n 2 " "$T/single.log" && ! grep -q "ompi-server" "$T/single.log"'
dry hidden CUDA_VISIBLE_DEVICES=-1
rc=$?
check '[ $rc -eq 0 ] && grep -q "mpirun .* -n 1 " "$T/hidden.log"'
dry three CUDA_VISIBLE_DEVICES=0,1,2
rc=$?
check '[ $rc -eq 0 ] && grep -q "mpirun .* -n 3 " "$T/three.log"'
dry np CUDA_VISIBLE_DEVICES=0,1,2 NPROC_PER_NODE=1   # NPROC_PER_NODE wins, as LLaMA-Factory's does
rc=$?
check '[ $rc -eq 0 ] && grep -q "mpirun .* -n 1 " "$T/np.log"'
# a hostfile launch: the same interfaces for MPI's TCP, and NCCL_DEBUG forwarded to the other machines' ranks
printf 'localhost slots=2\n' >"$T/hosts"
NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO timeout 30 "$BIN" launch --dry-run --hostfile "$T/hosts" "$T/a.yaml" >"$T/hf.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "mpirun .*--hostfile .*--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo .*-x NCCL_DEBUG" "$T/hf.log"'
OMPI_MCA_btl_tcp_if_exclude=docker0 NCCL_SOCKET_IFNAME=lo timeout 30 "$BIN" launch --dry-run --hostfile "$T/hosts" "$T/a.yaml" \
  >"$T/hfx.log" 2>&1
rc=$?   # the user's own Open MPI choice wins (Open MPI refuses include and exclude together)
check '[ $rc -eq 0 ] && ! grep "mpirun" "$T/hfx.log" | grep -q "btl_tcp_if_include" && grep -q "mpirun.*oob_tcp_if_include lo" "$T/hfx.log"'
[ "$fails" -eq 0 ] || tail -n 8 "$T"/*.log
echo "test_lf_launch_vars: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
