#!/bin/sh
# gpu_verify.sh -- issue 19's verification on a lent GPU machine (the `device` tool; /work/.library/device), in as
# few calls as possible. The device machine reaches no package registry and has its own image (CUDA 13 toolkit,
# PyTorch, no Debian build dependencies), so everything is built here and carried:
#
#   here:    scripts/gpu_verify.sh prepare
#            builds into build-gpu/ for the x86-64-v3 CPU baseline (nvcc must be found: the build targets sm_90 +
#            compute_80 PTX), checks that baseline (below), and packs into .gpu/ (in
#            .gitignore, so only `carry` sends it): tandem and the GPU test binaries, every shared library `ldd` names that is
#            not glibc/libstdc++ or CUDA's own (libcublasLt, libnccl: 750 MB, taken from the device's CUDA or PyTorch
#            install instead), and Open MPI's runtime (mpirun, orted, plugins, help files) relocated with OPAL_PREFIX.
#   device:  run(command="sh scripts/gpu_verify.sh run all", carry=[".gpu"], timeout_s=600)
#            parts: tests (make test-gpu's tests, run directly: the build tree's paths do not exist there), profile
#            (TANDEM_PROFILE=1 on a Qwen3-1.7B bf16 step: the time of every backend call, profile.txt), bench
#            (bench/bench_gpu.sh: tandem vs PyTorch eager and compiled). `all` runs tests, then bench until the
#            deadline (TANDEM_VERIFY_SECONDS, default 560 of the 600 a call may take); what did not fit is named in
#            summary.txt with the call that runs it (`run bench`).
#   results: $OUT/summary.txt (verdicts, last lines), env.txt (GPU, driver, libraries found, tandem env/topo),
#            tests.log, profile.txt, bench.log, bench.jsonl, bench.md: 7 files (the device tool brings back 8).
set -u
MODE=${1:-}
PART=${2:-all}
REPO=$(cd "$(dirname "$0")/.." && pwd)
CARRY=$REPO/.gpu

# The carried build: its own folder, for the x86-64-v3 baseline (the GPU machine's CPU is unknown; the local build's
# -march=native would carry this machine's AVX-512 there), checked before it is packed: no instruction beyond v3 in
# tandem's own code (scripts/check_isa.sh), and, where qemu-user is installed, its CPU kernel test run on an emulated
# Haswell (tests/cli/test_isa_baseline.sh does both on whatever build-gpu holds).
CARRIED_TARGETS="tandem test_gpu_kernels test_gpu_comm test_parity_fixtures test_unit_kernels"
build_carried() {
  make deps >/dev/null || { echo "gpu_verify: make deps failed"; exit 1; }
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTANDEM_MARCH=x86-64-v3 >/dev/null &&
    cmake --build build-gpu -j "$(nproc)" --target $CARRIED_TARGETS >/dev/null ||
    { echo "gpu_verify: the build (build-gpu, x86-64-v3) failed"; exit 1; }
  grep -q "^TANDEM_CUDA:BOOL=ON" build-gpu/CMakeCache.txt ||
    { echo "gpu_verify: this build has no CUDA backend (nvcc not found): nothing to verify on a GPU"; exit 1; }
  scripts/check_isa.sh build-gpu/tandem build-gpu/tests/test_gpu_kernels build-gpu/tests/test_gpu_comm \
    build-gpu/tests/test_parity_fixtures || { echo "gpu_verify: the carried build needs more than x86-64-v3"; exit 1; }
  if command -v qemu-x86_64 >/dev/null; then
    TANDEM_TESTS_DIR="$REPO/tests" OMP_NUM_THREADS=2 qemu-x86_64 -cpu Haswell build-gpu/tests/test_unit_kernels \
      >build-gpu/qemu-haswell.log 2>&1 ||
      { echo "gpu_verify: test_unit_kernels fails on an emulated Haswell (build-gpu/qemu-haswell.log)"; exit 1; }
    echo "gpu_verify: x86-64-v3: no AVX-512 in tandem's code; test_unit_kernels passes under qemu-x86_64 -cpu Haswell"
  else
    echo "gpu_verify: x86-64-v3: no AVX-512 in tandem's code (qemu-user not installed: not run on an emulated Haswell)"
  fi
}

prepare() {
  cd "$REPO" || exit 1
  build_carried
  S=$(mktemp -d /tmp/tandem-gpu-stage-XXXXXX)
  mkdir -p "$S/bin/tests" "$S/lib" "$S/ompi/bin" "$S/ompi/etc" "$S/ompi/share" "$S/ompi/lib/x86_64-linux-gnu"
  cp build-gpu/tandem "$S/bin/"
  for t in test_gpu_kernels test_gpu_comm test_parity_fixtures; do cp "build-gpu/tests/$t" "$S/bin/tests/"; done
  # Open MPI 4 (Debian): bin/orterun (= mpirun) and orted, plugins, help texts, default MCA parameters
  cp -L /usr/bin/orterun /usr/bin/orted "$S/ompi/bin/"
  ln -s orterun "$S/ompi/bin/mpirun"
  cp -r /usr/lib/x86_64-linux-gnu/openmpi "$S/ompi/lib/x86_64-linux-gnu/"
  rm -rf "$S/ompi/lib/x86_64-linux-gnu/openmpi/include"
  cp -r /usr/share/openmpi "$S/ompi/share/"
  cp -r /etc/openmpi "$S/ompi/etc/"
  # shared libraries of everything carried, minus the C runtime and CUDA's own
  skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libdl\.so|/libpthread\.so|/librt\.so|/libstdc\+\+|/libgcc_s|libcublas|libnccl|libcudart|libcuda\.so'
  { for f in "$S"/bin/tandem "$S"/bin/tests/* "$S"/ompi/bin/* $(find "$S/ompi/lib" -name '*.so*'); do ldd "$f" 2>/dev/null; done; } |
    awk '$3 ~ /^\// { print $3 }' | sort -u | grep -Ev "$skip" | while read -r lib; do cp -L "$lib" "$S/lib/"; done
  mkdir -p "$CARRY"
  tar -C "$S" -cJf "$CARRY/bundle.tar.xz" . || exit 1
  rm -rf "$S"
  echo "gpu_verify: $CARRY/bundle.tar.xz, $(du -h "$CARRY/bundle.tar.xz" | cut -f1) (the device tool carries at most 64 MiB)"
  echo "gpu_verify: now, with the device tool: run(command=\"sh scripts/gpu_verify.sh run all\", carry=[\".gpu\"], timeout_s=600)"
}

# ---------------------------------------------------------------- on the device machine

find_cuda_lib() { # NAME: the folder holding it (CUDA toolkit, ldconfig, then PyTorch's nvidia wheels)
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64; do
    [ -e "$d/$1" ] && { echo "$d"; return; }
  done
  p=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n { print $NF; exit }')
  [ -n "$p" ] && { dirname "$p"; return; }
  site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  p=$(find $site /opt /usr/lib /usr/local/lib -name "$1" 2>/dev/null | head -1)
  [ -n "$p" ] && dirname "$p"
}

T0=$(date +%s)
left() { echo $(( ${TANDEM_VERIFY_SECONDS:-560} - ($(date +%s) - T0) )); }
say() { echo "$*" | tee -a "$OUT/summary.txt"; }

# one_test NAME TIMEOUT COMMAND...: runs it with the test environment, appends its output to tests.log
one_test() {
  name=$1 lim=$2
  shift 2
  if [ "$(left)" -lt 30 ]; then say "SKIPPED (time) $name"; skipped="$skipped $name"; return; fi
  [ "$lim" -gt "$(left)" ] && lim=$(left)
  echo "==== $name" >>"$OUT/tests.log"
  t=$(date +%s)
  timeout "$lim" env TANDEM_TESTS_DIR="$REPO/tests" TANDEM_BIN="$G/bin/tandem" OMP_NUM_THREADS=4 "$@" >>"$OUT/tests.log" 2>&1
  rc=$?
  v=FAIL
  [ $rc -eq 0 ] && v=PASS
  [ $rc -eq 77 ] && v=SKIP
  [ $rc -eq 124 ] && v="FAIL (timeout ${lim}s)"
  say "$v $name ($(( $(date +%s) - t )) s)"
  [ "$v" = PASS ] || [ "$v" = SKIP ] || failed="$failed $name"
}

run() {
  : "${OUT:?gpu_verify run: \$OUT is the device tool's results folder}"
  [ -f "$CARRY/bundle.tar.xz" ] || { echo "gpu_verify: $CARRY/bundle.tar.xz missing: run prepare here, carry .gpu"; exit 1; }
  G=/tmp/tandem-gpu
  rm -rf "$G" && mkdir -p "$G" && tar -C "$G" -xJf "$CARRY/bundle.tar.xz" || exit 1
  : >"$OUT/summary.txt"
  {
    echo "== $(date -u) $(uname -a)"
    nvidia-smi 2>&1 | head -20
    nvcc --version 2>&1 | tail -2
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
  } >"$OUT/env.txt"
  libs=$G/lib
  for l in libcublasLt.so.13 libnccl.so.2; do
    d=$(find_cuda_lib "$l")
    echo "$l: ${d:-NOT FOUND}" >>"$OUT/env.txt"
    [ -n "$d" ] && libs="$libs:$d"
  done
  export LD_LIBRARY_PATH="$libs:$G/ompi/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$G/ompi/bin:$PATH" OPAL_PREFIX="$G/ompi" OPAL_SYSCONFDIR="$G/ompi/etc/openmpi"
  export OPAL_LIBDIR="$G/ompi/lib/x86_64-linux-gnu/openmpi/lib" OPAL_PKGLIBDIR="$G/ompi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3"
  export OPAL_BINDIR="$G/ompi/bin" OPAL_DATADIR="$G/ompi/share" OPAL_PKGDATADIR="$G/ompi/share/openmpi"
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=^ucx OMPI_MCA_mca_base_component_show_load_errors=0
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  {
    echo "== ldd tandem (missing libraries?)"
    ldd "$G/bin/tandem" | grep -i "not found\|cublas\|nccl\|mpi\|openblas"
    echo "== tandem env"
    "$G/bin/tandem" env 2>&1
    echo "== tandem topo"
    "$G/bin/tandem" topo 2>&1
    echo "== mpirun"
    mpirun --version 2>&1 | head -1
    mpirun -n 2 "$G/bin/tandem" version 2>&1 | head -4
    echo "== compute-sanitizer"
    command -v compute-sanitizer || echo "not on PATH"
  } >>"$OUT/env.txt" 2>&1
  if ldd "$G/bin/tandem" | grep -q "not found"; then
    say "FAIL: libraries missing on this machine (env.txt): $(ldd "$G/bin/tandem" | grep "not found" | awk '{print $1}' | tr '\n' ' ')"
    exit 1
  fi
  failed="" skipped=""
  if [ "$PART" = all ] || [ "$PART" = tests ]; then
    B=$G/bin/tests
    one_test kernels-fp32 120 env TANDEM_TEST_PRECISION=fp32 "$B/test_gpu_kernels"
    one_test kernels-bf16 120 env TANDEM_TEST_PRECISION=bf16 "$B/test_gpu_kernels"
    one_test kernels-bf16-fp32-attention 120 env TANDEM_TEST_PRECISION=bf16 TANDEM_CUDA_ATTENTION=fp32 "$B/test_gpu_kernels"
    one_test parity-cuda-fp32 120 env TANDEM_TEST_BACKEND=cuda "$B/test_parity_fixtures"
    one_test parity-cuda-bf16 120 env TANDEM_TEST_BACKEND=cuda-bf16 "$B/test_parity_fixtures"
    one_test comm-nccl-1rank 60 env TANDEM_COMM_BACKEND=nccl TANDEM_TEST_EXPECT_BACKEND=nccl "$B/test_gpu_comm"
    one_test topo 60 sh "$REPO/tests/gpu/test_gpu_topo.sh"
    one_test dp-2-ranks-one-gpu 120 sh "$REPO/tests/gpu/test_gpu_dp.sh"
    one_test train-demo-lora 240 sh "$REPO/tests/gpu/test_gpu_train.sh"
    one_test compute-sanitizer 420 sh "$REPO/tests/gpu/test_gpu_sanitizer.sh"
    grep -h "^test_gpu\|^test_parity\|check failed\|^FAIL\|^demo\|^LoRA\|^full:\|^lora:\|held-out\|check-.*: exit" \
      "$OUT/tests.log" \
      | head -60 >>"$OUT/summary.txt"
  fi
  if [ "$PART" = all ] || [ "$PART" = profile ]; then
    # where the step's time goes (backend_profile.h): every backend call timed, the device waited for after each
    if [ "$(left)" -lt 120 ]; then
      say "SKIPPED (time) profile: call again with run(command=\"sh scripts/gpu_verify.sh run profile\", carry=[\".gpu\"])"
    else
      TANDEM_PROFILE=1 timeout 110 "$G/bin/tandem" bench train --model-config "$REPO/bench/configs/qwen3-1.7b.json" \
        --device cuda --bf16 --seq 2048 --batch 8 --steps 2 --warmup 1 >"$OUT/profile.txt" 2>&1
      rc=$?
      [ $rc -eq 0 ] || { failed="$failed profile"; say "FAIL profile (exit $rc): $(tail -n 1 "$OUT/profile.txt")"; }
      grep -A 14 "^tandem: profile" "$OUT/profile.txt" >>"$OUT/summary.txt"
    fi
  fi
  if [ "$PART" = all ] || [ "$PART" = bench ]; then
    d=$(( $(left) - 20 ))
    if [ "$d" -lt 60 ]; then
      say "SKIPPED (time) bench: call again with run(command=\"sh scripts/gpu_verify.sh run bench\", carry=[\".gpu\"])"
    else
      say "bench: $d s left (a case starts only before then)"
      TANDEM_BIN="$G/bin/tandem" timeout "$(( d + 15 ))" sh "$REPO/bench/bench_gpu.sh" --json "$OUT/bench.jsonl" \
        --deadline "$d" >"$OUT/bench.md" 2>"$OUT/bench.log"
      rc=$?
      [ $rc -eq 0 ] || { failed="$failed bench"; say "FAIL bench (exit $rc): $(tail -n 1 "$OUT/bench.log")"; }
      cat "$OUT/bench.md" >>"$OUT/summary.txt"
      grep -c . "$OUT/bench.jsonl" 2>/dev/null | sed 's/^/bench: measurements: /' >>"$OUT/summary.txt"
      grep "skipped (deadline" "$OUT/bench.log" | sed 's/^/bench: /' >>"$OUT/summary.txt"
    fi
  fi
  say "gpu_verify: $(( $(date +%s) - T0 )) s; failed:${failed:- none}; skipped for time:${skipped:- none}"
  [ -z "$failed" ]
}

case "$MODE" in
prepare) prepare ;;
run) run ;;
*) echo "usage: scripts/gpu_verify.sh prepare (here) | run [all|tests|profile|bench] (on the device, \$OUT set)"; exit 1 ;;
esac
