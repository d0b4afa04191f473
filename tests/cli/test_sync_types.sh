#!/bin/sh
# The config's sync_mode (tn_sync_mode, TN_SYNC_*) and the gradient exchange's mode (tn_grad_mode, TN_GRAD_*)
# are distinct types: handing one to a function that takes the other is a compile error under the project's
# -Wall -Wextra -Werror (C11), where a bare int once let TN_SYNC_DILOCO == TN_SYNC_REDUCE_SCATTER through.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
ROOT=$TANDEM_TESTS_DIR/..
CC=${CC:-cc}
command -v "$CC" >/dev/null 2>&1 || { echo "SKIP: no C compiler ($CC)"; exit 77; }
fails=0 checks=0
SRC=$TANDEM_TESTS_DIR/compile/sync_mode_mix.c
FLAGS="-std=c11 -Wall -Wextra -Werror -fsyntax-only -I$ROOT/src"
check '"$CC" $FLAGS "$SRC" 2>/dev/null'                                  # the right type compiles
out=$("$CC" $FLAGS -DMIX "$SRC" 2>&1); rc=$?
check '[ $rc -ne 0 ]'                                                    # the mix does not
check 'echo "$out" | grep -q "enum-conversion"'                          # and for that reason
echo "sync types: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
