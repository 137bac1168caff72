#!/usr/bin/env bash
# A real one-node SLURM cluster on this host, for testing the cluster path (profiles/slurm):
# Debian's slurm-wlm with munge, and slurmdbd over MariaDB so that `sacct` (which the executor
# plugin reads job states from) answers. Needs root (or passwordless sudo) and Debian packages.
#
#   scripts/slurm_cluster.sh start    install what is missing, write the configs, start munged,
#                                     mariadb, slurmdbd, slurmctld and slurmd; wait until the
#                                     node is idle
#   scripts/slurm_cluster.sh stop     cancel every job, stop every daemon started, check that
#                                     none is left
#   scripts/slurm_cluster.sh status   sinfo, and the daemons running
#
# The cluster: one node (this host's cores and memory, less 1 GB), one partition `cpu`,
# cons_tres with a default of 1 GB per CPU (a job without a memory request does not hold the
# node's memory), no cgroups (proctrack/linuxproc, task/none: the test machines are
# containers). State and logs under $SLURM_TEST_DIR (default /tmp/sdbench-slurm).
set -euo pipefail
DIR=${SLURM_TEST_DIR:-/tmp/sdbench-slurm}
CLUSTER=sdbench
NODE=$(hostname -s)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
PACKAGES=(slurm-wlm slurm-client slurmdbd munge mariadb-server)
say() { echo "[slurm_cluster $(date +%T)] $*"; }

install() {
  if command -v slurmctld >/dev/null && command -v slurmdbd >/dev/null \
      && command -v munged >/dev/null && command -v mariadbd >/dev/null; then
    return 0
  fi
  say "installing ${PACKAGES[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${PACKAGES[@]}" >"$DIR/apt.log" 2>&1 || {
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$DIR/apt.log" 2>&1
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${PACKAGES[@]}" >>"$DIR/apt.log" 2>&1
  } || { say "cannot install ${PACKAGES[*]} (see $DIR/apt.log)"; exit 3; }
}

write_configs() {
  local cpus mem
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
  mkdir -p "$DIR"/{state,spool,log,mysql,run}
  $SUDO mkdir -p /etc/slurm /etc/munge /run/munge /var/log/munge /var/lib/munge
  cat >"$DIR/slurm.conf" <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
KillWait=10
InactiveLimit=0
MinJobAge=60
NodeName=$NODE CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=cpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StorageUser=root
StorageLoc=slurm_acct_db
StoragePort=3306
EOF
  chmod 600 "$DIR/slurmdbd.conf"
  # the commands (sinfo, sbatch, sacct) read /etc/slurm; the daemons get the files by path
  $SUDO cp "$DIR/slurm.conf" /etc/slurm/slurm.conf
  $SUDO cp "$DIR/slurmdbd.conf" /etc/slurm/slurmdbd.conf
  $SUDO chmod 600 /etc/slurm/slurmdbd.conf
}

wait_for() {  # wait_for <seconds> <what> <command...>
  local limit=$1 what=$2; shift 2
  for _ in $(seq "$limit"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  say "$what did not come up in $limit s"; return 1
}

start() {
  mkdir -p "$DIR"
  install
  write_configs
  if [ ! -s /etc/munge/munge.key ]; then
    $SUDO dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    $SUDO chmod 400 /etc/munge/munge.key
  fi
  pgrep -x munged >/dev/null || $SUDO munged --force
  if ! pgrep -x mariadbd >/dev/null; then
    [ -d "$DIR/mysql/mysql" ] || $SUDO mariadb-install-db --user=root --datadir="$DIR/mysql" \
      >"$DIR/log/mariadb-install.log" 2>&1
    $SUDO mariadbd --user=root --datadir="$DIR/mysql" --socket="$DIR/run/mysql.sock" \
      --port=3306 --bind-address=127.0.0.1 --skip-grant-tables \
      --pid-file="$DIR/run/mariadb.pid" >"$DIR/log/mariadb.log" 2>&1 &
    wait_for 60 MariaDB test -S "$DIR/run/mysql.sock"
  fi
  pgrep -x slurmdbd >/dev/null || $SUDO slurmdbd  # reads /etc/slurm/slurmdbd.conf
  wait_for 60 slurmdbd sacctmgr -i -n list cluster
  sacctmgr -i -n list cluster format=cluster | grep -qw "$CLUSTER" \
    || $SUDO sacctmgr -i add cluster "$CLUSTER" >/dev/null
  pgrep -x slurmctld >/dev/null || $SUDO slurmctld -f /etc/slurm/slurm.conf
  wait_for 60 slurmctld scontrol ping
  pgrep -x slurmd >/dev/null || $SUDO slurmd -f /etc/slurm/slurm.conf
  wait_for 60 "an idle node" bash -c "sinfo -h -N -o %t | grep -qx idle"
  say "up: $(sinfo -h -o '%P %D %t %c CPUs %m MB')"
}

DAEMONS=(slurmd slurmctld slurmdbd mariadbd munged)

stop() {
  command -v scancel >/dev/null && scancel --user="$(id -un)" 2>/dev/null || true
  for daemon in "${DAEMONS[@]}"; do
    $SUDO pkill -x "$daemon" 2>/dev/null || true
  done
  for _ in $(seq 30); do
    left=$(for d in "${DAEMONS[@]}"; do pgrep -x "$d" >/dev/null && echo "$d"; done || true)
    [ -z "$left" ] && { say "stopped"; return 0; }
    sleep 1
  done
  for d in $left; do $SUDO pkill -9 -x "$d" 2>/dev/null || true; done
  say "killed after 30 s: $left"
}

status() {
  sinfo 2>&1 || true
  for d in "${DAEMONS[@]}"; do pgrep -x "$d" >/dev/null && echo "$d running"; done || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
