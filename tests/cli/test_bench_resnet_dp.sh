#!/bin/sh
# test_bench_resnet_dp -- bench/bench_resnet_dp.py's argument handling and report, and `tandem bench resnet`'s, in
# seconds (no namespaces, no long runs):
#  1. bad --links / --rounds / --batch: one line naming the option, exit status 2; `tandem bench resnet` with a bad
#     number or an unknown option: one line, exit status 1;
#  2. the report's arithmetic on a fake tandem (1 rank 100 images/s, 2 ranks 150 or 170 by round): efficiency 0.750
#     and 0.850 per round, so the table says 0.800 (0.750-0.850), and the JSON has one row per measurement;
#  3. a fake that prints no result line: the script says so and fails;
#  4. the real thing, tiny (batch 4, 1 step, 1 round, this machine): tandem 1 and 2 ranks (mpirun), PyTorch DDP too
#     when python3-torchvision is there; the printed efficiencies are the JSON rows' 2-rank / (2 x 1-rank).
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
ROOT=$(cd "$TANDEM_TESTS_DIR/.." && pwd)
PY=$ROOT/bench/bench_resnet_dp.py
T=$(mktemp -d /tmp/tandem-benchrdp-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# 1. arguments
for bad in "--links local,5mbps" "--rounds 0" "--batch 1"; do
  # shellcheck disable=SC2086
  /usr/bin/python3 "$PY" $bad >"$T/out" 2>"$T/err"
  rc=$?
  check "[ $rc -eq 2 ] && grep -q -- '${bad%% *}' '$T/err' && [ \$(grep -c error '$T/err') -eq 1 ]"
done
check '/usr/bin/python3 "$PY" --links 5mbps 2>&1 | grep -q "5mbps. is not local or a rate like 100mbit"'
"$BIN" bench resnet --steps x >"$T/out" 2>"$T/err"
rc=$?
check '[ $rc -eq 1 ] && grep -q "bench resnet: --steps expects a number, got .x." "$T/err" && [ "$(wc -l <"$T/err")" -eq 1 ]'
"$BIN" bench resnet --bogus >"$T/out" 2>"$T/err"
rc=$?
check '[ $rc -eq 1 ] && grep -q "unexpected argument .--bogus." "$T/err" && [ ! -s "$T/out" ]'
"$BIN" bench resnet --batch 1 >"$T/out" 2>"$T/err"
rc=$?
check '[ $rc -eq 1 ] && grep -q -- "--batch must be >= 2" "$T/err"'

# 2. the report's arithmetic (a fake tandem: rank 0 prints; 2 ranks give 150 images/s in round 1, 170 in round 2)
cat >"$T/tandem" <<SH
#!/bin/sh
[ "\${OMPI_COMM_WORLD_RANK:-0}" = 0 ] || exit 0
case "\$*" in
  *--dist*) n=\$(cat "$T/n" 2>/dev/null || echo 0); echo \$((n + 1)) >"$T/n"
            ips=\$([ "\$n" = 0 ] && echo 150 || echo 170); ranks=2 ;;
  *) ips=100 ranks=1 ;;
esac
echo '{"impl":"tandem","config":"resnet18","batch":4,"ms_step":10.0,"images_s":'\$ips',"ranks":'\$ranks',"grad_mb":42.65,"first_grad_ms":5.0}'
SH
chmod +x "$T/tandem"
/usr/bin/python3 "$PY" --tandem "$T/tandem" --links local --no-torch --rounds 2 --steps 1 --warmup 0 --batch 4 \
  --json "$T/fake.jsonl" >"$T/fake.md" 2>"$T/fake.log"
rc=$?
check '[ $rc -eq 0 ]'
check 'grep -q "^| local | - | tandem | 100.0 (100.0-100.0) | 160.0 (150.0-170.0) | \*\*0.800 (0.750-0.850)\*\* |" "$T/fake.md"'
check 'grep -q "^Command: .bench/bench_resnet_dp.sh --tandem" "$T/fake.md" && grep -q "^CPU: " "$T/fake.md"'
check '[ "$(wc -l <"$T/fake.jsonl")" -eq 4 ] && [ "$(grep -c "\"link\": \"local\"" "$T/fake.jsonl")" -eq 4 ]'

# 3. no result line
printf '#!/bin/sh\necho nothing\n' >"$T/mute"
chmod +x "$T/mute"
/usr/bin/python3 "$PY" --tandem "$T/mute" --links local --no-torch --rounds 1 >"$T/out" 2>"$T/err"
rc=$?
check '[ $rc -ne 0 ] && grep -q "no tandem result line" "$T/err"'

# 4. the real binaries, tiny
torch=--no-torch
/usr/bin/python3 -c 'import torchvision' 2>/dev/null && torch=
# shellcheck disable=SC2086
OMP_NUM_THREADS=1 /usr/bin/python3 "$PY" --tandem "$BIN" --links local $torch --rounds 1 --steps 1 --warmup 0 \
  --batch 4 --json "$T/real.jsonl" >"$T/real.md" 2>"$T/real.log"
rc=$?
check '[ $rc -eq 0 ] || { tail -5 "$T/real.log"; false; }'
check '/usr/bin/python3 - "$T/real.jsonl" "$T/real.md" <<EOF
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
md = open(sys.argv[2]).read()
ok = True
for impl, label in (("tandem", "tandem"), ("torch", "PyTorch DDP")):
    got = {r["ranks"]: r for r in rows if r["impl"] == impl}
    if not got:
        continue
    eff = got[2]["images_s"] / (2 * got[1]["images_s"])
    m = re.search(r"^\| local \| - \| %s \| [^|]* \| [^|]* \| \*\*([0-9.]+) " % label, md, re.M)
    ok &= bool(m) and abs(float(m.group(1)) - eff) < 1e-3 and got[2]["batch"] == 4
sys.exit(0 if ok and len(rows) in (2, 4) else 1)
EOF'
[ -n "$torch" ] && echo "python3-torchvision missing: PyTorch's side of part 4 not run"

echo "test_bench_resnet_dp: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
