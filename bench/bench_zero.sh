#!/bin/sh
# bench_zero.sh -- ZeRO stages 0-3: memory per rank and step time, one machine and two over 100 Mbit/s; see
# bench_zero.py (needs root for the namespaces).
set -e
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/../build/tandem" ] || { echo "bench_zero.sh: build/tandem not found: run \`make build\` first" >&2; exit 1; }
exec /usr/bin/python3 "$here/bench_zero.py" "$@"
