#!/bin/sh
# test_cuda_launch_bounds -- every CUDA kernel launched with more than 256 threads a block still launches in a debug
# (-G) build and in the release build: its registers x threads fit the 65536 registers of a block (sm_80/sm_90),
# which the compiler guarantees only when the kernel declares __launch_bounds__ (a -G build of k_cross_entropy
# takes 66 registers without it: "too many resources requested for launch" at 1024 threads). Needs nvcc only (no
# GPU): compiles each .cu file that has such a launch with ptxas -v and reads the registers of every kernel.
set -u
ROOT=${TANDEM_TESTS_DIR:?}/..
NVCC=${CUDACXX:-}
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
[ -z "$NVCC" ] && NVCC=$(command -v nvcc 2>/dev/null)
if [ -z "$NVCC" ]; then
  echo "test_cuda_launch_bounds: skipped: no nvcc (CUDA toolkit) on this machine"
  [ "${CI:-}" = true ] && exit 1
  exit 77
fi
T=$(mktemp -d /tmp/tandem-lb-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0

# launches FILE: "kernel threads" for each launch whose block size is a number or a macro #defined as one
launches() {
  awk '/^#define [A-Z_]+ [0-9]+/ { val[$2] = $3 }
       /<<</ { s = $0; sub(/^[ \t]*(if \([^)]*\) |else )?/, "", s)
               name = s; sub(/(<[^<>]*>)?<<<.*/, "", name); sub(/.*[ \t(]/, "", name)
               rest = s; sub(/.*<<</, "", rest); n = split(rest, a, ","); blk = a[2]; gsub(/[ \t]/, "", blk)
               if (blk ~ /^[0-9]+$/) print name, blk; else if (blk in val) print name, val[blk] }' "$1" | sort -u
}

for cu in "$ROOT"/src/backend/*.cu; do
  base=$(basename "$cu" .cu)
  launches "$cu" | awk '$2 > 256' >"$T/$base.big"
  [ -s "$T/$base.big" ] || continue
  for variant in debug release; do
    flags="-O3"
    [ $variant = debug ] && flags="-G"
    if ! "$NVCC" $flags -std=c++17 -arch=sm_90 -I"$ROOT/src" -Xptxas -v -c "$cu" -o "$T/$base.o" >"$T/$base.$variant.log" 2>&1; then
      echo "FAIL: $base.cu does not compile with $flags:"; tail -n 5 "$T/$base.$variant.log"; fails=$((fails + 1)); continue
    fi
    # "mangled-name registers" for every entry function
    awk '/Compiling entry function/ { f = $0; sub(/.*function ./, "", f); sub(/\047.*/, "", f) }
         /Used [0-9]+ registers/ && f != "" { r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r); print f, r; f = "" }' \
      "$T/$base.$variant.log" >"$T/$base.$variant.regs"
    while read -r kernel threads; do
      checks=$((checks + 1))
      regs=$(awk -v k="$kernel" 'index($1, "_Z" length(k) k) == 1 { print $2; exit }' "$T/$base.$variant.regs")
      if [ -z "$regs" ]; then
        echo "FAIL: $base.cu ($variant): no register count for kernel $kernel"; fails=$((fails + 1))
      elif [ $((regs * threads)) -gt 65536 ]; then
        echo "FAIL: $base.cu ($variant, $flags): $kernel uses $regs registers x $threads threads > 65536: it cannot launch (declare __launch_bounds__($threads))"
        fails=$((fails + 1))
      else
        echo "  $base.cu ($variant): $kernel: $regs registers x $threads threads"
      fi
    done <"$T/$base.big"
  done
done
[ "$checks" -gt 0 ] || { echo "FAIL: no launch of more than 256 threads found (the source scan is broken)"; fails=$((fails + 1)); }
echo "test_cuda_launch_bounds: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
