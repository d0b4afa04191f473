#!/bin/sh
# bench_vl.sh -- a vision-language training step, tandem vs the PyTorch reference (../shared/ref/vl_ref.py), in one
# invocation; see bench/bench_vl.py and docs/performance.md.
# Usage: bench/bench_vl.sh [--model-config F] [--threads N] [--batch B] [--seq S] [--images K] [--image-size PX]
#                          [--full] [--steps N] [--warmup N] [--rounds R] [--wait-quiet SECONDS] [--json OUT]
set -e
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$here/../build/tandem" ]; then
  echo "bench_vl.sh: build/tandem not found: run \`make build\` first" >&2
  exit 1
fi
. "$here/same_blas_kernel.sh" && same_blas_kernel "$here/../build/tandem"
export BENCH_VL_LAUNCHER="$0"
exec /usr/bin/python3 "$here/bench_vl.py" "$@"
