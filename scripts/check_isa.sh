#!/bin/sh
# check_isa.sh -- refuses x86-64 code that needs more than the x86-64-v3 baseline (Haswell: AVX2, FMA, BMI2), the
# baseline the carried GPU bundle is built for (scripts/gpu_verify.sh prepare): its GPU machine's CPU is unknown, and
# AVX-512 code from a -march=native build would die there with SIGILL. Disassembles each file (objdump) and looks
# for what only AVX-512 (x86-64-v4) has: zmm registers, the opmask registers k0-k7, xmm/ymm16-31, EVEX-only
# instructions ({1to..} broadcasts, vpternlog, vpermt2/vpermi2, valign, vcompress/vexpand, vpmovq/d narrowing).
# Usage: scripts/check_isa.sh FILE...   (exit 1 naming the first offending instructions of each file)
set -u
[ $# -gt 0 ] || { echo "usage: scripts/check_isa.sh FILE..."; exit 2; }
command -v objdump >/dev/null || { echo "check_isa: objdump (binutils) is needed"; exit 2; }
bad=0
pat='%zmm|%k[0-7]\b|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|\{1to[0-9]+\}|vpternlog|vperm[ti]2|valign[dq]|vcompress|vexpand|vpmov[sdqwb]*[qd][bwd]\b|vpmov[su]s'
for f in "$@"; do
  if ! objdump -d --no-show-raw-insn "$f" >/tmp/check_isa.$$ 2>&1; then
    echo "check_isa: $f: objdump failed: $(head -1 /tmp/check_isa.$$)"; bad=1; continue
  fi
  n=$(grep -Ec "$pat" /tmp/check_isa.$$)
  if [ "$n" -gt 0 ]; then
    echo "check_isa: $f: $n instructions beyond x86-64-v3 (AVX-512), e.g.:"
    grep -E "$pat" /tmp/check_isa.$$ | head -3 | sed 's/^/    /'
    bad=1
  fi
done
rm -f /tmp/check_isa.$$
exit $bad
