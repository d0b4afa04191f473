#!/bin/sh
# Training on the GPU, end to end (skipped, exit 77, where no GPU is visible):
#  1. the demo, 200 steps, on the CPU (seeds 42 and 43), the GPU in fp32 and in bf16: the GPU runs reach the CPU
#     run's loss within noise. Noise: the mean of the last 20 logged losses is compared; the allowance is the larger
#     of 10% of the CPU's value, twice the CPU's own seed-to-seed spread, and 0.02 (the demo's loss floor);
#  2. a LoRA SFT (tiny Qwen3, LLaMA-Factory alpaca data made here, lora_dropout 0.1: the frozen base in bf16 only),
#     200 steps on the CPU and the GPU in bf16, the same criterion; the GPU's adapter is PEFT's (merges on the CPU
#     with `tandem export`), and a GPU checkpoint resumes on the CPU;
# (compute-sanitizer: test_gpu_sanitizer.sh; 2 ranks on one GPU: test_gpu_dp.sh.) CPU runs use 8 threads.
set -u
GPU_TEST=test_gpu_train
. "${TANDEM_TESTS_DIR:?}/gpu/gpulib.sh"
export OMP_NUM_THREADS=8

# mean of the last 20 logged training losses of a run
tail_loss() {
  python3 -c 'import json,sys
l=[json.loads(x)["loss"] for x in open(sys.argv[1]) if "\"loss\"" in x]
print("%.6f" % (sum(l[-20:]) / len(l[-20:])) if l else "nan")' "$1/trainer_log.jsonl"
}
# close GPU CPU CPU2: |GPU - CPU| <= max(0.1 CPU, 2 |CPU - CPU2|, 0.02)
close() {
  awk -v g="$1" -v c="$2" -v c2="$3" 'BEGIN { d = g - c; if (d < 0) d = -d; s = c - c2; if (s < 0) s = -s;
    a = 0.1 * c; if (2 * s > a) a = 2 * s; if (0.02 > a) a = 0.02; exit !(g == g && d <= a) }'
}

# ---- 1. the demo
D="max_steps=200 logging_steps=1"
"$BIN" train "$EX/demo_addition.yaml" $D device=cpu output_dir="$T/demo-cpu" >"$T/demo-cpu.log" 2>&1
"$BIN" train "$EX/demo_addition.yaml" $D device=cpu seed=43 output_dir="$T/demo-cpu43" >"$T/demo-cpu43.log" 2>&1
"$BIN" train "$EX/demo_addition.yaml" $D device=cuda output_dir="$T/demo-fp32" >"$T/demo-fp32.log" 2>&1
"$BIN" train "$EX/demo_addition.yaml" $D device=cuda bf16=true output_dir="$T/demo-bf16" >"$T/demo-bf16.log" 2>&1
check 'grep -q "trained 200 steps" "$T/demo-fp32.log" && grep -q "on cuda:[0-9]* (.*fp32 throughout" "$T/demo-fp32.log"'
check 'grep -q "trained 200 steps" "$T/demo-bf16.log" && grep -q "bf16 matrix products" "$T/demo-bf16.log"'
c=$(tail_loss "$T/demo-cpu") c2=$(tail_loss "$T/demo-cpu43") f=$(tail_loss "$T/demo-fp32") b=$(tail_loss "$T/demo-bf16")
echo "demo, mean of the last 20 losses: cpu $c (seed 43: $c2), cuda fp32 $f, cuda bf16 $b"
grep "held-out accuracy" "$T/demo-cpu.log" "$T/demo-fp32.log" "$T/demo-bf16.log" | sed 's/^/  /'
check 'close "$f" "$c" "$c2"'
check 'close "$b" "$c" "$c2"'

# ---- 2. LoRA SFT on a tiny Qwen3 (frozen base bf16-only on the GPU)
mkdir -p "$T/data"
python3 - "$T/data" <<'PY'
import json, random, sys
random.seed(7)
rows = []
for _ in range(256):
    a, b = random.randint(0, 99), random.randint(0, 99)
    rows.append({"instruction": "add %d and %d" % (a, b), "input": "", "output": "%d" % (a + b)})
json.dump(rows, open(sys.argv[1] + "/sums.json", "w"))
json.dump({"sums": {"file_name": "sums.json"}}, open(sys.argv[1] + "/dataset_info.json", "w"))
PY
"$BIN" init-model "$EX/tiny-qwen3/config.json" "$T/model" --tokenizer "$TD/fixtures/lf_data/tok_q" >/dev/null
L="model_name_or_path=$T/model dataset=sums dataset_dir=$T/data template=qwen cutoff_len=64 max_samples=256
max_steps=200 logging_steps=1 per_device_train_batch_size=8 gradient_accumulation_steps=1 learning_rate=2e-3
lora_rank=8 lora_dropout=0.1 num_train_epochs=100 save_steps=100 save_only_model=false"
"$BIN" train "$EX/lf/qwen_lora_sft.yaml" $L device=cpu bf16=false output_dir="$T/lora-cpu" >"$T/lora-cpu.log" 2>&1
"$BIN" train "$EX/lf/qwen_lora_sft.yaml" $L device=cpu bf16=false seed=43 output_dir="$T/lora-cpu43" >"$T/lora-cpu43.log" 2>&1
"$BIN" train "$EX/lf/qwen_lora_sft.yaml" $L device=cuda bf16=true output_dir="$T/lora-bf16" >"$T/lora-bf16.log" 2>&1
check 'grep -q "trained 200 steps" "$T/lora-bf16.log" && grep -q "bf16 matrix products" "$T/lora-bf16.log"'
c=$(tail_loss "$T/lora-cpu") c2=$(tail_loss "$T/lora-cpu43") b=$(tail_loss "$T/lora-bf16")
echo "LoRA SFT, mean of the last 20 losses: cpu $c (seed 43: $c2), cuda bf16 $b"
check 'close "$b" "$c" "$c2"'
# outputs as on the CPU: a PEFT adapter that merges on the CPU; a GPU checkpoint resumes on the CPU
check '[ -s "$T/lora-bf16/adapter_model.safetensors" ] && [ -s "$T/lora-bf16/adapter_config.json" ]'
printf 'model_name_or_path: %s\nadapter_name_or_path: %s\ntemplate: qwen\nfinetuning_type: lora\nexport_dir: %s\n' \
  "$T/model" "$T/lora-bf16" "$T/merged" >"$T/merge.yaml"
"$BIN" export "$T/merge.yaml" >"$T/merge.log" 2>&1
check '[ -s "$T/merged/model.safetensors" ]'
mkdir -p "$T/resume" && cp -r "$T/lora-bf16/checkpoint-100" "$T/resume/"
"$BIN" train "$EX/lf/qwen_lora_sft.yaml" $L device=cpu output_dir="$T/resume" overwrite_output_dir=false >"$T/resume.log" 2>&1
check 'grep -q "resuming from .*checkpoint-100" "$T/resume.log" && grep -q "trained" "$T/resume.log"'

[ "$fails" -eq 0 ] || for f in "$T"/*.log; do echo "== $f"; tail -n 8 "$f"; done
echo "test_gpu_train: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
