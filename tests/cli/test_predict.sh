#!/bin/sh
# Predict as LLaMA-Factory does it (do_predict + predict_with_generate): its examples/extras/nlg_eval/
# llama3_lora_predict.yaml runs unchanged from a folder laid out as an LF checkout, with a tiny Llama-3 (real
# Llama-3 tokenizer) and a LoRA adapter trained into the path the YAML names; only model_name_or_path and
# max_new_tokens are given on the command line. tests/tools/check_predict.py checks the outputs independently
# (dataset order, prompt / predict / label, byte format, every metric recomputed with nltk and a Python ROUGE).
# Then: greedy on 1 rank == greedy under `tandem launch -n 2` (ranks split the examples, rank 0 writes them in
# order); sampled with batch 1 == sampled with batch 4 (per-example seeds); qwen3's empty thought opens the label.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
ROOT=$TD/..
need_shared test_predict
need_mpirun test_predict
if ! /usr/bin/python3 -c 'import nltk' 2>/dev/null; then
  [ "${CI:-}" = true ] && { echo "test_predict: FAIL: python3-nltk missing (scripts/install-deps.sh)"; exit 1; }
  echo "test_predict: skipped (python3-nltk missing: scripts/install-deps.sh)"; exit 77
fi
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tandem-predict-XXXXXX)
export TANDEM_CACHE_DIR=$T/cache
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
LF=$SHARED/data/llamafactory
mkdir -p "$T/lf/data" "$T/lf/models"
cp "$LF/dataset_info.json" "$LF/identity.json" "$LF/alpaca_en_demo.json" "$T/lf/data/"
cp -r "$LF/examples" "$T/lf/examples"
cd "$T/lf" || exit 1
cat >"$T/llama.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 64,
 "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 4096, "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": true,
 "initializer_range": 0.02, "bos_token_id": 128000, "eos_token_id": 128009, "torch_dtype": "float32"}
JSON
"$BIN" init-model "$T/llama.json" models/llama3 --tokenizer "$SHARED/data/tokenizers/llama3" >"$T/init.log" 2>&1
"$BIN" init-model "$ROOT/examples/tiny-qwen3/config.json" models/qwen3 --tokenizer "$SHARED/data/tokenizers/qwen3" >>"$T/init.log" 2>&1
# the adapter the predict YAML reads (saves/llama3-8b/lora/sft), trained briefly
"$BIN" train examples/train_lora/qwen3_lora_sft.yaml model_name_or_path=models/llama3 template=llama3 \
  output_dir=saves/llama3-8b/lora/sft max_steps=2 max_samples=16 >"$T/train.log" 2>&1
check '[ -s saves/llama3-8b/lora/sft/adapter_model.safetensors ]'

P=saves/llama3-8b/lora/predict
"$BIN" train examples/extras/nlg_eval/llama3_lora_predict.yaml model_name_or_path=models/llama3 max_new_tokens=16 \
  >"$T/predict.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "tandem: predict: 100 examples" "$T/predict.log"'
/usr/bin/python3 "$TD/tools/check_predict.py" "$P" data identity,alpaca_en_demo 50 >"$T/check.out" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
cat "$T/check.out"
check '! grep -q "saved LoRA adapter\|trained " "$T/predict.log"' # do_train unset: LF's default false

# greedy: one rank, two ranks (launch), batch sizes 1 and 3
K="model_name_or_path=models/llama3 max_new_tokens=12 max_samples=5 do_sample=false"
"$BIN" train examples/extras/nlg_eval/llama3_lora_predict.yaml $K output_dir=g1 >"$T/g1.log" 2>&1
"$BIN" launch -n 2 --no-bind examples/extras/nlg_eval/llama3_lora_predict.yaml $K output_dir=g2 \
  per_device_eval_batch_size=3 >"$T/g2.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && [ "$(wc -l <g1/generated_predictions.jsonl)" -eq 10 ] && cmp -s g1/generated_predictions.jsonl g2/generated_predictions.jsonl'
check '/usr/bin/python3 "$TD/tools/check_predict.py" g2 data identity,alpaca_en_demo 5 >/dev/null'
# sampled: the same seed gives the same lines at batch 1 and batch 4
S="model_name_or_path=models/llama3 max_new_tokens=12 max_samples=4 seed=7"
"$BIN" train examples/extras/nlg_eval/llama3_lora_predict.yaml $S output_dir=s1 >"$T/s1.log" 2>&1
"$BIN" train examples/extras/nlg_eval/llama3_lora_predict.yaml $S output_dir=s4 per_device_eval_batch_size=4 >"$T/s4.log" 2>&1
check 'cmp -s s1/generated_predictions.jsonl s4/generated_predictions.jsonl && ! cmp -s s1/generated_predictions.jsonl g1/generated_predictions.jsonl'

# qwen3 (reasoning template, enable_thinking default true): the label opens with the empty thought; prompts end at
# the assistant header
printf 'model_name_or_path: models/qwen3\nstage: sft\ndo_predict: true\npredict_with_generate: true\neval_dataset: identity\ntemplate: qwen3\nmax_samples: 3\nmax_new_tokens: 4\noutput_dir: q3\n' >"$T/q3.yaml"
"$BIN" train "$T/q3.yaml" dataset_dir=data >"$T/q3.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && /usr/bin/python3 -c "
import json, sys
ls = [json.loads(l) for l in open(\"q3/generated_predictions.jsonl\")]
sys.exit(not (len(ls) == 3 and all(l[\"label\"].startswith(\"<think>\\n\\n</think>\\n\\n\") and l[\"prompt\"].endswith(\"<|im_start|>assistant\\n\") for l in ls)))"'
# errors: one line each
"$BIN" train "$T/q3.yaml" dataset_dir=data predict_with_generate=false >"$T/e1.log" 2>&1
check '[ "$(grep -c "tandem: error:.*predict_with_generate" "$T/e1.log")" -eq 1 ]'
"$BIN" train "$T/q3.yaml" dataset_dir=data eval_dataset=nosuch >"$T/e2.log" 2>&1
check '[ "$(grep -c "tandem: error:" "$T/e2.log")" -eq 1 ] && grep -q nosuch "$T/e2.log"'

[ "$fails" -eq 0 ] || tail -n 5 "$T"/*.log
echo "test_predict: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
