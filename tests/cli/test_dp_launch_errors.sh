#!/bin/sh
# Launch failures are one clear error line, fast, never a hang: ranks started with different builds,
# configs or job secrets (checked before any training, naming the host), a hostfile host that does not
# resolve, one that does not answer (TEST-NET address 192.0.2.1: nothing is there), a host listed twice,
# and a malformed slots value.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
need_mpirun test_dp_launch_errors
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/tandem-launch-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
one_error() { # log pattern: exactly one "tandem: error:" line, and it matches pattern
  [ "$(grep -c 'tandem: error:' "$1")" -eq 1 ] && grep 'tandem: error:' "$1" | grep -Eq "$2"
}
sed "s|model_config: demo/config.json|model_config: $EX/demo/config.json|" "$EX/demo_addition.yaml" >"$T/a.yaml"
cp "$T/a.yaml" "$T/b.yaml"
echo "# a different file" >>"$T/b.yaml"
host=$(hostname)

# different config on rank 1
timeout 120 mpirun -n 1 "$BIN" train "$T/a.yaml" max_steps=5 output_dir="$T/o" : -n 1 "$BIN" train "$T/b.yaml" \
  max_steps=5 output_dir="$T/o" >"$T/cfg.log" 2>&1
rc=$?
check '[ $rc -ne 0 ]'
check 'one_error "$T/cfg.log" "rank 1 on host $host was started with a different config"'
check '[ ! -e "$T/o" ]' # nothing trained, nothing written
# different build on rank 1 (the same program plus one byte)
cp "$BIN" "$T/tandem-other"
printf x >>"$T/tandem-other"
timeout 120 mpirun -n 1 "$BIN" train "$T/a.yaml" max_steps=5 output_dir="$T/o" : -n 1 "$T/tandem-other" train \
  "$T/a.yaml" max_steps=5 output_dir="$T/o" >"$T/build.log" 2>&1
rc=$?
check '[ $rc -ne 0 ]'
check 'one_error "$T/build.log" "rank 1 on host $host runs a different tandem build"'
# a process of another job (another secret) is refused
timeout 120 mpirun -n 1 -x TANDEM_JOB_SECRET=one "$BIN" train "$T/a.yaml" max_steps=5 output_dir="$T/o" : -n 1 \
  -x TANDEM_JOB_SECRET=two "$BIN" train "$T/a.yaml" max_steps=5 output_dir="$T/o" >"$T/secret.log" 2>&1
rc=$?
check '[ $rc -ne 0 ]'
check 'one_error "$T/secret.log" "rank 1 on host $host presents another job secret"'
# the same binary and config on both ranks passes the check and trains
timeout 120 mpirun -n 2 "$BIN" train "$T/a.yaml" max_steps=3 output_dir="$T/ok" >"$T/ok.log" 2>&1
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/ok/model.safetensors" ]'

# hostfile problems, reported by `tandem launch` before mpirun starts anything
printf 'nosuchhost.invalid slots=2\n' >"$T/hf-missing"
printf '# second machine\n192.0.2.1 slots=1\n' >"$T/hf-unreachable"
printf 'localhost slots=2\nlocalhost slots=1\n' >"$T/hf-twice"
printf 'localhost slots=two\n' >"$T/hf-slots"
for case in missing unreachable twice slots; do
  start=$(date +%s)
  timeout 60 "$BIN" launch --hostfile "$T/hf-$case" "$T/a.yaml" >"$T/$case.log" 2>&1
  rc=$? took=$(($(date +%s) - start))
  check '[ $rc -ne 0 ] && [ $rc -ne 124 ]' # failed, and not by the timeout
  check '[ $took -le 30 ]'
  echo "$case: $(grep 'tandem: error:' "$T/$case.log") (${took} s)"
done
check 'one_error "$T/missing.log" "hf-missing:1: host .nosuchhost.invalid. does not resolve"'
check 'one_error "$T/unreachable.log" "hf-unreachable:2: host .192.0.2.1. (is unreachable|did not answer)"'
check 'one_error "$T/twice.log" "hf-twice:2: host localhost is listed twice"'
check 'one_error "$T/slots.log" "hf-slots:1: .slots=two."'
[ "$fails" -eq 0 ] || cat "$T"/*.log
echo "test_dp_launch_errors: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
