# sanitizer_refusal.sh -- sourced: sanitizer_refused LOG prints why compute-sanitizer could not run the program at
# all (and returns 0), or returns 1 when it ran (its ERROR SUMMARY line is there, whatever it found). Some sandboxed
# GPU machines refuse the sanitizer (no debugger interface, ptrace or profiling permission, an unsupported device):
# that is a skip with its reason, not a failure of tandem. Used by test_gpu_sanitizer.sh; test_gpu_scripts.sh checks
# it on the sanitizer's messages without a GPU.
sanitizer_refused() {
  grep -q "ERROR SUMMARY:" "$1" && return 1
  why=$(grep -E -m1 "^=+ (Internal Sanitizer Error|Error)\b|[Ss]anitizer.*(not supported|permission|failed to (initialize|attach))|Debugger interface.*(fail|not)" "$1")
  [ -n "$why" ] || return 1
  echo "$why" | sed 's/^=* *//'
}

# find_sanitizer: compute-sanitizer on PATH or in the CUDA toolkit (not always on PATH there); empty when absent
find_sanitizer() {
  command -v compute-sanitizer 2>/dev/null && return
  for p in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -x "$p" ] && { echo "$p"; return; }
  done
}
