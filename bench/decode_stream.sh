#!/bin/sh
# decode_stream.sh -- builds and runs bench/decode_stream.c: a Qwen3-0.6B decode token's weight stream read by
# variants of the batch-1 product (tandem's kernel, rows interleaved, one parallel region a token, a plain read)
# alternated in one process. Needs build/ (cmake Release).
# Usage: bench/decode_stream.sh [THREADS] [ROUNDS]   (defaults: 2, 10)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${1:-2}
ROUNDS=${2:-10}
[ -f "$ROOT/build/libtandem_core.a" ] || { echo "decode_stream: build first (cmake -S . -B build && cmake --build build)"; exit 1; }
BIN=$(mktemp "${TMPDIR:-/tmp}/decode_stream.XXXXXX")
trap 'rm -f "$BIN"' EXIT INT TERM
# the flags cpu_decode.c is built with (CMakeLists.txt: Release -O3 -march, FMA contraction)
cc -O3 -march=native -ffp-contract=fast -fopenmp -I"$ROOT/src" "$ROOT/bench/decode_stream.c" \
  "$ROOT/build/libtandem_core.a" -o "$BIN" \
  $(pkg-config --libs openblas 2>/dev/null || echo -lopenblas) -ldnnl -lyaml -lcjson -lpcre2-8 -lutf8proc -lm -lpthread
echo "decode_stream: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $T threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
# tandem's own wait policy (src/cli/main.c) unless the caller sets one
[ -n "${OMP_WAIT_POLICY:-}${GOMP_SPINCOUNT:-}" ] || export GOMP_SPINCOUNT=1000
OMP_NUM_THREADS=$T "$BIN" "$ROUNDS"
echo "decode_stream: load after $(cut -d' ' -f1-3 /proc/loadavg)"
