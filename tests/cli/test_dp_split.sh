#!/bin/sh
# Data parallelism is split-invariant: the same global batch of 8 trained as 1x8, 2x4, 4x2 (ranks x
# micro-batch) and 2 x 2 x accumulation 2, for 6 steps, full and LoRA (with dropout, whose masks are drawn
# per global row), must give the same parameters.
#
# Bound: relative L2 <= 1e-6 per tensor. The runs are not bit-identical because a different split sums
# each weight gradient over a different number of rows per GEMM (fp32 rounding differs, ~1e-7 relative),
# and AdamW normalises every element by sqrt(v), so elements with near-zero gradients turn that rounding
# into up to lr-sized differences; over a whole tensor that stays far below 1e-6 (observed <= 1e-7).
# Exception, derived rather than measured: LoRA B starts at zero, so after 6 steps its value IS the sum of 6
# normalised AdamW steps m_s / sqrt(v_s), and any element whose gradient is within rounding of zero (its
# sign set by the summation order) takes a step of either sign. How many such elements a tensor has depends
# on the data and on the BLAS kernel (observed: lora_B rel L2 2.4e-6 with one OpenBLAS kernel, 2.3e-5 with
# another), and telling them apart needs the gradients, which this test does not see (the parity test does).
# So lora_B is held, element by element, to AdamW's own bound for two correct runs: by Cauchy-Schwarz on the
# bias-corrected moments, |m_s / sqrt(v_s)| <= A_s = sqrt(sum_k w_k^2 / o_k) (w, o the moments' weights of
# gradient k; betas 0.9 / 0.95), so |B_run - B_ref| <= 2 lr sum_{s<=6} A_s (x (1 + lr wd)^6 for decay).
# Nothing is lost in sensitivity: a split that changed B's gradient changes A's from step 2 on (A's gradient
# is B^T times the upstream gradient), and A is held to 1e-6; losing half the global batch, full or LoRA,
# is far outside the bounds (checked below).
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
need_mpirun test_dp_split
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
T=$(mktemp -d /tmp/tandem-dp-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
COMMON="max_steps=6 logging_steps=100 learning_rate=1e-4 warmup_ratio=0"

run() { # name ranks micro accum extra...
  name=$1 n=$2 b=$3 acc=$4; shift 4
  OMP_NUM_THREADS=1 mpirun -n "$n" -x OMP_NUM_THREADS "$BIN" train "$EX/demo_addition.yaml" $COMMON "$@" \
    per_device_train_batch_size="$b" gradient_accumulation_steps="$acc" output_dir="$T/$name" >"$T/$name.log" 2>&1 \
    || { echo "run $name failed:"; cat "$T/$name.log"; }
}

ADAM_B=$(adamw_bound 1e-4 6) # the demo's weight decay 0.01 and betas 0.9 / 0.95
for ft in full lora; do
  extra=""
  [ $ft = lora ] && extra="finetuning_type=lora lora_rank=4 lora_dropout=0.1"
  run $ft-1x8 1 8 1 $extra
  run $ft-2x4 2 4 1 $extra
  run $ft-4x2 4 2 1 $extra
  run $ft-2x2x2 2 2 2 $extra
  check '[ -s "$T/$ft-1x8.log" ] && grep -q "trained 6 steps" "$T/$ft-2x4.log"'
  for v in 2x4 4x2 2x2x2; do
    a=$(worst "$T/$ft-$v" "$T/$ft-1x8" '.' 'lora_B')
    b=$(worst "$T/$ft-$v" "$T/$ft-1x8" 'lora_B')
    echo "$ft $v vs 1x8: worst rel L2 $a (lora_B: $b)"
    check 'within $a 1e-6'
    m=$(maxdiff "$T/$ft-$v" "$T/$ft-1x8" 'lora_B')
    [ $ft = lora ] && echo "  lora_B max|diff| $m, AdamW's bound for two correct runs $ADAM_B"
    check 'within $m $ADAM_B'
  done
done
# the comparison is sensitive: losing half of the global batch (as a rank whose slice went missing
# would) is far outside the bound
run full-half 1 4 1
d=$(worst "$T/full-half" "$T/full-1x8" '.')
echo "full, global batch 4 instead of 8 vs 1x8: worst rel L2 $d"
check 'within 1e-4 $d'
run lora-half 1 4 1 finetuning_type=lora lora_rank=4 lora_dropout=0.1
d=$(worst "$T/lora-half" "$T/lora-1x8" '.' 'lora_B')
echo "lora, global batch 4 instead of 8 vs 1x8: worst rel L2 without lora_B $d"
check 'within 1e-4 $d'
grep -q "data parallel over 4 rank" "$T/full-4x2.log" || { echo "FAIL: no data-parallel banner"; fails=$((fails + 1)); }
echo "test_dp_split: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
