#!/bin/sh
# A full disk at every write of a run never leaves a folder that looks finished (issue 24, item 1; README
# "The output folder"). Run A (2 steps) finishes in output_dir; run B (3 steps, a fresh start over it) then runs
# on a tmpfs of every size from what A's files take, one page (4 KB) more at a time, up to the size where B
# completes. Each file B writes needs a page of its own the first time, so every write of the run (logs,
# checkpoint files, final adapter, tokenizer files, results, the plot, all_results.json) is the one that fails at
# some size. After each failed B: exit 1 with one error line saying the disk is full, no "saved" line, and nothing
# in output_dir that claims a finished run: no results files, no loss plot, no adapter of A's. After the first
# B that succeeds: all_results.json and trainer_state.json say B's 3 steps.
# Needs to mount a tmpfs (root): skipped with the reason where that is not permitted, a failure with CI=true.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
EX=$TD/../examples
T=$(mktemp -d /tmp/tandem-diskfull-XXXXXX)
trap 'while umount "$T/mnt" 2>/dev/null; do :; done; rm -rf "$T"' EXIT
export TANDEM_CACHE_DIR=$T/cache
fails=0 checks=0
mkdir -p "$T/mnt"
if ! why=$(mount -t tmpfs -o size=64k tmpfs "$T/mnt" 2>&1); then
  [ "${CI:-}" = true ] && { echo "test_disk_full: FAIL: cannot mount a tmpfs in CI: $why"; exit 1; }
  echo "test_disk_full: skipped (cannot mount a tmpfs: $why; run as root)"
  exit 77
fi
umount "$T/mnt"

printf '{"model_type": "qwen2", "vocab_size": 320, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 256, "tie_word_embeddings": true}\n' \
  >"$T/tiny.json"
"$BIN" init-model "$T/tiny.json" "$T/model" --tokenizer "$TD/fixtures/lf_data/tok_q" >/dev/null
# run RUN_DIR STEPS LOG: the LoRA recipe, saving at its last step
run() {
  "$BIN" train "$EX/lf/qwen_lora_sft.yaml" model_name_or_path="$T/model" dataset=hi dataset_dir="$TD/fixtures/lf_data/data" \
    max_samples=8 gradient_accumulation_steps=1 max_steps="$2" save_steps="$2" overwrite_output_dir=true output_dir="$1" \
    >"$3" 2>&1
}
# unmount: retried, a process that just exited may still hold the mount for a moment
unmount() {
  for _ in 1 2 3 4 5 6 7 8 9 10; do umount "$T/mnt" 2>/dev/null && return 0; sleep 0.2; done
  echo "cannot unmount $T/mnt"; return 1
}
run "$T/A" 2 "$T/A.log"
check '[ $? -eq 0 ] && [ -f "$T/A/all_results.json" ]'
a_kb=$(du -sk "$T/A" | cut -f1)

# claims_nothing DIR: no file in DIR says a run finished there
claims_nothing() {
  for f in all_results.json train_results.json eval_results.json trainer_state.json training_loss.png; do
    [ -e "$1/$f" ] && { echo "  $f present"; return 1; }
  done
  if [ -f "$1/adapter_model.safetensors" ] && cmp -s "$1/adapter_model.safetensors" "$T/A/adapter_model.safetensors"; then
    echo "  run A's adapter_model.safetensors present"; return 1
  fi
  return 0
}

# sweep NAME FROM_KB [OVER]: B on a tmpfs of FROM_KB, FROM_KB + 4, ... until B completes; OVER: a finished run's
# folder copied into output_dir first (a size it does not fit in is passed over)
sweep() {
  kb=$2 done_ok=0 failed_runs=0
  : >"$T/failed_writes"
  while [ $kb -le 1024 ] && [ $done_ok -eq 0 ]; do
    mount -t tmpfs -o size=${kb}k tmpfs "$T/mnt" || { echo "mount of ${kb}k failed"; fails=$((fails + 1)); return; }
    if [ -z "${3:-}" ] || cp -a "$3" "$T/mnt/out" 2>/dev/null; then
      log=$T/$1-$kb.log
      run "$T/mnt/out" 3 "$log"
      rc=$?
      if [ $rc -eq 0 ]; then
        done_ok=1
        check 'grep -q "\"global_step\": 3" "$T/mnt/out/trainer_state.json" && [ -f "$T/mnt/out/all_results.json" ]'
      else
        failed_runs=$((failed_runs + 1))
        err=$(grep 'tandem: error:' "$log")
        echo "$err" | sed "s#^tandem: error: ##; s#$T/mnt/out/##; s#\.tmp\.[0-9]*##; s#: write failed: No space.*##" | cut -c1-80 \
          >>"$T/failed_writes"
        check '[ $rc -eq 1 ] && [ "$(grep -c "tandem: error:" "$log")" -eq 1 ] && echo "$err" | grep -q "No space left on device"' ||
          echo "  $1 at ${kb} KB: exit $rc: $err"
        check '! grep -q "saved .* to" "$log"'
        check 'claims_nothing "$T/mnt/out"' || echo "  $1 at ${kb} KB ($err)"
      fi
    fi
    unmount || { fails=$((fails + 1)); return; }
    kb=$((kb + 4))
  done
  echo "test_disk_full: $1: $failed_runs runs failed on a full disk, each at one of these writes (times):"
  sort "$T/failed_writes" | uniq -c | sed 's/^/    /'
  check '[ $done_ok -eq 1 ] && [ $failed_runs -ge 8 ]'
}
sweep empty 4            # every write of a run into an empty folder
sweep over-A $((a_kb + 4)) "$T/A" # the issue's case: a finished run's folder under it
[ "$fails" -eq 0 ] || tail -n 3 "$T"/*-*.log | tail -20
echo "test_disk_full: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
