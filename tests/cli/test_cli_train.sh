#!/bin/sh
# A short run of the bundled demo: the loss must fall, the model folder must be written and reload
# as an HF folder, and a LoRA run on top of it must write a PEFT adapter.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
T=$(mktemp -d /tmp/tandem-cli-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0

"$BIN" train "$EX/demo_addition.yaml" max_steps=120 logging_steps=20 output_dir="$T/full" >"$T/log" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
first=$(grep -m1 '^step' "$T/log" | sed 's/.*loss \([0-9.]*\).*/\1/')
last=$(grep '^step' "$T/log" | tail -1 | sed 's/.*loss \([0-9.]*\).*/\1/')
check 'awk "BEGIN{exit !($last < 0.7 * $first)}"'
check '[ -s "$T/full/model.safetensors" ] && [ -s "$T/full/config.json" ]'
check 'grep -q "held-out accuracy" "$T/log"'

# LoRA on top of the model just trained: only the adapter is written.
"$BIN" train "$EX/demo_addition.yaml" model_config= model_name_or_path="$T/full" finetuning_type=lora \
  lora_rank=4 max_steps=20 output_dir="$T/lora" >"$T/log2" 2>&1
check '[ -s "$T/lora/adapter_model.safetensors" ] && [ -s "$T/lora/adapter_config.json" ]'
check 'grep -Eq "\"r\":[[:space:]]*4" "$T/lora/adapter_config.json"'
check 'grep -q "LoRA" "$T/log2"'
[ "$fails" -eq 0 ] || cat "$T/log" "$T/log2"
echo "test_cli_train: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
