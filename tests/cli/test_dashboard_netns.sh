#!/bin/sh
# The dashboard's links between two simulated machines (network namespaces joined by a veth pair shaped to
# 100 Mbit/s, scripts/netns/netns.sh; the run launched through the hostfile path as test_lowcomm_netns.sh does):
#  - before any measurement the job line says the capacity was not measured and how to measure it;
#  - `tandem bench allreduce` across the two machines records their capacity (TANDEM_BENCH_LOG), below the shaped
#    12.5 MB/s and above a tenth of it;
#  - a 2-rank run with dashboard=true then carries that capacity in its job line, and each machine's bytes/s in and
#    out: the median of the run's samples is above a quarter of what the strategy's bytes per step at the median
#    step time would need (the counters see the gradients cross) and at most the shaped rate plus 5% (nothing else
#    is counted as this link's);
#  - `tandem dashboard` over the finished run serves both machines' links and the capacity (/api/state).
# Where namespaces cannot be created the test FAILS with the reason.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
TD=${TANDEM_TESTS_DIR:?}
EX=$TD/../examples
KIT=$TD/../scripts/netns
export TANDEM_NETNS=tndb$$
need_mpirun test_dashboard_netns
need_netns test_dashboard_netns "$KIT"
T=$(mktemp -d /tmp/tandem-dashn-XXXXXX)
trap '"$KIT/netns.sh" down; rm -rf "$T"' EXIT
"$KIT/netns.sh" up --rate 100mbit || { echo "test_dashboard_netns: FAIL: netns.sh up failed"; exit 1; }
fails=0 checks=0
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export TANDEM_BENCH_LOG=$T/bench_allreduce.jsonl
sed "s|model_config: demo/config.json|model_config: $EX/demo/config.json|" "$EX/demo_addition.yaml" >"$T/demo.yaml"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$T/hostfile"
# run NAME: 2 ranks, one on each machine, with the dashboard
run() {
  name=$1
  timeout 400 "$KIT/netns.sh" exec 0 env OMP_NUM_THREADS=1 OMPI_MCA_plm_rsh_agent="$KIT/rsh-agent.sh" \
    OMPI_MCA_btl=tcp,self,vader OMPI_MCA_btl_tcp_if_include=10.77.0.0/24 OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 \
    TANDEM_NETNS="$TANDEM_NETNS" TANDEM_BENCH_LOG="$TANDEM_BENCH_LOG" \
    "$BIN" launch --hostfile "$T/hostfile" "$T/demo.yaml" max_steps="$2" logging_steps=10 output_dir="$T/$1" \
    dashboard=true >"$T/$1.log" 2>&1
  rc=$?
  check '[ $rc -eq 0 ] && grep -q "on 2 machine(s)" "$T/$name.log" && grep -q "tandem: dashboard of this run at http://127.0.0.1:" "$T/$name.log"'
  [ $rc -eq 0 ] || tail -n 20 "$T/$name.log"
}
job() { grep '"kind":"job"' "$T/$1/tandem_ranks.jsonl" | tail -n 1; }

run before 5
check 'job before | grep -q "\"capacity\":null" && job before | grep -q "not measured: run .tandem bench allreduce. on these machines"'

timeout 300 "$KIT/netns.sh" mpirun -n 2 --map-by node -x TANDEM_BENCH_LOG -x OMP_NUM_THREADS=1 "$BIN" bench allreduce \
  --min 4M --max 16M --iters 3 --warmup 1 --no-mpi >"$T/bench.log" 2>&1
rc=$?
cat "$T/bench.log"
cap=$(/usr/bin/python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["machine_Bps"])' "$TANDEM_BENCH_LOG" 2>/dev/null)
echo "recorded capacity: ${cap:-none} bytes/s each way per machine"
check '[ $rc -eq 0 ] && [ -n "$cap" ] && within "$cap" 12500000 && within 1250000 "$cap"'
# and the link's CPU a byte (tandem plan --link-cpu): more than nothing, less than the two cores' whole time over
# the bytes the 16 MB all-reduce carried each way (at >= 1.25 MB/s: 800 ns a byte per core)
ns=$(sed -n 's/^# link CPU at .*: \([0-9.]*\) ns a byte each way per machine .*/\1/p' "$T/bench.log")
check '[ -n "$ns" ] && within 0.01 "$ns" && within "$ns" 1600'

run after 60
check 'job after | grep -q "\"capacity\":{\"machine_Bps\":"'
/usr/bin/python3 - "$T/after/tandem_ranks.jsonl" "$cap" >"$T/links.out" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
job = [l for l in lines if l["kind"] == "job"][-1]
steps = [l for l in lines if l["kind"] == "step"]
times = [b["time"] - a["time"] for a, b in zip(steps, steps[1:])]
links = [l["links"] for l in steps if "links" in l]
ok = job["machines"] == 2 and len(links) >= 4 and all(len(x) == 2 for x in links)
need = job["bytes_per_step"] / statistics.median(times)
for m in range(2):
    for d, name in ((0, "in"), (1, "out")):
        vals = [x[m][d] for x in links[1:] if x[m] is not None]
        med = statistics.median(vals) if vals else 0
        print("machine %d %s: median %.0f bytes/s over %d samples; the strategy needs %.0f, the link carries 12500000"
              % (m, name, med, len(vals), need))
        ok = ok and need / 4 <= med <= 12500000 * 1.05
print("links ok" if ok else "links WRONG")
PY
cat "$T/links.out"
check 'grep -q "^links ok" "$T/links.out"'

# the finished run's page
"$BIN" dashboard "$T/after" >"$T/serve.log" 2>&1 &
spid=$!
for _ in $(seq 1 1200); do grep -q "at http" "$T/serve.log" && break; sleep 0.1; done
port=$(sed -n 's|.* at http://[^ ]*:\([0-9]*\)/ .*|\1|p' "$T/serve.log")
/usr/bin/python3 - "$port" >"$T/state.out" <<'PY'
import json, sys, urllib.request
s = json.loads(urllib.request.urlopen("http://127.0.0.1:%s/api/state" % sys.argv[1]).read())
r = s["runs"][0]
ok = len(r["links"]["machines"]) == 2 and all(m is not None for m in r["links"]["machines"]) \
    and r["job"]["capacity"]["machine_Bps"] > 0 and r["job"]["machines"] == 2
print("page links ok" if ok else "page links WRONG: %s" % json.dumps(r.get("links")))
PY
cat "$T/state.out"
check 'grep -q "^page links ok" "$T/state.out"'
kill "$spid"
wait_at_most 120 "$spid"

[ "$fails" -eq 0 ] || tail -n 20 "$T"/*.log
echo "test_dashboard_netns: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
