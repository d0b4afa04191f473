#!/bin/sh
# Predict (do_predict + predict_with_generate) on datasets with images, on tiny VL models (examples/tiny-qwen2-vl,
# tiny-qwen2.5-vl and tiny-qwen3-vl made by init-model with the real Qwen tokenizer, random weights drawn wide):
#  - LLaMA-Factory's mllm_demo (its images, two-turn records, one with two images): one line per record in dataset
#    order, each prompt exactly what LF writes (tests/tools/check_vl_predict.py rebuilds it from the record: the
#    template, every <image> expanded to the image's token count computed from the file's size); 2 ranks (launch -n 2,
#    batch 2) write the same file as 1 rank (batch 1);
#  - a single-turn set with different images and tags before or after the text, and a text-only record, predicted
#    greedily two at a time with image_max_pixels lowering the images: each prediction equals, token for token, what
#    `tandem generate --prompt TEXT --image FILE` answers (a fresh process per prompt), and the predictions are not all
#    the same (the check could not see an image given to the wrong example otherwise);
#  - an undecodable or missing image: one error line naming the dataset, record and file.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
ROOT=$TD/..
need_shared test_vl_predict
need_mpirun test_vl_predict
LF=$SHARED/data/llamafactory
if [ ! -f "$LF/mllm_demo.json" ]; then
  [ "${CI:-}" = true ] && { echo "test_vl_predict: FAIL: $LF/mllm_demo.json is required in CI"; exit 1; }
  echo "test_vl_predict: skipped ($LF/mllm_demo.json absent)"; exit 77
fi
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tandem-vlpredict-XXXXXX)
export TANDEM_CACHE_DIR=$T/cache
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fails=0 checks=0
mkdir -p "$T/data"
cp -r "$LF/dataset_info.json" "$LF/mllm_demo.json" "$LF/mllm_demo_data" "$T/data/"
chmod -R u+w "$T/data"
cp "$SHARED/ref/fixtures/qwen2vl-f32/images/image0.png" "$T/data/mllm_demo_data/4.png"
printf 'not an image' >"$T/data/mllm_demo_data/bad.jpg"
# the single-turn set (prompts that generate can take) and two broken ones, added to dataset_info.json
/usr/bin/python3 - "$T/data" <<'PY'
import json, sys
d = sys.argv[1]
def rec(q, img): return {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": "An answer."}],
                         "images": img}
one = [rec("<image>Who are they?", ["mllm_demo_data/1.jpg"]), rec("Describe this picture.<image>", ["mllm_demo_data/3.jpg"]),
       rec("What is the colour of the sky?", []), rec("<image>What is this?", ["mllm_demo_data/4.png"]),
       rec("<image>Who is he?", ["mllm_demo_data/2.jpg"])]
sets = {"vl_single": one, "vl_badfile": one[:1] + [rec("<image>And this?", ["mllm_demo_data/bad.jpg"])],
        "vl_missing": [rec("<image>And this?", ["mllm_demo_data/none.jpg"])]}
info = json.load(open(f"{d}/dataset_info.json"))
for name, rows in sets.items():
    json.dump(rows, open(f"{d}/{name}.json", "w"), indent=1)
    info[name] = dict(info["mllm_demo"], file_name=f"{name}.json")
json.dump(info, open(f"{d}/dataset_info.json", "w"), indent=1)
for i, r in enumerate(one):
    open(f"{d}/single_{i}.txt", "w").write(r["messages"][0]["content"])
PY
cd "$T" || exit 1
for ex in tiny-qwen2-vl:qwen2_vl tiny-qwen2.5-vl:qwen2_vl tiny-qwen3-vl:qwen3_vl; do
  name=${ex%%:*} tpl=${ex##*:}
  # weights drawn 25x wider than the config's 0.02: the answers then depend on the image (at 0.02 every one is "\n")
  sed 's/"initializer_range": 0.02/"initializer_range": 0.5/' "$ROOT/examples/$name/config.json" >"$name.json"
  "$BIN" init-model "$name.json" "$name" --tokenizer "$SHARED/data/tokenizers/qwen3" >"$name.init.log" 2>&1
  printf 'model_name_or_path: %s\nstage: sft\ndo_predict: true\npredict_with_generate: true\neval_dataset: mllm_demo\ndataset_dir: data\ntemplate: %s\ndo_sample: false\nmax_new_tokens: 6\n' \
    "$name" "$tpl" >"$name.yaml"
  if [ "$name" = tiny-qwen2-vl ]; then # LF's mllm_demo: the prompts, 1 rank == 2 ranks
    "$BIN" train "$name.yaml" output_dir=demo1 >demo1.log 2>&1
    rc=$?
    check '[ $rc -eq 0 ] && [ "$(wc -l <demo1/generated_predictions.jsonl)" -eq 6 ] && [ -s demo1/predict_results.json ]'
    check '/usr/bin/python3 "$TD/tools/check_vl_predict.py" demo1 data mllm_demo.json "$name/preprocessor_config.json" 589824 1024'
    "$BIN" launch -n 2 --no-bind "$name.yaml" output_dir=demo2 per_device_eval_batch_size=2 >demo2.log 2>&1
    rc=$?
    check '[ $rc -eq 0 ] && cmp -s demo1/generated_predictions.jsonl demo2/generated_predictions.jsonl'
  fi
  # single-turn prompts: predict (two at a time, images lowered by image_max_pixels) == generate
  K="image_max_pixels=40000"
  "$BIN" train "$name.yaml" eval_dataset=vl_single output_dir="single-$name" per_device_eval_batch_size=2 $K \
    >"single-$name.log" 2>&1
  rc=$?
  check '[ $rc -eq 0 ] && [ "$(wc -l <"single-$name/generated_predictions.jsonl")" -eq 5 ]'
  i=0
  for img in 1.jpg 3.jpg - 4.png 2.jpg; do
    set -- --prompt "$(cat "data/single_$i.txt")"
    [ "$img" != - ] && set -- "$@" --image "data/mllm_demo_data/$img"
    "$BIN" generate "$name.yaml" "$@" $K >"gen-$name-$i.out" 2>"gen-$name-$i.err"
    /usr/bin/python3 -c "import json, sys; l = open(sys.argv[1], encoding='utf-8').readlines()[$i]
sys.stdout.write(json.loads(l)['predict'] + '\n')" "single-$name/generated_predictions.jsonl" >"pred-$name-$i.out"
    check 'cmp -s "gen-$name-$i.out" "pred-$name-$i.out"'
    i=$((i + 1))
  done
  check '[ "$(cat pred-$name-*.out | sort -u | wc -l)" -gt 2 ]'
done
# a bad image: one line naming the dataset, the record and the file
"$BIN" train tiny-qwen2-vl.yaml eval_dataset=vl_badfile output_dir=bad >bad.log 2>&1
rc=$?
check '[ $rc -ne 0 ] && [ "$(grep -c "error" bad.log)" -eq 1 ] && grep "tandem: error:" bad.log | grep -q "vl_badfile.*record 1.*bad.jpg"'
check '[ ! -e bad/generated_predictions.jsonl ]'
"$BIN" train tiny-qwen2-vl.yaml eval_dataset=vl_missing output_dir=bad >missing.log 2>&1
rc=$?
check '[ $rc -ne 0 ] && [ "$(grep -c "error" missing.log)" -eq 1 ] && grep "tandem: error:" missing.log | grep -q "vl_missing.*record 0.*none.jpg"'
[ "$fails" -eq 0 ] || tail -n 4 "$T"/*.log "$T"/gen-*.err
echo "test_vl_predict: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
