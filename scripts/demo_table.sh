#!/bin/sh
# demo_table.sh -- does the bundled demo learn on every CPU? Runs `tandem train examples/demo_addition.yaml`
# under every OpenBLAS kernel (OPENBLAS_CORETYPE) this CPU can execute, with 1 and 2 threads and 5 seeds, and
# prints the held-out accuracy of each run, then the worst and the median. Exits 1 if the worst is below
# --min (default 95). Kernels change the summation order inside every matrix product, so the runs differ in
# their last bits from the first step on; a recipe that only learns for some orders shows up here.
# Re-running with the same --out only runs what is missing.
# Usage: scripts/demo_table.sh [--seeds "42 1 2 3 4"] [--threads "1 2"] [--coretypes "default Haswell ..."]
#                              [--min 95] [--out DIR] [key=value ...]   (overrides go to every run)
set -eu
cd "$(dirname "$0")/.."
BIN=${TANDEM_BIN:-build/tandem}
SEEDS="42 1 2 3 4" THREADS="1 2" MIN=95 OUT="" CORETYPES=""
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) SEEDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --coretypes) CORETYPES=$2; shift 2 ;;
    --min) MIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
[ -x "$BIN" ] || { echo "demo_table: $BIN not built (run make build)"; exit 1; }
[ -n "$CORETYPES" ] || CORETYPES="default $(scripts/openblas_coretypes.sh | tr '\n' ' ')"
[ -n "$OUT" ] || OUT=$(mktemp -d "${TMPDIR:-/tmp}/demo-table.XXXXXX")
mkdir -p "$OUT"
NPROC=$(nproc)

# one run: CORETYPE THREADS SEED -> $OUT/CORETYPE-tTHREADS-sSEED.log (held-out accuracy on its last line)
cat >"$OUT/one.sh" <<'ONE'
#!/bin/sh
ct=$1 th=$2 seed=$3
log="$OUT/$ct-t$th-s$seed"
[ -f "$log.secs" ] && exit 0 # done by an earlier invocation with the same --out
if [ "$ct" = default ]; then unset OPENBLAS_CORETYPE; else OPENBLAS_CORETYPE=$ct; export OPENBLAS_CORETYPE; fi
start=$(date +%s.%N)
OMP_NUM_THREADS=$th "$BIN" train examples/demo_addition.yaml seed="$seed" output_dir="$log.out" plot_loss=false $OVERRIDES \
  >"$log.log" 2>&1 || echo "tandem: exit $?" >>"$log.log"
echo "$(date +%s.%N) - $start" | bc >"$log.secs"
rm -rf "$log.out"
ONE
chmod +x "$OUT/one.sh"
OVERRIDES="$*" # key=value words, no spaces inside
export OUT BIN OVERRIDES

for th in $THREADS; do  # runs of th threads, nproc/th at a time
  par=$((NPROC / th)); [ "$par" -ge 1 ] || par=1
  for ct in $CORETYPES; do for seed in $SEEDS; do echo "$ct $th $seed"; done; done |
    xargs -P "$par" -L 1 "$OUT/one.sh"
done

: >"$OUT/accs"
printf '%-12s %-20s %7s %5s %9s %10s %6s\n' coretype kernel threads seed accuracy final-loss secs
for ct in $CORETYPES; do for th in $THREADS; do for seed in $SEEDS; do
  log="$OUT/$ct-t$th-s$seed.log"
  acc=$(sed -n 's/.*held-out accuracy \([0-9.]*\)%.*/\1/p' "$log" | tail -1)
  kernel=$(sed -n 's/.*threads per rank (\(.*\))$/\1/p' "$log" | head -1 | sed 's/^OpenBLAS //; s/;.*//')
  loss=$(sed -n 's/^step .* | loss \([0-9.]*\) .*/\1/p' "$log" | tail -1)
  printf '%-12s %-20s %7s %5s %8s%% %10s %6.0f\n' "$ct" "${kernel:-?}" "$th" "$seed" "${acc:-FAILED}" "${loss:-?}" \
    "$(cat "$OUT/$ct-t$th-s$seed.secs")"
  echo "${acc:--1}" >>"$OUT/accs"
done; done; done
sort -n "$OUT/accs" >"$OUT/accs.sorted"
n=$(wc -l <"$OUT/accs.sorted")
worst=$(head -1 "$OUT/accs.sorted")
median=$(awk -v n="$n" '{a[NR]=$1} END {print (n % 2) ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2}' "$OUT/accs.sorted")
echo "demo_table: $n runs, worst $worst%, median $median% (logs in $OUT)"
awk -v w="$worst" -v m="$MIN" 'BEGIN {exit !(w >= m)}' || { echo "demo_table: worst $worst% is below $MIN%"; exit 1; }
