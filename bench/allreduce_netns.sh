#!/bin/sh
# allreduce_netns.sh -- tandem's allreduce against one plain TCP stream and against plain MPI_Allreduce,
# between two simulated machines (scripts/netns: two network namespaces joined by a veth pair, shaped with
# tbf on both ends). One invocation: build the link, measure one TCP stream over it (iperf3, receiver
# goodput), run `tandem bench allreduce` with 1 rank per machine and with 2 per machine (hierarchical
# path), print both tables and the ratios to the TCP stream for sizes >= 1 MB, remove the namespaces.
# The ranks are started the two ways tandem launches across machines: one mpirun with a hostfile from
# machine 0 (what `tandem launch --hostfile` runs), and the per-node launch (`NNODES=2 NODE_RANK=i
# MASTER_ADDR=... tandem bench allreduce` typed on each machine: node 0's ompi-server joins the two local
# jobs, src/comm/comm_join.c).
#
#   bench/allreduce_netns.sh [--rate 100mbit] [--min 4K] [--max 64M] [--iters 3] [--warmup 1]
#                            [--launch hostfile,pernode]
#
# Needs root (network namespaces). TANDEM_BIN selects the binary (default build/tandem). At 100 Mbit/s the
# defaults take about 5 minutes; --max 256M (the full nccl-tests range) about 25.
# Ratios: busbw/tcp as the task states it; algbw/tcp is the fairer one with 2 ranks per machine, since the
# machines exchange the whole buffer once (busbw's 2(n-1)/n counts ranks, not links).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TANDEM_BIN:-$ROOT/build/tandem}
NETNS=$ROOT/scripts/netns/netns.sh
export TANDEM_NETNS=${TANDEM_NETNS:-tandembench}
rate=100mbit min=4K max=64M iters=3 warmup=1 launch=hostfile,pernode
while [ $# -gt 0 ]; do
  case $1 in
    --rate) rate=$2; shift 2 ;;
    --min) min=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --launch) launch=$2; shift 2 ;;
    *) echo "allreduce_netns.sh: unknown option '$1'" >&2; exit 1 ;;
  esac
done
[ -x "$BIN" ] || { echo "allreduce_netns.sh: $BIN is not built (make build, or set TANDEM_BIN)" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "allreduce_netns.sh: iperf3 is missing (scripts/install-deps.sh)" >&2; exit 1; }
T=$(mktemp -d /tmp/tandem-bench-XXXXXX)
cleanup() {
  [ -f "$T/iperf.pid" ] && kill "$(cat "$T/iperf.pid")" 2>/dev/null # a server left by a failed client
  "$NETNS" down
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$NETNS" up --rate "$rate"
echo "# link: veth between namespaces, tbf $rate on both ends ($(ip netns exec "${TANDEM_NETNS}0" tc qdisc show | grep tbf | sed 's/.*rate/rate/'))"

# One TCP stream, node0 -> node1, 10 s; the receiver's goodput is the reference.
"$NETNS" exec 1 iperf3 -s -1 -D -I "$T/iperf.pid" >/dev/null
sleep 1
"$NETNS" exec 0 iperf3 -c 10.77.0.2 -t 10 -f m >"$T/iperf.txt"
tcp_mbit=$(awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i + 1) == "Mbits/sec") v = $i } END { print v }' "$T/iperf.txt")
[ -n "$tcp_mbit" ] || { echo "allreduce_netns.sh: could not read iperf3's rate:" >&2; cat "$T/iperf.txt" >&2; exit 1; }
tcp_gbs=$(awk -v m="$tcp_mbit" 'BEGIN { printf "%.5f", m / 8000 }')
echo "# one TCP stream (iperf3, 10 s, receiver): $tcp_mbit Mbit/s = $tcp_gbs GB/s"

# ratios: the table in $T/table.txt, ratios to the TCP stream
ratios() {
  cat "$T/table.txt"
  awk -v tcp="$tcp_gbs" '
    BEGIN { printf "# ratios to the TCP stream (sizes >= 1 MB)\n#  %10s | %12s %12s | %12s %12s\n", "size(B)",
            "tandem busbw", "tandem algbw", "MPI busbw", "MPI algbw" }
    /^#/ || $1 < 1048576 { next }
    { split($0, h, "|"); split(h[2], t, " "); split(h[3], m, " ")
      printf "   %10d | %12.3f %12.3f | %12.3f %12.3f\n", $1, t[3] / tcp, t[2] / tcp, m[3] / tcp, m[2] / tcp
      n++; st += t[3] / tcp; sm += m[3] / tcp; at += t[2] / tcp; am += m[2] / tcp }
    END { if (n) printf "#  %10s | %12.3f %12.3f | %12.3f %12.3f\n", "mean", st / n, at / n, sm / n, am / n }
  ' "$T/table.txt"
}

# run_case LABEL MPIRUN-ARGS : one mpirun with the kit's hostfile, from machine 0
run_case() {
  label=$1
  shift
  echo
  echo "## $label"
  # shellcheck disable=SC2086
  "$NETNS" mpirun "$@" "$BIN" bench allreduce --min "$min" --max "$max" --iters "$iters" --warmup "$warmup" \
    >"$T/table.txt"
  ratios
}

# run_pernode LABEL NPROC_PER_NODE : the same command typed on each machine (node 0 prints the table)
run_pernode() {
  echo
  echo "## $1"
  set -- NNODES=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 NPROC_PER_NODE="$2" TANDEM_NETNS="$TANDEM_NETNS" \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  for node in 1 0; do
    "$NETNS" exec $node env "$@" NODE_RANK=$node "$BIN" bench allreduce --min "$min" --max "$max" --iters "$iters" \
      --warmup "$warmup" >"$T/pernode$node.txt" 2>&1 &
  done
  wait
  grep "^tandem launch: mpirun" "$T/pernode0.txt" | sed 's/^/# /'
  grep -v "^tandem launch" "$T/pernode0.txt" >"$T/table.txt"
}

case $launch in *hostfile*)
  run_case "hostfile launch, 1 rank per machine (2 ranks: pipelined ring between the machines)" -n 2 --map-by node
  run_case "hostfile launch, 2 ranks per machine (4 ranks: shared memory inside, ring between the machines)" \
    -n 4 --map-by ppr:2:node ;;
esac
case $launch in *pernode*)
  run_pernode "per-node launch, 1 rank per machine" 1 && ratios
  run_pernode "per-node launch, 2 ranks per machine" 2 && ratios ;;
esac
