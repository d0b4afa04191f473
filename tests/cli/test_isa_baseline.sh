#!/bin/sh
# test_isa_baseline -- what is carried to a GPU machine (scripts/gpu_verify.sh prepare: build-gpu/, TANDEM_MARCH
# x86-64-v3) must run on any x86-64-v3 CPU (Haswell and later), whatever this build machine has (-march=native here
# may mean AVX-512). Checks that scripts/check_isa.sh tells the two apart (a vector loop built for x86-64-v3 passes,
# the same loop built for x86-64-v4 with 512-bit vectors is refused), and, where qemu-user is installed, that an
# emulated Haswell runs the first and dies on the second with SIGILL. Then, when build-gpu/ holds the carried build,
# the same two checks on it: no instruction beyond v3 in tandem's own code, and its test_unit_kernels (the CPU
# kernels, vectorised) passes under qemu-x86_64 -cpu Haswell. Without qemu those runs are skipped with the reason;
# without build-gpu the carried build is not checked here (gpu_verify.sh prepare checks it before packing).
set -u
ROOT=$(cd "${TANDEM_TESTS_DIR:?}/.." && pwd)
. "$TANDEM_TESTS_DIR/cli/testlib.sh"
T=$(mktemp -d /tmp/tandem-isa-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
command -v objdump >/dev/null || { echo "FAIL: objdump (binutils) is not installed"; exit 1; }
CC=${CC:-cc}
cat >"$T/axpy.c" <<'C'
void axpy(float *restrict y, const float *restrict x, float a, int n) { for (int i = 0; i < n; i++) y[i] += a * x[i]; }
C
cat >"$T/main.c" <<'C'
#include <stdio.h>
void axpy(float *restrict y, const float *restrict x, float a, int n);
int main(void) {
    static float x[4096], y[4096];
    for (int i = 0; i < 4096; i++) x[i] = (float)i;
    axpy(y, x, 2.0f, 4096);
    printf("%g\n", y[4095]);
    return y[4095] == 8190.0f ? 0 : 1;
}
C
"$CC" -O3 -march=x86-64-v3 "$T/main.c" "$T/axpy.c" -o "$T/v3" && \
  "$CC" -O3 -march=x86-64-v4 -mprefer-vector-width=512 "$T/main.c" "$T/axpy.c" -o "$T/v4" ||
  { echo "FAIL: $CC cannot build the probes"; exit 1; }
check '"$ROOT/scripts/check_isa.sh" "$T/v3" >"$T/isa3.log"'
check '! "$ROOT/scripts/check_isa.sh" "$T/v4" >"$T/isa4.log" && grep -q "beyond x86-64-v3" "$T/isa4.log"'

QEMU=$(command -v qemu-x86_64 || true)
haswell() { OMP_NUM_THREADS=2 "$QEMU" -cpu Haswell "$@" 2>"$T/qemu.err"; }
if [ -n "$QEMU" ]; then
  check 'haswell "$T/v3" >/dev/null'
  haswell "$T/v4" >/dev/null; rc=$?
  check '[ $rc -eq 132 ] || grep -q "Illegal instruction" "$T/qemu.err"'
else
  echo "test_isa_baseline: qemu runs skipped: qemu-x86_64 (Debian's qemu-user) is not installed"
fi

B=$ROOT/build-gpu
if [ -x "$B/tandem" ] && grep -q "^TANDEM_MARCH:STRING=x86-64-v3" "$B/CMakeCache.txt" 2>/dev/null; then
  check '"$ROOT/scripts/check_isa.sh" "$B/tandem" $(ls "$B"/tests/test_gpu_* "$B/tests/test_parity_fixtures" 2>/dev/null)'
  if [ -n "$QEMU" ] && [ -x "$B/tests/test_unit_kernels" ]; then
    check 'TANDEM_TESTS_DIR="$ROOT/tests" haswell "$B/tests/test_unit_kernels" >"$T/kernels.log" 2>&1 || { tail -3 "$T/kernels.log"; false; }'
    echo "test_isa_baseline: build-gpu: $(tail -1 "$T/kernels.log")"
  fi
else
  echo "test_isa_baseline: no carried build in build-gpu/ (scripts/gpu_verify.sh prepare makes it): only the probes checked"
fi
echo "test_isa_baseline: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
