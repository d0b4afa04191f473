#!/bin/sh
# A failed final save leaves no results claiming a finished run (issue 15, item 5): only the final model write
# fails (model.safetensors / adapter_model.safetensors in output_dir is a folder, so the write cannot be
# renamed into place; the checkpoints in checkpoint-N/ are written normally). The run exits non-zero with one
# error line; train_results.json, all_results.json and trainer_state.json are not in output_dir (the stale
# all_results.json of an earlier run is removed too); the last checkpoint is complete and resumable.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
T=$(mktemp -d /tmp/tandem-fsave-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0

for ft in full lora; do
  weights=model.safetensors
  [ $ft = lora ] && weights=adapter_model.safetensors
  mkdir -p "$T/$ft/$weights"
  echo '{"epoch": 3.0, "train_loss": 0.01}' >"$T/$ft/all_results.json" # an earlier run's
  "$BIN" train "$EX/demo_addition.yaml" finetuning_type=$ft max_steps=6 save_steps=3 output_dir="$T/$ft" \
    >"$T/$ft.log" 2>&1
  rc=$?
  echo "$ft: exit $rc: $(grep 'tandem: error' "$T/$ft.log")"
  check '[ $rc -ne 0 ] && [ "$(grep -c "tandem: error:" "$T/$ft.log")" -eq 1 ] && grep -q "tandem: error: .*$weights" "$T/$ft.log"'
  check '! grep -q "saved .* to" "$T/$ft.log"'
  for f in train_results.json all_results.json eval_results.json trainer_state.json; do
    check '[ ! -e "$T/$ft/$f" ]'
  done
  check '[ -f "$T/$ft/checkpoint-6/tandem_manifest.json" ] && [ ! -e "$T/$ft/checkpoint-6.partial" ]'
done
# the last checkpoint resumes (into a folder where the final save can succeed)
"$BIN" train "$EX/demo_addition.yaml" max_steps=6 resume_from_checkpoint="$T/full/checkpoint-6" output_dir="$T/again" \
  >"$T/again.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "resuming from .*checkpoint-6 (step 6 of 6)" "$T/again.log" && [ -f "$T/again/all_results.json" ]'

[ "$fails" -eq 0 ] || tail -n 5 "$T"/*.log
echo "test_final_save: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
