#!/bin/sh
# The dashboard in a real browser: Debian's chromium, headless, driven by puppeteer-core (tests/tools/dashboard_browser.mjs;
# both installed by scripts/install-deps.sh, puppeteer-core into tests/node_modules), with the charts from npm uplot in
# deps/node_modules. The browser opens the page before each run starts and watches it through the run:
#  - A: `tandem launch -n 2 ... dashboard=HOST:PORT`, a tiny Qwen2 with LoRA on LLaMA-Factory data with evaluation: the
#    curves grow while the run is running, without a reload; at the end the loss, eval loss and lr curves hold exactly
#    the points trainer_log.jsonl holds, the per-rank panel lists both ranks on this host, and no straggler is named;
#  - B: the same with balance_ranks and rank 1 made three times slower from step 3 (TANDEM_FAULT_SLOW=1:3:3): the page
#    names rank 1 and this host as the straggler;
#  - `tandem dashboard A B` over the two finished runs: both runs' curves overlaid, each exactly its trainer_log.jsonl;
#  - without uPlot (TANDEM_UPLOT_DIR pointing nowhere): the page says how to get it and draws everything else.
# Screenshots go to test_output/test_dashboard_browser/ under the directory the test runs in (ctest: the build tree).
# Without node, puppeteer-core, chromium or uplot the test is skipped with a message (CI=true: a failure).
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
ROOT=$TD/..
need_shared test_dashboard_browser
need_mpirun test_dashboard_browser
missing=""
command -v node >/dev/null || missing="$missing node"
[ -f "$TD/node_modules/puppeteer-core/package.json" ] || missing="$missing puppeteer-core"
command -v "${CHROMIUM:-chromium}" >/dev/null || missing="$missing chromium"
[ -f "${TANDEM_UPLOT_DIR:-$ROOT/deps/node_modules/uplot/dist}/uPlot.iife.min.js" ] || missing="$missing uplot"
if [ -n "$missing" ]; then
  [ "${CI:-}" = true ] && { echo "test_dashboard_browser: FAIL:$missing missing (scripts/install-deps.sh installs them)"; exit 1; }
  echo "test_dashboard_browser: skipped ($missing missing: run scripts/install-deps.sh)"
  exit 77
fi
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 TANDEM_CACHE_DIR
T=$(mktemp -d /tmp/tandem-dashb-XXXXXX)
TANDEM_CACHE_DIR=$T/cache
OUT=${TANDEM_TEST_OUTPUT:-$PWD/test_output}/test_dashboard_browser
mkdir -p "$OUT"
PIDS=""
cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$T"; }
trap cleanup EXIT
fails=0 checks=0
HOST=$(hostname)
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

"$BIN" init-model "$ROOT/examples/tiny-qwen2/config.json" "$T/model" --tokenizer "$SHARED/data/tokenizers/qwen3" >/dev/null
ARGS="model_name_or_path=$T/model dataset_dir=$SHARED/data/llamafactory max_samples=40 cutoff_len=64 max_steps=40
logging_steps=2 val_size=8 eval_steps=10 per_device_train_batch_size=1 gradient_accumulation_steps=2 save_steps=20"

# live NAME BROWSER-FLAGS SLOW [KEY=VALUE...]: the browser on a free port first, then the 2-rank run serving there
live() {
  name=$1 flags=$2 slow=$3
  shift 3
  port=$(free_port)
  node "$TD/tools/dashboard_browser.mjs" live "http://127.0.0.1:$port/" "$T/$name" "$OUT/live-$name.png" "$HOST" $flags \
    >"$T/$name.browser" 2>&1 &
  bpid=$!
  PIDS="$PIDS $bpid"
  TANDEM_FAULT_SLOW=$slow "$BIN" launch -n 2 --no-bind "$ROOT/examples/lf/qwen_lora_sft.yaml" $ARGS \
    output_dir="$T/$name" dashboard="127.0.0.1:$port" "$@" >"$T/$name.log" 2>&1
  rc=$?
  check '[ $rc -eq 0 ]'
  check 'grep -q "tandem: dashboard of this run at http://127.0.0.1:$port/ (live; afterwards: tandem dashboard $T/$name)" "$T/$name.log"'
  wait_at_most 240 "$bpid"
  cat "$T/$name.browser"
  check '[ $rc -eq 0 ]'
  [ $rc -eq 0 ] || tail -n 5 "$T/$name.log"
}
live A "--evals" none
live B "--evals --straggler 1" 1:3:3 balance_ranks=true
check 'grep -q "balance: step [0-9]*: rank 1 on host" "$T/B.log"'

# the two finished runs, overlaid
port=$(free_port)
"$BIN" dashboard "$T/A" "$T/B" --port "$port" >"$T/files.log" 2>&1 &
dpid=$!
PIDS="$PIDS $dpid"
node "$TD/tools/dashboard_browser.mjs" files "http://127.0.0.1:$port/" "$OUT/files-A-B.png" "$T/A" "$T/B" >"$T/files.browser" 2>&1
rc=$?
cat "$T/files.browser"
check '[ $rc -eq 0 ]'
kill "$dpid"
wait_at_most 120 "$dpid"
check 'grep -q "tandem dashboard: 2 run(s) at http://127.0.0.1:$port/" "$T/files.log" && grep -q "tandem dashboard: stopped" "$T/files.log"'

# without uPlot
port=$(free_port)
TANDEM_UPLOT_DIR=$T/nowhere "$BIN" dashboard "$T/A" --port "$port" >"$T/nocharts.log" 2>&1 &
dpid=$!
PIDS="$PIDS $dpid"
node "$TD/tools/dashboard_browser.mjs" nocharts "http://127.0.0.1:$port/" "$OUT/nocharts.png" >"$T/nocharts.browser" 2>&1
rc=$?
cat "$T/nocharts.browser"
check '[ $rc -eq 0 ] && grep -q "no charts without uPlot: scripts/install-deps.sh installs it" "$T/nocharts.log"'
kill "$dpid"
wait_at_most 120 "$dpid"

echo "screenshots: $(ls "$OUT" | tr '\n' ' ')in $OUT"
echo "test_dashboard_browser: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
