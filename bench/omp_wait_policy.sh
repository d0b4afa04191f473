#!/bin/sh
# omp_wait_policy.sh -- tok/s of `tandem bench train` under each OpenMP wait policy, with and without another
# process holding a core; see bench/omp_wait_policy.py and docs/performance.md.
set -e
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/../build/tandem" ] || { echo "omp_wait_policy.sh: build/tandem not found: run \`make build\` first" >&2; exit 1; }
exec /usr/bin/python3 "$here/omp_wait_policy.py" "$@"
