#!/bin/sh
# diloco_sync_steps N (sync_mode: diloco): the first N steps synchronous data parallelism, then DiLoCo rounds from
# step N's parameters. On faked machines (TANDEM_NODE_NAME per rank, one host), against what must hold exactly:
#  - N >= the run's steps: every step runs the exchange sync_mode ddp runs (the same buckets, all-reduce or the
#    compressed exchange, the same loss normalisation over every rank), so the run IS plain DP, bit for bit: the
#    same weights and the same logged losses, fp32 and int8, 2 machines x 1 rank and x 2 ranks;
#  - 0 < N: built independently from existing pieces, plain DP checkpointed at step N and resumed as DiLoCo
#    (N = 0; N a multiple of H so its rounds end at the same steps) starts the rounds from the same point
#    (parameters of step N, the same AdamW moments on every machine, outer momentum 0): the same weights bit for
#    bit; the checkpoint at step N equals plain DP's, the end does not (a real difference); the rounds end at
#    N + k H (N = 2, H = 4: plain DP's checkpoint-2 and one synchronous DiLoCo round of 4 steps = step 6);
#  - resumes from checkpoints inside the synchronous phase, at its end and mid-round after it are bit-identical
#    to the uninterrupted run, with the same log, fp32 and int8 (the phase's compression residuals);
#  - a bad value is one line.
# (N = 0 is today's DiLoCo: the default, which test_lowcomm.sh checks.)
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
need_mpirun test_diloco_sync
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tandem-dlsync-XXXXXX)
trap 'pkill -9 -f "output_dir=$T/" 2>/dev/null; rm -rf "$T"' EXIT
fails=0 checks=0
# a constant learning rate: a run cut shorter (max_steps) takes the same steps as a longer one up to its end
COMMON="max_steps=12 logging_steps=1 learning_rate=1e-3 warmup_ratio=0 lr_scheduler_type=constant per_device_train_batch_size=8"

same() { cmp -s "$T/$1/model.safetensors" "$T/$2/model.safetensors"; }
same_log() { [ -n "$(logged_losses "$T/$1")" ] && [ "$(logged_losses "$T/$1")" = "$(logged_losses "$T/$2")" ]; }

# ---- N >= the run's steps: plain data parallelism, bit for bit
train_machines_ok ddp 2 1 save_steps=2
train_machines_ok all 2 1 sync_mode=diloco diloco_inner_steps=4 diloco_sync_steps=12
train_machines_ok all-more 2 1 sync_mode=diloco diloco_inner_steps=4 diloco_sync_steps=1000
train_machines_ok ddp-int8 2 1 comm_compression=int8
train_machines_ok all-int8 2 1 comm_compression=int8 sync_mode=diloco diloco_inner_steps=4 diloco_sync_steps=12
train_machines_ok dl-int8-job 2 1 comm_compression=int8 sync_mode=diloco diloco_inner_steps=4 max_steps=4
train_machines_ok ddp-2x2 4 2 per_device_train_batch_size=4
train_machines_ok all-2x2 4 2 per_device_train_batch_size=4 sync_mode=diloco diloco_inner_steps=4 diloco_sync_steps=12
for p in "all ddp" "all-more ddp" "all-int8 ddp-int8" "all-2x2 ddp-2x2"; do
  a=${p% *} b=${p#* }
  check 'same $a $b'
  check 'same_log $a $b'
  echo "diloco_sync_steps >= steps ($a) vs plain DP ($b): $(same $a $b && echo bit-identical || echo DIFFERENT)"
done
check 'grep -q "diloco_sync_steps 12: steps 1-12 are synchronous data parallelism over all 2 rank(s)" "$T/all.log"'
check 'grep -q "as int8" "$T/all-int8.log"'
# the job line of tandem_ranks.jsonl (the dashboard's "The strategy (...)") names the strategy that ran and its codec
job_says() { grep '"kind":"job"' "$T/$1/tandem_ranks.jsonl" | tail -n 1 | grep -q "\"sync\":\"$2\",\"compression\":\"$3\""; }
check 'job_says ddp ddp fp32 && job_says ddp-int8 compressed int8 && job_says dl-int8-job diloco int8'

# ---- 0 < N: the rounds start from plain DP's step N (checkpoint-4 of ddp, resumed as DiLoCo with H = 4)
train_machines_ok s4 2 1 sync_mode=diloco diloco_inner_steps=4 diloco_sync_steps=4 save_steps=4
mkdir -p "$T/built" && cp -r "$T/ddp/checkpoint-4" "$T/built/"
train_machines_ok built 2 1 sync_mode=diloco diloco_inner_steps=4 overwrite_output_dir=false
train_machines_ok dl 2 1 sync_mode=diloco diloco_inner_steps=4
check 'grep -q "restarts its rounds from checkpoint-4.s parameters: it holds no DiLoCo state" "$T/built.log"'
check 'cmp -s "$T/s4/checkpoint-4/model.safetensors" "$T/ddp/checkpoint-4/model.safetensors"'
check 'same s4 built'
check '! same s4 ddp && ! same s4 dl'
check '[ "$(logged_losses "$T/s4" | head -5)" = "$(logged_losses "$T/ddp" | head -5)" ]' # step 5: the same parameters, one mean
# rounds end at N + k H: N = 2, H = 4, without overlap, round 1 ends at step 6 with every machine at the consensus;
# plain DP's checkpoint-2 resumed as DiLoCo for 4 steps, one round (H 8: none ends before the run's last step,
# which ends a synchronous one; H decides only where rounds end) gets there too
train_machines_ok s2 2 1 sync_mode=diloco diloco_inner_steps=4 diloco_sync_steps=2 diloco_overlap=false save_steps=6
mkdir -p "$T/built2" && cp -r "$T/ddp/checkpoint-2" "$T/built2/"
train_machines_ok built2 2 1 sync_mode=diloco diloco_inner_steps=8 diloco_overlap=false overwrite_output_dir=false max_steps=6
check 'cmp -s "$T/s2/checkpoint-6/model.safetensors" "$T/built2/model.safetensors"'
echo "diloco_sync_steps 2, H 4: step 6 vs plain DP to step 2 and one DiLoCo round:" \
  "$(cmp -s "$T/s2/checkpoint-6/model.safetensors" "$T/built2/model.safetensors" && echo bit-identical || echo DIFFERENT)"
echo "diloco_sync_steps 4 vs plain DP to step 4 resumed as DiLoCo: $(same s4 built && echo bit-identical || echo DIFFERENT);" \
  "vs plain DP $(worst "$T/s4" "$T/ddp"), vs DiLoCo from step 0 $(worst "$T/s4" "$T/dl") (relative L2, a real difference)"

# ---- resume inside the phase (3), at its end (6) and mid-round after it (9; rounds end at 10, 12)
for mode in "comm_compression=none" "comm_compression=int8"; do
  tag=$(echo "$mode" | tr ' =' '_-')
  ARGS="sync_mode=diloco diloco_inner_steps=4 diloco_sync_steps=6 save_steps=3 overwrite_output_dir=false $mode"
  train_machines_ok "ra-$tag" 2 1 $ARGS
  for k in 3 6 9; do
    [ "$k" = 6 ] && [ "$tag" != comm_compression-none ] && continue
    mkdir -p "$T/rb-$tag-$k" && cp -r "$T/ra-$tag/checkpoint-$k" "$T/rb-$tag-$k/"
    train_machines_ok "rb-$tag-$k" 2 1 $ARGS
    check 'grep -q "resuming from .*checkpoint-$k (step $k of 12)" "$T/rb-$tag-$k.log"'
    check '! grep -q "note: sync_mode diloco restarts\|starts .*with empty residuals\|taken during DiLoCo" "$T/rb-$tag-$k.log"'
    check 'same "ra-$tag" "rb-$tag-$k"'
    check '[ -n "$(logged_losses "$T/rb-$tag-$k")" ] && [ "$(logged_losses "$T/ra-$tag" | tail -n "$(logged_losses "$T/rb-$tag-$k" | wc -l)")" = "$(logged_losses "$T/rb-$tag-$k")" ]'
    echo "$mode: resumed from checkpoint-$k: $(same "ra-$tag" "rb-$tag-$k" && echo bit-identical || echo DIFFERENT)"
  done
done
check '[ -f "$T/ra-comm_compression-int8/checkpoint-3/sync-rank-00001-of-00002.safetensors" ]'

# ---- a bad value: one line
"$BIN" train "$EX/demo_addition.yaml" diloco_sync_steps=-1 output_dir="$T/x" >"$T/x.log" 2>&1
rc=$?
check '[ $rc -ne 0 ] && grep -q "key .diloco_sync_steps. expects an integer >= 0 (optimizer steps), got .-1." "$T/x.log"'
check '[ "$(wc -l <"$T/x.log")" -eq 1 ]'

[ "$fails" -eq 0 ] || for f in "$T"/*.log; do echo "== $f"; tail -n 5 "$f"; done
echo "test_diloco_sync: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
