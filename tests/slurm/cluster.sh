#!/usr/bin/env bash
# A real Slurm test cluster on this one host: munged (own key and socket), slurmctld and 8 slurmd
# (n1..n8, all NodeAddr=127.0.0.1, one port each), everything under DIR, every daemon run as root.
# With --hosts N: N compute hosts n1..nN and a login host, each a network namespace of its own with
# its own address and hostname (tests/slurm/hosts.sh); slurmctld runs on the login host.
#
#   tests/slurm/cluster.sh start DIR [--hosts N]
#                                       install slurm-wlm + munge if missing, start, wait until all
#                                       nodes are idle, print the environment to use (SLURM_CONF)
#   tests/slurm/cluster.sh stop DIR     stop exactly the processes this script started (DIR/pids),
#                                       remove the hosts it made (DIR/net)
#   tests/slurm/cluster.sh status DIR   which recorded processes live; sinfo
#   tests/slurm/cluster.sh env DIR      print the environment to use
#
# Every node declares 2 GPUs (GresTypes=gpu, gres.conf) on stand-in device files under DIR/dev.
# Partitions: `main` (PriorityTier=10, default), `pilot` (PriorityTier=1, PreemptMode=CANCEL,
# GraceTime=$BFT_SLURM_GRACE_S, default 5): a main job preempts pilots (SIGTERM to their steps,
# SIGKILL after the grace time), and `noroot` (DisableRootJobs=YES: one root has no right to).
# Ports: slurmctld on BASE, n1..n8 on BASE+1..BASE+8; BASE is $BFT_SLURM_BASE_PORT or the first of
# 16810, 16910, ... whose nine ports are all free; with --hosts, 6817 and 6818 on each host's own
# address. Exit status 77: Slurm cannot be installed here, or (--hosts) no namespaces can be made.
set -euo pipefail

NODES=8
GRACE_S=${BFT_SLURM_GRACE_S:-5}
GPUS_PER_NODE=2 # generic resources "gpu" each node declares (gres.conf), on stand-in device files
START_TIMEOUT_S=${BFT_SLURM_START_TIMEOUT_S:-60}
DEBUG=${BFT_SLURM_DEBUG:-info} # SlurmctldDebug and SlurmdDebug (debug, debug2, ...: to trace a timeline)

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() { die "usage: $0 start|stop|status|env DIR"; }

[[ $# -eq 2 || ($# -eq 4 && $1 == start && $3 == --hosts) ]] || usage
CMD=$1
DIR=$2
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
PIDS=$DIR/pids   # one line per process started: "<name> <pid>"
# shellcheck source=tests/slurm/hosts.sh
source "$(dirname "${BASH_SOURCE[0]}")/hosts.sh"
REQUESTED_HOSTS=0 # what a start asks for; HOSTS: what DIR holds (hosts.sh read it)
if [[ $# -eq 4 ]]; then
  [[ $4 =~ ^[1-9][0-9]?$ ]] || die "--hosts takes 1..99, got '$4'"
  REQUESTED_HOSTS=$4
fi
[[ $HOSTS -gt 0 ]] && NODES=$HOSTS

alive() { kill -0 "$1" 2>/dev/null; }
# A recorded pid is still the daemon we started (not a pid reused since): its name matches (or,
# on a namespace host, that of a command still on its way to exec the daemon).
ours() {
  local comm
  comm=$(cat "/proc/$2/comm" 2>/dev/null) || return 1
  [[ $comm == "${1%%.*}" ]] || { [[ $HOSTS -gt 0 ]] && [[ $comm == nsenter || $comm == unshare || $comm == on-host || $comm == sh ]]; }
}

print_env() {
  echo "export SLURM_CONF=$DIR/slurm.conf"
  echo "export BFT_SLURM_CLUSTER_DIR=$DIR"
  [[ $HOSTS -gt 0 ]] && hosts_env
  return 0
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pick_base_port() {
  local candidates=${BFT_SLURM_BASE_PORT:-"16810 16910 17010 17110 17210 17310 17410 17510"}
  local base p busy
  for base in $candidates; do
    busy=
    for ((p = base; p <= base + NODES; p++)); do
      if port_in_use "$p"; then busy=$p; break; fi
    done
    [[ -z $busy ]] && { echo "$base"; return 0; }
    echo "cluster.sh: port $busy is in use, base port $base skipped" >&2
  done
  die "no free range of $((NODES + 1)) ports among base ports: $candidates (set BFT_SLURM_BASE_PORT)"
}

install_packages() {
  local missing=()
  command -v munged >/dev/null || missing+=(munge)
  for b in slurmctld slurmd sbatch; do command -v "$b" >/dev/null || { missing+=(slurm-wlm); break; }; done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  [[ $(id -u) -eq 0 ]] || { echo "cluster.sh: need root to install ${missing[*]} with apt-get" >&2; exit 77; }
  echo "cluster.sh: installing ${missing[*]} with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Exit status 77 ("skipped"): the packages cannot be had here, which is not a cluster failure.
  apt-get update -qq >/dev/null || { echo "cluster.sh: apt-get update failed" >&2; exit 77; }
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { echo "cluster.sh: apt-get install ${missing[*]} failed" >&2; exit 77; }
}

srun_ports() {
  local lo=$((20000 + ($1 > 16810 ? ($1 - 16810) / 100 : 0) * 1000))
  echo "$lo-$((lo + 999))"
}

write_config() {
  local base=$1 i
  mkdir -p "$DIR"/{munge,state,spool,log,run}
  chmod 700 "$DIR/munge"
  if [[ ! -s $DIR/munge/munge.key ]]; then
    # A key of our own: this cluster never authenticates against a site munged.
    (umask 077; dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none)
  fi
  {
    cat <<EOF
# Written by tests/slurm/cluster.sh: a test cluster. See docs/slurm.md.
ClusterName=bfttest
SlurmctldHost=$(controller_host)
SlurmctldPort=$base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.%n.log
SlurmctldDebug=$DEBUG
SlurmdDebug=$DEBUG
# No cgroups on this kind of machine, no accounting daemon.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# No accounting database, but a job-completion log: `sacct --completion` reads ended jobs from it.
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
# The nodes share this host's cores and memory: trust the configured sizes.
SlurmdParameters=config_overrides
# cons_tres, as on GPU partitions: select/linear allocates a node's GPUs to a job but gives its
# steps none. One CPU per node, so a job holds its nodes whole all the same.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# GPUs as a generic resource on stand-in device files (gres.conf): Slurm allocates and accounts them
# as on a GPU partition, and its steps get the allocation in their environment, with no GPU here.
GresTypes=gpu
ReturnToService=2
# Fast reactions for tests: a scheduling pass on every event and at least once a second,
# short kill wait (SIGTERM -> SIGKILL at scancel/end), quick failure detection.
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1,sched_min_interval=100000
KillWait=3
MessageTimeout=5
SlurmdTimeout=30
SlurmctldTimeout=30
InactiveLimit=0
MinJobAge=60
# Partition-priority preemption, without slurmdbd: a job of a higher PriorityTier partition
# cancels jobs of a lower one (SIGTERM, SIGKILL after the low partition's GraceTime).
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
# What docs/security.md tells a centre to set for the srun on the manager's host: its listeners on
# these ports only (the Slurm tests check). Each srun takes about 4 ports (pilots' and launches'
# alike): 1,000 per cluster, below Linux's ephemeral ports, one range per base port so that clusters
# side by side do not share one.
SrunPortRange=$(srun_ports "$base")
EOF
    # Binding to the address the host's name resolves to, not the wildcard: only where the names
    # resolve. The --hosts namespaces' names (login, n1, ...) do not, and slurmd cannot bind at all.
    if [[ $HOSTS -eq 0 ]]; then echo "CommunicationParameters=NoInAddrAny"; fi
    for ((i = 1; i <= NODES; i++)); do
      echo "NodeName=n$i $(node_address "$i" "$base") CPUs=1 RealMemory=1000 Gres=gpu:$GPUS_PER_NODE State=UNKNOWN"
    done
    cat <<EOF
PartitionName=main Nodes=n[1-$NODES] Default=YES PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
PartitionName=pilot Nodes=n[1-$NODES] Default=NO PriorityTier=1 PreemptMode=CANCEL GraceTime=$GRACE_S MaxTime=INFINITE State=UP
# Root (the tests' user) may not run jobs here: a partition the manager has no right to.
PartitionName=noroot Nodes=n[1-$NODES] Default=NO PriorityTier=1 DisableRootJobs=YES State=UP
EOF
  } >"$DIR/slurm.conf"
  # Slurm 22.05's gres/gpu drops a GPU without a File= ("file-less"), so every node's GPUs are
  # character devices of NVIDIA's major number that no driver serves (nothing opens them); where
  # mknod is refused, plain files, which slurmd accepts with an error line per file.
  mkdir -p "$DIR/dev"
  for ((i = 0; i < GPUS_PER_NODE; i++)); do
    [[ -e $DIR/dev/gpu$i ]] || mknod -m 666 "$DIR/dev/gpu$i" c 195 "$i" 2>/dev/null || : >"$DIR/dev/gpu$i"
  done
  # Read by slurmctld and every slurmd from slurm.conf's directory.
  echo "NodeName=n[1-$NODES] Name=gpu File=$DIR/dev/gpu[0-$((GPUS_PER_NODE - 1))]" >"$DIR/gres.conf"
}

# Starts "$@" in the background (its own session, so a terminal's signals miss it), output to
# the log, and records its pid before anything else can fail.
launch() {
  local name=$1 log=$2
  shift 2
  setsid "$@" >>"$log" 2>&1 </dev/null &
  echo "$name $!" >>"$PIDS"
}

log_tail() {
  local f
  for f in "$DIR"/log/*.log; do
    [[ -s $f ]] || continue
    echo "---- ${f#$DIR/} (last 15 lines)" >&2
    tail -n 15 "$f" >&2
  done
}

fail_start() {
  echo "cluster.sh: start failed: $*" >&2
  log_tail
  exit 1  # the EXIT trap of do_start stops what was started
}

start_aborted() {
  echo "cluster.sh: start did not complete; stopping what was started" >&2
  do_stop
}

any_alive() {
  [[ -s $PIDS ]] || return 1
  local name pid
  while read -r name pid; do ours "$name" "$pid" && return 0; done <"$PIDS"
  return 1
}

do_start() {
  if any_alive; then
    # Idempotent: a running cluster is left as it is, if it is whole.
    local dead=0 name pid
    while read -r name pid; do ours "$name" "$pid" || { echo "cluster.sh: $name (pid $pid) is dead" >&2; dead=1; }; done <"$PIDS"
    [[ $dead -eq 0 ]] || die "cluster in $DIR is half running; run '$0 stop $DIR' first"
    print_env
    return 0
  fi
  install_packages
  HOSTS=$REQUESTED_HOSTS
  [[ $HOSTS -gt 0 ]] && NODES=$HOSTS
  rm -rf "$HOSTS_FILE" "$DIR/bin" # of an earlier multi-host cluster in DIR, stopped
  : >"$PIDS"
  # However the start ends before the nodes are up (set -e included), what was started is stopped
  # and the hosts are removed.
  trap start_aborted EXIT
  trap 'exit 130' INT TERM
  local base
  if [[ $HOSTS -gt 0 ]]; then
    hosts_up
    base=6817  # each host has an address of its own: the standard ports collide with nothing
  else
    base=$(pick_base_port)
  fi
  write_config "$base"
  export SLURM_CONF=$DIR/slurm.conf
  local t0=$SECONDS i

  launch munged "$DIR/log/munged.out" munged --foreground --force \
    --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
  for ((i = 0; i < 100; i++)); do [[ -S $DIR/munge/munge.socket ]] && break; sleep 0.1; done
  [[ -S $DIR/munge/munge.socket ]] || fail_start "munged did not create its socket in 10 s"

  # -i: ignore unreadable state from an older run instead of refusing to start.
  launch slurmctld "$DIR/log/slurmctld.out" $(on_host login) slurmctld -D -i -f "$DIR/slurm.conf"
  for ((i = 0; i < 100; i++)); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
  scontrol ping 2>/dev/null | grep -q UP || fail_start "slurmctld does not answer 'scontrol ping' after 20 s"

  for ((i = 1; i <= NODES; i++)); do
    launch "slurmd.n$i" "$DIR/log/slurmd.n$i.out" $(on_host "n$i") slurmd -D -N "n$i" -f "$DIR/slurm.conf"
  done

  local deadline=$((SECONDS + START_TIMEOUT_S)) states
  while :; do
    states=$(sinfo -h -N -p main -o '%N %T' 2>/dev/null | sort -u)
    if [[ $(grep -c ' idle$' <<<"$states") -eq $NODES ]]; then break; fi
    if ((SECONDS >= deadline)); then fail_start "not all $NODES nodes idle after ${START_TIMEOUT_S} s; sinfo: $(tr '\n' ';' <<<"$states")"; fi
    local name pid
    while read -r name pid; do alive "$pid" || fail_start "$name (pid $pid) exited"; done <"$PIDS"
    sleep 0.2
  done
  trap - EXIT INT TERM
  echo "cluster.sh: $NODES nodes idle in $((SECONDS - t0)) s (slurmctld port $base)" >&2
  print_env
}

# Job processes live under slurmstepd, which outlives slurmd: cancel every job of this cluster
# while the controller still runs, and wait (bounded) until the queue is empty.
cancel_jobs() {
  export SLURM_CONF=$DIR/slurm.conf
  scontrol ping 2>/dev/null | grep -q UP || return 0
  local ids i
  ids=$(squeue -h -o %i 2>/dev/null) || return 0
  [[ -n $ids ]] || return 0
  # shellcheck disable=SC2086
  scancel $ids 2>/dev/null || true
  for ((i = 0; i < 75; i++)); do
    [[ -z $(squeue -h -o %i 2>/dev/null) ]] && return 0
    sleep 0.2
  done
  echo "cluster.sh: jobs still in the queue 15 s after scancel: $(squeue -h -o '%i:%T' | tr '\n' ' ')" >&2
}

do_stop() {
  trap - EXIT
  [[ -s $PIDS ]] || { echo "cluster.sh: nothing recorded in $PIDS" >&2; hosts_down; return 0; }
  cancel_jobs
  local name pid pids=()
  # Reverse order: slurmd before slurmctld before munged.
  while read -r name pid; do ours "$name" "$pid" && pids=("$pid" "${pids[@]}"); done <"$PIDS"
  if [[ ${#pids[@]} -gt 0 ]]; then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local i left
    for ((i = 0; i < 50; i++)); do
      left=()
      for pid in "${pids[@]}"; do alive "$pid" && left+=("$pid"); done
      [[ ${#left[@]} -eq 0 ]] && break
      sleep 0.2
    done
    if [[ ${#left[@]} -gt 0 ]]; then
      echo "cluster.sh: SIGKILL to ${left[*]} (still alive 10 s after SIGTERM)" >&2
      kill -KILL "${left[@]}" 2>/dev/null || true
    fi
  fi
  : >"$PIDS"
  hosts_down
  echo "cluster.sh: stopped" >&2
}

do_status() {
  local name pid rc=0
  [[ -s $PIDS ]] || { echo "not running (nothing recorded in $PIDS)"; return 1; }
  while read -r name pid; do
    if ours "$name" "$pid"; then echo "$name $pid running"; else echo "$name $pid dead"; rc=1; fi
  done <"$PIDS"
  SLURM_CONF=$DIR/slurm.conf sinfo -N -o '%N %P %T' || rc=1
  return $rc
}

case $CMD in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  env) print_env ;;
  *) usage ;;
esac
