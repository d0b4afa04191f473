#!/bin/sh
# bench_api.sh -- `tandem api` throughput (docs/performance.md, "Serving"): a Qwen3 model folder with random
# weights (tandem init-model, real Qwen3 tokenizer), MAX_CONCURRENT=32, then 1, 8 and 32 concurrent streaming clients
# of the official OpenAI client (bench/api_load.mjs): tokens/s summed and time to first token p50 / p99.
# Usage: bench/bench_api.sh [THREADS] [CONFIG.json] [MAX_TOKENS]   (defaults: 2, bench/configs/qwen3-0.6b.json, 32)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$HERE/..
THREADS=${1:-2}
CONFIG=${2:-$HERE/configs/qwen3-0.6b.json}
M=${3:-32}
BIN=${TANDEM_BIN:-$ROOT/build/tandem}
SHARED=${TANDEM_SHARED_DIR:-$ROOT/../shared}
T=$(mktemp -d /tmp/tandem-bench-api-XXXXXX)
SPID=""
trap '[ -n "$SPID" ] && kill $SPID; rm -rf "$T"' EXIT
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" init-model "$CONFIG" "$T/m" --tokenizer "$SHARED/data/tokenizers/qwen3" >/dev/null
printf 'model_name_or_path: %s\ntemplate: qwen3_nothink\n' "$T/m" >"$T/api.yaml"
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
OMP_NUM_THREADS=$THREADS MAX_CONCURRENT=32 API_PORT=$PORT API_CONTEXT=512 "$BIN" api "$T/api.yaml" >"$T/api.log" 2>&1 &
SPID=$!
for _ in $(seq 1 600); do grep -q "tandem api:" "$T/api.log" && break; sleep 0.2; done
echo "# $(head -1 "$T/api.log")"
for c in 1 8 32; do
  node "$HERE/api_load.mjs" "http://127.0.0.1:$PORT/v1" "$c" 1 "$M"
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
