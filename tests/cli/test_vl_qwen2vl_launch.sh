#!/bin/sh
# Issue 25's job as its user runs it: the verbatim Qwen2-VL LoRA config (tests/fixtures/issue25/qwen2vl_lora_sft.yaml:
# LoRA incl. embed_tokens, ds_z2_config.json, template qwen2_vl, dataset meisu_img_recognize in
# data/20250106_visionocr_meisutrain) on a tiny Qwen2-VL (`tandem init-model examples/tiny-qwen2-vl`), with a small
# image dataset of the same layout made at test time (scripts/make_vl_data.py ocr: digit strings, PNG and JPEG,
# different widths), launched with the issue's two commands, `tandem train` for `llamafactory-cli train`, as two
# nodes on this one machine (MASTER_ADDR=127.0.0.1, NCCL_SOCKET_IFNAME=lo; the nodes differ by RANK and
# CUDA_VISIBLE_DEVICES only). Overridden: model_name_or_path (the config's /data/models path) and the step count.
# Checked: one job of 4 ranks on 2 machines with the communication log; output_dir holds the PEFT adapter with
# the embedding adapter (lora_embedding_A/B on embed_tokens); and the same job as `tandem launch -n 4` on one
# machine gives the same adapter (bounds of test_dp_split.sh: relative L2 <= 1e-6, LoRA B within AdamW's bound).
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
ROOT=$TD/..
need_shared test_vl_qwen2vl_launch
need_mpirun test_vl_qwen2vl_launch
PY=/usr/bin/python3
"$PY" -c 'import PIL' 2>/dev/null || { echo "test_vl_qwen2vl_launch: FAIL: $PY has no PIL (apt-get install python3-pil)"; exit 1; }
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 TANDEM_CACHE_DIR
T=$(mktemp -d /tmp/tandem-q2vl-XXXXXX)
TANDEM_CACHE_DIR=$T/cache
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
mkdir -p "$T/lf/examples/deepspeed" "$T/lf/models"
cp "$SHARED/data/llamafactory/examples/deepspeed/ds_z2_config.json" "$T/lf/examples/deepspeed/"
cp "$TD/fixtures/issue25/qwen2vl_lora_sft.yaml" "$T/lf/"
cd "$T/lf" || exit 1
"$PY" "$ROOT/scripts/make_vl_data.py" ocr data/20250106_visionocr_meisutrain --n 16 >"$T/data.log" 2>&1
check '[ -s data/20250106_visionocr_meisutrain/meisu_img_recognize.json ]'
"$BIN" init-model "$ROOT/examples/tiny-qwen2-vl/config.json" models/Qwen2-VL-7B-Instruct \
  --tokenizer "$SHARED/data/tokenizers/qwen3" >"$T/init.log" 2>&1
# PENDING(i25m): until the VL models land, a tandem that cannot make a qwen2_vl model skips this test. The lead
# removes this block when merging them; from then on a failed init-model fails the checks below.
if [ ! -s models/Qwen2-VL-7B-Instruct/config.json ]; then
  echo "test_vl_qwen2vl_launch: skipped (tandem init-model cannot create a qwen2_vl model yet: $(grep -m1 . "$T/init.log"))"
  exit 77
fi
check 'grep -Eq "\"model_type\":[[:space:]]*\"qwen2_vl\"" models/Qwen2-VL-7B-Instruct/config.json'
OV="model_name_or_path=models/Qwen2-VL-7B-Instruct max_steps=3"
OUT=output/20250106_visionocr_meisutrain
PORT=$((20000 + $$ % 10000))
CMD="NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo FORCE_TORCHRUN=1 NNODES=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT"
env $CMD CUDA_VISIBLE_DEVICES=1,6 RANK=1 TANDEM_RDZV_TIMEOUT=120 timeout 500 "$BIN" train qwen2vl_lora_sft.yaml $OV \
  >"$T/n1.log" 2>&1 &
p1=$!
env $CMD CUDA_VISIBLE_DEVICES=6,7 RANK=0 TANDEM_RDZV_TIMEOUT=120 timeout 500 "$BIN" train qwen2vl_lora_sft.yaml $OV \
  >"$T/n0.log" 2>&1
rc0=$?
wait $p1
rc1=$?
check '[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]'
check 'grep -q "data parallel over 4 rank(s) on 2 machine(s)" "$T/n0.log"'
check 'grep -q "\[3\] tandem INFO rank 3 of 4: machine 1 of 2" "$T/n1.log"'
check 'grep -q "template qwen2_vl" "$T/n0.log"'
for f in adapter_config.json adapter_model.safetensors trainer_log.jsonl training_loss.png; do check '[ -s "$OUT/$f" ]'; done
check 'grep -aq "embed_tokens.lora_embedding_A" "$OUT/adapter_model.safetensors"'
cp -r "$OUT" "$T/two_nodes"
timeout 500 "$BIN" launch -n 4 --no-bind qwen2vl_lora_sft.yaml $OV >"$T/one.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
worst() { "$BIN" compare "$1" "$2" | awk -v pat="${3:-.}" -v ex="${4:-^$}" \
  '$1 ~ pat && $1 !~ ex && $2 == "rel" { if ($4 + 0 > w) w = $4 + 0 } END { printf "%.3e", w + 0 }'; }
maxdiff() { "$BIN" compare "$1" "$2" | awk -v pat="$3" \
  '$1 ~ pat && $5 == "max|diff|" { if ($6 + 0 > w) w = $6 + 0 } END { printf "%.3e", w + 0 }'; }
# LoRA B (and PEFT's embedding B) start at zero: within AdamW's bound for 3 steps, lr 1e-4, betas 0.9 / 0.999
bound=$(awk 'BEGIN { b1 = 0.9; b2 = 0.999; sum = 0
  for (s = 1; s <= 3; s++) { a = 0
    for (k = 1; k <= s; k++) { w = (1 - b1) * b1^(s - k) / (1 - b1^s); o = (1 - b2) * b2^(s - k) / (1 - b2^s); a += w * w / o }
    sum += sqrt(a) }
  printf "%.6e", 2 * 1e-4 * sum * 1.001 }')
w=$(worst "$OUT" "$T/two_nodes" . "lora_B|lora_embedding_B") d=$(maxdiff "$OUT" "$T/two_nodes" "lora_B|lora_embedding_B")
echo "two nodes x 2 ranks vs launch -n 4: worst rel L2 (A) $w, B max |diff| $d (bound $bound)"
check '"$BIN" compare "$OUT" "$T/two_nodes" >/dev/null && within "$w" 1e-6 && within "$d" "$bound"'
[ "$fails" -eq 0 ] || tail -n 6 "$T"/*.log
echo "test_vl_qwen2vl_launch: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
