#!/bin/sh
# Absurd sizes and files that are not files (issue 15, item 7): hidden_size 1e9, num_hidden_layers 1e6,
# vocab_size 2^31-1 and per_device_train_batch_size=1e9 stop `tandem train` at once with one error line naming
# the key and the bytes (no "out of memory" after a huge allocation); a dataset file that is a FIFO or a
# device is refused instead of hanging the run; `launch -n 100000` states the real limit.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
EX=$TD/../examples
T=$(mktemp -d /tmp/tandem-limits-XXXXXX)
trap 'rm -rf "$T"' EXIT
export TANDEM_CACHE_DIR=$T/cache
fails=0 checks=0

# one_line LOG WANT: exactly one error line, which holds WANT and a byte count, and no out-of-memory exit
one_line() {
  [ "$(grep -c 'tandem: error:' "$1")" -eq 1 ] && grep 'tandem: error:' "$1" | grep -q -- "$2" &&
    grep 'tandem: error:' "$1" | grep -Eq '[0-9]+ bytes' && ! grep -q 'out of memory' "$1"
}

for kv in hidden_size=1000000000 num_hidden_layers=1000000 vocab_size=2147483647; do
  key=${kv%=*}
  python3 -c "import json, sys; d = json.load(open('$EX/demo/config.json')); d['$key'] = ${kv#*=}; json.dump(d, sys.stdout)" \
    >"$T/$key.json"
  "$BIN" train "$EX/demo_addition.yaml" model_config="$T/$key.json" output_dir="$T/out-$key" >"$T/$key.log" 2>&1 &
  pid=$!
  wait_at_most 30 $pid
  echo "$key: $(grep 'tandem: error' "$T/$key.log") [exit $rc]"
  check '[ $rc -eq 1 ] && one_line "$T/$key.log" "$key.json: key .$key. ${kv#*=}"'
done
"$BIN" train "$EX/demo_addition.yaml" per_device_train_batch_size=1e9 output_dir="$T/out-batch" >"$T/batch.log" 2>&1 &
pid=$!
wait_at_most 30 $pid
echo "batch: $(grep 'tandem: error' "$T/batch.log") [exit $rc]"
check '[ $rc -eq 1 ] && one_line "$T/batch.log" "demo_addition.yaml: key .per_device_train_batch_size. 1000000000"'
check '[ ! -e "$T/out-batch/model.safetensors" ]'

# init-model (issue 24, items 4 and 7): the same named, pre-allocation error as train (file, key, bytes needed, bytes
# available), never "slab ... is too large" after the sizes overflowed; a size past INT_MAX says the limit
for kv in vocab_size=2147483647 intermediate_size=1099511627776 hidden_size=2000000000; do
  key=${kv%=*}
  python3 -c "import json, sys; d = json.load(open('$EX/demo/config.json')); d['$key'] = ${kv#*=}; json.dump(d, sys.stdout)" \
    >"$T/init-$key.json"
  "$BIN" init-model "$T/init-$key.json" "$T/init-$key" >"$T/init-$key.log" 2>&1 &
  pid=$!
  wait_at_most 30 $pid
  echo "init-model $key: $(grep 'tandem: error' "$T/init-$key.log") [exit $rc]"
  check '[ $rc -eq 1 ] && [ "$(wc -l <"$T/init-$key.log")" -eq 1 ] && [ ! -e "$T/init-$key" ] &&
    grep -q "tandem: error: $T/init-$key.json: key .$key. " "$T/init-$key.log"'
done
check 'grep -Eq "[0-9]+ bytes .*more than this machine.s [0-9]+ bytes" "$T/init-vocab_size.log"'
check 'grep -q "is 1099511627776, more than the largest size tandem supports (2147483647)" "$T/init-intermediate_size.log"'
check 'grep -q "more than the largest width tandem supports" "$T/init-hidden_size.log"'

# a dataset file that is a FIFO (nobody writes to it) or a device: refused by name, no hang
printf '{"model_type": "qwen2", "vocab_size": 320, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 256, "tie_word_embeddings": true}\n' \
  >"$T/tiny.json"
"$BIN" init-model "$T/tiny.json" "$T/model" --tokenizer "$TD/fixtures/lf_data/tok_q" >/dev/null
mkdir -p "$T/data"
mkfifo "$T/data/fifo.json"
printf '{"fifo": {"file_name": "fifo.json"}, "dev": {"file_name": "/dev/zero"}}\n' >"$T/data/dataset_info.json"
for ds in fifo dev; do
  "$BIN" train "$EX/lf/qwen_lora_sft.yaml" model_name_or_path="$T/model" dataset=$ds dataset_dir="$T/data" max_steps=1 \
    output_dir="$T/out-$ds" >"$T/$ds.log" 2>&1 &
  pid=$!
  wait_at_most 30 $pid
  echo "$ds: $(grep 'tandem: error' "$T/$ds.log") [exit $rc]"
  check '[ $rc -eq 1 ] && grep -q "tandem: error: .*dataset .$ds.: a \(FIFO\|device\), not a regular file" "$T/$ds.log"'
done

# the real limit of -n
"$BIN" launch -n 100000 --dry-run "$EX/demo_addition.yaml" >"$T/n.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && grep -q "expected a number of ranks in 1..65536" "$T/n.log"'

[ "$fails" -eq 0 ] || tail -n 5 "$T"/*.log
echo "test_limits: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
