#!/bin/sh
# ZeRO's two shard layouts (src/trainer/shard_layout.h) on one machine, at 1, 2 and 3 ranks (3 divides neither the
# trainable slab nor most units: chunks one value apart, checked from the banner):
#  1. Split invariance: the global batch of 12 as 2x6 and 3x4 at stages 1, 2, 3, balanced (the default) and
#     contiguous, gives the parameters of one rank's 1x12 run: relative L2 <= 1e-6 per tensor (the bound and why:
#     tests/cli/test_dp_split.sh); LoRA balanced at stage 3 on 3 ranks too (lora_B within AdamW's step bound).
#     Memory at 3 ranks, stage 3, by page residency: within the ZeRO formulas rounded up per unit as FSDP pads.
#     Stage 3 on one machine maps one shared copy of the parameters (zero_shared_params, the default): the same
#     parameters to the bit as gathering them (zero_shared_params: false), which stays covered here; its file on
#     2 MB pages (a huge-page tmpfs of its own) or a line saying why not.
#  2. Re-sharding: a checkpoint written by 3 balanced ranks (one optimizer file per rank, each a list of chunks)
#     resumes bit-identically on 3 balanced ranks, and within 1e-6 on 2 contiguous ranks (stage 1), 2 balanced
#     ranks (stage 3) and 1 rank (stage 0); checkpoints written by 2 contiguous ranks and by 1 rank resume on
#     3 balanced ranks within 1e-6. A checkpoint missing one rank's file is refused, naming the gap.
# The comparison can fail: the planted bugs of test_unit_shard_layout (tests/mutants) and, here, a run with
# another learning rate lands far outside the bound.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
need_mpirun test_zero_layout
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tandem-zerolayout-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
COMMON="max_steps=8 logging_steps=100 learning_rate=1e-4 warmup_ratio=0 plot_loss=false"

run() { # name ranks extra... (global batch 12: 12 / ranks a rank)
  name=$1 n=$2; shift 2
  if [ "$n" = 1 ]; then L="$BIN train"; else L="$BIN launch -n $n --no-bind"; fi
  $L "$EX/demo_addition.yaml" $COMMON per_device_train_batch_size=$((12 / n)) output_dir="$T/$name" "$@" \
    >"$T/$name.log" 2>&1 || { echo "run $name failed:"; tail -n 20 "$T/$name.log"; }
}

# 1. split invariance, both layouts
run ref 1 zero_stage=0
for layout in balanced contiguous; do
  for n in 2 3; do
    for s in 1 2 3; do
      [ $layout = contiguous ] && [ $n = 2 ] && [ $s != 2 ] && continue
      run $layout-$n-s$s $n zero_stage=$s zero_shard_layout=$layout
      d=$(worst "$T/$layout-$n-s$s" "$T/ref")
      echo "$layout, $n ranks, stage $s vs 1 rank: worst rel L2 $d"
      check 'within $d 1e-6 && grep -q "ZeRO stage $s, $n rank" "$T/$layout-$n-s$s.log"'
    done
  done
done
check 'grep -q "ZeRO shards contiguous" "$T/contiguous-3-s2.log"'
u=$(sed -n 's/.*unit(s), each split into 3 chunks.* \([0-9][0-9]*\) unit(s) not divisible by 3.*/\1/p' "$T/balanced-3-s2.log")
echo "balanced, 3 ranks: ${u:-no} unit(s) not divisible by 3"
check '[ "${u:-0}" -gt 0 ]'
# memory at 3 ranks, stage 3: the ZeRO formulas with FSDP's rounding (a chunk is at most ceil(unit / N), so a rank
# holds at most P/N + U values of each kind, U units), plus the pages bucket and group edges share (8 KB each)
mem_ok() { # LOG UNITS
  awk -v U="$2" '
    /trainable parameters \(a full replica/ { for (i = 1; i <= NF; i++) if ($i == "rank(s),") { N = $(i - 1); P = $(i + 1) } }
    /rank [0-9]+ memory:/ { ranks++; q = P / N + U; slack = 8192 * 64
      printf "    rank %d: parameters %.0f, gradients %.0f, AdamW %.0f bytes (4 (P/N + U) = %.0f)\n", ranks - 1, $(NF - 8), $(NF - 5), $(NF - 1), 4 * q
      bad = bad || $(NF - 1) > 8 * q || $(NF - 5) > 4 * q + slack || $(NF - 8) > 4 * q + slack }
    END { exit !(ranks == N && U > 0 && !bad) }' "$1"
}
U=$(sed -n 's/.*balanced.*: \([0-9][0-9]*\) unit(s), each split.*/\1/p' "$T/balanced-3-s3.log")
check 'mem_ok "$T/balanced-3-s3.log" "${U:-0}"'
# stage 3 on one machine maps one shared copy of the parameters (zero.c), counted a third to each rank above; the
# gathers it replaces stay what runs across machines (test_zero_netns): here too with zero_shared_params false
check 'grep -q "the 3 ranks map one shared copy of the parameters" "$T/balanced-3-s3.log"'
check 'grep -q "the 3 ranks map one shared copy of the parameters" "$T/contiguous-3-s3.log"'
# on 2 MB pages: its file is on a huge-page tmpfs of its own (core/huge_file.h), so a line about 4 KB pages must say
# why that was refused (or that shmem_enabled is deny, which takes huge pages from every mount)
check '! grep -q "on 4 KB pages" "$T/balanced-3-s3.log" || grep -q "huge-page tmpfs of its own was refused\|is deny" "$T/balanced-3-s3.log"'
run gathered-3-s3 3 zero_stage=3 zero_shared_params=false
d=$(worst "$T/gathered-3-s3" "$T/ref")
echo "balanced, 3 ranks, stage 3, parameters gathered (zero_shared_params: false) vs 1 rank: worst rel L2 $d"
check 'within $d 1e-6 && ! grep -q "shared copy" "$T/gathered-3-s3.log"'
check 'mem_ok "$T/gathered-3-s3.log" "${U:-0}"'
check '"$BIN" compare "$T/gathered-3-s3" "$T/balanced-3-s3" --quiet --max-rel-l2 0 >/dev/null' # the same sums
check '! mem_ok "$T/contiguous-3-s1.log" "${U:-0}"' # a full parameter replica is outside: the check can fail
run lref 1 zero_stage=0 finetuning_type=lora lora_rank=4
run l3 3 zero_stage=3 finetuning_type=lora lora_rank=4
a=$(worst "$T/l3" "$T/lref" '.' 'lora_B') m=$(maxdiff "$T/l3" "$T/lref" 'lora_B')
echo "LoRA, balanced, 3 ranks, stage 3 vs 1 rank: worst rel L2 $a, lora_B max|diff| $m"
check 'within $a 1e-6 && within $m $(adamw_bound 1e-4 8)'
run halflr 3 zero_stage=2 learning_rate=5e-5
d=$(worst "$T/halflr" "$T/ref")
echo "half the learning rate vs 1 rank: worst rel L2 $d (must be far outside the bound)"
check 'within 1e-4 $d'

# 2. re-sharding through checkpoints
resume() { # name from ranks extra...: from's checkpoint-4 to step 8
  r=$1 from=$2 n=$3; shift 3
  rm -rf "$T/$r" && mkdir -p "$T/$r" && cp -r "$T/$from/checkpoint-4" "$T/$r/"
  run "$r" "$n" overwrite_output_dir=false "$@"
  check 'grep -q "resuming from .*checkpoint-4" "$T/$r.log"'
}
run b3 3 zero_stage=2 save_steps=4
check '[ "$(ls "$T/b3/checkpoint-4" | grep -c "optimizer-0000[0-2]-of-00003")" -eq 3 ]'
resume b3-same b3 3 zero_stage=2
check '"$BIN" compare "$T/b3-same" "$T/b3" --quiet --max-rel-l2 0 >/dev/null'
for to in "2 zero_stage=1 zero_shard_layout=contiguous" "2 zero_stage=3" "1 zero_stage=0"; do
  set -- $to
  resume b3-to-$1-$2 b3 $to
  d=$(worst "$T/b3-to-$1-$2" "$T/b3")
  echo "balanced 3 ranks (stage 2) resumed on $*: worst rel L2 $d"
  check 'within $d 1e-6'
done
run c2 2 zero_stage=3 zero_shard_layout=contiguous save_steps=4
resume c2-to-3 c2 3 zero_stage=2
d=$(worst "$T/c2-to-3" "$T/c2")
echo "contiguous 2 ranks (stage 3) resumed on 3 balanced ranks (stage 2): worst rel L2 $d"
check 'within $d 1e-6'
run one 1 zero_stage=0 save_steps=4
resume one-to-3 one 3 zero_stage=3
d=$(worst "$T/one-to-3" "$T/one")
echo "1 rank resumed on 3 balanced ranks (stage 3): worst rel L2 $d"
check 'within $d 1e-6'
# one rank's optimizer file missing: refused, nothing trained
rm -rf "$T/gap" && mkdir -p "$T/gap" && cp -r "$T/b3/checkpoint-4" "$T/gap/"
rm "$T/gap/checkpoint-4/optimizer-00001-of-00003.safetensors"
python3 -c 'import json, sys; p = sys.argv[1]; d = json.load(open(p)); del d["files"][sys.argv[2]]; json.dump(d, open(p, "w"))' \
  "$T/gap/checkpoint-4/tandem_manifest.json" optimizer-00001-of-00003.safetensors
run gap 2 zero_stage=2 overwrite_output_dir=false
check '! [ -f "$T/gap/model.safetensors" ] && grep -q "the optimizer shards cover .* of the .* moments needed" "$T/gap.log"'

[ "$fails" -eq 0 ] || tail -n 3 "$T"/*.log
echo "test_zero_layout: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
