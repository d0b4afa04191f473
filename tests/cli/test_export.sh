#!/bin/sh
# `tandem export` (LLaMA-Factory's merge): a LoRA adapter trained on a small base is merged into it; the
# merged weights must equal W + (alpha/r) B A computed independently in float64 by PyTorch
# (tests/tools/merge_ref.py), the tokenizer files must be copied, the result must load as a model, and
# the same YAML keys as `llamafactory-cli export` work; the merged folder has the adapter's chat_template.jinja. A missing adapter is one clear error line.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
EX=$TD/../examples
T=$(mktemp -d /tmp/tandem-export-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0

"$BIN" train "$EX/demo_addition.yaml" max_steps=20 output_dir="$T/base" >"$T/log1" 2>&1
# stands in for a real tokenizer file, with a chat template (training writes it out as chat_template.jinja)
printf '{"model_max_length": 12, "chat_template": "{%% for m in messages %%}{{ m.content }}{%% endfor %%}"}\n' \
  >"$T/base/tokenizer_config.json"
"$BIN" train "$EX/demo_addition.yaml" model_config= model_name_or_path="$T/base" finetuning_type=lora lora_rank=4 \
  lora_alpha=12 max_steps=20 learning_rate=1e-2 output_dir="$T/lora" >"$T/log2" 2>&1
cat >"$T/merge.yaml" <<EOY
### model
model_name_or_path: $T/base
adapter_name_or_path: $T/lora
template: default
finetuning_type: lora
trust_remote_code: true
### export
export_dir: $T/merged
export_size: 5
export_device: cpu
export_legacy_format: false
EOY
"$BIN" export "$T/merge.yaml" >"$T/log3" 2>&1
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/merged/model.safetensors" ] && [ -s "$T/merged/config.json" ]'
check 'cmp -s "$T/base/tokenizer_config.json" "$T/merged/tokenizer_config.json"'
# export_size's note says what export does with it, not that only `tandem export` reads it (issue 24, item 10)
check '! grep -q "only .tandem export. reads" "$T/log3" && grep -q "^tandem: note: export_size: safetensors shards of at most 5 GB" "$T/log3"'
# the merged model has the chat template the trained adapter has (issue 24, item 15)
check '[ -s "$T/lora/chat_template.jinja" ] && cmp -s "$T/lora/chat_template.jinja" "$T/merged/chat_template.jinja"'
check '/usr/bin/python3 "$TD/tools/merge_ref.py" "$T/base" "$T/lora" "$T/merged"'
# the merged model trains on (loads as a plain HF folder)
"$BIN" train "$EX/demo_addition.yaml" model_config= model_name_or_path="$T/merged" finetuning_type=full max_steps=2 \
  output_dir="$T/again" >"$T/log4" 2>&1
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/again/model.safetensors" ]'
# missing adapter: one error line
"$BIN" export model_name_or_path="$T/base" adapter_name_or_path="$T/nope" export_dir="$T/x" >"$T/log5" 2>&1
rc=$?
check '[ $rc -ne 0 ] && [ "$(grep -c "tandem: error:" "$T/log5")" -eq 1 ] && grep -q "nope" "$T/log5"'
check '[ ! -e "$T/x/model.safetensors" ]'
[ "$fails" -eq 0 ] || cat "$T"/log*
echo "test_export: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
