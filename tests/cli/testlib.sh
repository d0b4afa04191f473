# testlib.sh -- helpers shared by the command-line tests; sourced: . "$TANDEM_TESTS_DIR/cli/testlib.sh"
# A test sets fails=0 checks=0, runs `check 'CONDITION'` for each assertion, and ends with its summary line.

# check 'CONDITION': evaluate it; a false one is counted and printed.
check() { checks=$((checks + 1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails + 1)); fi; }

# within A B: A <= B as numbers (awk reads 1e-6 and 4.2e-08 alike).
within() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# worst A B [PATTERN [EXCLUDE]]: the worst relative L2 distance (`tandem compare`) over the tensors whose
# name matches PATTERN (default: all) and not EXCLUDE.
worst() {
  "$BIN" compare "$1" "$2" | awk -v pat="${3:-.}" -v ex="${4:-^$}" \
    '$1 ~ pat && $1 !~ ex && $2 == "rel" { if ($4 + 0 > w) w = $4 + 0 } END { printf "%.3e", w + 0 }'
}

# maxdiff A B PATTERN: the largest element difference |a - b| over the tensors whose name matches PATTERN.
maxdiff() {
  "$BIN" compare "$1" "$2" | awk -v pat="$3" '$1 ~ pat && $5 == "max|diff|" { if ($6 + 0 > w) w = $6 + 0 } END { printf "%.3e", w + 0 }'
}

# adamw_bound LR STEPS [WD]: how far one element can differ between two correct runs of STEPS AdamW steps
# (the demo's betas 0.9 / 0.95) that started equal. By Cauchy-Schwarz on the bias-corrected moments,
# |m_s / sqrt(v_s)| <= A_s = sqrt(sum_k w_k^2 / o_k), w and o the weights of gradient k in m_s and v_s, so each
# run moves an element by at most lr A_s at step s (times (1 + lr wd) per step for decay): 2 lr sum A_s apart.
# Used for LoRA B, which starts at zero (test_dp_split.sh says why a tighter bound needs the gradients).
adamw_bound() {
  awk -v lr="$1" -v t="$2" -v wd="${3:-0.01}" 'BEGIN { b1 = 0.9; b2 = 0.95; sum = 0
    for (s = 1; s <= t; s++) { a = 0
      for (k = 1; k <= s; k++) { w = (1 - b1) * b1^(s - k) / (1 - b1^s); o = (1 - b2) * b2^(s - k) / (1 - b2^s); a += w * w / o }
      sum += sqrt(a) }
    printf "%.4e", 2 * lr * sum * (1 + lr * wd)^t }'
}

# wait_at_most SECONDS PID: wait for PID, killing it after SECONDS so that a hang fails the test instead
# of hanging it; its exit status lands in $rc. The guard holds no output open (ctest would wait for it).
wait_at_most() {
  ( sleep "$1"; kill -9 "$2" ) >/dev/null 2>&1 &
  _guard=$!
  wait "$2"
  rc=$?
  kill "$_guard" 2>/dev/null
  return 0
}

# need_shared NAME: the test reads ../shared (TANDEM_SHARED_DIR). Without it the test is skipped (exit 77),
# except in CI (CI=true), where its absence is a failure. Sets SHARED.
need_shared() {
  SHARED=${TANDEM_SHARED_DIR:-${TANDEM_TESTS_DIR:?}/../../shared}
  [ -d "$SHARED/data/tokenizers/qwen3" ] && return 0
  [ "${CI:-}" = true ] && { echo "$1: FAIL: $SHARED is required in CI"; exit 1; }
  echo "$1: skipped ($SHARED absent)"
  exit 77
}

# need_mpirun NAME / need_root NAME WHAT / need_netns NAME KIT: what a test cannot run without. Missing,
# the test FAILS with the reason (never skips: these are installed or granted by the project's scripts).
need_mpirun() {
  command -v mpirun >/dev/null || { echo "$1: FAIL: mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; }
}
need_root() {
  [ "$(id -u)" -eq 0 ] || { echo "$1: FAIL: needs root ($2); running as uid $(id -u)"; exit 1; }
}
need_netns() {
  _why=$("$2/netns.sh" check 2>&1) || { echo "$1: FAIL: cannot simulate two machines here: $_why"; exit 1; }
}

# kill_rank_when FILE OUTPUT_DIR: once FILE exists (at most 60 s; e.g. a checkpoint's manifest, written last),
# kill -9 the newest rank of the run writing OUTPUT_DIR. Its pid in $victim (empty when none was found).
kill_rank_when() {
  for _ in $(seq 1 600); do [ -f "$1" ] && break; sleep 0.1; done
  victim=$(pgrep -f "tandem train .*output_dir=$2" | tail -1)
  [ -n "$victim" ] && kill -9 "$victim"
  return 0
}

# train_machines NAME RANKS RANKS-PER-MACHINE key=value...: `tandem train` on faked machines (one host; rank r on
# machine r / RANKS-PER-MACHINE through TANDEM_NODE_NAME) into $T/NAME, log in $T/NAME.log; uses the caller's BIN,
# EX and COMMON (keys every run of the test shares) and fails as the run does (for runs expected to be refused).
train_machines() {
  name=$1 n=$2 per=$3; shift 3
  timeout 300 mpirun -n "$n" --bind-to none -x OMP_NUM_THREADS \
    sh -c "export TANDEM_NODE_NAME=m\$(( OMPI_COMM_WORLD_RANK / $per )); exec \"\$0\" \"\$@\"" \
    "$BIN" train "$EX/demo_addition.yaml" $COMMON output_dir="$T/$name" "$@" >"$T/$name.log" 2>&1
}
# train_machines_ok: the same, printing the log's end when the run fails (the checks that follow then fail).
train_machines_ok() { train_machines "$@" || { echo "run $1 failed:"; tail -n 20 "$T/$1.log"; }; }
# logged_losses RUN_DIR: the step / total / loss triples of a run's trainer_log.jsonl, one a line.
logged_losses() { grep -o '"current_steps": [0-9]*, "total_steps": [0-9]*, "loss": [0-9.e+-]*' "$1/trainer_log.jsonl"; }
