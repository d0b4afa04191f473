#!/bin/sh
# The dashboard at the HTTP level (tests/tools/dashboard_http.py, raw sockets) and what watching costs a run:
#  - `tandem dashboard RUN` over a finished run: every route (status, type, security headers, HEAD), 404 / 405 / 400 /
#    413 / 403 (a Host naming no loopback) with JSON error bodies, malformed requests; 600 fuzzed URLs (traversal,
#    encodings, NUL, long) of which only the fixed routes answer 200 and none carries the content of a file planted
#    beside the run or /etc/passwd;
#  - the token: a non-loopback --host is refused without TANDEM_DASHBOARD_TOKEN and a short token is refused, each in
#    one line; with it, every request needs the token (bearer, cookie, or ?token= once: 303 and the cookie);
#  - a line appended to a running run's trainer_log.jsonl reaches an open event stream within 5 s;
#  - bad command lines: one error line each (no folder, a file, a bad --port, a port in use, --dashboard without
#    its value);
#  - load: `tandem launch -n 2 --dashboard 127.0.0.1:PORT` with 50 viewers reading the event stream for the whole run
#    while 5 connections stall half-way through a request and 5 streams are never read: every viewer gets events,
#    the run ends 0, its tandem_ranks.jsonl has every step with both ranks (no note lost), and the run's own account
#    says the job monitor took <= 1% of the step time on every rank and the dashboard's threads <= 1% of rank 0's
#    CPU (the cores rank 0 computes on: a bound on how much slower the viewers made it);
#  - `tandem train` with --dashboard prints the address and serves while it trains.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
ROOT=$TD/..
need_mpirun test_dashboard_http
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tandem-dashh-XXXXXX)
PIDS=""
cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$T"; }
trap cleanup EXIT
fails=0 checks=0
HTTP="/usr/bin/python3 $TD/tools/dashboard_http.py"
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# serve NAME ARGS...: `tandem dashboard ARGS` in the background; $PORT and $SPID once it prints its address
serve() {
  name=$1
  shift
  "$BIN" dashboard "$@" >"$T/$name.log" 2>&1 &
  SPID=$!
  PIDS="$PIDS $SPID"
  for _ in $(seq 1 1200); do grep -q "tandem dashboard: .* at http" "$T/$name.log" && break; sleep 0.1; done
  PORT=$(sed -n 's|.* at http://[^ ]*:\([0-9]*\)/ .*|\1|p' "$T/$name.log")
  [ -n "$PORT" ] || { echo "dashboard $name did not start:"; cat "$T/$name.log"; return 1; }
}
stop() { # NAME: Ctrl-C's signal ends it in one line and 0
  kill -INT "$SPID"
  wait_at_most 120 "$SPID"
  stopped=$T/$1.log
  check '[ $rc -eq 0 ] && grep -q "tandem dashboard: stopped" "$stopped"'
}

# a finished run to serve
"$BIN" train "$ROOT/examples/demo_addition.yaml" output_dir="$T/run" max_steps=12 logging_steps=2 >"$T/run.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && [ -f "$T/run/tandem_ranks.jsonl" ]'
echo "SECRET-4f1b9c-MARKER" >"$T/run/secret.txt"
serve plain "$T/run" || exit 1
$HTTP routes "$PORT" run >"$T/routes.out" 2>&1
rc=$?
cat "$T/routes.out" | tail -n 20
check '[ $rc -eq 0 ]'
$HTTP fuzz "$PORT" 29 600 SECRET-4f1b9c-MARKER >"$T/fuzz.out" 2>&1
rc=$?
tail -n 10 "$T/fuzz.out"
check '[ $rc -eq 0 ]'
stop plain

# the bind rule and the token
"$BIN" dashboard "$T/run" --host 0.0.0.0 >"$T/bind.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && [ "$(grep -c . "$T/bind.log")" -eq 1 ] && grep -q "without a token: set TANDEM_DASHBOARD_TOKEN" "$T/bind.log"'
TANDEM_DASHBOARD_TOKEN=short "$BIN" dashboard "$T/run" >"$T/short.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && [ "$(grep -c . "$T/short.log")" -eq 1 ] && grep -q "TANDEM_DASHBOARD_TOKEN must be 16" "$T/short.log"'
TOKEN=tok-0123456789-abcdefXYZ
TANDEM_DASHBOARD_TOKEN=$TOKEN serve token "$T/run" --host 0.0.0.0 || exit 1
check 'grep -q "tandem dashboard: 1 run(s) at http://$(hostname):$PORT/" "$T/token.log"'
$HTTP token "$PORT" "$TOKEN" >"$T/token.out" 2>&1
rc=$?
cat "$T/token.out"
check '[ $rc -eq 0 ]'
stop token

# a running run: its new lines reach the viewers
mkdir -p "$T/growing"
head -n 3 "$T/run/trainer_log.jsonl" >"$T/growing/trainer_log.jsonl"
serve growing "$T/growing" || exit 1
$HTTP follow "$PORT" "$T/growing" >"$T/follow.out" 2>&1
rc=$?
cat "$T/follow.out"
check '[ $rc -eq 0 ]'
stop growing

# bad command lines: one line each
for args in "" "$T/nowhere" "$T/run/trainer_log.jsonl" "$T/run --port 70000" "$T/run --port x" "$T/run --what"; do
  "$BIN" dashboard $args >"$T/bad.log" 2>&1
  rc=$?
  check '[ $rc -ne 0 ] && [ "$(grep -c . "$T/bad.log")" -eq 1 ] && grep -q "^tandem: error: dashboard: " "$T/bad.log"'
done
/usr/bin/python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(60)' >"$T/busy.port" &
holder=$!
PIDS="$PIDS $holder"
for _ in $(seq 1 600); do [ -s "$T/busy.port" ] && break; sleep 0.1; done
busy=$(cat "$T/busy.port")
"$BIN" dashboard "$T/run" --port "$busy" >"$T/busy.log" 2>&1 &
bpid=$!
wait_at_most 120 "$bpid"
check '[ $rc -ne 0 ] && [ "$(grep -c . "$T/busy.log")" -eq 1 ] && grep -q "cannot listen on 127.0.0.1:$busy" "$T/busy.log"'
kill "$holder"
"$BIN" train "$ROOT/examples/demo_addition.yaml" output_dir="$T/x" --dashboard >"$T/flag.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && grep -q "dashboard needs where to listen" "$T/flag.log"'

# one process, --dashboard on train (before the config, as with launch): the address, and the page answers while
# it trains
port=$(free_port)
"$BIN" train --dashboard "127.0.0.1:$port" "$ROOT/examples/demo_addition.yaml" output_dir="$T/one" max_steps=150 \
  logging_steps=10 >"$T/one.log" 2>&1 &
tpid=$!
PIDS="$PIDS $tpid"
for _ in $(seq 1 1200); do grep -q "dashboard of this run" "$T/one.log" && break; sleep 0.1; done
check 'grep -q "tandem: dashboard of this run at http://127.0.0.1:$port/ (live; afterwards: tandem dashboard $T/one)" "$T/one.log"'
state=$(/usr/bin/python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
  "http://127.0.0.1:$port/api/state" 2>&1)
check 'echo "$state" | grep -q "\"mode\": \"live\"" && echo "$state" | grep -q "\"name\":\"one\""'
wait_at_most 300 "$tpid"
check '[ $rc -eq 0 ]'

# load: 50 viewers and 10 hostile connections through a 2-rank run (they connect as soon as its server is up)
port=$(free_port)
$HTTP viewers "$port" 50 600 >"$T/viewers.out" 2>&1 &
vpid=$!
PIDS="$PIDS $vpid"
"$BIN" launch -n 2 --dashboard "127.0.0.1:$port" "$ROOT/examples/demo_addition.yaml" output_dir="$T/load" max_steps=600 \
  logging_steps=10 >"$T/load.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]'
wait_at_most 60 "$vpid"
cat "$T/viewers.out"
check '[ $rc -eq 0 ] && grep -q "\"with_events\": 50," "$T/viewers.out"'
grep "tandem: dashboard: " "$T/load.log"
line=$(grep "tandem: dashboard: the job monitor took" "$T/load.log")
mon=$(echo "$line" | sed -n 's/.*at most \([0-9.]*\)% on any rank.*/\1/p')
dcpu=$(echo "$line" | sed -n 's/.* of CPU, \([0-9.]*\)% of this process.*/\1/p')
check '[ -n "$mon" ] && within "$mon" 1'
check '[ -n "$dcpu" ] && within "$dcpu" 1'
n_steps=$(grep -c '"kind": "step"' "$T/load/tandem_ranks.jsonl")
# a step line's "ranks" holds null for a rank whose note never came; its "memory" holds null for a rank that did
# not sample memory at that step (each rank samples every 2 s by its own clock, so the two can be a step apart)
n_full=$(/usr/bin/python3 -c 'import json, sys
print(sum(1 for l in open(sys.argv[1]) for d in [json.loads(l)] if d["kind"] == "step" and None not in d["ranks"]))' \
  "$T/load/tandem_ranks.jsonl")
echo "tandem_ranks.jsonl: $n_steps step lines, $n_full with both ranks' notes"
check '[ "$n_steps" -eq 600 ] && [ "$n_full" -eq 600 ]'

echo "test_dashboard_http: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
