#!/bin/sh
# bench_resnet.sh -- a ResNet-18 training step on CIFAR-sized batches (64 x 3 x 32 x 32): tandem (CPU backend) against
# torchvision's resnet18 in PyTorch (Debian's python3-torch + python3-torchvision, whose convolutions run on oneDNN),
# same thread count, median of STEPS steps each. Needs build/ (cmake Release).
# Usage: bench/bench_resnet.sh [THREADS] [BATCH] [STEPS]   (defaults: all cores, 64, 10)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${1:-$(nproc)} B=${2:-64} S=${3:-10}
[ -f "$ROOT/build/libtandem_core.a" ] || { echo "bench_resnet: build first (cmake -S . -B build && cmake --build build)"; exit 1; }
. "$ROOT/bench/same_blas_kernel.sh"
[ ! -x "$ROOT/build/tandem" ] || same_blas_kernel "$ROOT/build/tandem"
BIN=$(mktemp "${TMPDIR:-/tmp}/bench_resnet.XXXXXX")
trap 'rm -f "$BIN"' EXIT INT TERM
cc -O2 -fopenmp -I"$ROOT/src" "$ROOT/bench/bench_resnet_step.c" "$ROOT/build/libtandem_core.a" -o "$BIN" \
  -lopenblas -ldnnl -lyaml -lcjson -lpcre2-8 -lutf8proc -lm -lpthread
echo "bench_resnet: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $T threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
OMP_NUM_THREADS=$T "$BIN" "$B" "$S"
OMP_NUM_THREADS=$T /usr/bin/python3 "$ROOT/bench/bench_resnet.py" "$T" "$B" "$S"
echo "bench_resnet: load after $(cut -d' ' -f1-3 /proc/loadavg)"
