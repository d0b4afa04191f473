#!/bin/sh
# LLaMA-Factory drop-in, end to end: the examples' LoRA SFT YAML (unchanged keys) on a small Qwen2-architecture
# model with the real Qwen tokenizer and LLaMA-Factory's demo data (identity + alpaca_en_demo), across 2 ranks,
# with val_size, eval_steps, save_steps and plot_loss: every output file LLaMA-Factory writes is there and
# parses, the adapter is PEFT's (names, shapes, F32: tests/tools/check_lf_outputs.py), and a resumed run
# ends bit-identical. Every example YAML parses; a mistyped key is one error line with a suggestion.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
ROOT=$TD/..
need_shared test_lf_e2e
need_mpirun test_lf_e2e
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 TANDEM_CACHE_DIR
T=$(mktemp -d /tmp/tandem-lf-XXXXXX)
TANDEM_CACHE_DIR=$T/cache
trap 'rm -rf "$T"' EXIT
fails=0 checks=0

"$BIN" init-model "$ROOT/examples/tiny-qwen2/config.json" "$T/model" --tokenizer "$SHARED/data/tokenizers/qwen3" >/dev/null
ARGS="model_name_or_path=$T/model dataset_dir=$SHARED/data/llamafactory max_samples=16 cutoff_len=96 max_steps=6
save_steps=3 logging_steps=2 val_size=0.25 eval_steps=3 per_device_train_batch_size=2 gradient_accumulation_steps=2
overwrite_output_dir=false"
"$BIN" launch -n 2 --no-bind "$ROOT/examples/lf/qwen_lora_sft.yaml" $ARGS output_dir="$T/a" >"$T/a.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
check 'grep -q "data parallel over 2 rank" "$T/a.log" && grep -q "template qwen" "$T/a.log"'
for f in adapter_config.json adapter_model.safetensors trainer_log.jsonl trainer_state.json train_results.json \
  all_results.json eval_results.json training_loss.png training_eval_loss.png checkpoint-3 checkpoint-6; do
  check '[ -e "$T/a/$f" ]'
done
check '/usr/bin/python3 "$TD/tools/check_lf_outputs.py" "$T/a" "$T/model"'
check '[ -s "$T/a/checkpoint-3/trainer_state.json" ] && [ -s "$T/a/checkpoint-3/adapter_model.safetensors" ]'
# resume: checkpoint-3 alone in a new output_dir, the same launch: bit-identical adapter
mkdir -p "$T/b"
cp -r "$T/a/checkpoint-3" "$T/b/"
"$BIN" launch -n 2 --no-bind "$ROOT/examples/lf/qwen_lora_sft.yaml" $ARGS output_dir="$T/b" >"$T/b.log" 2>&1
check 'grep -q "resuming from .*checkpoint-3" "$T/b.log"'
check 'cmp -s "$T/a/adapter_model.safetensors" "$T/b/adapter_model.safetensors"'
# the resumed run's trainer_state.json holds the whole history (steps before the checkpoint come from it)
hist() { /usr/bin/python3 -c 'import json,sys; print(sum("loss" in e for e in json.load(open(sys.argv[1]))["log_history"]))' "$1"; }
check '[ "$(hist "$T/b/trainer_state.json")" -eq "$(hist "$T/a/trainer_state.json")" ]'
# every example YAML parses (dry run of the launcher validates the config); a typo is one clear line
for y in "$ROOT"/examples/lf/*.yaml; do
  "$BIN" launch --dry-run -n 2 "$y" >"$T/dry.log" 2>&1
  check 'grep -q "^tandem launch: mpirun" "$T/dry.log"'
done
sed 's/^lora_rank:/lora_rnak:/' "$ROOT/examples/lf/qwen_lora_sft.yaml" >"$T/typo.yaml"
"$BIN" train "$T/typo.yaml" >"$T/typo.log" 2>&1
check '[ "$(grep -c "tandem: error:" "$T/typo.log")" -eq 1 ] && grep -q "typo.yaml:[0-9]*: key .lora_rnak. is not known (did you mean .lora_rank.?)" "$T/typo.log"'
[ "$fails" -eq 0 ] || tail -n 15 "$T"/*.log
echo "test_lf_e2e: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
