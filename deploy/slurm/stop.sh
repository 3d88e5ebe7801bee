#!/usr/bin/env bash
# Stops the private Slurm cluster that deploy/slurm/start.sh started, or one
# daemon of it. Skips what is not running; safe to run twice.
#
# Usage: deploy/slurm/stop.sh [options]
#   --state-dir DIR   the cluster's state directory (default $TRAINYARD_SLURM_DIR,
#                     else .slurm-stack/ in the repository)
#   --daemon NAME     stop only munged, slurmctld, slurmrestd or slurmd:<node>
#   --signal SIG      first signal (default TERM; KILL simulates a crash, and
#                     for slurmd:<node> also kills the node's running jobs,
#                     like a node that lost power)
#   --purge           also delete the state directory
#
# A full stop cancels the cluster's jobs first, so no job process outlives it.
set -euo pipefail

# shellcheck source=deploy/slurm/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

STATE_DIR="${TRAINYARD_SLURM_DIR:-${TY_SLURM_REPO}/.slurm-stack}"
DAEMON=""
SIG=TERM
PURGE=0
KEEP_WATCHDOG=0
while (($# > 0)); do
  case "$1" in
    --state-dir) STATE_DIR="$2"; shift ;;
    --daemon) DAEMON="$2"; shift ;;
    --signal) SIG="$2"; shift ;;
    --purge) PURGE=1 ;;
    --keep-watchdog) KEEP_WATCHDOG=1 ;;  # internal: the watchdog calls us
    -h | --help) usage; exit 0 ;;
    *) usage >&2; ty_slurm_die "unknown argument: $1" ;;
  esac
  shift
done

STATE_DIR="$(ty_slurm_abspath "${STATE_DIR}")"
RUN="${STATE_DIR}/run"
CONF="${STATE_DIR}/etc/slurm.conf"
export SLURM_CONF="${CONF}"
if [[ ! -d "${RUN}" ]]; then
  ty_slurm_log "nothing to stop in ${STATE_DIR}"
  if ((PURGE)); then rm -rf "${STATE_DIR}"; fi
  exit 0
fi

# The slurmstepd processes of this cluster's jobs, found by the slurmd log
# they inherited (DIR/log/slurmd-<node>.log). $1: a node name to restrict to,
# or empty for all.
job_pids() {
  local node="$1" pid
  for pid in $(pgrep -f '^slurmstepd:' 2>/dev/null || true); do
    if ls -l "/proc/${pid}/fd" 2>/dev/null | grep -q -F "${STATE_DIR}/log/slurmd-${node}"; then
      echo "${pid}"
    fi
  done
  return 0
}

kill_jobs_of() {  # kill_jobs_of NODE|"" : SIGKILL slurmstepd and their process trees
  local pid child
  for pid in $(job_pids "$1"); do
    for child in $(pgrep -P "${pid}" 2>/dev/null || true); do
      pkill -KILL -P "${child}" 2>/dev/null || true
      kill -KILL "${child}" 2>/dev/null || true
    done
    kill -KILL "${pid}" 2>/dev/null || true
  done
}

stop_one() {
  case "$1" in
    munged) ty_slurm_stop_pidfile "${RUN}/munged.pid" "${SIG}" 10 ;;
    slurmctld) ty_slurm_stop_pidfile "${RUN}/slurmctld.ours.pid" "${SIG}" 30 ;;
    slurmrestd) ty_slurm_stop_pidfile "${RUN}/slurmrestd.pid" "${SIG}" 10 ;;
    slurmd:*)
      local node="${1#slurmd:}"
      ty_slurm_stop_pidfile "${RUN}/slurmd-${node}.ours.pid" "${SIG}" 15
      if [[ "${SIG}" == KILL || "${SIG}" == 9 ]]; then kill_jobs_of "${node}"; fi
      ;;
    *) ty_slurm_die "unknown daemon $1 (munged, slurmctld, slurmrestd, slurmd:<node>)" ;;
  esac
}

if [[ -n "${DAEMON}" ]]; then
  stop_one "${DAEMON}"
  ty_slurm_log "${DAEMON} stopped"
  exit 0
fi

# Cancel every job while slurmctld still runs (best effort), so slurmd ends them.
if ty_slurm_live_pid "${RUN}/slurmctld.ours.pid" >/dev/null; then
  timeout 10 scancel --quiet --full $(timeout 10 squeue -h -o %i 2>/dev/null) 2>/dev/null || true
fi
# slurmrestd and every slurmd at once (each takes a second or two).
stop_one slurmrestd &
for f in "${RUN}"/slurmd-*.ours.pid; do
  [[ -e "${f}" ]] || continue
  node="$(basename "${f}" .ours.pid)"
  stop_one "slurmd:${node#slurmd-}" &
done
wait
kill_jobs_of ""
stop_one slurmctld
stop_one munged
if ((!KEEP_WATCHDOG)); then ty_slurm_stop_pidfile "${RUN}/watchdog.pid" TERM 2; fi
if ((PURGE)); then rm -rf "${STATE_DIR}"; fi
ty_slurm_log "cluster in ${STATE_DIR} stopped"
