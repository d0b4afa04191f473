#!/bin/sh
# `tandem plan`: the table for every strategy, the choice and its reason, the config's own strategy named, the
# measured path (bench train on the config's model), the hostfile path with and without a recorded link, and one
# error line for each bad argument.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
ROOT=$(cd "$TANDEM_TESTS_DIR/.." && pwd)
T=$(mktemp -d /tmp/tandem-plan-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
TINY=$ROOT/bench/plan/tiny.yaml

# link-bound: 2 machines over 100 Mbit/s with the tiny preset's recorded 612 ms step
"$BIN" plan "$TINY" --machines 2 --link 100mbit --step-time 0.612 >"$T/out" 2>&1
rc=$?
check '[ $rc -eq 0 ] && [ "$(grep -cE "^(ddp|ddp\+bf16|ddp\+int8|zero1|zero2|zero3|diloco|diloco\+int8) " "$T/out")" -eq 8 ]'
check 'grep -q "^best: diloco" "$T/out" && grep -q "^why: the link is the bottleneck" "$T/out"'
check 'grep -q "^ddp .*(this config)" "$T/out" && grep -q "^this config runs ddp: .* predicted .*x faster" "$T/out"'
# the config's keys select its row: zero_stage=2 and sync_mode=diloco
"$BIN" plan "$TINY" zero_stage=2 --machines 2 --link 100mbit --step-time 0.612 >"$T/z2" 2>&1
check 'grep -q "^zero2 .*(this config)" "$T/z2"'
"$BIN" plan "$TINY" sync_mode=diloco comm_compression=int8 --machines 2 --link 100mbit --step-time 0.612 --json >"$T/json" 2>&1
check '[ "$(grep -c "^{\"strategy\"" "$T/json")" -eq 8 ] && grep -q "\"strategy\":\"diloco+int8\".*\"config\":true" "$T/json"'
check 'python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$T/json"'
# compute-bound: 10 Gbit/s, the simplest strategy wins
"$BIN" plan "$TINY" --machines 2 --link 10gbit --step-time 0.612 >"$T/fast" 2>&1
check 'grep -q "^best: ddp " "$T/fast" && grep -q "^why: compute-bound" "$T/fast"'
# memory decides: 0.24 GB a rank leaves only ZeRO-3 (0.23 GB) at 2 ranks
"$BIN" plan "$TINY" --machines 2 --link 10gbit --step-time 0.612 --memory 0.235 >"$T/mem" 2>&1
check 'grep -q "^best: zero3" "$T/mem" && grep -q "^why: ddp needs" "$T/mem"'
"$BIN" plan "$TINY" --machines 2 --link 10gbit --step-time 0.612 --memory 0.01 >"$T/none" 2>&1
rc=$?
check '[ $rc -eq 2 ] && grep -q "^none fits in 0.01 GB a rank" "$T/none"'
# --compute: a GPU's rate for a model this machine cannot hold
"$BIN" plan "$TINY" model_config="$ROOT/bench/configs/qwen3-4b.json" cutoff_len=2048 per_device_train_batch_size=1 \
  --machines 4 --ranks-per-machine 8 --link 10gbit --compute 400 --memory 80 >"$T/gpu" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "4 machine(s) x 8 rank(s)" "$T/gpu" && grep -q "(given;" "$T/gpu"'
# measured here: one rank's step of the demo model by bench train
"$BIN" plan "$ROOT/examples/demo_addition.yaml" --machines 2 --link 1gbit >"$T/measured" 2>"$T/measured.err"
rc=$?
check '[ $rc -eq 0 ] && grep -q "(measured here;" "$T/measured" && grep -q "bench train" "$T/measured.err"'
# a hostfile: without a recorded link, one line saying how to measure it; with one, it is used
printf 'nodeA slots=2\nnodeB slots=2\n' >"$T/hosts"
TANDEM_BENCH_LOG=$T/none.jsonl "$BIN" plan "$TINY" --hostfile "$T/hosts" --step-time 0.612 >"$T/h1" 2>&1
rc=$?
check '[ $rc -eq 1 ] && [ "$(wc -l <"$T/h1")" -eq 1 ] && grep -q "no link measurement between the machines of .*bench allreduce" "$T/h1"'
printf '{"hosts": ["nodeA", "nodeB"], "ranks": 4, "bytes": 1e8, "seconds": 10, "machine_Bps": 5000000, "time": %s}\n' \
  "$(date +%s)" >"$T/log.jsonl"
TANDEM_BENCH_LOG=$T/log.jsonl "$BIN" plan "$TINY" --hostfile "$T/hosts" --step-time 0.612 >"$T/h2" 2>&1
check 'grep -q "2 machine(s) x 2 rank(s), link 5.00 MB/s each way (measured by bench allreduce)" "$T/h2"'
# bad arguments: one line each
for args in "--link fast --machines 2" "--machines 0" "--frobnicate" "--machines 2" "--step-time -1" \
            "--hostfile $T/absent --link 1gbit"; do
  # shellcheck disable=SC2086
  "$BIN" plan "$TINY" $args >"$T/bad" 2>&1
  rc=$?
  check '[ $rc -eq 1 ] && [ "$(wc -l <"$T/bad")" -eq 1 ]'
done
"$BIN" plan >"$T/noarg" 2>&1
rc=$?
check '[ $rc -eq 1 ] && grep -q "expected CONFIG.yaml" "$T/noarg"'
"$BIN" plan "$TINY" lora_rnak=8 --machines 1 --step-time 1 >"$T/key" 2>&1
check 'grep -q "lora_rnak" "$T/key" && [ "$(wc -l <"$T/key")" -eq 1 ]'
echo "test_plan: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
