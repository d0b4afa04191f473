#!/bin/sh
# Checkpoints and resume (LLaMA-Factory's rules): a run resumed from checkpoint-5 ends bit-identical to the
# uninterrupted run (full and LoRA with dropout), also when the resumed part runs on 2 ranks (same global
# batch: then within the split-invariance bound of test_dp_split.sh); auto-resume from the newest complete
# checkpoint unless overwrite_output_dir; a checkpoint truncated on disk is skipped (named) in favour of
# the previous one; save_total_limit keeps the newest; weights without checkpoints are not overwritten.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
T=$(mktemp -d /tmp/tandem-resume-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
train() { out=$1; shift; "$BIN" train "$EX/demo_addition.yaml" max_steps=10 save_steps=5 logging_steps=5 \
  overwrite_output_dir=false per_device_train_batch_size=16 output_dir="$out" "$@" >"$out.log" 2>&1; }
weights() { [ -f "$1/model.safetensors" ] && echo "$1/model.safetensors" || echo "$1/adapter_model.safetensors"; }

for ft in full lora; do
  extra=""
  [ $ft = lora ] && extra="finetuning_type=lora lora_rank=4 lora_dropout=0.1"
  train "$T/$ft-a" $extra
  check '[ -d "$T/$ft-a/checkpoint-5" ] && [ -d "$T/$ft-a/checkpoint-10" ] && [ -f "$T/$ft-a/checkpoint-5/tandem_manifest.json" ]'
  mkdir -p "$T/$ft-b"
  cp -r "$T/$ft-a/checkpoint-5" "$T/$ft-b/"
  train "$T/$ft-b" $extra # auto-resume: output_dir holds a checkpoint
  check 'grep -q "resuming from .*checkpoint-5 (step 5 of 10)" "$T/$ft-b.log"'
  check 'cmp -s "$(weights "$T/$ft-a")" "$(weights "$T/$ft-b")"'
  # the same checkpoint resumed on 2 ranks (per-rank batch halved: the same global batch)
  mkdir -p "$T/$ft-c"
  cp -r "$T/$ft-a/checkpoint-5" "$T/$ft-c/"
  OMP_NUM_THREADS=1 mpirun -n 2 -x OMP_NUM_THREADS "$BIN" train "$EX/demo_addition.yaml" max_steps=10 save_steps=5 \
    logging_steps=5 overwrite_output_dir=false per_device_train_batch_size=8 output_dir="$T/$ft-c" $extra \
    >"$T/$ft-c.log" 2>&1
  check 'grep -q "resuming from" "$T/$ft-c.log"'
  check '"$BIN" compare "$T/$ft-c" "$T/$ft-a" --quiet --max-rel-l2 1e-5 >/dev/null'
done
# explicit resume_from_checkpoint, with overwrite_output_dir true (which alone would start afresh)
train "$T/full-d" resume_from_checkpoint="$T/full-a/checkpoint-5" overwrite_output_dir=true
check 'cmp -s "$T/full-a/model.safetensors" "$T/full-d/model.safetensors"'
# a torn checkpoint-10 (file truncated) is skipped, checkpoint-5 used
mkdir -p "$T/full-e"
cp -r "$T/full-a/checkpoint-5" "$T/full-a/checkpoint-10" "$T/full-e/"
truncate -s 1000 "$T/full-e/checkpoint-10/model.safetensors"
train "$T/full-e"
check 'grep -q "skipping .*checkpoint-10: .*model.safetensors: 1000 bytes" "$T/full-e.log"'
check 'grep -q "resuming from .*checkpoint-5" "$T/full-e.log"'
check 'cmp -s "$T/full-a/model.safetensors" "$T/full-e/model.safetensors"'
# save_total_limit 1: only the newest checkpoint stays
train "$T/full-f" save_total_limit=1 save_steps=3
check '[ -d "$T/full-f/checkpoint-10" ] && [ ! -d "$T/full-f/checkpoint-9" ] && [ ! -d "$T/full-f/checkpoint-3" ]'
check '[ -z "$(ls "$T/full-f" | grep partial)" ]'
# trained weights and no checkpoint, overwrite_output_dir false: refused, nothing touched
mkdir -p "$T/full-g"
cp "$T/full-a/model.safetensors" "$T/full-a/config.json" "$T/full-g/"
train "$T/full-g" save_steps=0
rc=$?
check '[ $rc -ne 0 ] && grep -q "tandem: error: .*already holds a trained model" "$T/full-g.log"'
check 'cmp -s "$T/full-a/model.safetensors" "$T/full-g/model.safetensors"'
[ "$fails" -eq 0 ] || tail -n 5 "$T"/*.log
echo "test_resume: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
