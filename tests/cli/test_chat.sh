#!/bin/sh
# `tandem generate` / `tandem chat` go through the training template: a small Qwen2-architecture model
# (real Qwen tokenizer) fully fine-tuned on one identity example until it knows it; greedy generation for
# the same user text must give back exactly the answer from the dataset file, in one-shot and chat mode
# (with "clear" between turns; chat keeps the conversation's KV cache between turns). Sampling runs too, the same
# seed giving the same answer; --stats reports time to first token and tokens/s. The generation keys are LLaMA-Factory's.
# An empty prompt (generate) or message (chat) is refused in one line.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
ROOT=$TD/..
need_shared test_chat
T=$(mktemp -d /tmp/tandem-chat-XXXXXX)
trap 'rm -rf "$T"' EXIT
export TANDEM_CACHE_DIR=$T/cache
fails=0 checks=0

cd "$ROOT" || exit 1 # the example's deepspeed JSON is relative to the repository root, as LLaMA-Factory reads it
"$BIN" init-model "$ROOT/examples/tiny-qwen2/config.json" "$T/base" --tokenizer "$SHARED/data/tokenizers/qwen3" >/dev/null
"$BIN" train "$ROOT/examples/lf/qwen_full_sft.yaml" model_name_or_path="$T/base" dataset=identity \
  dataset_dir="$SHARED/data/llamafactory" max_samples=1 cutoff_len=128 max_steps=40 per_device_train_batch_size=1 \
  gradient_accumulation_steps=1 learning_rate=3e-3 warmup_ratio=0 lr_scheduler_type=constant \
  disable_gradient_checkpointing=true output_dir="$T/tuned" >"$T/train.log" 2>&1
want=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["output"])' "$SHARED/data/llamafactory/identity.json")
user=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["instruction"])' "$SHARED/data/llamafactory/identity.json")
printf 'model_name_or_path: %s\ntemplate: qwen\ndo_sample: false\nmax_new_tokens: 60\ninfer_backend: huggingface\n' \
  "$T/tuned" >"$T/infer.yaml"
got=$("$BIN" generate "$T/infer.yaml" --prompt "$user" 2>"$T/gen.err")
echo "generate: '$got'"
check '[ "$got" = "$want" ]'
printf '%s\nclear\n%s\nexit\n' "$user" "$user" | "$BIN" chat "$T/infer.yaml" >"$T/chat.log" 2>&1
check '[ "$(grep -c "Assistant: $want\$" "$T/chat.log")" -eq 2 ] && grep -q "History has been removed" "$T/chat.log"'
# two turns without "clear": the second continues the first's cache (its prompt begins with the first turn)
printf '%s\n%s\nexit\n' "$user" "$user" | "$BIN" chat "$T/infer.yaml" >"$T/chat2.log" 2>&1
check '[ "$(grep -c "Assistant: $want\$" "$T/chat2.log")" -ge 1 ] && [ "$(grep -c "Assistant:" "$T/chat2.log")" -eq 2 ] && ! grep -q "tandem: error" "$T/chat2.log"'
# an empty prompt is refused in one line (issue 24, item 5), in generate and in chat
"$BIN" generate "$T/infer.yaml" --prompt "" >"$T/empty.out" 2>"$T/empty.err"
rc=$?
check '[ $rc -eq 1 ] && [ ! -s "$T/empty.out" ] && [ "$(grep -c "tandem: error:" "$T/empty.err")" -eq 1 ] &&
  grep -q "tandem: error: generate: --prompt is empty" "$T/empty.err"'
printf '\n   \n%s\nexit\n' "$user" | "$BIN" chat "$T/infer.yaml" >"$T/chat3.log" 2>&1
check '[ "$(grep -c "an empty message" "$T/chat3.log")" -eq 2 ] && grep -q "Assistant: $want\$" "$T/chat3.log"'
got2=$("$BIN" generate "$T/infer.yaml" do_sample=true temperature=0.7 top_p=0.9 seed=1 --prompt "$user" 2>>"$T/gen.err")
check '[ -n "$got2" ]'
# --stats: time to first token and tokens/s on stderr, the answer unchanged on stdout
got3=$("$BIN" generate "$T/infer.yaml" --stats --prompt "$user" 2>"$T/stats.err")
check '[ "$got3" = "$want" ] && grep -q "prompt tokens, [0-9]* new tokens: time to first token [0-9.]* ms, then [0-9.]* tokens/s" "$T/stats.err"'
# the same seed samples the same answer
got4=$("$BIN" generate "$T/infer.yaml" do_sample=true temperature=0.7 top_p=0.9 seed=1 --prompt "$user" 2>>"$T/gen.err")
check '[ "$got4" = "$got2" ]'
"$BIN" generate "$T/infer.yaml" template=nosuch --prompt x >"$T/bad.log" 2>&1
check '[ "$(grep -c "tandem: error:" "$T/bad.log")" -eq 1 ]'
[ "$fails" -eq 0 ] || cat "$T/train.log" "$T/gen.err" "$T/chat.log" "$T/bad.log"
echo "test_chat: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
