#!/bin/sh
# compute-sanitizer on one training step (skipped, 77, without a GPU): memcheck on the demo in fp32 and bf16 (the
# fp32 and the tensor-core attention kernels) and on a LoRA SFT step in bf16 (frozen bf16 base, dropout), racecheck
# and synccheck on that LoRA step (shared-memory tiles of attention, the column reductions). Each run is bounded in
# time: the sanitizers slow kernels down 10-100x. A machine that refuses the sanitizer (sandboxed, no debugger
# interface) or lacks it skips the runs it refused, with the reason (sanitizer_refusal.sh); all refused: exit 77.
set -u
GPU_TEST=test_gpu_sanitizer
. "${TANDEM_TESTS_DIR:?}/gpu/gpulib.sh"
. "$TD/gpu/sanitizer_refusal.sh"

mkdir -p "$T/data"
python3 - "$T/data" <<'PY'
import json, random, sys
random.seed(7)
rows = [{"instruction": "add %d and %d" % (a, b), "input": "", "output": "%d" % (a + b)}
        for a, b in ((random.randint(0, 99), random.randint(0, 99)) for _ in range(64))]
json.dump(rows, open(sys.argv[1] + "/sums.json", "w"))
json.dump({"sums": {"file_name": "sums.json"}}, open(sys.argv[1] + "/dataset_info.json", "w"))
PY
"$BIN" init-model "$EX/tiny-qwen3/config.json" "$T/model" --tokenizer "$TD/fixtures/lf_data/tok_q" >/dev/null
L="model_name_or_path=$T/model dataset=sums dataset_dir=$T/data template=qwen cutoff_len=64 max_steps=1
per_device_train_batch_size=8 lora_rank=8 lora_dropout=0.1 save_steps=0 device=cuda bf16=true"
CS=$(find_sanitizer)
if [ -z "$CS" ]; then
  echo "test_gpu_sanitizer: skipped: compute-sanitizer is not installed here (not on PATH nor in /usr/local/cuda)"
  exit 77
fi
refused=0 ran=0
san() { # NAME TOOL ARGS...
  name=$1 tool=$2
  shift 2
  timeout 150 "$CS" --tool "$tool" --error-exitcode 9 "$BIN" train "$@" output_dir="$T/$name" >"$T/$name.log" 2>&1
  rc=$?
  if why=$(sanitizer_refused "$T/$name.log"); then
    echo "$name: skipped: compute-sanitizer refused to run here: $why"
    refused=$((refused + 1))
    return
  fi
  ran=$((ran + 1))
  if libs=$(sanitizer_foreign_races "$T/$name.log"); then
    # reported in full, not counted: see sanitizer_foreign_races for why these are not tandem's
    echo "$name: exit $rc, races reported only in NVIDIA's library kernels, none in tandem's (k_*): $libs"
    grep -m 4 "Race reported\|RACECHECK SUMMARY" "$T/$name.log"
    check 'grep -q "RACECHECK SUMMARY" "$T/'$name'.log"'
    return
  fi
  echo "$name: exit $rc, $(grep -E -o "(ERROR|RACECHECK) SUMMARY: [0-9]* [a-z]*" "$T/$name.log" | tail -1)"
  check '[ $rc -eq 0 ] && grep -E -q "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" "$T/'$name'.log"'
}
san memcheck-demo-fp32 memcheck "$EX/demo_addition.yaml" device=cuda max_steps=1
san memcheck-demo-bf16 memcheck "$EX/demo_addition.yaml" device=cuda bf16=true max_steps=1
san memcheck-lora-bf16 memcheck "$EX/lf/qwen_lora_sft.yaml" $L
san racecheck-lora-bf16 racecheck "$EX/lf/qwen_lora_sft.yaml" $L
san synccheck-lora-bf16 synccheck "$EX/lf/qwen_lora_sft.yaml" $L
if [ "$ran" -eq 0 ]; then
  echo "test_gpu_sanitizer: skipped: compute-sanitizer refused all $refused runs on this machine (see above)"
  exit 77
fi
[ "$fails" -eq 0 ] || for f in "$T"/*check*.log; do echo "== $f"; grep -m 20 "=========" "$f"; done
echo "test_gpu_sanitizer: $checks checks, $fails failed, $refused runs refused by the sanitizer (skipped)"
[ "$fails" -eq 0 ]
