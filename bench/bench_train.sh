#!/bin/sh
# bench_train.sh -- tandem vs the PyTorch reference (../shared/ref), side by side; see bench/README.md.
# Usage: bench/bench_train.sh [--configs tiny,tiny-lora,small,small-lora] [--threads 1,2] [--steps K]
#                             [--stock] [--json OUT.jsonl] [--wait-quiet SECONDS] [--quick]
set -e
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$here/../build/tandem" ]; then
  echo "bench_train.sh: build/tandem not found: run \`make build\` first" >&2
  exit 1
fi
. "$here/same_blas_kernel.sh" && same_blas_kernel "$here/../build/tandem"
export BENCH_TRAIN_LAUNCHER="$0"
exec /usr/bin/python3 "$here/bench_train.py" "$@"
