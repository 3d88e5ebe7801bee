#!/usr/bin/env bash
# Starts a private Slurm cluster on loopback (Slurm 22.05, Debian 12, as root):
# munged, slurmctld, one slurmd per node (each node with fake GPUs: character
# devices with /dev/null's numbers), and slurmrestd as an unprivileged user with
# JWT authentication. Two partitions, one per Trainyard flavor: `ondemand`
# (nodes gpu1..gpuN, the default) and `spot` (the next M nodes). Slurm's own
# preemption is off: Trainyard chooses victims and stops them itself.
#
# Usage: deploy/slurm/start.sh [options]
#   --state-dir DIR        state directory (default $TRAINYARD_SLURM_DIR, else
#                          .slurm-stack/ in the repository); created if missing
#   --cluster-name NAME    Slurm ClusterName (default trainyard)
#   --ctld-port P          slurmctld port (default 16817)
#   --slurmd-ports P,P,..  one port per node (default 16831, 16832, ...)
#   --rest-port P          slurmrestd on 127.0.0.1:P (default 16820)
#   --rest-socket PATH     slurmrestd on a unix socket instead of a TCP port
#   --ondemand-nodes N     nodes in partition ondemand (default 2)
#   --spot-nodes N         nodes in partition spot (default 2)
#   --gpus-per-node N      fake GPUs per node (default 4)
#   --cpus-per-node N      CPUs declared per node (default 4)
#   --memory-mb N          RealMemory per node in MB (default 4000)
#   --rest-user USER       OS user slurmrestd runs as (default nobody)
#   --api-version V        OpenAPI plugin slurmrestd loads (default v0.0.38)
#   --ondemand-flavor F    Trainyard flavor of partition ondemand in adapter.conf
#                          (default gpu; the quick start's is on-demand-h100)
#   --spot-flavor F        Trainyard flavor of partition spot (default spot;
#                          the quick start's is spot-h100)
#   --watch-pid PID        stop the cluster when process PID exits (tests)
#   --daemon NAME          (re)start only this daemon of an existing cluster:
#                          munged, slurmctld, slurmrestd or slurmd:<node>
#   --timeout S            seconds to wait for readiness (default 90)
#
# On success the cluster is up, every node is idle and slurmrestd answers;
# DIR/cluster.env and DIR/adapter.conf describe it. Stop it with
# deploy/slurm/stop.sh --state-dir DIR.
set -euo pipefail

# shellcheck source=deploy/slurm/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

STATE_DIR="${TRAINYARD_SLURM_DIR:-${TY_SLURM_REPO}/.slurm-stack}"
CLUSTER_NAME=trainyard
CTLD_PORT=16817
SLURMD_PORTS=""
REST_PORT=16820
REST_SOCKET=""
OD_NODES=2
SPOT_NODES=2
GPUS=4
CPUS=4
MEMORY_MB=4000
REST_USER=nobody
API_VERSION=v0.0.38
OD_FLAVOR=gpu
SPOT_FLAVOR=spot
WATCH_PID=""
DAEMON=""
TIMEOUT=90
while (($# > 0)); do
  case "$1" in
    --state-dir) STATE_DIR="$2"; shift ;;
    --cluster-name) CLUSTER_NAME="$2"; shift ;;
    --ctld-port) CTLD_PORT="$2"; shift ;;
    --slurmd-ports) SLURMD_PORTS="$2"; shift ;;
    --rest-port) REST_PORT="$2"; shift ;;
    --rest-socket) REST_SOCKET="$2"; shift ;;
    --ondemand-nodes) OD_NODES="$2"; shift ;;
    --spot-nodes) SPOT_NODES="$2"; shift ;;
    --gpus-per-node) GPUS="$2"; shift ;;
    --cpus-per-node) CPUS="$2"; shift ;;
    --memory-mb) MEMORY_MB="$2"; shift ;;
    --rest-user) REST_USER="$2"; shift ;;
    --api-version) API_VERSION="$2"; shift ;;
    --ondemand-flavor) OD_FLAVOR="$2"; shift ;;
    --spot-flavor) SPOT_FLAVOR="$2"; shift ;;
    --watch-pid) WATCH_PID="$2"; shift ;;
    --daemon) DAEMON="$2"; shift ;;
    --timeout) TIMEOUT="$2"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; ty_slurm_die "unknown argument: $1" ;;
  esac
  shift
done

[[ "$(id -u)" -eq 0 ]] || ty_slurm_die "must run as root (slurmd launches jobs as their users)"
for bin in munged slurmctld slurmd slurmrestd scontrol sinfo setpriv curl; do
  command -v "${bin}" >/dev/null 2>&1 ||
    ty_slurm_die "${bin} not found; install: apt-get install slurmctld slurmd slurmrestd slurm-client slurm-wlm-jwt-plugin munge curl"
done
[[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so || -n "$(ls /usr/lib/*/slurm-wlm/auth_jwt.so 2>/dev/null)" ]] ||
  ty_slurm_die "auth/jwt plugin missing; install slurm-wlm-jwt-plugin"
id slurm >/dev/null 2>&1 || ty_slurm_die "no 'slurm' OS user (installed by the slurmctld package)"
id munge >/dev/null 2>&1 || ty_slurm_die "no 'munge' OS user (installed by the munge package)"
id "${REST_USER}" >/dev/null 2>&1 || ty_slurm_die "no '${REST_USER}' OS user for slurmrestd"

STATE_DIR="$(ty_slurm_abspath "${STATE_DIR}")"
ETC="${STATE_DIR}/etc"
CONF="${ETC}/slurm.conf"
RUN="${STATE_DIR}/run"
LOG="${STATE_DIR}/log"
MUNGE_DIR="${STATE_DIR}/munge"
MUNGE_SOCKET="${MUNGE_DIR}/munge.socket"
JWT_KEY="${STATE_DIR}/jwt/jwt_hs256.key"
export SLURM_CONF="${CONF}"

node_names() {
  local i
  for ((i = 1; i <= OD_NODES + SPOT_NODES; i++)); do printf 'gpu%d\n' "${i}"; done
}

write_config() {
  local -a ports=()
  local n=$((OD_NODES + SPOT_NODES)) i name host
  ((OD_NODES >= 1)) || ty_slurm_die "--ondemand-nodes must be >= 1"
  ((SPOT_NODES >= 0)) || ty_slurm_die "--spot-nodes must be >= 0"
  if [[ -n "${SLURMD_PORTS}" ]]; then
    IFS=, read -r -a ports <<<"${SLURMD_PORTS}"
    ((${#ports[@]} == n)) || ty_slurm_die "--slurmd-ports needs ${n} ports, got ${#ports[@]}"
  else
    for ((i = 0; i < n; i++)); do ports+=($((16831 + i))); done
  fi
  host="$(hostname)"
  mkdir -p "${ETC}" "${RUN}" "${LOG}" "${MUNGE_DIR}" "${STATE_DIR}/jwt" \
    "${STATE_DIR}/state" "${STATE_DIR}/spool" "${STATE_DIR}/gpu" "${STATE_DIR}/tmp"
  # Daemons running as slurm, munge and the REST user must traverse the dir.
  chmod 0755 "${STATE_DIR}" "${ETC}" "${STATE_DIR}/gpu"
  chmod 1777 "${STATE_DIR}/tmp"
  chown slurm:slurm "${STATE_DIR}/state" "${RUN}" "${LOG}" "${STATE_DIR}/jwt"
  chmod 0755 "${RUN}" "${LOG}"
  chmod 0700 "${STATE_DIR}/state" "${STATE_DIR}/jwt"
  chown munge:munge "${MUNGE_DIR}"
  chmod 0711 "${MUNGE_DIR}"

  if [[ ! -s "${MUNGE_DIR}/munge.key" ]]; then
    head -c 1024 /dev/urandom >"${MUNGE_DIR}/munge.key"
  fi
  chown munge:munge "${MUNGE_DIR}/munge.key"
  chmod 0400 "${MUNGE_DIR}/munge.key"
  if [[ ! -s "${JWT_KEY}" ]]; then
    head -c 32 /dev/urandom >"${JWT_KEY}"
  fi
  chown slurm:slurm "${JWT_KEY}"
  chmod 0600 "${JWT_KEY}"

  local gres="${ETC}/gres.conf.new" conf="${CONF}.new" nodes_od nodes_spot
  : >"${gres}"
  {
    cat <<EOF
# Generated by deploy/slurm/start.sh; edits are overwritten.
ClusterName=${CLUSTER_NAME}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=${CTLD_PORT}
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${MUNGE_SOCKET}
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=${JWT_KEY}
StateSaveLocation=${STATE_DIR}/state
SlurmdSpoolDir=${STATE_DIR}/spool/%n
SlurmctldPidFile=${RUN}/slurmctld.pid
SlurmdPidFile=${RUN}/slurmd-%n.pid
SlurmctldLogFile=${LOG}/slurmctld.log
SlurmdLogFile=${LOG}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=${STATE_DIR}/tmp
PlugStackConfig=${ETC}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
GresTypes=gpu
# Trainyard decides preemption; Slurm never requeues on its own.
PreemptType=preempt/none
JobRequeue=0
ReturnToService=2
# Failure detection fast enough for tests: a silent slurmd is DOWN after 10 s.
SlurmdTimeout=10
SlurmctldTimeout=10
MessageTimeout=10
KillWait=5
InactiveLimit=0
# Ended jobs stay visible (jobs?update_time=) until Trainyard recorded them.
MinJobAge=3600
SchedulerParameters=defer_batch=0,sched_min_interval=100000
SlurmdParameters=config_overrides
EOF
    for ((i = 1; i <= n; i++)); do
      name="gpu${i}"
      # Every node carries its own name as a feature: the adapter pins
      # workers to the scheduler's nodes with a constraint on it.
      printf 'NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%s CPUs=%s RealMemory=%s Gres=gpu:h100:%s Features=%s,%s State=UNKNOWN\n' \
        "${name}" "${host}" "${ports[$((i - 1))]}" "${CPUS}" "${MEMORY_MB}" "${GPUS}" \
        "$(if ((i <= OD_NODES)); then echo ondemand; else echo spot; fi)" "${name}"
      mkdir -p "${STATE_DIR}/spool/${name}"
      local g
      for ((g = 0; g < GPUS; g++)); do
        [[ -c "${STATE_DIR}/gpu/${name}-${g}" ]] || mknod "${STATE_DIR}/gpu/${name}-${g}" c 1 3
      done
      printf 'NodeName=%s Name=gpu Type=h100 File=%s/gpu/%s-[0-%d]\n' \
        "${name}" "${STATE_DIR}" "${name}" $((GPUS - 1)) >>"${gres}"
    done
    nodes_od="gpu[1-${OD_NODES}]"
    printf 'PartitionName=ondemand Nodes=%s Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO PreemptMode=OFF\n' "${nodes_od}"
    if ((SPOT_NODES > 0)); then
      nodes_spot="gpu[$((OD_NODES + 1))-${n}]"
      printf 'PartitionName=spot Nodes=%s MaxTime=INFINITE State=UP OverSubscribe=NO PreemptMode=OFF\n' "${nodes_spot}"
    fi
  } >"${conf}"
  : >"${ETC}/plugstack.conf"
  mv "${gres}" "${ETC}/gres.conf"
  mv "${conf}" "${CONF}"
  chmod 0644 "${CONF}" "${ETC}/gres.conf" "${ETC}/plugstack.conf"

  local rest_url
  if [[ -n "${REST_SOCKET}" ]]; then
    rest_url="unix:$(ty_slurm_abspath "${REST_SOCKET}")"
  else
    rest_url="http://127.0.0.1:${REST_PORT}"
  fi
  {
    printf '# Generated by deploy/slurm/start.sh.\n'
    printf 'SLURM_CONF=%q\n' "${CONF}"
    printf 'TRAINYARD_SLURM_CLUSTER=%q\n' "${CLUSTER_NAME}"
    printf 'TRAINYARD_SLURM_REST=%q\n' "${rest_url}"
    printf 'TRAINYARD_SLURM_REST_SOCKET=%q\n' "${REST_SOCKET}"
    printf 'TRAINYARD_SLURM_REST_PORT=%q\n' "${REST_PORT}"
    printf 'TRAINYARD_SLURM_REST_USER=%q\n' "${REST_USER}"
    printf 'TRAINYARD_SLURM_API_VERSION=%q\n' "${API_VERSION}"
    printf 'TRAINYARD_SLURM_JWT_KEY=%q\n' "${JWT_KEY}"
    printf 'TRAINYARD_SLURM_CTLD_PORT=%q\n' "${CTLD_PORT}"
    printf 'TRAINYARD_SLURM_NODES=%q\n' "$(node_names | paste -sd' ')"
    printf 'TRAINYARD_SLURM_MUNGE_SOCKET=%q\n' "${MUNGE_SOCKET}"
  } >"${STATE_DIR}/cluster.env"
  {
    printf '# Settings of the Slurm adapter (docs/slurm.md), generated by deploy/slurm/start.sh.\n'
    printf 'rest_url = %s\n' "${rest_url}"
    printf 'api_version = %s\n' "${API_VERSION}"
    printf 'jwt_key_file = %s\n' "${JWT_KEY}"
    printf 'token_user = slurm\n'
    printf 'user = root\n'
    printf 'partition = %s:ondemand:ondemand\n' "${OD_FLAVOR}"
    if ((SPOT_NODES > 0)); then printf 'partition = %s:spot:spot\n' "${SPOT_FLAVOR}"; fi
    printf 'gpu_model = H100\n'
    printf 'stop_signal = USR1\n'
  } >"${STATE_DIR}/adapter.conf"
}

# Runs "$@" detached in its own session, output appended to log $1 (first
# argument), and writes its pid to pid file $2.
spawn() {
  local log="$1" pidfile="$2"
  shift 2
  setsid "$@" >>"${log}" 2>&1 </dev/null &
  echo $! >"${pidfile}"
}

wait_for() {  # wait_for DESCRIPTION SECONDS COMMAND...
  local what="$1" secs="$2" i
  shift 2
  for ((i = 0; i < secs * 5; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  ty_slurm_log "timed out after ${secs}s waiting for ${what}"
  return 1
}

start_munged() {
  ty_slurm_stop_pidfile "${RUN}/munged.pid" TERM 5
  rm -f "${MUNGE_SOCKET}" "${MUNGE_SOCKET}.lock"
  spawn "${LOG}/munged.log" "${RUN}/munged.pid" \
    setpriv --reuid=munge --regid=munge --init-groups -- \
    /usr/sbin/munged --foreground --force --socket="${MUNGE_SOCKET}" \
    --key-file="${MUNGE_DIR}/munge.key" --pid-file="${MUNGE_DIR}/munged.pid" \
    --seed-file="${MUNGE_DIR}/munged.seed" --log-file="${MUNGE_DIR}/munged.log"
  wait_for "munged socket" "${TIMEOUT}" test -S "${MUNGE_SOCKET}" ||
    ty_slurm_die "munged did not start; see ${LOG}/munged.log ${MUNGE_DIR}/munged.log"
}

ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

start_slurmctld() {
  ty_slurm_stop_pidfile "${RUN}/slurmctld.ours.pid" TERM 20
  spawn "${LOG}/slurmctld.out" "${RUN}/slurmctld.ours.pid" \
    /usr/sbin/slurmctld -D -i -f "${CONF}"
  wait_for "slurmctld" "${TIMEOUT}" ctld_up ||
    { tail -n 20 "${LOG}/slurmctld.log" "${LOG}/slurmctld.out" >&2 || true; ty_slurm_die "slurmctld did not start"; }
}

start_slurmd() {
  local node="$1"
  ty_slurm_stop_pidfile "${RUN}/slurmd-${node}.ours.pid" TERM 10
  spawn "${LOG}/slurmd-${node}.out" "${RUN}/slurmd-${node}.ours.pid" \
    /usr/sbin/slurmd -D -N "${node}" -f "${CONF}"
}

node_ready() {  # node_ready NODE: idle/mixed/allocated, not down/drained/unknown
  local state
  state="$(sinfo -h -N -n "$1" -o '%t' 2>/dev/null | head -n1)"
  case "${state}" in
    idle | mix | alloc | comp) return 0 ;;
    *) return 1 ;;
  esac
}

rest_token() { scontrol token username=slurm lifespan=300 | sed -n 's/^SLURM_JWT=//p'; }

rest_ping() {
  local token
  token="$(rest_token)" || return 1
  [[ -n "${token}" ]] || return 1
  if [[ -n "${REST_SOCKET}" ]]; then
    curl -sf --max-time 5 --unix-socket "${REST_SOCKET}" -H "X-SLURM-USER-NAME: slurm" \
      -H "X-SLURM-USER-TOKEN: ${token}" "http://localhost/slurm/${API_VERSION}/ping"
  else
    curl -sf --max-time 5 -H "X-SLURM-USER-NAME: slurm" -H "X-SLURM-USER-TOKEN: ${token}" \
      "http://127.0.0.1:${REST_PORT}/slurm/${API_VERSION}/ping"
  fi
}

start_slurmrestd() {
  local listen
  ty_slurm_stop_pidfile "${RUN}/slurmrestd.pid" TERM 5
  if [[ -n "${REST_SOCKET}" ]]; then
    REST_SOCKET="$(ty_slurm_abspath "${REST_SOCKET}")"
    # slurmrestd (unprivileged) creates the socket: a directory it owns.
    if [[ ! -d "$(dirname "${REST_SOCKET}")" ]]; then
      mkdir -p "$(dirname "${REST_SOCKET}")"
      chown "${REST_USER}" "$(dirname "${REST_SOCKET}")"
      chmod 0755 "$(dirname "${REST_SOCKET}")"
    fi
    rm -f "${REST_SOCKET}"
    listen="unix:${REST_SOCKET}"
  else
    listen="127.0.0.1:${REST_PORT}"
  fi
  spawn "${LOG}/slurmrestd.log" "${RUN}/slurmrestd.pid" \
    env SLURM_CONF="${CONF}" SLURM_JWT=daemon \
    setpriv --reuid="${REST_USER}" --regid="$(id -g "${REST_USER}")" --init-groups -- \
    /usr/sbin/slurmrestd -a rest_auth/jwt -s "openapi/${API_VERSION}" "${listen}"
  wait_for "slurmrestd" "${TIMEOUT}" rest_ping ||
    { tail -n 20 "${LOG}/slurmrestd.log" >&2 || true; ty_slurm_die "slurmrestd did not answer"; }
}

start_watchdog() {
  [[ -n "${WATCH_PID}" ]] || return 0
  ty_slurm_stop_pidfile "${RUN}/watchdog.pid" TERM 2
  spawn "${LOG}/watchdog.log" "${RUN}/watchdog.pid" \
    bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec bash "$2" --state-dir "$3" --keep-watchdog' \
    watchdog "${WATCH_PID}" "${TY_SLURM_REPO}/deploy/slurm/stop.sh" "${STATE_DIR}"
}

# Restart of one daemon of an existing cluster: reuse its settings.
if [[ -n "${DAEMON}" ]]; then
  [[ -r "${STATE_DIR}/cluster.env" ]] || ty_slurm_die "no cluster in ${STATE_DIR} (run start.sh without --daemon first)"
  # shellcheck disable=SC1091
  source "${STATE_DIR}/cluster.env"
  REST_SOCKET="${TRAINYARD_SLURM_REST_SOCKET}"
  REST_PORT="${TRAINYARD_SLURM_REST_PORT}"
  REST_USER="${TRAINYARD_SLURM_REST_USER}"
  API_VERSION="${TRAINYARD_SLURM_API_VERSION}"
  case "${DAEMON}" in
    munged) start_munged ;;
    slurmctld) start_slurmctld ;;
    slurmrestd) start_slurmrestd ;;
    slurmd:*)
      node="${DAEMON#slurmd:}"
      grep -q "^NodeName=${node} " "${CONF}" || ty_slurm_die "unknown node ${node}"
      start_slurmd "${node}"
      wait_for "node ${node}" "${TIMEOUT}" node_ready "${node}" || ty_slurm_die "node ${node} did not come back"
      ;;
    *) ty_slurm_die "unknown daemon ${DAEMON} (munged, slurmctld, slurmrestd, slurmd:<node>)" ;;
  esac
  ty_slurm_log "${DAEMON} started"
  exit 0
fi

mkdir -p "${STATE_DIR}"
write_config
start_watchdog
start_munged
start_slurmctld
for node in $(node_names); do start_slurmd "${node}"; done
for node in $(node_names); do
  wait_for "node ${node}" "${TIMEOUT}" node_ready "${node}" ||
    { tail -n 20 "${LOG}/slurmd-${node}.log" "${LOG}/slurmd-${node}.out" >&2 || true; sinfo -N >&2 || true; ty_slurm_die "node ${node} did not become idle"; }
done
start_slurmrestd
ty_slurm_log "cluster ${CLUSTER_NAME} up in ${STATE_DIR}: slurmctld 127.0.0.1:${CTLD_PORT}, nodes $(node_names | paste -sd' '), slurmrestd $(sed -n 's/^rest_url = //p' "${STATE_DIR}/adapter.conf")"
