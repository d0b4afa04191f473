# gpulib.sh -- the set-up every GPU shell test shares (sourced after setting GPU_TEST to the test's name):
# testlib, a scratch folder removed on exit, Open MPI as root on one host, and the probe that skips the test
# (exit 77, with the reason) when this build has no CUDA backend or no GPU is visible.
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
ROOT=$TD/..
EX=$ROOT/examples
T=$(mktemp -d /tmp/tandem-gpu-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 TANDEM_CACHE_DIR="$T/cache"

"$BIN" train "$EX/demo_addition.yaml" device=cuda max_steps=1 output_dir="$T/probe" >"$T/probe.log" 2>&1
if grep -q "no GPU is visible\|built without CUDA" "$T/probe.log"; then
  echo "${GPU_TEST:?}: skipped: $(grep -o "device 'cuda'.*" "$T/probe.log" | head -1)"
  exit 77
fi
