#!/bin/sh
# bench_generate.sh -- generation speed (docs/performance.md, "Generation"): tandem's decode on a Qwen3 config with
# random weights against the memory-bandwidth limit measured in the same run (a STREAM-style copy) and against
# PyTorch (../shared/ref's llama_ref with a simple KV cache, bench/torch_kv_decode.py) on the same threads; the
# prefill against tandem's training forward; the cost of a token at 64, 256 and 1024 new tokens.
# Usage: bench/bench_generate.sh [THREADS] [CONFIG.json] [NEW,...]   (defaults: 2, bench/configs/qwen3-0.6b.json,
# 64,256,1024). Needs a Release build (make build) and, for the PyTorch side, ../shared/ref (skipped without it).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$HERE/..
THREADS=${1:-2}
CONFIG=$(cd "$(dirname "${2:-$HERE/configs/qwen3-0.6b.json}")" && pwd)/$(basename "${2:-$HERE/configs/qwen3-0.6b.json}")
NEW=${3:-64,256,1024}
BIN=${TANDEM_BIN:-$ROOT/build/tandem}
. "$ROOT/bench/same_blas_kernel.sh" && same_blas_kernel "$BIN"
REF=${TANDEM_SHARED_DIR:-$ROOT/../shared}/ref
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# tandem: $BIN bench generate --model-config $CONFIG --prompt 128 --new $NEW --prefill 512 (OMP_NUM_THREADS=$THREADS)"
OMP_NUM_THREADS=$THREADS "$BIN" bench generate --model-config "$CONFIG" --prompt 128 --new "$NEW" --prefill 512
if [ -d "$REF" ]; then
  echo "# pytorch: $REF/run.sh $HERE/torch_kv_decode.py $CONFIG $THREADS 128 $NEW"
  OMP_NUM_THREADS=$THREADS PYTHONPATH=$REF "$REF/run.sh" "$HERE/torch_kv_decode.py" "$CONFIG" "$THREADS" 128 "$NEW"
else
  echo "# pytorch: skipped ($REF absent)"
fi
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
