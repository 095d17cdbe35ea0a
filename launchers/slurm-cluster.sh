#!/usr/bin/env bash
# A real Slurm cluster on this machine (Debian's slurm-wlm + munge), for trying commbench under
# srun and for the tests. Root only.
#
#   bash launchers/slurm-cluster.sh up   [DIR] [NODES]   start munged, slurmctld and slurmd(s)
#   bash launchers/slurm-cluster.sh down [DIR]           stop them and remove DIR
#
# NODES=1 (default): one node named after this host. NODES=2..8: fake nodes n1..nN, one slurmd
# each (slurmd -N nK), all on this host at 127.0.0.1 with their own ports.
# DIR defaults to /tmp/commbench-slurm. Afterwards: export SLURM_CONF=DIR/slurm.conf
set -euo pipefail
trap 'echo "slurm-cluster.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
cmd=${1:-}; dir=${2:-/tmp/commbench-slurm}; nodes=${3:-1}
[ "$(id -u)" = 0 ] || { echo "slurm-cluster.sh: run as root (it starts munged, slurmctld, slurmd)" >&2; exit 2; }

down() {
  for f in "$dir"/slurmd-*.pid "$dir"/slurmctld.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f"); kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  if [ -f "$dir/munged.started" ]; then
    pkill -x munged 2>/dev/null || true
    for _ in $(seq 50); do pgrep -x munged >/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$dir"
}

case "$cmd" in
  down) down; exit 0 ;;
  up) ;;
  *) echo "usage: slurm-cluster.sh up|down [DIR] [NODES]" >&2; exit 2 ;;
esac
case "$nodes" in [1-8]) ;; *) echo "slurm-cluster.sh: NODES must be 1..8, not '$nodes'" >&2; exit 2 ;; esac

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge libpmix2 libpmix-dev >/dev/null
fi
down  # a stale cluster in DIR
mkdir -p "$dir/state" "$dir/spool"
if [ "$nodes" = 1 ]; then mkdir -p "$dir/tmp/$(hostname -s)"; else for i in $(seq "$nodes"); do mkdir -p "$dir/tmp/n$i"; done; fi
chmod 1777 "$dir"/tmp/*

if ! pgrep -x munged >/dev/null; then
  [ -f /etc/munge/munge.key ] || { /usr/sbin/mungekey -c 2>/dev/null || /usr/sbin/create-munge-key -f; }
  chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge; chown munge:munge /run/munge /var/log/munge /var/lib/munge
  runuser -u munge -- /usr/sbin/munged
  touch "$dir/munged.started"
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
  echo "SlurmctldPort=${COMMBENCH_SLURMCTLD_PORT:-6817}"
  if [ "$nodes" = 1 ]; then
    echo "NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN"
  else
    for i in $(seq "$nodes"); do
      echo "NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$(( ${COMMBENCH_SLURMD_PORT:-17000} + i )) CPUs=$cpus RealMemory=$mem State=UNKNOWN"
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
