#!/bin/sh
# bench_resnet_dp.sh -- ResNet-18 data-parallel efficiency, tandem vs PyTorch DDP (gloo), on this machine and over
# shaped netns links; see bench_resnet_dp.py (needs root for the namespaces). Both sides on the same OpenBLAS kernel.
set -e
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/../build/tandem" ] || { echo "bench_resnet_dp.sh: build/tandem not found: run \`make build\` first" >&2; exit 1; }
. "$here/same_blas_kernel.sh"
same_blas_kernel "$here/../build/tandem"
exec /usr/bin/python3 "$here/bench_resnet_dp.py" "$@"
