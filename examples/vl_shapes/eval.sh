#!/bin/sh
# eval.sh MODEL_DIR DATA_DIR [CONFIG]: held-out accuracy of the shapes task (scripts/make_vl_data.py shapes): for
# every record of DATA_DIR/shapes_eval.json (images never trained on), greedy generation from the image and the
# question. MODEL_DIR is a LoRA adapter (adapter_config.json: on the base model of CONFIG, default
# examples/vl_shapes/vl_shapes_lora.yaml) or a fully fine-tuned model folder (used as the model itself). A record
# counts as right when the answer starts with "<colour> <shape>". Prints one line per miss, then
# "accuracy: R / N".
set -u
ADAPTER=${1:?usage: eval.sh MODEL_DIR DATA_DIR [CONFIG]} DATA=${2:?usage: eval.sh MODEL_DIR DATA_DIR [CONFIG]}
CONFIG=${3:-$(dirname "$0")/vl_shapes_lora.yaml}
BIN=${TANDEM_BIN:-$(dirname "$0")/../../build/tandem}
if [ -f "$ADAPTER/adapter_config.json" ]; then USE="adapter_name_or_path=$ADAPTER"; else USE="model_name_or_path=$ADAPTER"; fi
/usr/bin/python3 - "$DATA/shapes_eval.json" <<'PY' >"${TMPDIR:-/tmp}/vl_shapes_eval.$$" || exit 1
import json, sys
for r in json.load(open(sys.argv[1], encoding="utf-8")):
    print("%s\t%s\t%s" % (r["images"][0], r["messages"][0]["content"], r["messages"][1]["content"]))
PY
right=0 n=0
while IFS="$(printf '\t')" read -r img question want; do
  got=$("$BIN" generate "$CONFIG" "$USE" do_sample=false max_new_tokens=6 \
        --image "$DATA/$img" --prompt "$question" 2>/dev/null | tr '[:upper:]' '[:lower:]' | tr -s ' \n' '  ')
  n=$((n + 1))
  case " $got" in
    " $want"*|" $want") right=$((right + 1)) ;;
    *) echo "miss: $img: expected '$want', got '$got'" ;;
  esac
done <"${TMPDIR:-/tmp}/vl_shapes_eval.$$"
rm -f "${TMPDIR:-/tmp}/vl_shapes_eval.$$"
echo "accuracy: $right / $n"
[ "$n" -gt 0 ]
