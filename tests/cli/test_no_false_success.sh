#!/bin/sh
# A run that trained nothing never reports success (issue 24, item 2): with NaN in the base model's weights every
# step is skipped (fewer than max_bad_steps of them), and with a NaN injected into every step's gradient, or into
# the last step's, the run fails with one error line saying why: exit status 1, no "saved" line, no model or
# adapter and no results files in output_dir. A NaN in an earlier step only (the run ends on a finite loss)
# still succeeds. A finished run leaves no .tandem.lock in output_dir, neither `train` nor `launch` (item 14: it
# would be uploaded with the adapter folder). An evaluation's steps per second count the batches it ran (item 11); the data-parallel
# banner states the gradient buckets that run (item 9); bf16 gets one truthful line for the backend in use (item 8).
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
EX=$TD/../examples
T=$(mktemp -d /tmp/tandem-nofalse-XXXXXX)
trap 'rm -rf "$T"' EXIT
export TANDEM_CACHE_DIR=$T/cache
fails=0 checks=0

# failed NAME WANT: the run NAME exited 1 with exactly one error line holding WANT, claimed nothing, left nothing
failed() {
  [ "$rc" -eq 1 ] && [ "$(grep -c 'tandem: error:' "$T/$1.log")" -eq 1 ] && grep 'tandem: error:' "$T/$1.log" | grep -q -- "$2" &&
    ! grep -q 'saved .* to' "$T/$1.log" && [ ! -e "$T/$1/model.safetensors" ] && [ ! -e "$T/$1/adapter_model.safetensors" ] &&
    [ ! -e "$T/$1/all_results.json" ] && [ ! -e "$T/$1/train_results.json" ]
}

# 1. the issue's case: a base model whose final norm is NaN, trained with LoRA
printf '{"model_type": "qwen2", "vocab_size": 320, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 256, "tie_word_embeddings": true}\n' \
  >"$T/tiny.json"
"$BIN" init-model "$T/tiny.json" "$T/model" --tokenizer "$TD/fixtures/lf_data/tok_q" >/dev/null
cp -r "$T/model" "$T/nanmodel"
python3 - "$T/nanmodel/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    info = json.loads(f.read(n))["model.norm.weight"]
    lo, hi = info["data_offsets"]
    f.seek(8 + n + lo)
    f.write(struct.pack("<f", float("nan")) * ((hi - lo) // 4))
PY
"$BIN" train "$EX/lf/qwen_lora_sft.yaml" model_name_or_path="$T/nanmodel" dataset=hi dataset_dir="$TD/fixtures/lf_data/data" \
  max_steps=3 max_samples=8 gradient_accumulation_steps=1 output_dir="$T/nanw" >"$T/nanw.log" 2>&1
rc=$?
echo "NaN weights: exit $rc: $(grep 'tandem: error' "$T/nanw.log")"
check 'failed nanw "every one of the 3 steps of this run had a non-finite loss or gradient and was skipped"'

# 2. every step's gradient NaN (fault injection), 3. only the last step's, 4. only an earlier step's
TANDEM_FAULT_NAN_STEPS=1-4 "$BIN" train "$EX/demo_addition.yaml" max_steps=4 output_dir="$T/all" >"$T/all.log" 2>&1
rc=$?
check 'failed all "every one of the 4 steps"'
TANDEM_FAULT_NAN_STEPS=4 "$BIN" train "$EX/demo_addition.yaml" max_steps=4 output_dir="$T/last" >"$T/last.log" 2>&1
rc=$?
echo "last step NaN: exit $rc: $(grep 'tandem: error' "$T/last.log")"
check 'failed last "the last step (4) had a non-finite loss or gradient"'
TANDEM_FAULT_NAN_STEPS=2 "$BIN" train "$EX/demo_addition.yaml" max_steps=4 output_dir="$T/mid" >"$T/mid.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "saved model to" "$T/mid.log" && [ -f "$T/mid/all_results.json" ]'

check '[ ! -e "$T/mid/.tandem.lock" ]'

# results state what ran (item 11): with a batch of 1 an evaluation runs one step per sample, whatever
# gradient_accumulation_steps is, so eval_steps_per_second equals eval_samples_per_second
"$BIN" train "$EX/lf/qwen_lora_sft.yaml" model_name_or_path="$T/model" dataset=split10 dataset_dir="$TD/fixtures/lf_data/data" \
  max_steps=2 max_samples=8 val_size=0.5 per_device_train_batch_size=1 gradient_accumulation_steps=8 output_dir="$T/ev" \
  >"$T/ev.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && python3 -c "import json, sys; e = json.load(open(sys.argv[1])); print(\"eval:\", e)
sys.exit(e[\"eval_steps_per_second\"] != e[\"eval_samples_per_second\"])" "$T/ev/eval_results.json"'
need_mpirun test_no_false_success
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 "$BIN" launch -n 2 --no-bind \
  "$EX/demo_addition.yaml" finetuning_type=lora max_steps=2 output_dir="$T/launched" >"$T/launched.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && [ -f "$T/launched/adapter_model.safetensors" ] && [ ! -e "$T/launched/.tandem.lock" ]'

# the notes on bf16 say what the backend in use does, once (item 8): with the DeepSpeed ZeRO-3 example on the CPU
# (TANDEM_DEVICE=cpu) a line saying the CPU computes in fp32, and the DeepSpeed note defers to the YAML's bf16
TANDEM_DEVICE=cpu "$BIN" train "$EX/lf/qwen_lora_sft.yaml" model_name_or_path="$T/model" dataset=split10 \
  dataset_dir="$TD/fixtures/lf_data/data" max_steps=1 max_samples=4 deepspeed="$EX/deepspeed/ds_z3_config.json" \
  output_dir="$T/ds" >"$T/ds.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && [ "$(grep -c "bf16.*fp32\|fp32.*bf16" "$T/ds.log")" -eq 1 ] &&
  grep -q "^tandem: note: bf16: the CPU backend runs it, in fp32 (device: cpu)" "$T/ds.log" &&
  grep -q "bf16/fp16: the YAML.s bf16 key decides (bf16: true)" "$T/ds.log"'

# the log states the buckets that run (item 9): the demo's 626944 fp32 gradients (counted from its config.json here)
# cut as grad_sync.h says: buckets of at most ddp_bucket_cap_mb, at least 8 of them, none under 64 KB
OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 "$BIN" launch -n 2 --no-bind \
  "$EX/demo_addition.yaml" max_steps=1 output_dir="$T/dp" >"$T/dp.log" 2>&1
rc=$?
want=$(python3 -c "
import json, math, sys
c = json.load(open(sys.argv[1]))
D, I, L, V = c['hidden_size'], c['intermediate_size'], c['num_hidden_layers'], c['vocab_size']
hd = D // c['num_attention_heads']; q, kv = c['num_attention_heads'] * hd, c['num_key_value_heads'] * hd
n = L * (2 * D + 2 * q * D + 2 * kv * D + 3 * I * D) + V * D * (1 if c['tie_word_embeddings'] else 2) + D
per = min(4 * 1048576 // 4, max(math.ceil(n / 8), 16384))
print('in %d bucket(s) of <= %.3g MB' % (math.ceil(n / per), per * 4 / 1048576))" "$EX/demo/config.json")
echo "buckets: want '$want': $(grep -o 'in [0-9]* bucket.*MB' "$T/dp.log")"
check '[ $rc -eq 0 ] && grep -q "gradients all-reduced once per step $want " "$T/dp.log"'

[ "$fails" -eq 0 ] || tail -n 5 "$T"/*.log
echo "test_no_false_success: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
