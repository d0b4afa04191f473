#!/bin/sh
# `tandem env`: this machine's report against what the system says independently (getconf, /proc/meminfo,
# /sys NUMA nodes, mpirun --version, the OpenBLAS kernel forced through OPENBLAS_CORETYPE for every kernel
# the CPU runs, OpenMP threads); then two simulated machines (network namespaces, scripts/netns) side by side,
# once through `tandem env --hostfile` (machine 1's daemon started with another OPENBLAS_CORETYPE by a
# wrapper of the kit's rsh agent) and once through the per-node launch (each machine typed with its own
# OMP_NUM_THREADS): exactly the rows that differ are marked '*' and named in the last line.
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
ROOT=$TANDEM_TESTS_DIR/..
KIT=$ROOT/scripts/netns
export TANDEM_NETNS=tnenv$$
# the "default" side of the comparisons below is the kernel OpenBLAS picks itself, even when the suite runs
# under a forced OPENBLAS_CORETYPE (CI on other CPUs does)
unset OPENBLAS_CORETYPE
need_mpirun test_env
fails=0 checks=0
T=$(mktemp -d /tmp/tandem-env-XXXXXX)
trap '"$KIT/netns.sh" down >/dev/null 2>&1; rm -rf "$T"' EXIT

# row FILE KEY: the value column of KEY's first line (single-machine table: "  KEY | value")
row() { awk -F ' [|] ' -v k="$2" 'substr($1, 3) ~ "^"k" *$" { print $2; exit }' "$1"; }

# 1. one machine
OMP_NUM_THREADS=1 "$BIN" env >"$T/one.txt" 2>&1
rc=$?
cat "$T/one.txt"
check '[ $rc -eq 0 ]'
check '[ "$(row "$T/one.txt" CPUs)" = "$(getconf _NPROCESSORS_ONLN) online, $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) usable by this process" ]'
mem=$(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
check '[ "$(row "$T/one.txt" memory)" = "$mem" ]'
numa=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
check 'row "$T/one.txt" "NUMA nodes" | grep -q "^$numa (node0: "'
ompi=$(mpirun --version | sed -n 's/.*(Open MPI) \([0-9.]*\).*/\1/p')
check 'row "$T/one.txt" MPI | grep -q "^Open MPI v$ompi"'
check '[ "$(row "$T/one.txt" "OpenBLAS threads")" = "1 (OpenMP)" ]'
check 'row "$T/one.txt" "OpenMP threads" | grep -q "^1 (OMP_NUM_THREADS=1,"'
check 'row "$T/one.txt" "CPU model" | grep -qF "$(grep -m1 "model name" /proc/cpuinfo | sed "s/.*: //")"'
check 'grep -q "^  tandem version *| [0-9]*\.[0-9]*\.[0-9]* (git [0-9a-f]" "$T/one.txt"'
check '! grep -q "^\*" "$T/one.txt"'
for k in $("$ROOT/scripts/openblas_coretypes.sh"); do
  OPENBLAS_CORETYPE=$k "$BIN" env >"$T/k.txt" 2>&1
  check '[ "$(row "$T/k.txt" "OpenBLAS core type")" = "$k (OPENBLAS_CORETYPE=$k)" ]'
done
default=$(row "$T/one.txt" "OpenBLAS core type" | awk '{ print $1 }') # the kernel (tandem may have chosen it)
other=$("$ROOT/scripts/openblas_coretypes.sh" | grep -vx "$default" | head -1)

# 2. two machines side by side
need_netns test_env "$KIT"
"$KIT/netns.sh" up --rate 0 || { echo "test_env: FAIL: netns.sh up failed"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# marked FILE: the keys of the rows marked '*', one per line
marked() { awk -F ' [|] ' '/^\* / && NF > 1 { k = substr($1, 3); sub(/ +$/, "", k); print k }' "$1"; }

cat >"$T/agent.sh" <<EOF
#!/bin/sh
# the kit's agent, machine 1 started with another OpenBLAS kernel
for a in "\$@"; do case \$a in 10.77.0.2) export OPENBLAS_CORETYPE=$other ;; esac; done
exec "$KIT/rsh-agent.sh" "\$@"
EOF
chmod +x "$T/agent.sh"
printf '10.77.0.1 slots=2\n10.77.0.2 slots=2\n' >"$T/hostfile"
timeout 120 "$KIT/netns.sh" exec 0 env OMP_NUM_THREADS=1 OMPI_MCA_plm_rsh_agent="$T/agent.sh" \
  OMPI_MCA_btl=tcp,self,vader TANDEM_NETNS="$TANDEM_NETNS" "$BIN" env --hostfile "$T/hostfile" >"$T/hf.txt" 2>&1
rc=$?
cat "$T/hf.txt"
check '[ $rc -eq 0 ]'
check 'grep -q "^tandem env: 2 machine(s), 2 rank(s)" "$T/hf.txt"'
check 'grep -q "^  host *| $TANDEM_NETNS-node0 *| $TANDEM_NETNS-node1$" "$T/hf.txt"'
check '[ "$(marked "$T/hf.txt" | tr "\n" ,)" = "OpenBLAS,OpenBLAS core type," ]'
check 'grep -q "^\* OpenBLAS core type *| $default[^|]* *| $other (OPENBLAS_CORETYPE=$other)" "$T/hf.txt"'
check 'grep -q "^\* 2 row(s) differ between the 2 machines: OpenBLAS, OpenBLAS core type$" "$T/hf.txt"'

PN="NNODES=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 TANDEM_RDZV_TIMEOUT=60 TANDEM_NETNS=$TANDEM_NETNS"
"$KIT/netns.sh" exec 0 env $PN NODE_RANK=0 FORCE_TORCHRUN=1 OMP_NUM_THREADS=1 timeout 120 "$BIN" env >"$T/pn0.txt" 2>&1 &
p0=$!
"$KIT/netns.sh" exec 1 env $PN NODE_RANK=1 FORCE_TORCHRUN=1 OMP_NUM_THREADS=2 timeout 120 "$BIN" env >"$T/pn1.txt" 2>&1
rc1=$?
wait $p0
rc0=$?
cat "$T/pn0.txt"
check '[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]'
check '[ "$(marked "$T/pn0.txt" | tr "\n" ,)" = "OpenBLAS threads,OpenMP threads," ]'
check 'grep -q "^\* OpenBLAS threads *| 1 (OpenMP) *| 2 (OpenMP)$" "$T/pn0.txt"'
check 'grep -q "^  tandem build *| \([0-9a-f]*\) *| \1$" "$T/pn0.txt"'
# OpenBLAS's kernel: where OpenBLAS fell back to an old one for a CPU it does not know, tandem asks for the newest
# the CPU can run and says so; a kernel the user chose is kept as it is (core/blas_kernel.h)
env -u OPENBLAS_CORETYPE -u TANDEM_OPENBLAS_CHOICE "$BIN" env >"$T/blas.txt" 2>&1
line=$(grep "OpenBLAS core type" "$T/blas.txt")
echo "$line"
if echo "$line" | grep -q "set by tandem"; then
  k=$(echo "$line" | sed 's/.*OPENBLAS_CORETYPE=\([A-Za-z]*\) set by tandem.*/\1/')
  check '"$ROOT/scripts/openblas_coretypes.sh" "$k" && echo "$line" | grep -q "| $k (OPENBLAS_CORETYPE=$k set by tandem: OpenBLAS chose [A-Za-z0-9]*, its fallback"'
else
  check '! echo "$line" | grep -q "Prescott"' # kept: OpenBLAS knew this CPU (or it can run nothing newer)
fi
OPENBLAS_CORETYPE=Nehalem "$BIN" env 2>&1 | grep "OpenBLAS core type" >"$T/blas2.txt"
check 'grep -q "| Nehalem (OPENBLAS_CORETYPE=Nehalem)$" "$T/blas2.txt"'
echo "test_env: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
