#!/bin/sh
# bench_lowcomm.sh -- low-communication training over 100 Mbit/s and unequal ranks; see bench_lowcomm.py
# (needs root for the network namespaces).
set -e
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/../build/tandem" ] || { echo "bench_lowcomm.sh: build/tandem not found: run \`make build\` first" >&2; exit 1; }
exec /usr/bin/python3 "$here/bench_lowcomm.py" "$@"
