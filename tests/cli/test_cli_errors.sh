#!/bin/sh
# Bad input to `tandem train` ends with exactly one error line naming the file/line/key, exit status 1,
# and no output folder. Expected messages are written by hand from the config contract.
set -u
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
T=$(mktemp -d /tmp/tandem-cli-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0

# expect_error NAME PATTERN CMD... : CMD must exit 1 with one stderr line matching PATTERN.
expect_error() {
  name=$1 pattern=$2
  shift 2
  checks=$((checks + 1))
  "$@" >"$T/stdout" 2>"$T/err"
  rc=$?
  lines=$(wc -l <"$T/err")
  if [ "$rc" -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -Eq "$pattern" "$T/err"; then
    echo "FAIL $name: rc=$rc, $lines stderr lines, expected /$pattern/:"; cat "$T/err"
    fails=$((fails + 1))
  fi
}

printf 'model_config: %s/demo/config.json\ndataset: demo_addition\nlora_rnak: 8\n' "$EX" >"$T/typo.yaml"
expect_error typo "typo.yaml:3: key 'lora_rnak' is not known \(did you mean 'lora_rank'\?\)" "$BIN" train "$T/typo.yaml"

printf 'model_config: %s/demo/config.json\ndataset: demo_addition\nlearning_rate: fast\n' "$EX" >"$T/value.yaml"
expect_error bad-value "value.yaml:3: .*learning_rate.*fast" "$BIN" train "$T/value.yaml"

printf 'dataset: demo_addition\n' >"$T/nomodel.yaml"
expect_error no-model "nomodel.yaml.*model_name_or_path" "$BIN" train "$T/nomodel.yaml"

printf 'model_config: %s/demo/config.json\ndataset: [unclosed\n' "$EX" >"$T/syntax.yaml"
expect_error yaml-syntax "syntax.yaml:[0-9]+" "$BIN" train "$T/syntax.yaml"

expect_error missing-file "nope.yaml" "$BIN" train "$T/nope.yaml"
expect_error override "max_steps" "$BIN" train "$EX/demo_addition.yaml" max_steps=many
expect_error not-key-value "'oops' is not key=value" "$BIN" train "$EX/demo_addition.yaml" oops
expect_error command "unknown command 'trian'" "$BIN" trian

mkdir -p "$T/model"
printf '{"model_type": "gpt2", "vocab_size": 10}' >"$T/model/config.json"
printf 'model_name_or_path: %s/model\ndataset: demo_addition\nfinetuning_type: full\noutput_dir: %s/out\n' "$T" "$T" >"$T/gpt2.yaml"
expect_error model-type "config.json.*model_type" "$BIN" train "$T/gpt2.yaml"

printf '{"model_type": "llama", "vocab_size": 259, "hidden_size": 16, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2}' >"$T/model/config.json"
printf 'not a safetensors file' >"$T/model/model.safetensors"
expect_error bad-weights "model.safetensors" "$BIN" train "$T/gpt2.yaml"
checks=$((checks + 1))
if [ -e "$T/out" ]; then echo "FAIL: a failed run left an output folder"; fails=$((fails + 1)); fi

echo "test_cli_errors: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
