#!/bin/sh
# The torchrun / LLaMA-Factory variables on one machine (no namespaces): FORCE_TORCHRUN=1 NPROC_PER_NODE=2
# `tandem train` runs 2 local ranks as `llamafactory-cli train` does under torchrun, and ends with the
# parameters of `tandem launch -n 2`; a bad variable is one error line naming it, before anything starts;
# per-node options that exclude each other are refused; `--dry-run` of a per-node launch shows the mpirun
# line it will run (joined through node 0's ompi-server); two per-node launches on this one machine
# (MASTER_ADDR=127.0.0.1) form one job of 2 ranks on 2 "machines".
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
need_mpirun test_pernode_args
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tandem-pernode-args-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
sed "s|model_config: demo/config.json|model_config: $EX/demo/config.json|" "$EX/demo_addition.yaml" >"$T/a.yaml"
ARGS="max_steps=5 logging_steps=100 per_device_train_batch_size=4"
one_error() { # log pattern: exactly one "tandem: error:" line, and it matches pattern
  [ "$(grep -c 'tandem: error:' "$1")" -eq 1 ] && grep 'tandem: error:' "$1" | grep -Eq -e "$2"
}

# FORCE_TORCHRUN with one node: local ranks, the same job as `tandem launch -n 2`
FORCE_TORCHRUN=1 NPROC_PER_NODE=2 timeout 120 "$BIN" train "$T/a.yaml" $ARGS output_dir="$T/ft" >"$T/ft.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
check 'grep -q "data parallel over 2 rank(s)" "$T/ft.log"'
timeout 120 "$BIN" launch -n 2 "$T/a.yaml" $ARGS output_dir="$T/l2" >"$T/l2.log" 2>&1
check 'cmp -s "$T/ft/model.safetensors" "$T/l2/model.safetensors"'
# without FORCE_TORCHRUN and with one node, train stays one process (as llamafactory-cli on a CPU machine)
NPROC_PER_NODE=2 timeout 120 "$BIN" train "$T/a.yaml" $ARGS output_dir="$T/one" >"$T/one.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && ! grep -q "data parallel" "$T/one.log"'

# bad values: one line naming the variable, nothing started
for bad in "NNODES=2 NODE_RANK=2|NODE_RANK='2': expected an integer in 0..1 \\(NNODES=2\\)" \
           "NNODES=two|NNODES='two': expected an integer in 1..4096" \
           "NNODES=2 MASTER_PORT=70000|MASTER_PORT='70000': expected an integer in 1..65535" \
           "NNODES=2 TANDEM_RDZV_TIMEOUT=0|TANDEM_RDZV_TIMEOUT='0': expected an integer"; do
  vars=${bad%%|*} want=${bad#*|}
  env $vars FORCE_TORCHRUN=1 timeout 30 "$BIN" train "$T/a.yaml" $ARGS output_dir="$T/bad" >"$T/bad.log" 2>&1
  rc=$?
  check '[ $rc -ne 0 ] && one_error "$T/bad.log" "$want"'
  check '[ ! -e "$T/bad" ]'
done
printf 'localhost slots=2\n' >"$T/hosts"
NNODES=2 timeout 30 "$BIN" launch --hostfile "$T/hosts" "$T/a.yaml" >"$T/hf.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && one_error "$T/hf.log" "NNODES=2 \\(a per-node launch\\) and --hostfile exclude each other"'
NNODES=2 timeout 30 "$BIN" launch --drop-dead-hosts "$T/a.yaml" >"$T/dd.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && one_error "$T/dd.log" "--drop-dead-hosts needs --hostfile"'

# --dry-run: the local mpirun of this machine's ranks, pointed at node 0's ompi-server
NNODES=2 NODE_RANK=1 MASTER_ADDR=127.0.0.1 NPROC_PER_NODE=3 timeout 30 "$BIN" launch --dry-run "$T/a.yaml" \
  >"$T/dry.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "mpirun .* -n 3 --ompi-server .<node 0.*s ompi-server>. .*tandem train $T/a.yaml" "$T/dry.log"'

# two per-node launches on this machine: one job of 2 ranks, each launch its own "machine"
PN="NNODES=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + $$ % 10000)) NPROC_PER_NODE=1 TANDEM_RDZV_TIMEOUT=60"
env $PN NODE_RANK=1 timeout 120 "$BIN" train "$T/a.yaml" $ARGS output_dir="$T/pn" >"$T/pn1.log" 2>&1 &
p1=$!
env $PN NODE_RANK=0 timeout 120 "$BIN" train "$T/a.yaml" $ARGS output_dir="$T/pn" >"$T/pn0.log" 2>&1
rc0=$?
wait $p1
rc1=$?
check '[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]'
check 'grep -q "data parallel over 2 rank(s) on 2 machine(s)" "$T/pn0.log"'
[ "$fails" -eq 0 ] || tail -n 5 "$T"/*.log
echo "test_pernode_args: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
