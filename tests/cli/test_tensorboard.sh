#!/bin/sh
# report_to: tensorboard writes TensorBoard event files on rank 0, read back by an independent reader
# (tests/tools/tb_read.py: its own bit-by-bit CRC-32C, TensorFlow's field numbers compiled by protoc, Debian's
# python3-protobuf): a 2-rank LoRA run with evaluation leaves exactly one event file, in HF's default logging_dir
# (output_dir/runs/<Mon><DD>_<HH>-<MM>-<SS>_<host>), whose scalars are trainer_state.json's log_history and the
# final evaluation under HF's tags; logging_dir is obeyed; a flipped byte is caught by the reader; report_to
# services get one line saying nothing is sent; report_to: none writes no event file; a misspelt integration
# is one error line.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
ROOT=$TD/..
need_shared test_tensorboard
need_mpirun test_tensorboard
command -v protoc >/dev/null && /usr/bin/python3 -c 'import google.protobuf' 2>/dev/null ||
  { echo "test_tensorboard: FAIL: protoc and python3-protobuf are needed (scripts/install-deps.sh installs them)"; exit 1; }
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 TANDEM_CACHE_DIR
T=$(mktemp -d /tmp/tandem-tb-XXXXXX)
TANDEM_CACHE_DIR=$T/cache
trap 'rm -rf "$T"' EXIT
fails=0 checks=0

"$BIN" init-model "$ROOT/examples/tiny-qwen2/config.json" "$T/model" --tokenizer "$SHARED/data/tokenizers/qwen3" >/dev/null
ARGS="model_name_or_path=$T/model dataset_dir=$SHARED/data/llamafactory max_samples=12 cutoff_len=64 max_steps=4
logging_steps=2 val_size=4 eval_steps=2 per_device_train_batch_size=1 gradient_accumulation_steps=2 save_steps=0"
"$BIN" launch -n 2 --no-bind "$ROOT/examples/lf/qwen_lora_sft.yaml" $ARGS output_dir="$T/a" report_to=tensorboard,wandb \
  >"$T/a.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
check '[ "$(grep -c "tandem: note: report_to: nothing is sent to wandb" "$T/a.log")" -eq 1 ]'
check '[ "$(find "$T/a" -name "events.out.tfevents.*" | wc -l)" -eq 1 ]'
logdir=$(dirname "$(find "$T/a" -name "events.out.tfevents.*" | head -n 1)")
check 'echo "$logdir" | grep -Eq "/a/runs/[A-Z][a-z][a-z][0-9][0-9]_[0-9][0-9]-[0-9][0-9]-[0-9][0-9]_$(hostname)$"'
check 'grep -q "TensorBoard event files in $logdir" "$T/a.log"'
check '/usr/bin/python3 "$TD/tools/tb_read.py" "$logdir" "$T/a" >"$T/read.txt"'
# the tags LLaMA-Factory's Trainer logs, every one present
for tag in train/loss train/learning_rate train/grad_norm train/epoch eval/loss eval/runtime eval/samples_per_second \
  train/train_runtime train/train_samples_per_second train/train_loss train/tokens_per_second; do
  check 'grep -q " $tag " "$T/read.txt"'
done
# a flipped byte in the last record's data is caught by the reader's CRC check
mkdir -p "$T/bad"
cp "$logdir"/events.out.tfevents.* "$T/bad/"
f=$(ls "$T"/bad/events.out.tfevents.*)
size=$(wc -c <"$f")
printf '\377' | dd of="$f" bs=1 seek=$((size - 8)) conv=notrunc 2>/dev/null
check '! /usr/bin/python3 "$TD/tools/tb_read.py" "$T/bad" >"$T/bad.txt" && grep -q "data CRC mismatch" "$T/bad.txt"'

# one process, logging_dir given, report_to: mlflow and swanlab noted; none: no event file
"$BIN" train "$ROOT/examples/lf/qwen_lora_sft.yaml" $ARGS output_dir="$T/b" max_steps=2 val_size=0 eval_steps=1 \
  report_to=[tensorboard,mlflow,swanlab] logging_dir="$T/tb" >"$T/b.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && [ "$(ls "$T"/tb/events.out.tfevents.* | wc -l)" -eq 1 ] && [ ! -e "$T/b/runs" ]'
check 'grep -q "tandem: note: report_to: nothing is sent to mlflow, swanlab" "$T/b.log"'
check '/usr/bin/python3 "$TD/tools/tb_read.py" "$T/tb" "$T/b" >/dev/null'
"$BIN" train "$ROOT/examples/lf/qwen_lora_sft.yaml" $ARGS output_dir="$T/c" max_steps=1 val_size=0 eval_steps=1 >"$T/c.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && [ ! -e "$T/c/runs" ] && ! grep -q "report_to" "$T/c.log"'
"$BIN" train "$ROOT/examples/lf/qwen_lora_sft.yaml" $ARGS output_dir="$T/d" report_to=tensorbaord >"$T/d.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && [ "$(wc -l <"$T/d.log")" -eq 1 ] && grep -q "key .report_to.: .tensorbaord. is not an integration" "$T/d.log"'
[ "$fails" -eq 0 ] || tail -n 15 "$T"/*.log
echo "test_tensorboard: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
