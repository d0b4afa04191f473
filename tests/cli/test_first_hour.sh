#!/bin/sh
# What a LLaMA-Factory user meets in the first hour, on a small Qwen2-architecture model with the real Qwen
# tokenizer: a Hub id is one line saying it is not downloaded and what to pass (train, chat, export); the LoRA
# output names its base model and holds the tokenizer and chat template; train_runtime leaves the final
# evaluation out; logging_first_step, eval_on_start and save_strategy (epoch, no) act as in HF; tokenized_path,
# export_size, export_device, infer_backend get one note each and pissa_init: true one error; on a terminal
# the bar moves every step with lr and grad_norm, an evaluation is shown while it runs, and its time is not
# counted in tok/s.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
ROOT=$TD/..
need_shared test_first_hour
export OMP_NUM_THREADS=1 TANDEM_CACHE_DIR
T=$(mktemp -d /tmp/tandem-fh-XXXXXX)
TANDEM_CACHE_DIR=$T/cache
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
Y=$ROOT/examples/lf/qwen_lora_sft.yaml

# Hub ids: one line, what to pass; the same from chat and export
for cmd in train chat export; do
  "$BIN" $cmd "$Y" model_name_or_path=Qwen/Qwen3-4B-Instruct-2507 template=qwen export_dir="$T/x" >"$T/hub.log" 2>&1
  rc=$?
  check '[ $rc -ne 0 ] && [ "$(grep -c . "$T/hub.log")" -eq 1 ] && grep -q "tandem: error: .*qwen_lora_sft.yaml: key .model_name_or_path.: .Qwen/Qwen3-4B-Instruct-2507. is not a local folder, and Hugging Face Hub ids are not downloaded: fetch it first (huggingface-cli download Qwen/Qwen3-4B-Instruct-2507 --local-dir models/Qwen3-4B-Instruct-2507) and pass model_name_or_path: models/Qwen3-4B-Instruct-2507" "$T/hub.log"'
done

"$BIN" init-model "$ROOT/examples/tiny-qwen2/config.json" "$T/model" --tokenizer "$SHARED/data/tokenizers/qwen3" >/dev/null
ARGS="model_name_or_path=$T/model dataset_dir=$SHARED/data/llamafactory cutoff_len=64 per_device_train_batch_size=1
gradient_accumulation_steps=1 save_steps=0"

# LoRA output: adapter_config.json names the base; tokenizer files and chat template beside the adapter
"$BIN" train "$Y" $ARGS max_samples=8 max_steps=2 output_dir="$T/lora" >"$T/lora.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
check '/usr/bin/python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))[\"base_model_name_or_path\"] != sys.argv[2])" "$T/lora/adapter_config.json" "$T/model"'
check 'cmp -s "$T/lora/tokenizer.json" "$T/model/tokenizer.json" && cmp -s "$T/lora/tokenizer_config.json" "$T/model/tokenizer_config.json"'
check '/usr/bin/python3 -c "import json,sys; sys.exit(open(sys.argv[1]).read() != json.load(open(sys.argv[2]))[\"chat_template\"])" "$T/lora/chat_template.jinja" "$T/model/tokenizer_config.json"'
# the folder serves chat on its own: generate with the adapter alone, tokenizer from the base
# (keys of LLaMA-Factory's inference and export YAMLs are noted there too: generate on stderr, export on stdout)
"$BIN" generate "$Y" model_name_or_path="$T/model" adapter_name_or_path="$T/lora" max_new_tokens=2 do_sample=false \
  infer_backend=vllm --prompt hi >"$T/gen.out" 2>"$T/gen.err"
rc=$?
check '[ $rc -eq 0 ] && ! grep -q "tandem:" "$T/gen.out" && grep -q "^tandem: note: infer_backend: " "$T/gen.err"'
"$BIN" export model_name_or_path="$T/model" adapter_name_or_path="$T/lora" export_dir="$T/merged" export_size=1 \
  export_device=cpu >"$T/export.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "^tandem: note: export_device: " "$T/export.log" && grep -q "^tandem: note: export_size: .*at most 1 GB" "$T/export.log"'

# train_runtime: one short step, then a final evaluation many times longer; the runtime counts only the step
"$BIN" train "$Y" $ARGS max_samples=40 val_size=32 max_steps=1 output_dir="$T/rt" >"$T/rt.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
check '/usr/bin/python3 -c "import json,sys; t=json.load(open(sys.argv[1]))[\"train_runtime\"]; e=json.load(open(sys.argv[2]))[\"eval_runtime\"]; print(\"train_runtime\", t, \"eval_runtime\", e); sys.exit(not t < e)" "$T/rt/train_results.json" "$T/rt/eval_results.json"'

# logging_first_step, eval_on_start, save_strategy epoch; the noted keys; the evaluation announced as it starts
# (max_samples counts per dataset: 2 x 3 samples, 2 held out, 2 a step: an epoch every 2 steps)
"$BIN" train "$Y" $ARGS max_samples=3 val_size=2 per_device_train_batch_size=2 max_steps=4 logging_steps=3 \
  eval_steps=100 output_dir="$T/k" \
  logging_first_step=true eval_on_start=true save_strategy=epoch tokenized_path="$T/tok" export_size=2 \
  export_device=cpu infer_backend=vllm pissa_init=false >"$T/k.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
steps() { /usr/bin/python3 -c 'import json,sys; print(" ".join(str(l["current_steps"]) for l in map(json.loads, open(sys.argv[1])) if sys.argv[2] in l))' "$1" "$2"; }
check '[ "$(steps "$T/k/trainer_log.jsonl" loss)" = "1 3 4" ]'
check '[ "$(steps "$T/k/trainer_log.jsonl" eval_loss)" = "0" ]'
check 'grep -n "step 0: evaluating 2 samples" "$T/k.log" | cut -d: -f1 | { read a; b=$(grep -n "step 0 eval_loss" "$T/k.log" | cut -d: -f1); [ "$a" -lt "$b" ]; }'
check '[ "$(ls -d "$T"/k/checkpoint-* | xargs -n1 basename | tr "\n" " ")" = "checkpoint-2 checkpoint-4 " ]'
for key in tokenized_path export_size export_device infer_backend; do
  check '[ "$(grep -c "^tandem: note: $key: " "$T/k.log")" -eq 1 ]'
done
check '[ ! -e "$T/tok" ]'
"$BIN" train "$Y" $ARGS max_samples=10 max_steps=2 save_steps=1 save_strategy=no output_dir="$T/no" >"$T/no.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
check '[ -s "$T/no/adapter_model.safetensors" ] && ! ls -d "$T"/no/checkpoint-* >/dev/null 2>&1'
"$BIN" train "$Y" $ARGS pissa_init=true output_dir="$T/p" >"$T/p.log" 2>&1
check '[ "$(grep -c . "$T/p.log")" -eq 1 ] && grep -q "key .pissa_init.: not supported yet" "$T/p.log"'

# a terminal: the bar after every step with lr and grad_norm; an evaluation shown while it runs; tok/s with an
# evaluation (8x a step) after every step stays close to tok/s without one
TANDEM_TTY=1 "$BIN" train "$Y" $ARGS max_samples=40 val_size=32 max_steps=4 logging_steps=10 eval_steps=1 \
  output_dir="$T/tty" >"$T/tty.log" 2>&1
check '[ "$(tr "\r" "\n" <"$T/tty.log" | grep -c "^[1-4]/4 \[.*\] .* loss [0-9.]* | lr [0-9.e+-]* | grad_norm [0-9.]* | [0-9]* tok/s | ETA")" -eq 4 ]'
check '[ "$(tr "\r" "\n" <"$T/tty.log" | grep -c "^evaluating 32 samples at step [1-3] ...")" -eq 3 ]'
TANDEM_TTY=1 "$BIN" train "$Y" $ARGS max_samples=40 val_size=32 max_steps=4 logging_steps=10 eval_steps=1 \
  eval_strategy=no val_size=0 max_samples=8 output_dir="$T/tty0" >"$T/tty0.log" 2>&1
toks() { tr "\r" "\n" <"$1" | grep -o "^[234]/4 .*| [0-9]* tok/s" | grep -o "[0-9]* tok/s" | cut -d" " -f1 | sort -n | sed -n 2p; }
with=$(toks "$T/tty.log") without=$(toks "$T/tty0.log")
echo "median tok/s of steps 2-4: with an evaluation after each step $with, without $without"
check '[ -n "$with" ] && [ -n "$without" ] && awk -v a="$with" -v b="$without" "BEGIN { exit !(a >= 0.4 * b) }"'
[ "$fails" -eq 0 ] || tail -n 12 "$T"/*.log
echo "test_first_hour: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
