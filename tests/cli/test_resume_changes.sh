#!/bin/sh
# Resumes that say what changed (issue 15, items 3 and 4): a run resumed with another learning_rate,
# max_steps, seed or per_device_train_batch_size, or on another number of ranks, prints one line per changed
# key (old -> new, and the global batch when it follows); an unchanged resume prints none; a change that makes
# resuming meaningless (finetuning_type, lora_rank, lora_alpha, lora_target) is refused with one line. When
# every checkpoint in output_dir is damaged the run stops with one line instead of training from step 0,
# unless overwrite_output_dir.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
need_mpirun test_resume_changes
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
T=$(mktemp -d /tmp/tandem-rchg-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
ARGS="max_steps=10 save_steps=5 logging_steps=5 overwrite_output_dir=false per_device_train_batch_size=16"
train() { out=$1; shift; "$BIN" train "$EX/demo_addition.yaml" $ARGS output_dir="$out" "$@" >"$out.log" 2>&1; }
# from A/checkpoint-5 into a fresh output_dir
from5() { rm -rf "$2"; mkdir -p "$2"; cp -r "$T/$1/checkpoint-5" "$2/"; }
changes() { grep -c "note: .* changed since checkpoint-5: " "$1"; }

train "$T/full"
train "$T/lora" finetuning_type=lora lora_rank=4
check '[ -f "$T/full/checkpoint-5/tandem_manifest.json" ] && [ -f "$T/lora/checkpoint-5/tandem_manifest.json" ]'

# unchanged: no line
from5 full "$T/same"
train "$T/same"
check 'grep -q "resuming from .*checkpoint-5" "$T/same.log" && [ "$(changes "$T/same.log")" -eq 0 ]'

# four keys changed: one line each, old -> new, plus the global batch
from5 full "$T/four"
train "$T/four" learning_rate=1e-3 max_steps=12 seed=7 per_device_train_batch_size=8
grep "changed since" "$T/four.log"
check 'grep -q "note: learning_rate changed since checkpoint-5: 0.002 -> 0.001$" "$T/four.log"'
check 'grep -q "note: max_steps changed since checkpoint-5: 10 -> 12$" "$T/four.log"'
check 'grep -q "note: seed changed since checkpoint-5: 42 -> 7$" "$T/four.log"'
check 'grep -q "note: per_device_train_batch_size changed since checkpoint-5: 16 -> 8$" "$T/four.log"'
check 'grep -q "note: global batch .* changed since checkpoint-5: 16 -> 8$" "$T/four.log"'
check '[ "$(changes "$T/four.log")" -eq 5 ] && grep -q "resuming from .*checkpoint-5 (step 5 of 12)" "$T/four.log"'

# the number of ranks: 1 -> 2 with the same per-rank batch doubles the global batch
from5 full "$T/ranks"
OMP_NUM_THREADS=1 mpirun -n 2 -x OMP_NUM_THREADS "$BIN" train "$EX/demo_addition.yaml" $ARGS output_dir="$T/ranks" \
  >"$T/ranks.log" 2>&1
check 'grep -q "note: ranks changed since checkpoint-5: 1 -> 2$" "$T/ranks.log"'
check 'grep -q "note: global batch .* changed since checkpoint-5: 16 -> 32$" "$T/ranks.log"'
check '[ "$(changes "$T/ranks.log")" -eq 2 ] && [ -f "$T/ranks/model.safetensors" ]'

# changes that make resuming meaningless: refused, one line, nothing trained
for change in "lora lora_alpha=32 lora_alpha" "lora lora_rank=8 lora_rank" "lora lora_target=q_proj lora_target" \
  "full finetuning_type=lora finetuning_type"; do
  set -- $change
  base=$1 kv=$2 key=$3
  from5 "$base" "$T/refused"
  extra=""
  [ "$base" = lora ] && extra="finetuning_type=lora lora_rank=4"
  train "$T/refused" $extra "$kv"
  rc=$?
  grep "tandem: error" "$T/refused.log"
  check '[ $rc -ne 0 ] && [ "$(grep -c "tandem: error:" "$T/refused.log")" -eq 1 ] && grep -q "tandem: error: .*: $key changed since .*checkpoint-5: " "$T/refused.log"'
  check '! grep -q "resuming from" "$T/refused.log" && [ ! -d "$T/refused/checkpoint-10" ]'
done

# every checkpoint damaged: one line, nothing trained; overwrite_output_dir starts over
mkdir -p "$T/torn"
cp -r "$T/full/checkpoint-5" "$T/full/checkpoint-10" "$T/torn/"
truncate -s 1000 "$T/torn/checkpoint-10/model.safetensors"
printf 'x' >>"$T/torn/checkpoint-5/optimizer.safetensors"
train "$T/torn"
rc=$?
grep "tandem: error" "$T/torn.log"
check '[ $rc -ne 0 ] && [ "$(grep -c "tandem: error:" "$T/torn.log")" -eq 1 ] && grep -q "tandem: error: .*holds checkpoints but none verifies" "$T/torn.log"'
check '[ "$(grep -c "skipping .*torn/checkpoint-" "$T/torn.log")" -eq 2 ] && [ ! -f "$T/torn/model.safetensors" ]'
train "$T/torn" overwrite_output_dir=true
rc=$?
check '[ $rc -eq 0 ] && ! grep -q "resuming" "$T/torn.log" && cmp -s "$T/full/model.safetensors" "$T/torn/model.safetensors"'

[ "$fails" -eq 0 ] || tail -n 5 "$T"/*.log
echo "test_resume_changes: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
