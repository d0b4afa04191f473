#!/bin/sh
# test_cuda_teardown_sync -- the CUDA backend's free() must wait for every stream of the device before it unmaps or
# frees memory, not only the kernels' stream: at teardown a collective on the parameters or gradients may still run
# on NCCL's own stream (comm_nccl.c), and freeing under it is a use-after-free on the GPU. No GPU here, so this reads
# the source: cuda_free's body synchronises the device (cudaDeviceSynchronize) before its first cudaFree or unmap.
set -u
SRC=${TANDEM_TESTS_DIR:?}/../src/backend/cuda_backend.cu
fails=0 checks=0
check() { checks=$((checks + 1)); if ! eval "$1"; then echo "FAIL: $2"; fails=$((fails + 1)); fi; }
body=$(awk '/^static void cuda_free\(void \*p\)/ { on = 1 } on { print } on && /^}/ { exit }' "$SRC")
check '[ -n "$body" ]' "cuda_free not found in $SRC"
first_free=$(printf '%s\n' "$body" | grep -n 'cudaFree\|g_drv.unmap\|address_free' | head -1 | cut -d: -f1)
sync_at=$(printf '%s\n' "$body" | grep -n 'cudaDeviceSynchronize' | head -1 | cut -d: -f1)
check '[ -n "$sync_at" ] && [ -n "$first_free" ] && [ "$sync_at" -lt "$first_free" ]' \
  "cuda_free releases memory (line $first_free of its body) without a cudaDeviceSynchronize before it (${sync_at:-none})"
echo "test_cuda_teardown_sync: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
