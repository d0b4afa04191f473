#!/bin/sh
# Every command tandem prints for the user to run is copy-paste safe (issue 24, item 13): pasted into sh it gives
# back exactly the argv meant. A property test: tandem launch with arguments drawn at random from the characters a
# shell splits, expands or interprets (space, tab, ; & | < > ( ) $ ` \ ' " * ? [ ] ~ # ! { } ^ and UTF-8), run with a
# stand-in mpirun that records the argv it receives; the printed "tandem launch: mpirun ..." line, parsed back by
# sh, must be that argv. Then a training run into such a folder: its "tandem dashboard DIR" and "tensorboard
# --logdir DIR" suggestions, parsed by sh, must name that folder.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
EX=${TANDEM_TESTS_DIR:?}/../examples
T=$(mktemp -d /tmp/tandem-printed-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
mkdir -p "$T/bin"
cat >"$T/bin/mpirun" <<EOS
#!/bin/sh
{ printf 'mpirun\\0'; for a in "\$@"; do printf '%s\\0' "\$a"; done; } >"$T/argv"
EOS
chmod +x "$T/bin/mpirun"

# nasty N: the N-th random word (fixed seed): 1-12 characters from the shell's special ones, letters and UTF-8
nasty() {
  awk -v n="$1" 'BEGIN { srand(24 + n); split("a b Z 9 _ - . / ; & | < > ( ) $ ` \\ '"'"' \" * ? [ ] ~ # ! { } ^ = % , é", c, " ")
    c[length(c) + 1] = " "; c[length(c) + 1] = "\t"; len = 1 + int(rand() * 12); s = ""
    for (i = 0; i < len; i++) s = s c[1 + int(rand() * length(c))]; printf "%s", s }'
}
# parsed LINE OUT: the words sh reads from LINE, NUL-separated into OUT
parsed() { sh -c 'eval "set -- $1" && for a in "$@"; do printf "%s\0" "$a"; done' sh "$1" >"$2"; }

bad=0
for n in $(seq 1 25); do
  w=$(nasty "$n")
  rm -f "$T/argv"
  PATH="$T/bin:$PATH" "$BIN" launch -n 2 "$EX/demo_addition.yaml" "output_dir=$T/out$n $w" "default_system=$w" \
    >"$T/launch.log" 2>&1
  line=$(grep '^tandem launch: mpirun' "$T/launch.log")
  parsed "${line#tandem launch: }" "$T/parsed"
  if [ ! -f "$T/argv" ] || ! cmp -s "$T/argv" "$T/parsed"; then
    bad=$((bad + 1))
    echo "  word $n [$w]: printed: $line"
  fi
done
echo "test_printed_commands: 25 launches with random words, $bad printed lines not read back as run"
check '[ $bad -eq 0 ]'

# the suggestions of a run whose output_dir holds such characters
dir="$T/run \$HOME; 'x' \"y\" (z)"
"$BIN" train "$EX/demo_addition.yaml" max_steps=1 output_dir="$dir" report_to=tensorboard --dashboard 127.0.0.1:0 \
  >"$T/train.log" 2>&1
rc=$?
dash=$(grep -o 'afterwards: tandem dashboard .*)' "$T/train.log" | sed 's/^afterwards: //; s/)$//')
tb=$(grep -o '(tensorboard --logdir .*)$' "$T/train.log" | sed 's/^(//; s/)$//')
parsed "$dash" "$T/dash"
parsed "$tb" "$T/tb"
printf 'tandem\0dashboard\0%s\0' "$dir" >"$T/dash.want"
printf 'tensorboard\0--logdir\0%s\0' "$(ls -d "$dir"/runs/* 2>/dev/null | head -1)" >"$T/tb.want"
echo "dashboard: $dash"
echo "tensorboard: $tb"
check '[ $rc -eq 0 ] && cmp -s "$T/dash" "$T/dash.want" && cmp -s "$T/tb" "$T/tb.want"'
echo "test_printed_commands: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
