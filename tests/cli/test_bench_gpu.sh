#!/bin/sh
# test_bench_gpu -- bench/bench_gpu.py keeps its results when it runs long (no GPU needed: a fake tandem stands in
# for `tandem bench train`): each table row and JSON line is written the moment it is measured (a run killed from
# outside keeps them), an attempt that would run past --deadline is stopped there and later ones are skipped, out of
# memory moves to the next smaller batch, a crash or timeout is reported for its case and the next case goes on, and
# an out-of-memory inside torch.compile (BackendCompilerFailed) counts as out of memory.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
ROOT=$(cd "$TANDEM_TESTS_DIR/.." && pwd)
PY=$ROOT/bench/bench_gpu.py
T=$(mktemp -d /tmp/tandem-benchgpu-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
command -v python3 >/dev/null || { echo "FAIL: python3 is not on PATH"; exit 1; }

# the fake: batch 16 is out of memory; qwen3-0.6b hangs; qwen3-4b crashes; others measure
cat >"$T/tandem" <<'SH'
#!/bin/sh
case "$*" in
  *"--batch 16"*) echo "tandem: out of GPU memory on device 0 allocating 1.0 MiB" >&2; exit 1 ;;
  *qwen3-0.6b*) sleep 60; exit 0 ;;
  *qwen3-4b*) echo "tandem: cuda: kernel cross_entropy failed" >&2; exit 1 ;;
esac
echo '{"ms_step": 100.0, "tok_s": 163840, "mfu": 0.4, "peak_device_mb": 2048, "loss": 12.1, "device": "fake"}'
SH
chmod +x "$T/tandem"
bench() { python3 "$PY" --tandem "$T/tandem" --impls tandem --batches 16,8 --json "$T/out.jsonl" "$@"; }

# 1. deadline 6 s: 1.7b measured at batch 8 after batch 16's OOM; 0.6b stopped at the deadline; 4b-lora skipped
t0=$(date +%s)
bench --cases qwen3-1.7b,qwen3-0.6b,qwen3-4b-lora --deadline 6 --min-attempt 1 >"$T/md" 2>"$T/log"
rc=$? took=$(( $(date +%s) - t0 ))
check '[ $rc -eq 0 ]'
check '[ $took -le 20 ]'
check 'grep -q "^| qwen3-1.7b | tandem | 8 | 100.0 | 163840 | 40.0% | 2.0 |" "$T/md"'
check '[ "$(grep -c "^| qwen3" "$T/md")" -eq 1 ]'
check 'grep -q "batch  16: oom" "$T/log"'
check 'grep -q "qwen3-0.6b" "$T/log" && grep -q "stopped after [0-9]* s (deadline)" "$T/log"'
check 'grep -q "qwen3-4b-lora: skipped (deadline" "$T/log"'
check '[ "$(grep -c "\"case\": \"qwen3-1.7b\"" "$T/out.jsonl")" -eq 1 ]'

# 2. a crash is that case's failure; the next case is measured
rm -f "$T/out.jsonl"
bench --cases qwen3-4b-lora,qwen3-1.7b >"$T/md" 2>"$T/log"
rc=$?
check '[ $rc -eq 0 ] && grep -q "kernel cross_entropy failed" "$T/log" && grep -q "^| qwen3-1.7b | tandem | 8" "$T/md"'

# 3. killed from outside (no deadline) while 0.6b hangs: the row and the JSON line of 1.7b are already written
rm -f "$T/out.jsonl"
timeout 8 python3 "$PY" --tandem "$T/tandem" --impls tandem --batches 16,8 --json "$T/out.jsonl" \
  --cases qwen3-1.7b,qwen3-0.6b >"$T/md" 2>"$T/log"
rc=$?
check '[ $rc -eq 124 ]'
check 'grep -q "^| qwen3-1.7b | tandem | 8" "$T/md" && grep -q "qwen3-1.7b" "$T/out.jsonl"'

# 4. failures of a PyTorch attempt: OOM (also inside torch.compile) versus anything else
check 'python3 - "$ROOT/bench" <<PY
import sys
sys.path.insert(0, sys.argv[1])
from bench_gpu import failure
class OutOfMemoryError(RuntimeError): pass
class BackendCompilerFailed(Exception): pass
assert failure(OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")) == "oom"
assert failure(BackendCompilerFailed("backend=inductor raised:\nRuntimeError: CUDA error: out of memory")) == "oom"
r = failure(BackendCompilerFailed("backend=inductor raised:\nLoweringException: bad"))
assert r.startswith("BackendCompilerFailed: backend=inductor raised:"), r
PY'
echo "test_bench_gpu: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
