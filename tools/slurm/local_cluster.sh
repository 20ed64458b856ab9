#!/usr/bin/env bash
# A real Slurm cluster on this machine, for tests and for trying the sbatch templates:
# one slurmctld and one or two slurmd ("nodes" n1, n2), all on loopback addresses.
#
#   tools/slurm/local_cluster.sh start [--nodes 1|2]   # (re)start; prints `export SLURM_CONF=...`
#   tools/slurm/local_cluster.sh stop                  # cancel jobs, stop the daemons
#   tools/slurm/local_cluster.sh status                # daemons + sinfo; exit 0 when all is up
#   tools/slurm/local_cluster.sh env                   # prints `export SLURM_CONF=...`
#   tools/slurm/local_cluster.sh kill-node n2          # the node dies: SIGKILL its slurmd and
#                                                      # every process of its jobs
#   tools/slurm/local_cluster.sh start-node n2         # the node comes back (slurmd restarted)
#
#   eval "$(tools/slurm/local_cluster.sh start --nodes 2)"
#   trap 'tools/slurm/local_cluster.sh stop' EXIT     # callers: always stop
#   srun -N 2 --ntasks-per-node=2 hostname
#
# Environment:
#   SLURM_LOCAL_DIR       work dir: slurm.conf, state, spool, logs, pid files
#                         (default: <repo>/build/slurm-local)
#   SLURM_LOCAL_PORT      first port to try (default 17000): slurmctld on it, slurmd n1/n2 on
#                         the next two; moved up by 10 while any of the three is taken
#   SLURM_LOCAL_TIMEOUT   seconds to wait for the nodes to become idle (default 30)
#   SLURM_LOCAL_SLURMD_TIMEOUT  seconds before slurmctld declares a silent node DOWN (Slurm's
#                         SlurmdTimeout; default 300): small values let tests see a node failure
#   SLURM_LOCAL_UNSHARE   1 (default when `unshare --uts` works): each slurmd runs in its own
#                         UTS namespace whose host name is its node name, so ranks on n1 and
#                         n2 see different gethostname(); 0: all share the real host name
#
# Needs root (slurmd runs jobs as any user) and the packages slurmctld slurmd slurm-client
# (tools/setup.sh). Uses auth/none: never expose these daemons beyond loopback.
# Facts behind the configuration: shared/notes/slurm-local.md.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
W="${SLURM_LOCAL_DIR:-$repo_root/build/slurm-local}"
CONF="$W/slurm.conf"
[[ "$W" != *[[:space:]]* ]] || { echo "local_cluster: work dir '$W' must not contain spaces (slurm.conf)" >&2; exit 1; }
TIMEOUT="${SLURM_LOCAL_TIMEOUT:-30}"

die() { echo "local_cluster: $*" >&2; exit 1; }

usage() {
  sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

require_slurm() {
  local missing=()
  for b in slurmctld slurmd sinfo srun sbatch squeue scancel; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || missing+=("$b")
  done
  [ ${#missing[@]} -eq 0 ] ||
    die "Slurm is not installed (missing: ${missing[*]}); run tools/setup.sh (packages slurmctld slurmd slurm-client)"
  [ "$(id -u)" -eq 0 ] || die "must run as root (slurmd launches jobs as their user)"
}

# The daemons live in /usr/sbin, which a non-login PATH may lack.
PATH="$PATH:/usr/sbin:/sbin"

port_busy() {  # true when something listens on 127.0.0.1:$1
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Alive and really one of our daemons (a pid file may outlive its process and the pid be
# reused). A zombie counts as gone: in containers whose PID 1 reaps late, a stopped daemon
# stays a zombie for a second or more.
daemon_alive() {
  local pid="$1" stat
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 1
  [[ "$stat" =~ ^[0-9]+\ \((slurmctld|slurmd)\)\ ([A-Za-z]) ]] || return 1
  [ "${BASH_REMATCH[2]}" != Z ]
}

node_names() {  # the NodeName= entries of the current slurm.conf
  [ -f "$CONF" ] && sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$CONF"
}

log_tail() {
  local f
  for f in "$W"/log/*.log; do
    [ -f "$f" ] || continue
    echo "---- tail of $f" >&2
    tail -n 25 "$f" >&2
  done
}

cmd_stop() {
  local pidfile pid waited any=0
  # Cancel what is still queued or running first, so that no slurmstepd outlives its slurmd.
  if [ -f "$CONF" ] && [ -f "$W/run/slurmctld.pid" ] && daemon_alive "$(cat "$W/run/slurmctld.pid")"; then
    local jobs
    jobs="$(SLURM_CONF="$CONF" timeout 10 squeue -h -o %i 2>/dev/null || true)"
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      SLURM_CONF="$CONF" timeout 10 scancel $jobs 2>/dev/null || true
      for _ in $(seq 20); do
        [ -z "$(SLURM_CONF="$CONF" timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.5
      done
    fi
  fi
  # slurmd first, then slurmctld.
  for pidfile in "$W"/run/slurmd-*.pid "$W/run/slurmctld.pid"; do
    [ -f "$pidfile" ] || continue
    pid="$(cat "$pidfile" 2>/dev/null || true)"
    if daemon_alive "$pid"; then
      any=1
      kill -TERM "$pid" 2>/dev/null || true
      waited=0
      while daemon_alive "$pid" && [ $waited -lt 100 ]; do sleep 0.1; waited=$((waited + 1)); done
      if daemon_alive "$pid"; then
        echo "local_cluster: $(basename "$pidfile" .pid) (pid $pid) ignored SIGTERM; killing" >&2
        kill -KILL "$pid" 2>/dev/null || true
      fi
    fi
    rm -f "$pidfile"
  done
  [ $any -eq 1 ] && echo "local_cluster: stopped ($W)" >&2
  return 0
}

write_conf() {  # write_conf NODES CTLD_PORT
  local nodes="$1" port="$2" cpus mem
  if [ "$nodes" -eq 1 ]; then cpus=8; mem=4000; else cpus=4; mem=2000; fi
  {
    cat <<EOF
# Written by tools/slurm/local_cluster.sh ($nodes node(s)); overwritten on every start.
ClusterName=localci
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool/%n
TmpFS=$W/tmpfs/%n
SlurmctldPidFile=$W/run/slurmctld.pid
SlurmdPidFile=$W/run/slurmd-%n.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
MailProg=/bin/true
ReturnToService=2
# Declare more CPUs than the machine has (tests run several ranks on 2 cores).
SlurmdParameters=config_overrides
# Short timeouts: a broken test should fail fast.
KillWait=5
# Reject at submission what the partition can never run (instead of pending forever).
EnforcePartLimits=ALL
# Completed jobs are forgotten after 5 s. This also keeps "sbatch --wait" polling every 2 s
# (it backs off to 8 s and 32 s only while the poll interval is below MinJobAge/2).
MinJobAge=5
SlurmdTimeout=${SLURM_LOCAL_SLURMD_TIMEOUT:-300}
EOF
    local i
    for i in $(seq 1 "$nodes"); do
      echo "NodeName=n$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((port + i)) CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
    local list="n1"; [ "$nodes" -eq 2 ] && list="n1,n2"
    # No MaxTime: the templates ask for hours; tests bound their jobs themselves.
    echo "PartitionName=debug Nodes=$list Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } >"$CONF"
}

use_unshare() {
  case "${SLURM_LOCAL_UNSHARE:-auto}" in
    0|no|false) return 1 ;;
    1|yes|true) return 0 ;;
    *) unshare --uts sh -c 'hostname n0 >/dev/null 2>&1' >/dev/null 2>&1 ;;
  esac
}

start_slurmd() {  # start_slurmd NODE UNSHARE(0|1)
  local node="$1" ok=1
  if [ "$2" -eq 1 ]; then
    unshare --uts sh -c "hostname $node && exec slurmd -f '$CONF' -N $node" \
      >"$W/log/slurmd-$node.stdout" 2>&1 || ok=0
  else
    slurmd -f "$CONF" -N "$node" >"$W/log/slurmd-$node.stdout" 2>&1 || ok=0
  fi
  [ $ok -eq 1 ] || { log_tail; cat "$W/log/slurmd-$node.stdout" >&2; }
  [ $ok -eq 1 ]
}

known_node() {
  node_names | grep -qx "$1" || die "no node '$1' in $CONF (nodes: $(node_names | tr '\n' ' '))"
}

# A node dies: its slurmd and every process of its jobs (slurmstepd, the ranks) get SIGKILL.
# They are found by the node's own UTS namespace, so the cluster must run with unshare.
cmd_kill_node() {
  local node="$1" pid ns p killed=0
  known_node "$node"
  [ "$(cat "$W/run/unshare" 2>/dev/null)" = 1 ] ||
    die "kill-node needs each node in its own UTS namespace (start with SLURM_LOCAL_UNSHARE=1)"
  pid="$(cat "$W/run/slurmd-$node.pid" 2>/dev/null || true)"
  daemon_alive "$pid" || die "slurmd $node is not running"
  ns="$(readlink "/proc/$pid/ns/uts")"
  [ "$ns" != "$(readlink /proc/$$/ns/uts)" ] || die "slurmd $node shares this shell's UTS namespace"
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/uts" 2>/dev/null)" = "$ns" ] || continue
    kill -KILL "${p#/proc/}" 2>/dev/null && killed=$((killed + 1))
  done
  rm -f "$W/run/slurmd-$node.pid"
  echo "local_cluster: node $node killed ($killed processes)" >&2
}

# The node comes back: slurmd restarted; waits (bounded) until slurmctld sees it idle again.
cmd_start_node() {
  local node="$1" deadline state
  known_node "$node"
  export SLURM_CONF="$CONF"
  start_slurmd "$node" "$(cat "$W/run/unshare" 2>/dev/null || echo 0)" || die "slurmd $node failed to start"
  # A node slurmctld marked DOWN for not responding returns by itself (ReturnToService=2).
  deadline=$((SECONDS + TIMEOUT))
  while :; do
    state="$(timeout 5 sinfo -h -n "$node" -N -o '%T' 2>/dev/null | head -n 1 || true)"
    case "$state" in idle|mixed|allocated) break ;; esac
    [ $SECONDS -lt $deadline ] || die "node $node is '$state' ${TIMEOUT}s after its slurmd restarted"
    sleep 0.2
  done
  echo "local_cluster: node $node back ($state)" >&2
}

cmd_start() {
  local nodes=1
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) [ $# -ge 2 ] || usage; nodes="$2"; shift 2 ;;
      --nodes=*) nodes="${1#--nodes=}"; shift ;;
      *) usage ;;
    esac
  done
  [[ "$nodes" == 1 || "$nodes" == 2 ]] || die "--nodes must be 1 or 2 (got '$nodes')"
  require_slurm

  # Variables of an outer Slurm job or launcher must not reach the daemons.
  while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM_|SBATCH_|SRUN_|SALLOC_|PMIX_)' |
                                           grep -vE '^SLURM_(LOCAL|TEST)_' || true)
  cmd_stop   # idempotent: stale daemons of this work dir go first
  rm -rf "$W/state" "$W/spool" "$W/tmpfs" "$W/run" "$W/log"
  mkdir -p "$W/state" "$W/log" "$W/run"
  local i
  for i in $(seq 1 "$nodes"); do mkdir -p "$W/spool/n$i" "$W/tmpfs/n$i"; done

  # Three free loopback ports: slurmctld, slurmd n1, slurmd n2.
  local port="${SLURM_LOCAL_PORT:-17000}" tries=0
  while port_busy "$port" || port_busy $((port + 1)) || port_busy $((port + 2)); do
    tries=$((tries + 1))
    [ $tries -lt 20 ] || die "no free ports among 3 consecutive ones from ${SLURM_LOCAL_PORT:-17000} (step 10); set SLURM_LOCAL_PORT"
    port=$((port + 10))
  done
  write_conf "$nodes" "$port"
  export SLURM_CONF="$CONF"

  if ! slurmctld -f "$CONF" >"$W/log/slurmctld.stdout" 2>&1; then
    log_tail; cat "$W/log/slurmctld.stdout" >&2; cmd_stop; die "slurmctld failed to start"
  fi
  local unshare=0; use_unshare && unshare=1
  echo "$unshare" >"$W/run/unshare"
  for i in $(seq 1 "$nodes"); do
    start_slurmd "n$i" $unshare || { cmd_stop; die "slurmd n$i failed to start"; }
  done

  # Wait (bounded) until every node is idle.
  local deadline=$((SECONDS + TIMEOUT)) states=""
  while :; do
    states="$(timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null | sort -u || true)"
    if [ -n "$states" ] && [ "$(grep -c ' idle$' <<<"$states")" -eq "$nodes" ]; then break; fi
    if [ $SECONDS -ge $deadline ]; then
      echo "local_cluster: nodes not idle after ${TIMEOUT}s; sinfo says:" >&2
      echo "${states:-<nothing: slurmctld not answering>}" >&2
      log_tail
      cmd_stop
      die "start failed (work dir $W)"
    fi
    sleep 0.2
  done
  echo "local_cluster: up: $nodes node(s), slurmctld port $port, $([ $unshare -eq 1 ] && echo 'host names = node names' || echo 'one shared host name'), work dir $W" >&2
  echo "export SLURM_CONF=$CONF"
}

cmd_status() {
  local rc=0 pidfile pid
  [ -f "$CONF" ] || { echo "no cluster in $W"; return 3; }
  for pidfile in "$W/run/slurmctld.pid" $(node_names | sed "s|^|$W/run/slurmd-|; s|\$|.pid|"); do
    pid="$(cat "$pidfile" 2>/dev/null || true)"
    if daemon_alive "$pid"; then
      echo "$(basename "$pidfile" .pid): running (pid $pid)"
    else
      echo "$(basename "$pidfile" .pid): not running"; rc=3
    fi
  done
  if [ $rc -eq 0 ]; then
    SLURM_CONF="$CONF" timeout 5 sinfo -N -o '%N %T %c %P' || rc=3
  fi
  echo "export SLURM_CONF=$CONF"
  return $rc
}

[ $# -ge 1 ] || usage
cmd="$1"; shift
case "$cmd" in
  start) cmd_start "$@" ;;
  stop) [ $# -eq 0 ] || usage; cmd_stop ;;
  status) [ $# -eq 0 ] || usage; cmd_status ;;
  env) [ $# -eq 0 ] || usage; echo "export SLURM_CONF=$CONF" ;;
  kill-node) [ $# -eq 1 ] || usage; cmd_kill_node "$1" ;;
  start-node) [ $# -eq 1 ] || usage; cmd_start_node "$1" ;;
  -h|--help|help) usage ;;
  *) usage ;;
esac
