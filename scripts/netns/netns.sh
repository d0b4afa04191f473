#!/bin/sh
# netns.sh -- simulate two machines on this host with network namespaces, for tandem's comm tests and
# benchmarks. Each "machine" is a namespace ${TANDEM_NETNS}0 / ${TANDEM_NETNS}1 (TANDEM_NETNS defaults to
# "tandem"; pick another prefix to run two kits at once) holding one end of a veth pair, 10.77.0.1/24 and
# 10.77.0.2/24 (private, visible only inside the namespaces), optionally shaped with tbf on both ends.
#
#   netns.sh up [--rate 100mbit] [--burst 64kb] [--latency 20ms]   create (rate 0 = unshaped veth)
#   netns.sh down                        remove both namespaces (idempotent; call it from a trap)
#   netns.sh check                       exit 1 with the reason when namespaces cannot be created here
#   netns.sh exec NODE CMD...            run CMD as machine NODE (0 or 1): own netns, own hostname
#   netns.sh mpirun MPIRUN-ARGS...       mpirun started on machine 0; machine 1 is reached through
#                                        rsh-agent.sh (ip netns exec instead of ssh)
#
# Machine identity: every process started through `exec`, `mpirun` or the agent runs in its own UTS
# namespace with hostname ${TANDEM_NETNS}-node<i> and TANDEM_NODE_NAME set to the same name, so the comm
# layer sees two machines (see src/comm/comm.h). Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN).
set -eu
PREFIX=${TANDEM_NETNS:-tandem}
HERE=$(cd "$(dirname "$0")" && pwd)
STATE=/tmp/$PREFIX-netns
NS0=${PREFIX}0 NS1=${PREFIX}1
ADDR0=10.77.0.1 ADDR1=10.77.0.2
# veth names are limited to 15 characters
VETH0=$(printf '%.12s' "$PREFIX")v0 VETH1=$(printf '%.12s' "$PREFIX")v1

die() { echo "netns.sh: $*" >&2; exit 1; }

check() {
  [ "$(id -u)" -eq 0 ] || die "needs root (CAP_NET_ADMIN) to create network namespaces; running as uid $(id -u)"
  command -v ip >/dev/null || die "'ip' (iproute2) is not installed (scripts/install-deps.sh)"
  command -v unshare >/dev/null || die "'unshare' (util-linux) is not installed"
  probe=${PREFIX}probe$$
  ip netns add "$probe" 2>"$STATE.err" || die "cannot create a network namespace: $(cat "$STATE.err")"
  ip netns del "$probe"
  rm -f "$STATE.err"
}

down() {
  for ns in "$NS0" "$NS1"; do
    if ip netns list 2>/dev/null | grep -q "^$ns\b"; then ip netns del "$ns" || true; fi
  done
  ip link del "$VETH0" 2>/dev/null || true   # only if left in the root namespace by a failed `up`
  rm -rf "$STATE"
}

up() {
  rate=100mbit burst=64kb latency=20ms
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) rate=$2; shift 2 ;;
      --burst) burst=$2; shift 2 ;;
      --latency) latency=$2; shift 2 ;;
      *) die "up: unknown option '$1'" ;;
    esac
  done
  check
  down
  mkdir -p "$STATE"
  ip netns add "$NS0"
  ip netns add "$NS1"
  ip link add "$VETH0" type veth peer name "$VETH1"
  ip link set "$VETH0" netns "$NS0"
  ip link set "$VETH1" netns "$NS1"
  ip -n "$NS0" addr add $ADDR0/24 dev "$VETH0"
  ip -n "$NS1" addr add $ADDR1/24 dev "$VETH1"
  for i in 0 1; do
    eval ns=\$NS$i dev=\$VETH$i
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "$dev" up
    if [ "$rate" != 0 ]; then
      ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency "$latency"
    fi
  done
  printf '%s slots=8\n%s slots=8\n' $ADDR0 $ADDR1 >"$STATE/hostfile"
  echo "$rate" >"$STATE/rate"
}

# node_exec I CMD... : run CMD as machine I (own netns + hostname, TANDEM_NODE_NAME exported).
node_exec() {
  i=$1
  shift
  case $i in 0 | 1) ;; *) die "exec: machine must be 0 or 1, got '$i'" ;; esac
  eval ns=\$NS$i
  name=$PREFIX-node$i
  [ -d "$STATE" ] || die "namespaces are not up (run: $0 up)"
  exec ip netns exec "$ns" unshare --uts env TANDEM_NODE_NAME="$name" \
    sh -c 'hostname "$TANDEM_NODE_NAME" && exec "$@"' sh "$@"
}

# Open MPI inside the namespaces: only the veth carries TCP (lo is never used between machines), the
# rsh agent replaces ssh, and root is allowed (the kit needs root anyway). No binding: each daemon
# believes it has the host to itself and would pin rank 0 of every "machine" to the same core.
run_mpirun() {
  [ -f "$STATE/hostfile" ] || die "namespaces are not up (run: $0 up)"
  node_exec 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TANDEM_NETNS="$PREFIX" \
    mpirun --hostfile "$STATE/hostfile" \
    --mca plm_rsh_agent "$HERE/rsh-agent.sh" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    --bind-to none -x TANDEM_NETNS "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  up) up "$@" ;;
  down) down ;;
  check) check ;;
  exec) node_exec "$@" ;;
  mpirun) run_mpirun "$@" ;;
  *) die "usage: netns.sh up|down|check|exec NODE CMD...|mpirun ARGS..." ;;
esac
