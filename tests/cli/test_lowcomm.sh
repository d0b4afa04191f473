#!/bin/sh
# Low-communication training (sync_mode: diloco, comm_compression) on faked machines (TANDEM_NODE_NAME per
# rank, one host), against what must hold exactly or within a derived bound:
#  - DiLoCo on ONE machine with outer lr 1 and momentum 0 is plain training (the outer step moves the
#    consensus by exactly the round's progress): equal to plain DP within the split-invariance bound of
#    test_dp_split.sh (1e-6; lora_B: AdamW's step bound), overlapped ("one round late") and synchronous, full and LoRA with
#    dropout and gradient accumulation;
#  - inside a machine the ranks stay in step: 2 machines x 2 ranks equal 2 machines x 1 rank with the same
#    machine batch, within the same bound;
#  - the loss in the log is every rank's: at step 1 (same parameters everywhere) DiLoCo's logged loss equals
#    plain DP's, and every step is logged once, in order;
#  - checkpoints taken mid-round (an exchange in flight, residuals, outer momentum, each machine's own
#    parameters and moments) resume bit-identically, with the same log, fp32, int8 and int4; compressed DP too;
#  - a DiLoCo checkpoint resumed on another topology says so and goes on; a restart after kill -9 ends
#    bit-identical;
#  - compression cuts the bytes (int8 about a quarter of fp32, int4 a seventh) and the run still learns, plain DP
#    and DiLoCo; combinations that do not exist are one clear line.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
need_mpirun test_lowcomm
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tandem-lowcomm-XXXXXX)
trap 'pkill -9 -f "output_dir=$T/" 2>/dev/null; rm -rf "$T"' EXIT
fails=0 checks=0
COMMON="max_steps=12 logging_steps=1 learning_rate=1e-3 warmup_ratio=0"


# ---- DiLoCo on one machine with outer lr 1, momentum 0 = plain training
LORA="finetuning_type=lora lora_rank=4 lora_dropout=0.1 gradient_accumulation_steps=2"
train_machines_ok plain-1m 2 2 per_device_train_batch_size=8
train_machines_ok plain-1m-lora 2 2 per_device_train_batch_size=4 $LORA
for ov in true false; do
  train_machines_ok dl-1m-$ov 2 2 per_device_train_batch_size=8 sync_mode=diloco diloco_inner_steps=4 diloco_outer_lr=1 \
    diloco_outer_momentum=0 diloco_overlap=$ov
  train_machines_ok dl-1m-lora-$ov 2 2 per_device_train_batch_size=4 $LORA sync_mode=diloco diloco_inner_steps=4 \
    diloco_outer_lr=1 diloco_outer_momentum=0 diloco_overlap=$ov
  a=$(worst "$T/dl-1m-$ov" "$T/plain-1m")
  b=$(worst "$T/dl-1m-lora-$ov" "$T/plain-1m-lora" '.' 'lora_B')
  c=$(worst "$T/dl-1m-lora-$ov" "$T/plain-1m-lora" 'lora_B')
  echo "one machine, outer lr 1, momentum 0, overlap $ov: full $a, LoRA $b (lora_B $c) vs plain DP"
  check 'within $a 1e-6'
  check 'within $b 1e-6'
  m=$(maxdiff "$T/dl-1m-lora-$ov" "$T/plain-1m-lora" 'lora_B')
  check 'within $m $(adamw_bound 1e-3 12)'
done
check 'grep -q "DiLoCo over 1 machine(s) of 2 rank(s)" "$T/dl-1m-true.log"'

# ---- two machines: ranks inside a machine in step; the logged loss is every machine's
train_machines_ok dl-2x1 2 1 per_device_train_batch_size=8 sync_mode=diloco diloco_inner_steps=4
train_machines_ok dl-2x2 4 2 per_device_train_batch_size=4 sync_mode=diloco diloco_inner_steps=4
train_machines_ok plain-2x1 2 1 per_device_train_batch_size=8
h=$(worst "$T/dl-2x2" "$T/dl-2x1")
d=$(worst "$T/dl-2x1" "$T/plain-2x1")
echo "DiLoCo 2 machines x 2 ranks vs x 1 rank: $h; DiLoCo vs plain DP after 12 steps: $d (not equal: a real difference)"
check 'within $h 1e-6'
check 'within 1e-4 $d'
check 'grep -q "DiLoCo over 2 machine(s) of 1 rank(s): .* every 4 steps .* lr 1, momentum 0 (Nesterov), one round late" "$T/dl-2x1.log"'
check '[ "$(logged_losses "$T/dl-2x1" | head -1)" = "$(logged_losses "$T/plain-2x1" | head -1)" ]'
check '[ "$(logged_losses "$T/dl-2x1" | sed "s/.*current_steps\": \([0-9]*\),.*/\1/" | tr "\n" " ")" = "1 2 3 4 5 6 7 8 9 10 11 12 " ]'
logged_losses "$T/dl-2x1" | head -1

# ---- resume mid-round (save at 5 and 10, rounds end at 4, 8, 12): bit-identical, the same log
for mode in "sync_mode=diloco comm_compression=none" "sync_mode=diloco comm_compression=int8" \
            "sync_mode=diloco comm_compression=int4" "comm_compression=int4" \
            "sync_mode=diloco comm_compression=bf16 diloco_overlap=false" "comm_compression=int8"; do
  tag=$(echo "$mode" | tr ' =' '_-')
  train_machines_ok "ra-$tag" 2 1 per_device_train_batch_size=8 diloco_inner_steps=4 save_steps=5 overwrite_output_dir=false $mode
  mkdir -p "$T/rb-$tag" && cp -r "$T/ra-$tag/checkpoint-5" "$T/rb-$tag/"
  train_machines_ok "rb-$tag" 2 1 per_device_train_batch_size=8 diloco_inner_steps=4 save_steps=5 overwrite_output_dir=false $mode
  check 'grep -q "resuming from .*checkpoint-5 (step 5 of 12)" "$T/rb-$tag.log"'
  check 'cmp -s "$T/ra-$tag/model.safetensors" "$T/rb-$tag/model.safetensors"'
  # the resumed run logs what the checkpoint had not logged yet (DiLoCo: a round still in flight), the same
  check '[ -n "$(logged_losses "$T/rb-$tag")" ] && [ "$(logged_losses "$T/ra-$tag" | tail -n "$(logged_losses "$T/rb-$tag" | wc -l)")" = "$(logged_losses "$T/rb-$tag")" ]'
  echo "$mode: resumed from checkpoint-5 $(cmp -s "$T/ra-$tag/model.safetensors" "$T/rb-$tag/model.safetensors" \
    && echo bit-identical || echo DIFFERENT)"
done
check '[ -f "$T/ra-sync_mode-diloco_comm_compression-int8/checkpoint-5/sync-state.safetensors" ]'
check '[ -f "$T/ra-sync_mode-diloco_comm_compression-int8/checkpoint-5/sync-rank-00001-of-00002.safetensors" ]'

# ---- a DiLoCo checkpoint on one process: a note, then plain training from its consensus
cp -r "$T/ra-sync_mode-diloco_comm_compression-none/checkpoint-5" "$T/one-ckpt" 2>/dev/null
mkdir -p "$T/one" && cp -r "$T/one-ckpt" "$T/one/checkpoint-5"
"$BIN" train "$EX/demo_addition.yaml" $COMMON per_device_train_batch_size=16 overwrite_output_dir=false \
  sync_mode=diloco diloco_inner_steps=4 output_dir="$T/one" >"$T/one.log" 2>&1
check '[ $? -eq 0 ] && grep -q "resuming from" "$T/one.log" && [ -s "$T/one/model.safetensors" ]'
mkdir -p "$T/four" && cp -r "$T/one-ckpt" "$T/four/checkpoint-5"
train_machines_ok four 4 2 per_device_train_batch_size=4 sync_mode=diloco diloco_inner_steps=4 overwrite_output_dir=false
check 'grep -q "note: sync_mode diloco restarts its rounds from checkpoint-5.s parameters: it was taken with 2 machine(s), 2 rank(s)" "$T/four.log"'
check '[ -s "$T/four/model.safetensors" ]'

# ---- compression: a quarter of the bytes, and it learns
train_machines_ok c-fp32 2 1 per_device_train_batch_size=8 max_steps=40 logging_steps=40
train_machines_ok c-int8 2 1 per_device_train_batch_size=8 max_steps=40 logging_steps=40 comm_compression=int8
fp=$(sed -n 's/.*(fp32: \([0-9.]*\) MB).*/\1/p' "$T/c-int8.log")
i8=$(sed -n 's/.*as int8 with error feedback: \([0-9.]*\) MB per step.*/\1/p' "$T/c-int8.log")
echo "bytes per step and machine: fp32 $fp MB, int8 $i8 MB"
check 'awk -v a="$i8" -v b="$fp" "BEGIN { exit !(a > 0.25 * b && a < 0.27 * b) }"'
l32=$(logged_losses "$T/c-fp32" | tail -1 | sed 's/.*loss": //') l8=$(logged_losses "$T/c-int8" | tail -1 | sed 's/.*loss": //')
echo "loss after 40 steps: fp32 $l32, int8 $l8"
check 'awk -v a="$l8" -v b="$l32" "BEGIN { exit !(a < 1.02 * b && a < 3.5) }"'
# int4: 0.5 + 4/64 bytes a value against 4 (a part's codes padded to whole floats: a little more)
train_machines_ok c-int4 2 1 per_device_train_batch_size=8 max_steps=40 logging_steps=40 comm_compression=int4
i4=$(sed -n 's/.*as int4 with error feedback: \([0-9.]*\) MB per step.*/\1/p' "$T/c-int4.log")
l4=$(logged_losses "$T/c-int4" | tail -1 | sed 's/.*loss": //')
echo "int4: $i4 MB per step and machine, loss after 40 steps $l4"
check 'awk -v a="$i4" -v b="$fp" "BEGIN { exit !(a > 0.140 * b && a < 0.15 * b) }"'
check 'awk -v a="$l4" -v b="$l32" "BEGIN { exit !(a < 1.02 * b && a < 3.5) }"'
# DiLoCo's pseudo-gradients as int4 learn as fp32 ones do
train_machines_ok c-dl-fp32 2 1 per_device_train_batch_size=8 max_steps=40 logging_steps=40 sync_mode=diloco diloco_inner_steps=4
train_machines_ok c-dl-int4 2 1 per_device_train_batch_size=8 max_steps=40 logging_steps=40 sync_mode=diloco diloco_inner_steps=4 \
  comm_compression=int4
d32=$(logged_losses "$T/c-dl-fp32" | tail -1 | sed 's/.*loss": //') d4=$(logged_losses "$T/c-dl-int4" | tail -1 | sed 's/.*loss": //')
echo "DiLoCo loss after 40 steps: fp32 $d32, int4 $d4"
check 'grep -q "pseudo-gradients (int4, error feedback)" "$T/c-dl-int4.log"'
check 'awk -v a="$d4" -v b="$d32" "BEGIN { exit !(a < 1.02 * b && a < 3.5) }"'

# ---- restart after kill -9 (2 ranks, one machine): bit-identical to the uninterrupted run
ARGS="max_steps=120 save_steps=20 logging_steps=20 per_device_train_batch_size=32 overwrite_output_dir=false \
sync_mode=diloco diloco_inner_steps=8"
"$BIN" launch -n 2 --no-bind "$EX/demo_addition.yaml" $ARGS output_dir="$T/ka" >"$T/ka.log" 2>&1
"$BIN" launch -n 2 --no-bind --max-restarts 1 "$EX/demo_addition.yaml" $ARGS output_dir="$T/kb" >"$T/kb.log" 2>&1 &
launcher=$!
for _ in $(seq 1 600); do [ -f "$T/kb/checkpoint-60/tandem_manifest.json" ] && break; sleep 0.1; done
victim=$(pgrep -f "tandem train .*output_dir=$T/kb" | tail -1)
[ -n "$victim" ] && kill -9 "$victim"
wait $launcher
check '[ $? -eq 0 ] && grep -q "restart 1 of 1" "$T/kb.log"'
check 'cmp -s "$T/ka/model.safetensors" "$T/kb/model.safetensors"'

# ---- combinations that do not exist: one line
train_machines bad-zero 2 1 per_device_train_batch_size=8 sync_mode=diloco zero_stage=2
check 'grep -q "sync_mode diloco keeps a whole replica on every machine: set zero_stage 0" "$T/bad-zero.log"'
# balance_ranks with DiLoCo exists (the split and its effect: test_balance.sh): it runs and says its weights
train_machines dl-bal 2 1 per_device_train_batch_size=8 sync_mode=diloco balance_ranks=true
check '[ $? -eq 0 ] && grep -q "averaged between machines (weighted by each machine.s samples)" "$T/dl-bal.log"'
"$BIN" train "$EX/demo_addition.yaml" comm_compression=int2 output_dir="$T/x" >"$T/x.log" 2>&1
check 'grep -q "key .comm_compression. expects none, bf16, int8 or int4, got .int2." "$T/x.log"'
train_machines uneven 3 2 per_device_train_batch_size=8 sync_mode=diloco
check 'grep -q "sync_mode diloco needs the same number of ranks on every machine" "$T/uneven.log"'

[ "$fails" -eq 0 ] || for f in "$T"/*.log; do echo "== $f"; tail -n 5 "$f"; done
echo "test_lowcomm: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
