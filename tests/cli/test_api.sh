#!/bin/sh
# `tandem api`: the OpenAI-compatible server driven by the official OpenAI client (npm package openai,
# tests/tools/openai_client.mjs) and by raw sockets. A tiny Qwen3 with the real Qwen3 tokenizer (random weights: the
# checks are about the protocol, not the words):
#  - models, streamed and non-streamed replies (greedy: the same text), usage, seeds, 401 / 400 errors as the SDK
#    raises them, the context limit named;
#  - the bind rule: a non-loopback API_HOST without API_KEY is refused in one line; API_PORT in use is named;
#  - 404 unknown route, 405 wrong method, 413 body over API_MAX_BODY (curl-free: python sockets);
#  - one sequence and no queue: a second request gets 429 with Retry-After, an abandoned stream frees its sequence;
#  - load: 40 concurrent clients x 3 requests each, every one answered within 300 s, and the server's resident
#    memory after the second load round within 5% + 8 MB of after the first (nothing kept per request);
#  - a fuzz pass of malformed HTTP and 300 mutated JSON bodies (tests/tools/http_fuzz.py).
# Without node/npm or the openai package the test is skipped with a message (CI=true: a failure).
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
ROOT=$TD/..
need_shared test_api
if ! command -v node >/dev/null || [ ! -f "$TD/node_modules/openai/package.json" ]; then
  [ "${CI:-}" = true ] && { echo "test_api: FAIL: node or tests/node_modules/openai missing (scripts/install-deps.sh installs them)"; exit 1; }
  echo "test_api: skipped (node or the openai npm package missing: run scripts/install-deps.sh)"
  exit 77
fi
T=$(mktemp -d /tmp/tandem-api-XXXXXX)
PIDS=""
cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$T"; }
trap cleanup EXIT
fails=0 checks=0
"$BIN" init-model "$ROOT/examples/tiny-qwen3/config.json" "$T/m" --tokenizer "$SHARED/data/tokenizers/qwen3" >/dev/null 2>&1
printf 'model_name_or_path: %s\ntemplate: qwen3_nothink\nmax_new_tokens: 8\n' "$T/m" >"$T/api.yaml"
export API_MODEL_NAME=tandem-tiny API_CONTEXT=256 API_KEY=sekrit

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# start NAME [ENV=VALUE ...]: a server in the background on a free port ($PORT), up once it prints its banner
start() {
  name=$1; shift
  PORT=$(free_port)
  env API_PORT="$PORT" "$@" "$BIN" api "$T/api.yaml" >"$T/$name.log" 2>&1 &
  SPID=$!
  PIDS="$PIDS $SPID"
  for _ in $(seq 1 1200); do grep -q "tandem api:" "$T/$name.log" && return 0; sleep 0.1; done
  echo "server $name did not start:"; cat "$T/$name.log"; return 1
}
rss() { awk '/VmRSS/ { print $2 }' "/proc/$1/status"; }
status_of() { # METHOD PATH [BODY-BYTES]: the HTTP status of one raw request
  /usr/bin/python3 - "$PORT" "$1" "$2" "${3:-0}" <<'PY'
import socket, sys
port, method, path, n = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
body = b"x" * n
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n".encode() + body)
data = b""
try:
    while chunk := s.recv(65536): data += chunk
except OSError: pass
print(data.split(b" ")[1].decode() if data.startswith(b"HTTP/1.") else "closed")
PY
}

# the bind rule and a busy port, each one line
env API_HOST=0.0.0.0 API_KEY= "$BIN" api "$T/api.yaml" >"$T/bind.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && [ "$(grep -c "tandem: error:" "$T/bind.log")" -eq 1 ] && grep -q "API_KEY" "$T/bind.log"'

start main || exit 1
MAIN=$SPID
node "$TD/tools/openai_client.mjs" basic "http://127.0.0.1:$PORT/v1" sekrit >"$T/basic.out" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
cat "$T/basic.out"
check '[ "$(status_of GET /v1/nothing)" = 404 ] && [ "$(status_of GET /v1/chat/completions)" = 405 ]'
check '[ "$(status_of POST /v1/chat/completions 2000000)" = 413 ]'
env API_PORT="$PORT" "$BIN" api "$T/api.yaml" >"$T/busy.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && [ "$(grep -c .  "$T/busy.log")" -eq 1 ] && grep -q "cannot listen on 127.0.0.1:$PORT" "$T/busy.log"'

# load: two rounds; the second must not leave more memory behind than the first did
for round in 1 2; do
  t0=$(date +%s)
  timeout 300 node "$TD/tools/openai_client.mjs" load "http://127.0.0.1:$PORT/v1" sekrit 40 3 >"$T/load$round.out" 2>&1
  rc=$?
  check '[ $rc -eq 0 ]'
  cat "$T/load$round.out"
  sleep 0.5
  eval "rss$round=\$(rss $MAIN)"
done
echo "server resident memory after load round 1: ${rss1} kB, after round 2: ${rss2} kB"
check 'within "$rss2" "$((rss1 + rss1 / 20 + 8192))"'

/usr/bin/python3 "$TD/tools/http_fuzz.py" "$PORT" sekrit 26 300 >"$T/fuzz.out" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
cat "$T/fuzz.out"
check 'kill -0 $MAIN'

start one MAX_CONCURRENT=1 API_MAX_QUEUE=0 || exit 1
node "$TD/tools/openai_client.mjs" disconnect "http://127.0.0.1:$PORT/v1" sekrit >"$T/disconnect.out" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
cat "$T/disconnect.out"

kill "$MAIN"
wait "$MAIN" 2>/dev/null
check 'grep -q "tandem api: stopped" "$T/main.log"'
[ "$fails" -eq 0 ] || tail -n 5 "$T"/*.log
echo "test_api: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
