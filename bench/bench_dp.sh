#!/bin/sh
# bench_dp.sh -- data-parallel weak scaling, tandem vs PyTorch DDP; see bench_dp.py (needs root for netns).
set -e
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/../build/tandem" ] || { echo "bench_dp.sh: build/tandem not found: run \`make build\` first" >&2; exit 1; }
exec /usr/bin/python3 "$here/bench_dp.py" "$@"
