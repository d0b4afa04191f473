#!/bin/sh
# openblas_coretypes.sh -- the OpenBLAS kernels (OPENBLAS_CORETYPE values) this CPU can execute, one per line,
# oldest first. Forcing a kernel whose instructions the CPU lacks would crash, so each is listed only when
# /proc/cpuinfo shows its instruction set. With an argument: exit 0 if that kernel runs here, 1 if not.
has() { for f in "$@"; do grep -qw "$f" /proc/cpuinfo || return 1; done; }
list() {
  has sse4_2 && echo Nehalem
  has avx && echo Sandybridge
  has avx2 fma && echo Haswell
  has avx512f avx512cd avx512bw avx512dq avx512vl && echo SkylakeX
  return 0
}
if [ $# -gt 0 ]; then list | grep -qx "$1"; else list; fi
