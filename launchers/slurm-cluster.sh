#!/usr/bin/env bash
# A real Slurm cluster on this machine (Debian's slurm-wlm + munge), for trying commbench under
# srun and for the tests. Root only.
#
#   bash launchers/slurm-cluster.sh up   [DIR] [NODES]   start munged, slurmctld and slurmd(s)
#   bash launchers/slurm-cluster.sh down [DIR]           stop them and remove DIR
#
# NODES=1 (default): one node named after this host. NODES=2..8: fake nodes n1..nN, one slurmd
# each (slurmd -N nK), all on this host at 127.0.0.1 with their own ports.
# DIR: a new directory /tmp/commbench-slurm.XXXXXX by default; an existing DIR must be empty or a
# stopped cluster of this script (a running one is refused, never torn down). Ports are free ones
# (COMMBENCH_SLURMCTLD_PORT, COMMBENCH_SLURMD_PORT override). munged is started only if none runs,
# and `down` stops only the munged that this cluster started (its pid file), never one by name.
# Afterwards: export SLURM_CONF=DIR/slurm.conf (printed); `down` without DIR takes it from SLURM_CONF.
set -euo pipefail
trap 'echo "slurm-cluster.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
cmd=${1:-}; nodes=${3:-1}
[ "$(id -u)" = 0 ] || { echo "slurm-cluster.sh: run as root (it starts munged, slurmctld, slurmd)" >&2; exit 2; }

alive() {  # alive PIDFILE NAME: the pid in PIDFILE runs a process called NAME
  local pid
  pid=$(cat "$1" 2>/dev/null) && [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

stop() {  # stop PIDFILE NAME: TERM, wait up to 5 s, then KILL
  alive "$1" "$2" || return 0
  local pid; pid=$(cat "$1" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do alive "$1" "$2" || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

down() {
  [ -f "$dir/slurm.conf" ] || [ -z "$(ls -A "$dir" 2>/dev/null)" ] || {
    echo "slurm-cluster.sh: $dir is not a cluster of this script (no slurm.conf); not removing it" >&2; exit 2; }
  for f in "$dir"/slurmd-*.pid; do [ -f "$f" ] && stop "$f" slurmd; done
  stop "$dir/slurmctld.pid" slurmctld
  stop "$dir/munged.pid" munged
  rm -rf "$dir"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

case "$cmd" in
  down)
    dir=${2:-$(dirname "${SLURM_CONF:-}")}
    [ -n "${2:-}${SLURM_CONF:-}" ] || { echo "slurm-cluster.sh: which cluster? give its DIR or set SLURM_CONF" >&2; exit 2; }
    down; exit 0 ;;
  up)
    case "$nodes" in [1-8]) ;; *) echo "slurm-cluster.sh: NODES must be 1..8, not '$nodes'" >&2; exit 2 ;; esac
    if [ -n "${2:-}" ]; then
      dir=$2
      if alive "$dir/slurmctld.pid" slurmctld; then
        echo "slurm-cluster.sh: $dir holds a running cluster (slurmctld pid $(cat "$dir/slurmctld.pid")); stop it first: bash launchers/slurm-cluster.sh down $dir" >&2
        exit 2
      fi
      [ ! -e "$dir" ] || [ -f "$dir/slurm.conf" ] || [ -z "$(ls -A "$dir")" ] || {
        echo "slurm-cluster.sh: $dir is not empty and not a cluster of this script; give an empty or new DIR" >&2; exit 2; }
      [ ! -f "$dir/slurm.conf" ] || down  # a stopped cluster's leftovers
      mkdir -p "$dir"
    else
      dir=$(mktemp -d /tmp/commbench-slurm.XXXXXX)
    fi ;;
  *) echo "usage: slurm-cluster.sh up|down [DIR] [NODES]" >&2; exit 2 ;;
esac

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge libpmix2 libpmix-dev >/dev/null
fi
mkdir -p "$dir/state" "$dir/spool"
if [ "$nodes" = 1 ]; then names=$(hostname -s); else names=$(seq -f 'n%g' "$nodes"); fi
for n in $names; do mkdir -p "$dir/tmp/$n" "$dir/spool/$n"; done
chmod 1777 "$dir"/tmp/*

if ! pgrep -x munged >/dev/null; then
  [ -f /etc/munge/munge.key ] || { /usr/sbin/mungekey -c 2>/dev/null || /usr/sbin/create-munge-key -f; }
  chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge; chown munge:munge /run/munge /var/log/munge /var/lib/munge
  rm -f /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
  cp /run/munge/munged.pid "$dir/munged.pid"  # this cluster's munged: `down` stops this pid only
fi

host=$(hostname -s)
# Advertise at least 8 CPUs a node (config_overrides lets slurmd accept that) so that studies with
# more ranks than this machine's cores, e.g. 2 workers + 2 PS shards, can be tried on it.
cpus=$(( $(nproc) > 8 ? $(nproc) : 8 ))
mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
mem=$(( mem / nodes ))
{
  echo "ClusterName=commbench"
  echo "SlurmctldHost=$host(127.0.0.1)"
  echo "SlurmUser=root"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_Core"
  echo "MpiDefault=none"
  echo "AccountingStorageType=accounting_storage/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "JobCompType=jobcomp/none"
  echo "ReturnToService=2"
  echo "SlurmdParameters=config_overrides"
  echo "StateSaveLocation=$dir/state"
  echo "SlurmdSpoolDir=$dir/spool/%n"
  echo "TmpFS=$dir/tmp/%n"  # per node: fake nodes share this machine's /tmp (pmix makes its appdir here)
  echo "SlurmctldPidFile=$dir/slurmctld.pid"
  echo "SlurmdPidFile=$dir/slurmd-%n.pid"
  echo "SlurmctldLogFile=$dir/slurmctld.log"
  echo "SlurmdLogFile=$dir/slurmd-%n.log"
  echo "SlurmctldPort=${COMMBENCH_SLURMCTLD_PORT:-$(free_port)}"
  if [ "$nodes" = 1 ]; then
    echo "NodeName=$host NodeAddr=127.0.0.1 Port=${COMMBENCH_SLURMD_PORT:-$(free_port)} CPUs=$cpus RealMemory=$mem State=UNKNOWN"
  else
    for i in $(seq "$nodes"); do
      port=$([ -n "${COMMBENCH_SLURMD_PORT:-}" ] && echo $(( COMMBENCH_SLURMD_PORT + i )) || free_port)
      echo "NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$port CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
  fi
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
} > "$dir/slurm.conf"
export SLURM_CONF="$dir/slurm.conf"

slurmctld -f "$SLURM_CONF"
if [ "$nodes" = 1 ]; then
  slurmd -f "$SLURM_CONF"
else
  for i in $(seq "$nodes"); do slurmd -f "$SLURM_CONF" -N "n$i"; done
fi
for _ in $(seq 100); do
  idle=$(sinfo -h -o '%T %D' 2>/dev/null | awk '$1=="idle"{print $2}')
  [ "${idle:-0}" = "$nodes" ] && { echo "export SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.2
done
echo "slurm-cluster.sh: nodes did not come up; see $dir/*.log" >&2
sinfo >&2 || true
exit 1
