#!/bin/sh
# netns.sh -- simulate two (or up to 8) machines on this host with network namespaces, for tandem's comm tests
# and benchmarks. Each "machine" is a namespace ${TANDEM_NETNS}0, ${TANDEM_NETNS}1, ... (TANDEM_NETNS defaults
# to "tandem"; pick another prefix to run two kits at once), machine i at 10.77.0.<i+1>/24 (private, visible
# only inside the namespaces). Two machines hold the ends of one veth pair; more are each wired by a veth
# pair to a bridge in namespace ${TANDEM_NETNS}sw (a switch): every machine has its own link, shaped with tbf
# on both ends (its upload on its side, its download on the switch's).
#
#   netns.sh up [--machines N] [--rate 100mbit] [--burst 64kb] [--latency 20ms]
#                                        create N machines (default 2; rate 0 = unshaped veth)
#   netns.sh down                        remove every namespace (idempotent; call it from a trap)
#   netns.sh check                       exit 1 with the reason when namespaces cannot be created here
#   netns.sh exec NODE CMD...            run CMD as machine NODE (0 .. N-1): own netns, own hostname
#   netns.sh mpirun MPIRUN-ARGS...       mpirun started on machine 0; the others are reached through
#                                        rsh-agent.sh (ip netns exec instead of ssh)
#
# Machine identity: every process started through `exec`, `mpirun` or the agent runs in its own UTS
# namespace with hostname ${TANDEM_NETNS}-node<i> and TANDEM_NODE_NAME set to the same name, so the comm
# layer sees two machines (see src/comm/comm.h). Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN).
set -eu
PREFIX=${TANDEM_NETNS:-tandem}
HERE=$(cd "$(dirname "$0")" && pwd)
STATE=/tmp/$PREFIX-netns
NS0=${PREFIX}0 NS1=${PREFIX}1 NSW=${PREFIX}sw
ADDR0=10.77.0.1 ADDR1=10.77.0.2
MOST=8
# veth names are limited to 15 characters
SHORT=$(printf '%.12s' "$PREFIX")
VETH0=${SHORT}v0 VETH1=${SHORT}v1

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
  i=0
  while [ $i -lt $MOST ]; do
    ns=$PREFIX$i
    if ip netns list 2>/dev/null | grep -q "^$ns\b"; then ip netns del "$ns" || true; fi
    ip link del "${SHORT}v$i" 2>/dev/null || true # only if left in the root namespace by a failed `up`
    i=$((i + 1))
  done
  if ip netns list 2>/dev/null | grep -q "^$NSW\b"; then ip netns del "$NSW" || true; fi
  rm -rf "$STATE"
}

# shape NS DEV: tbf on DEV's egress when a rate is set
shape() {
  [ "$rate" = 0 ] || ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency "$latency"
}

# up_switch N: machines 0 .. N-1, each on its own veth pair to the bridge in $NSW
up_switch() {
  ip netns add "$NSW"
  ip -n "$NSW" link add br0 type bridge
  ip -n "$NSW" link set br0 up
  ip -n "$NSW" link set lo up
  : >"$STATE/hostfile"
  i=0
  while [ $i -lt "$1" ]; do
    ns=$PREFIX$i dev=${SHORT}v$i sw=${SHORT}s$i addr=10.77.0.$((i + 1))
    ip netns add "$ns"
    ip link add "$dev" type veth peer name "$sw"
    ip link set "$dev" netns "$ns"
    ip link set "$sw" netns "$NSW"
    ip -n "$NSW" link set "$sw" master br0
    ip -n "$NSW" link set "$sw" up
    ip -n "$ns" addr add "$addr/24" dev "$dev"
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "$dev" up
    shape "$ns" "$dev"
    shape "$NSW" "$sw"
    echo "$addr slots=8" >>"$STATE/hostfile"
    i=$((i + 1))
  done
}

up() {
  rate=100mbit burst=64kb latency=20ms machines=2
  while [ $# -gt 0 ]; do
    case $1 in
      --machines) machines=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;;
      --burst) burst=$2; shift 2 ;;
      --latency) latency=$2; shift 2 ;;
      *) die "up: unknown option '$1'" ;;
    esac
  done
  case $machines in [2-8]) ;; *) die "up: --machines expects 2 to $MOST, got '$machines'" ;; esac
  check
  down
  mkdir -p "$STATE"
  echo "$machines" >"$STATE/machines"
  echo "$rate" >"$STATE/rate"
  if [ "$machines" -gt 2 ]; then
    up_switch "$machines"
    return
  fi
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
    shape "$ns" "$dev"
  done
  printf '%s slots=8\n%s slots=8\n' $ADDR0 $ADDR1 >"$STATE/hostfile"
}

# node_exec I CMD... : run CMD as machine I (own netns + hostname, TANDEM_NODE_NAME exported).
node_exec() {
  i=$1
  shift
  [ -d "$STATE" ] || die "namespaces are not up (run: $0 up)"
  n=$(cat "$STATE/machines" 2>/dev/null || echo 2)
  case $i in [0-7]) [ "$i" -lt "$n" ] || die "exec: machine must be 0 .. $((n - 1)), got '$i'" ;;
    *) die "exec: machine must be 0 .. $((n - 1)), got '$i'" ;; esac
  ns=$PREFIX$i
  name=$PREFIX-node$i
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
