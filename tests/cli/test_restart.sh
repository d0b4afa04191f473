#!/bin/sh
# Elastic restart: `tandem launch -n 2 --max-restarts 1`, one rank killed with SIGKILL after a checkpoint:
# the launcher restarts the run from the newest complete checkpoint and the final parameters are
# bit-identical to an uninterrupted run of the same config. Without --max-restarts the same kill ends the
# launch with a non-zero status.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
need_mpirun test_restart
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tandem-restart-XXXXXX)
trap 'pkill -9 -f "output_dir=$T/" 2>/dev/null; rm -rf "$T"' EXIT
fails=0 checks=0
ARGS="max_steps=240 save_steps=40 logging_steps=40 per_device_train_batch_size=32 overwrite_output_dir=false"

"$BIN" launch -n 2 --no-bind "$EX/demo_addition.yaml" $ARGS output_dir="$T/a" >"$T/a.log" 2>&1
check '[ -s "$T/a/model.safetensors" ]'

# kill -9 one rank once checkpoint-80 is complete (its manifest is written last)
"$BIN" launch -n 2 --no-bind --max-restarts 1 "$EX/demo_addition.yaml" $ARGS output_dir="$T/b" >"$T/b.log" 2>&1 &
launcher=$!
kill_rank_when "$T/b/checkpoint-80/tandem_manifest.json" "$T/b"
check '[ -n "$victim" ]'
wait $launcher
rc=$?
check '[ $rc -eq 0 ]'
check 'grep -q "restart 1 of 1 from the newest complete checkpoint" "$T/b.log"'
check 'grep -q "resuming from .*checkpoint-" "$T/b.log"'
check 'cmp -s "$T/a/model.safetensors" "$T/b/model.safetensors"'
echo "kill -9 of rank pid $victim: launcher exit $rc; final model $(cmp -s "$T/a/model.safetensors" "$T/b/model.safetensors" && echo bit-identical || echo DIFFERENT)"

# no restarts allowed: the kill fails the launch
"$BIN" launch -n 2 --no-bind "$EX/demo_addition.yaml" $ARGS output_dir="$T/c" >"$T/c.log" 2>&1 &
launcher=$!
kill_rank_when "$T/c/checkpoint-40/tandem_manifest.json" "$T/c"
wait $launcher
rc=$?
check '[ $rc -ne 0 ]'
[ "$fails" -eq 0 ] || tail -n 20 "$T"/*.log
echo "test_restart: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
