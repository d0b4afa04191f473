#!/bin/sh
# rsh-agent.sh -- Open MPI plm_rsh_agent for the netns kit (netns.sh): called like ssh, `rsh-agent.sh HOST
# CMD...`, it runs CMD as the simulated machine that owns HOST (its namespace, hostname and
# TANDEM_NODE_NAME) instead of logging in anywhere. HOST is 10.77.0.<i+1> (or node<i>) for machine i.
set -eu
PREFIX=${TANDEM_NETNS:-tandem}
# ssh-style options (-x, -l USER, ...) that Open MPI may put before the host are ignored.
while [ $# -gt 0 ]; do
  case $1 in
    -l | -p | -o | -i) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "rsh-agent.sh: usage: rsh-agent.sh HOST CMD..." >&2; exit 1; }
host=$1
shift
case $host in
  10.77.0.[1-8]) i=$((${host##*.} - 1)) ;;
  node[0-7]) i=${host#node} ;;
  "$PREFIX"-node[0-7]) i=${host#"$PREFIX"-node} ;;
  *) echo "rsh-agent.sh: host '$host' is not a machine of the netns kit (10.77.0.1 .. 10.77.0.8)" >&2; exit 1 ;;
esac
name=$PREFIX-node$i
# Like ssh, the remote command is the words joined by spaces and run by a shell.
exec ip netns exec "$PREFIX$i" unshare --uts env TANDEM_NODE_NAME="$name" \
  sh -c 'hostname "$TANDEM_NODE_NAME" && eval "$1"' sh "$*"
