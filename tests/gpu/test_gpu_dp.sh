#!/bin/sh
# 2 ranks on the one GPU through the MPI backend (host-staged) equal 1 rank (skipped, 77, without a GPU):
# test_dp_split's setup and bound (1x8 vs 2x4 for 6 steps, full and LoRA with dropout, relative L2 <= 1e-6 per
# tensor, LoRA B within AdamW's step bound), in fp32 mode (in bf16 an fp32 rounding difference can flip the bf16 rounding of the next
# product's operand, so bf16 runs are not split-invariant to 1e-6); then test_gpu_comm with 2 ranks on the GPU
# through MPI (its 1-rank NCCL run is a ctest of its own).
set -u
GPU_TEST=test_gpu_dp
. "${TANDEM_TESTS_DIR:?}/gpu/gpulib.sh"

COMMON="max_steps=6 logging_steps=100 learning_rate=1e-4 warmup_ratio=0 device=cuda"
for ft in full lora; do
  extra=""
  [ $ft = lora ] && extra="finetuning_type=lora lora_rank=4 lora_dropout=0.1"
  "$BIN" train "$EX/demo_addition.yaml" $COMMON $extra per_device_train_batch_size=8 output_dir="$T/$ft-1x8" \
    >"$T/$ft-1x8.log" 2>&1
  TANDEM_COMM_BACKEND=mpi mpirun -n 2 -x TANDEM_COMM_BACKEND "$BIN" train "$EX/demo_addition.yaml" $COMMON $extra \
    per_device_train_batch_size=4 output_dir="$T/$ft-2x4" >"$T/$ft-2x4.log" 2>&1
  check 'grep -q "staged in host memory" "$T/'$ft'-2x4.log" && grep -q "trained 6 steps" "$T/'$ft'-2x4.log"'
  a=$(worst "$T/$ft-2x4" "$T/$ft-1x8" '.' 'lora_B')
  echo "$ft: 2x4 on one GPU vs 1x8, worst relative L2 $a"
  check 'within "$a" 1e-6'
  if [ $ft = lora ]; then m=$(maxdiff "$T/$ft-2x4" "$T/$ft-1x8" 'lora_B'); check 'within "$m" $(adamw_bound 1e-4 6)'; fi
done

# the comm layer on GPU memory, 2 ranks through MPI
TANDEM_COMM_BACKEND=mpi mpirun -n 2 -x TANDEM_COMM_BACKEND "$(dirname "$BIN")/tests/test_gpu_comm" >"$T/comm.log" 2>&1
check 'grep -q "size 2, backend mpi .*0 failed" "$T/comm.log"'
grep "test_gpu_comm:" "$T/comm.log"

[ "$fails" -eq 0 ] || for f in "$T"/*.log; do echo "== $f"; tail -n 8 "$f"; done
echo "test_gpu_dp: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
