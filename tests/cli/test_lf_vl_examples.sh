#!/bin/sh
# LLaMA-Factory's own Qwen3-VL examples, unchanged (issue 25). A folder is laid out as a LLaMA-Factory checkout
# (data/ with dataset_info.json, mllm_demo and its images, identity, alpaca_en_demo; examples/ byte for byte from
# ../shared), a tiny Qwen3-VL is made with the real Qwen3 tokenizer (`tandem init-model examples/tiny-qwen3-vl`),
# and each YAML runs from that folder with nothing overridden but model_name_or_path and the step count:
#  - train_lora/qwen3vl_lora_sft.yaml (mllm_demo,identity,alpaca_en_demo mixed) on 1 rank and on 2 ranks; the
#    adapter holds LoRA on the language model only (freeze_vision_tower's default keeps `lora_target: all` off
#    the vision tower and projector, as LLaMA-Factory's find_all_linear_modules does);
#  - the same global batch split as 1 rank x accumulation 8 and 2 ranks x accumulation 4 gives the same adapter:
#    every rank hands each micro-batch's own images to the model (samples carry different numbers of image
#    tokens). Bounds as test_dp_split.sh: relative L2 <= 1e-6 per tensor, LoRA B element by element within
#    AdamW's bound for two correct runs (betas 0.9 / 0.999 here, LF's defaults);
#  - train_full/qwen3vl_full_sft.yaml with its ds_z3_config.json on 1 and 2 ranks (ZeRO stage 3, the same
#    parameters for the same global batch); on image batches its freeze flags keep the vision tower and projector
#    bit-identical while the language model moves, freeze_vision_tower false trains the tower (not the projector),
#    and LoRA with the tower unfrozen is one line;
#  - sync_mode diloco on 2 ranks carries the VL batches too;
#  - merge_lora/qwen3vl_lora_sft.yaml merges the adapter (with the processor and tokenizer files beside it);
#    inference/qwen3vl.yaml generates from an image and a prompt.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
ROOT=$TD/..
need_shared test_lf_vl_examples
need_mpirun test_lf_vl_examples
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 TANDEM_CACHE_DIR
T=$(mktemp -d /tmp/tandem-lfvl-XXXXXX)
TANDEM_CACHE_DIR=$T/cache
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
LF=$SHARED/data/llamafactory

mkdir -p "$T/lf/data" "$T/lf/models"
cp "$LF/dataset_info.json" "$LF/identity.json" "$LF/alpaca_en_demo.json" "$LF/mllm_demo.json" "$T/lf/data/"
cp -r "$LF/mllm_demo_data" "$T/lf/data/"
cp -r "$LF/examples" "$T/lf/examples"
cd "$T/lf" || exit 1
"$BIN" init-model "$ROOT/examples/tiny-qwen3-vl/config.json" models/qwen3vl --tokenizer "$SHARED/data/tokenizers/qwen3" \
  >"$T/init.log" 2>&1
# PENDING(i25m): until the VL models land, a tandem that cannot make a qwen3_vl model skips this test. The lead
# removes this block when merging them; from then on a failed init-model fails the checks below.
if [ ! -s models/qwen3vl/config.json ]; then
  echo "test_lf_vl_examples: skipped (tandem init-model cannot create a qwen3_vl model yet: $(grep -m1 . "$T/init.log"))"
  exit 77
fi
check 'grep -Eq "\"model_type\":[[:space:]]*\"qwen3_vl\"" models/qwen3vl/config.json && [ -s models/qwen3vl/preprocessor_config.json ]'
M="model_name_or_path=models/qwen3vl"

run() { # NAME COMMAND...: one example; its log in $T/NAME.log, exit status checked
  name=$1; shift
  "$@" >"$T/$name.log" 2>&1
  rc=$?
  check '[ $rc -eq 0 ]' || true
  [ $rc -eq 0 ] || { echo "--- $name:"; tail -n 8 "$T/$name.log"; }
}
lf_outputs() { # DIR FILES...: LLaMA-Factory's output folder
  d=$1; shift
  for f in trainer_log.jsonl trainer_state.json train_results.json all_results.json training_loss.png "$@"; do
    check '[ -s "$d/$f" ]'
  done
}
worst() { # A B [PATTERN [EXCLUDE]]: the worst relative L2 distance over the tensors matching PATTERN, not EXCLUDE
  "$BIN" compare "$1" "$2" | awk -v pat="${3:-.}" -v ex="${4:-^$}" \
    '$1 ~ pat && $1 !~ ex && $2 == "rel" { if ($4 + 0 > w) w = $4 + 0 } END { printf "%.3e", w + 0 }'
}
maxdiff() { # A B PATTERN: the largest element difference over the tensors matching PATTERN
  "$BIN" compare "$1" "$2" | awk -v pat="$3" '$1 ~ pat && $5 == "max|diff|" { if ($6 + 0 > w) w = $6 + 0 } END { printf "%.3e", w + 0 }'
}
adamw_bound() { # LR STEPS: 2 lr sum_s A_s, A_s = sqrt(sum_k w_k^2 / o_k) (test_dp_split.sh), betas 0.9 / 0.999
  awk -v lr="$1" -v t="$2" 'BEGIN { b1 = 0.9; b2 = 0.999; sum = 0
    for (s = 1; s <= t; s++) { a = 0
      for (k = 1; k <= s; k++) { w = (1 - b1) * b1^(s - k) / (1 - b1^s); o = (1 - b2) * b2^(s - k) / (1 - b2^s); a += w * w / o }
      sum += sqrt(a) }
    printf "%.6e", 2 * lr * sum * 1.001 }'
}
LORA=examples/train_lora/qwen3vl_lora_sft.yaml FULL=examples/train_full/qwen3vl_full_sft.yaml

run lora_sft "$BIN" train $LORA $M max_steps=2
lf_outputs saves/qwen3-vl-4b/lora/sft adapter_config.json adapter_model.safetensors
check 'grep -q "template qwen3_vl_nothink" "$T/lora_sft.log"'
check 'grep -aq "language_model.*lora_A\|layers\.0\..*lora_A" saves/qwen3-vl-4b/lora/sft/adapter_model.safetensors'
check '! grep -aq "visual" saves/qwen3-vl-4b/lora/sft/adapter_model.safetensors'
cp -r saves/qwen3-vl-4b/lora/sft "$T/lora_1rank"
run lora_sft_2 "$BIN" launch -n 2 --no-bind $LORA $M max_steps=2 gradient_accumulation_steps=4
check 'grep -q "data parallel over 2 rank" "$T/lora_sft_2.log"'
lf_outputs saves/qwen3-vl-4b/lora/sft adapter_config.json adapter_model.safetensors
w=$(worst saves/qwen3-vl-4b/lora/sft "$T/lora_1rank" . lora_B) d=$(maxdiff saves/qwen3-vl-4b/lora/sft "$T/lora_1rank" lora_B)
bound=$(adamw_bound 1e-4 2)
echo "LoRA, 1 rank x accumulation 8 vs 2 ranks x 4: worst rel L2 (not lora_B) $w, lora_B max |diff| $d (bound $bound)"
check '"$BIN" compare saves/qwen3-vl-4b/lora/sft "$T/lora_1rank" >/dev/null && within "$w" 1e-6 && within "$d" "$bound"'

run full_sft "$BIN" train $FULL $M max_steps=2
lf_outputs saves/qwen3-vl-4b/full/sft config.json model.safetensors tokenizer.json preprocessor_config.json
cp -r saves/qwen3-vl-4b/full/sft "$T/full_1rank"
# the freeze flags, on batches that hold images (mllm_demo alone): by default the vision tower and the projector
# stay bit-identical and the language model moves; freeze_vision_tower false trains the tower, not the projector
run freeze "$BIN" train $FULL $M max_steps=2 dataset=mllm_demo warmup_ratio=0 output_dir=saves/freeze
check '[ "$(worst models/qwen3vl saves/freeze visual)" = "0.000e+00" ]'
check '! within "$(worst models/qwen3vl saves/freeze "layers" visual)" 0'
run unfrozen "$BIN" train $FULL $M max_steps=2 dataset=mllm_demo warmup_ratio=0 freeze_vision_tower=false \
  output_dir=saves/unfrozen
check '! within "$(worst models/qwen3vl saves/unfrozen "visual.blocks")" 0'
check '[ "$(worst models/qwen3vl saves/unfrozen "visual.merger[.]")" = "0.000e+00" ]'
# LoRA with the tower unfrozen would put adapters on it (LLaMA-Factory): one line, not another model
"$BIN" train $LORA $M max_steps=1 freeze_vision_tower=false output_dir=saves/lv >"$T/lv.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && [ "$(grep -c "tandem: error:" "$T/lv.log")" -eq 1 ] && grep -q "would put LoRA on the vision tower" "$T/lv.log"'
run full_sft_2 "$BIN" launch -n 2 --no-bind $FULL $M max_steps=2 gradient_accumulation_steps=1
check 'grep -q "ZeRO stage 3" "$T/full_sft_2.log"'
w=$(worst saves/qwen3-vl-4b/full/sft "$T/full_1rank")
echo "full SFT (ds_z3), 1 rank x accumulation 2 vs 2 ranks x 1: worst rel L2 $w"
check '"$BIN" compare saves/qwen3-vl-4b/full/sft "$T/full_1rank" >/dev/null && within "$w" 1e-6'
run diloco_2 "$BIN" launch -n 2 --no-bind $LORA $M max_steps=2 sync_mode=diloco diloco_inner_steps=1 output_dir=saves/dl
check '[ -s saves/dl/adapter_model.safetensors ]'

# merge the 1-rank adapter (the merge YAML reads saves/qwen3-vl-4b/lora/sft), then the inference YAML
rm -rf saves/qwen3-vl-4b/lora/sft && cp -r "$T/lora_1rank" saves/qwen3-vl-4b/lora/sft
run merge "$BIN" export examples/merge_lora/qwen3vl_lora_sft.yaml $M
for f in model.safetensors config.json tokenizer.json preprocessor_config.json; do
  check '[ -s saves/qwen3_vl_sft_merged/$f ]'
done
run generate "$BIN" generate examples/inference/qwen3vl.yaml $M max_new_tokens=4 --image data/mllm_demo_data/1.jpg \
  --prompt "<image>Who are they?"
run generate_merged "$BIN" generate examples/inference/qwen3vl.yaml model_name_or_path=saves/qwen3_vl_sft_merged \
  max_new_tokens=4 --image data/mllm_demo_data/2.jpg --prompt "<image>Who is he?"

[ "$fails" -eq 0 ] || tail -n 5 "$T"/*.log
echo "test_lf_vl_examples: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
