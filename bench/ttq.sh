#!/bin/sh
# ttq.sh -- time to a target eval loss, two machines over 100 Mbit/s against one (issue 27); see bench/ttq.py
# (needs root for the network namespaces; the namespaces are torn down whatever happens).
set -e
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/../build/tandem" ] || { echo "ttq.sh: build/tandem not found: run \`make build\` first" >&2; exit 1; }
exec /usr/bin/python3 "$here/ttq.py" "$@"
