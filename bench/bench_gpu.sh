#!/bin/sh
# bench_gpu.sh -- tandem's CUDA backend against PyTorch (eager and torch.compile) on this machine's GPU: Qwen3-0.6B
# and 1.7B full fine-tuning, Qwen3-4B LoRA, seq 2048; tok/s, MFU and peak GPU memory (bench_gpu.py's docstring).
# Usage: bench/bench_gpu.sh [--cases qwen3-1.7b,...] [--impls tandem,torch-eager,torch-compile] [--batches 16,8,4,2,1]
#                          [--steps N] [--warmup N] [--peak-tflops X] [--json OUT.jsonl] [--deadline SECONDS]
# Needs: a build with the CUDA backend (TANDEM_BIN, default build/tandem), python3 with torch, transformers, peft.
set -e
here=$(cd "$(dirname "$0")" && pwd)
bin=${TANDEM_BIN:-$here/../build/tandem}
if [ ! -x "$bin" ]; then echo "bench_gpu.sh: $bin not found: run \`make build\` (with nvcc) first" >&2; exit 1; fi
if ! "$bin" env 2>/dev/null | grep -q "tandem GPU backend *| CUDA, [1-9]"; then
  echo "bench_gpu.sh: no GPU for tandem here ($("$bin" env 2>/dev/null | grep "tandem GPU backend" | cut -d'|' -f2))" >&2
  exit 1
fi
python3 -c "import torch, transformers, peft; assert torch.cuda.is_available()" 2>/dev/null ||
  { echo "bench_gpu.sh: python3 with torch (CUDA), transformers and peft is needed" >&2; exit 1; }
export TANDEM_BIN="$bin" PYTHONUNBUFFERED=1
exec python3 "$here/bench_gpu.py" "$@"
