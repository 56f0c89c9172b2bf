# Sourced by tests/slurm/cluster.sh: the hosts of a multi-host test cluster (start DIR --hosts N).
#
# Each host (login, n1..nN) is a network namespace made here, joined by a veth pair to a bridge of
# its own: addresses SUB.1 (login), SUB.2.. (n1..), no address on the bridge, so nothing outside the
# namespaces is reachable from them and they reach nothing else. Each daemon runs in its host's
# namespace (nsenter --net; `ip netns exec` would hide /sys/fs/cgroup from slurmd) under
# `unshare --uts` with the host's name as hostname (DIR/bin/on-host); munged stays outside (its
# Unix socket is a file, reachable from every namespace). Names carry the pid of the `start`
# (bft<pid>-login, bft<pid>-n3, bridge bft<pid>br, veth bft<pid>v3: at most 15 characters),
# so clusters of several runs coexist; each is recorded in DIR/net before it is made and removed by
# that name at stop, also after a start that failed half-way. The Slurm commands the tests and the
# script run (sbatch, squeue, ...) go through wrappers in DIR/bin that run them on the login host.

HOSTS=0 # 0: the one-host cluster
NET=$DIR/net # one line per network object made: "netns NAME" or "link NAME"
HOSTS_FILE=$DIR/hosts # "N PREFIX SUBNET" of a multi-host cluster
if [[ -s $HOSTS_FILE ]]; then
  read -r HOSTS PREFIX SUB <"$HOSTS_FILE"
  export PATH=$DIR/bin:$PATH
fi

host_addr() { if [[ $1 == login ]]; then echo "$SUB.1"; else echo "$SUB.$((${1#n} + 1))"; fi; }

# The command prefix that runs a daemon on host $1 ("" on the one-host cluster).
on_host() { [[ $HOSTS -gt 0 ]] && echo "$DIR/bin/on-host $1"; return 0; }

controller_host() { if [[ $HOSTS -gt 0 ]]; then echo "login($SUB.1)"; else echo "localhost(127.0.0.1)"; fi; }

# slurm.conf's address fields of node n$1 (slurmctld on port $2).
node_address() {
  if [[ $HOSTS -gt 0 ]]; then
    echo "NodeAddr=$(host_addr "n$1") NodeHostname=n$1 Port=$(($2 + 1))"
  else
    echo "NodeAddr=127.0.0.1 NodeHostname=localhost Port=$(($2 + $1))"
  fi
}

hosts_env() {
  echo "export BFT_SLURM_BIN=$DIR/bin"
  echo "export BFT_SLURM_LOGIN_ADDR=$SUB.1"
  echo "export BFT_SLURM_NETNS_PREFIX=$PREFIX-"
}

write_wrappers() {
  mkdir -p "$DIR/bin"
  cat >"$DIR/bin/on-host" <<EOF
#!/bin/sh
# on-host HOST COMMAND...: runs COMMAND on HOST (login, n1, ...) of the test cluster in $DIR:
# in its network namespace, with its hostname.
host=\$1; shift
exec nsenter --net=/run/netns/$PREFIX-\$host unshare --uts sh -c 'hostname "\$0" && exec "\$@"' "\$host" "\$@"
EOF
  local c real
  for c in sbatch squeue scancel scontrol sinfo srun salloc sacct; do
    real=$(command -v "$c") || continue
    printf '#!/bin/sh\n# %s on the login host of the test cluster in %s\nexec nsenter --net=/run/netns/%s %s "$@"\n' \
      "$c" "$DIR" "$PREFIX-login" "$real" >"$DIR/bin/$c"
  done
  chmod 755 "$DIR/bin"/*
}

record() { echo "$1 $2" >>"$NET"; }

hosts_up() {
  command -v ip >/dev/null && command -v unshare >/dev/null ||
    { echo "cluster.sh: --hosts needs ip (iproute2) and unshare" >&2; exit 77; }
  [[ $(id -u) -eq 0 ]] || { echo "cluster.sh: --hosts needs root (ip netns)" >&2; exit 77; }
  PREFIX=bft$$
  SUB=10.213.$(($$ % 256)) # any private /24: the bridge is reachable from nothing else
  echo "$HOSTS $PREFIX $SUB" >"$HOSTS_FILE"
  : >"$NET"
  write_wrappers
  local br=${PREFIX}br k host ns
  record link "$br"
  # Not allowed here (a container without CAP_NET_ADMIN): skipped, not a cluster failure.
  ip link add "$br" type bridge || { echo "cluster.sh: cannot create a bridge here (ip link add)" >&2; exit 77; }
  ip link set "$br" up
  for ((k = 0; k <= HOSTS; k++)); do
    if [[ $k -eq 0 ]]; then host=login; else host=n$k; fi
    ns=$PREFIX-$host
    record netns "$ns"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    record link "${PREFIX}v$k"
    ip link add "${PREFIX}v$k" type veth peer name eth0 netns "$ns"
    ip link set "${PREFIX}v$k" master "$br" up
    ip -n "$ns" addr add "$(host_addr "$host")/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  export PATH=$DIR/bin:$PATH
  echo "cluster.sh: hosts login ($SUB.1) and n1..n$HOSTS on bridge $br" >&2
}

# Removes what DIR/net records, last made first. Processes still in a namespace (a job's process
# that outlived its slurmstepd) are killed first: the namespace would live on in them.
hosts_down() {
  [[ -s $NET ]] || return 0
  local kind name pids
  while read -r kind name; do
    case $kind in
      netns)
        ip netns list | grep -q "^$name\b" || continue
        pids=$(ip netns pids "$name" 2>/dev/null | tr '\n' ' ')
        if [[ -n ${pids// /} ]]; then
          echo "cluster.sh: SIGKILL to processes left on $name: $pids" >&2
          # shellcheck disable=SC2086
          kill -KILL $pids 2>/dev/null || true
        fi
        ip netns delete "$name" || echo "cluster.sh: cannot delete namespace $name" >&2
        ;;
      link)
        ip link show "$name" >/dev/null 2>&1 || continue # a veth goes with its namespace
        ip link delete "$name" || echo "cluster.sh: cannot delete interface $name" >&2
        ;;
    esac
  done < <(tac "$NET")
  rm -f "$NET"
  echo "cluster.sh: hosts removed" >&2
}
