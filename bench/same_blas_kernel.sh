# same_blas_kernel.sh -- sourced by the benchmarks that run PyTorch beside tandem: both sides on the same OpenBLAS
# kernel. tandem asks for a newer kernel where OpenBLAS fell back to Prescott for a CPU model it does not know
# (src/core/blas_kernel.h); Debian's PyTorch loads the same OpenBLAS and would stay on the fallback, so the ratio
# would measure the kernel, not the code. same_blas_kernel TANDEM_BINARY exports OPENBLAS_CORETYPE = tandem's
# choice when the user set none.
same_blas_kernel() {
  [ -z "${OPENBLAS_CORETYPE:-}" ] || return 0
  _k=$("$1" env 2>/dev/null | sed -n 's/.*OPENBLAS_CORETYPE=\([A-Za-z0-9]*\) set by tandem.*/\1/p' | head -1)
  if [ -n "$_k" ]; then
    export OPENBLAS_CORETYPE="$_k"
    echo "bench: OPENBLAS_CORETYPE=$_k for both sides (tandem's choice where OpenBLAS fell back to an old kernel)" >&2
  fi
  unset _k
}
