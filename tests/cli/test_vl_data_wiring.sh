#!/bin/sh
# Vision-language data from the YAML to the trainer, with today's text models (issue 25). From a folder laid
# out as LLaMA-Factory's (data/ with mllm_demo and its images, identity), a tiny Qwen3 text model given a
# Qwen2-VL preprocessor_config.json:
#  - the VL keys of LLaMA-Factory's YAMLs are read (image_max_pixels, image_min_pixels, media_dir, the three
#    freeze_* flags); video/audio settings are accepted with one note that videos and audio are not supported;
#  - image_max_pixels reaches the image pre-resize: a smaller bound gives shorter mllm_demo samples (fewer
#    <|image_pad|> tokens), a larger one longer;
#  - media_dir reaches the images column: the images moved elsewhere are found through it, and a wrong one is
#    one error line naming the dataset, record and image file;
#  - the mixed dataset (mllm_demo,identity,alpaca_en_demo) on the text model stops before the first step with
#    one line, the model's refusal naming the dataset and its model_type, on 1 rank and on 2 ranks under ZeRO-3
#    and DiLoCo; no output folder is written;
#  - predicting from an image dataset with the text model is one line naming the model_type, not the <image> tags
#    read as text (predicting from images with a VL model: test_vl_predict.sh).
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
ROOT=${TANDEM_TESTS_DIR:?}/..
need_shared test_vl_data_wiring
need_mpirun test_vl_data_wiring
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 TANDEM_CACHE_DIR
T=$(mktemp -d /tmp/tandem-vlwire-XXXXXX)
TANDEM_CACHE_DIR=$T/cache
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
LF=$SHARED/data/llamafactory
mkdir -p "$T/lf/data" "$T/lf/models"
cp "$LF/dataset_info.json" "$LF/identity.json" "$LF/alpaca_en_demo.json" "$LF/mllm_demo.json" "$T/lf/data/"
cp -r "$LF/mllm_demo_data" "$T/lf/data/"
cd "$T/lf" || exit 1
"$BIN" init-model "$ROOT/examples/tiny-qwen3/config.json" models/qwen3 --tokenizer "$SHARED/data/tokenizers/qwen3" \
  >"$T/init.log" 2>&1
# Qwen2-VL's image processor (transformers' Qwen2VLImageProcessor defaults)
cat >models/qwen3/preprocessor_config.json <<'JSON'
{"patch_size": 14, "temporal_patch_size": 2, "merge_size": 2, "min_pixels": 3136, "max_pixels": 12845056,
 "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
 "rescale_factor": 0.00392156862745098, "do_resize": true, "resample": 3, "do_rescale": true,
 "do_normalize": true, "do_convert_rgb": true, "image_processor_type": "Qwen2VLImageProcessor"}
JSON
cat >vl.yaml <<'YAML'
model_name_or_path: models/qwen3
image_max_pixels: 65536
video_max_pixels: 16384
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
freeze_vision_tower: true
freeze_multi_modal_projector: true
freeze_language_model: false
dataset: mllm_demo,identity,alpaca_en_demo
template: qwen2_vl
cutoff_len: 1024
max_samples: 20
output_dir: saves/vl
per_device_train_batch_size: 2
max_steps: 2
YAML
refusal="vl.yaml: key 'dataset': mllm_demo,identity,alpaca_en_demo has images \\(6 of 46 training samples\\); model_type qwen3: this model takes no images"
one_error() { # log pattern: exactly one "tandem: error:" line, and it matches pattern
  [ "$(grep -c 'tandem: error:' "$1")" -eq 1 ] && grep 'tandem: error:' "$1" | grep -Eq -e "$2"
}
longest() { sed -n 's/.*(longest \([0-9]*\) tokens).*/\1/p' "$1" | head -1; }

"$BIN" train vl.yaml >"$T/one.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && one_error "$T/one.log" "$refusal"'
check 'grep -q "video_max_pixels.*videos and audio are not supported yet" "$T/one.log"'
check '[ ! -e saves/vl ]'
for mode in zero_stage=3 "sync_mode=diloco diloco_inner_steps=2"; do
  timeout 300 "$BIN" launch -n 2 --no-bind vl.yaml $mode >"$T/two.log" 2>&1
  rc=$?
  check '[ $rc -ne 0 ] && one_error "$T/two.log" "$refusal"'
  check '[ ! -e saves/vl ]'
done

# image_max_pixels reaches the pre-resize: mllm_demo alone, its longest sample grows with the bound
for px in 4096 16384 65536; do
  "$BIN" train vl.yaml dataset=mllm_demo image_max_pixels=$px >"$T/px$px.log" 2>&1
done
a=$(longest "$T/px4096.log") b=$(longest "$T/px16384.log") c=$(longest "$T/px65536.log")
echo "longest mllm_demo sample at image_max_pixels 4096 / 16384 / 65536 (images of about 50000 pixels): ${a:-?} / ${b:-?} / ${c:-?} tokens"
check '[ -n "$a" ] && [ -n "$b" ] && [ -n "$c" ] && [ "$a" -lt "$b" ] && [ "$b" -lt "$c" ]'

# media_dir: the images elsewhere, found through it; a wrong one names the record and the file
mkdir -p "$T/media" && mv data/mllm_demo_data "$T/media/"
"$BIN" train vl.yaml media_dir="$T/media" >"$T/media.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && one_error "$T/media.log" "$refusal"'
"$BIN" train vl.yaml media_dir="$T/nowhere" >"$T/nomedia.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && one_error "$T/nomedia.log" "mllm_demo.*record 0.*mllm_demo_data/1.jpg"'
mv "$T/media/mllm_demo_data" data/

# predict from images on the text model: one line, not the tags read as text
"$BIN" train vl.yaml do_train=false do_predict=true predict_with_generate=true eval_dataset=mllm_demo \
  max_new_tokens=2 output_dir=saves/p >"$T/pred.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && one_error "$T/pred.log" "key .eval_dataset.: mllm_demo has 8 image\\(s\\); model_type qwen3 takes no images"'
[ "$fails" -eq 0 ] || tail -n 4 "$T"/*.log
echo "test_vl_data_wiring: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
