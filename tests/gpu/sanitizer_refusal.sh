# sanitizer_refusal.sh -- sourced: sanitizer_refused LOG prints why compute-sanitizer could not run the program at
# all (and returns 0), or returns 1 when it ran (its summary line is there, whatever it found: memcheck, synccheck
# and initcheck end with ERROR SUMMARY, racecheck with RACECHECK SUMMARY). Some sandboxed GPU machines refuse the
# sanitizer (no debugger interface, ptrace or profiling permission, an unsupported device): that is a skip with its
# reason, not a failure of tandem. sanitizer_foreign_races LOG tells racecheck's findings in NVIDIA's closed library
# kernels from those in tandem's own. Used by test_gpu_sanitizer.sh; test_gpu_scripts.sh checks both on the
# sanitizer's messages without a GPU.
sanitizer_refused() {
  grep -E -q "(ERROR|RACECHECK) SUMMARY:|Race reported|Invalid __" "$1" && return 1
  why=$(grep -E -m1 "^=+ (Internal Sanitizer Error|Error)\b|[Ss]anitizer.*(not supported|permission|failed to (initialize|attach))|Debugger interface.*(fail|not)" "$1")
  [ -n "$why" ] || return 1
  echo "$why" | sed 's/^=* *//'
}

# sanitizer_kernels LOG: the kernels its findings point at ("... access at NAME+0x..", "at NAME+0x.."), one per line
sanitizer_kernels() {
  sed -n -E 's/^=+ .*( access| ) *at (void )?([A-Za-z_][A-Za-z0-9_]*).*\+0x.*/\3/p' "$1" | sort -u
}

# sanitizer_foreign_races LOG: prints the library kernels and returns 0 when the log is a racecheck run that finished
# (its summary is there) and every race it reports lies in a kernel that is not tandem's (tandem's are all named k_*):
# cuBLASLt's Hopper kernels (nvjet_*, sm90_*) synchronise through hardware barriers and the tensor-memory engine,
# which racecheck's shared-memory model does not follow, so hazards it reports there are not tandem's to fix. A
# race in a k_* kernel, or any memcheck finding (a bad pointer handed to a library kernel is tandem's fault), is not
# excused by this.
sanitizer_foreign_races() {
  grep -q "RACECHECK SUMMARY:" "$1" || return 1
  grep -q "Race reported" "$1" || return 1
  ks=$(sanitizer_kernels "$1")
  [ -n "$ks" ] || return 1
  echo "$ks" | grep -q "^k_" && return 1
  echo "$ks" | tr '\n' ' ' | sed 's/ $//'
}

# find_sanitizer: compute-sanitizer on PATH or in the CUDA toolkit (not always on PATH there); empty when absent
find_sanitizer() {
  command -v compute-sanitizer 2>/dev/null && return
  for p in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -x "$p" ] && { echo "$p"; return; }
  done
}
