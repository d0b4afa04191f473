#!/bin/sh
# bench_conv.sh -- builds and runs bench/bench_conv.c: ResNet-18's CIFAR-sized convolutions (batch 64) with tandem's
# im2col + OpenBLAS kernels, the CPU backend's (oneDNN + reorders) and oneDNN alone (Debian's libdnnl-dev), same threads. Needs build/ (cmake Release).
# Usage: bench/bench_conv.sh [THREADS]   (default: OMP_NUM_THREADS or all cores); BENCH_CONV_PLAIN=1 also times oneDNN
# on tandem's plain layout (its reference kernel: minutes)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${1:-${OMP_NUM_THREADS:-$(nproc)}}
[ -f "$ROOT/build/libtandem_core.a" ] || { echo "bench_conv: build first (cmake -S . -B build && cmake --build build)"; exit 1; }
[ -f /usr/include/dnnl.h ] || { echo "bench_conv: oneDNN headers absent (apt-get install libdnnl-dev)"; exit 1; }
BIN=$(mktemp "${TMPDIR:-/tmp}/bench_conv.XXXXXX")
trap 'rm -f "$BIN"' EXIT INT TERM
cc -O2 -fopenmp -I"$ROOT/src" "$ROOT/bench/bench_conv.c" "$ROOT/build/libtandem_core.a" -o "$BIN" \
  $(pkg-config --libs openblas 2>/dev/null || echo -lopenblas) -ldnnl -lyaml -lcjson -lpcre2-8 -lutf8proc -lm -lpthread
echo "bench_conv: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $T threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
OMP_NUM_THREADS=$T "$BIN"
