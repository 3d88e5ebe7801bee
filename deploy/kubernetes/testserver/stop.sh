#!/usr/bin/env bash
# Stops the Kubernetes API test server that deploy/kubernetes/testserver/start.sh started (it
# saves its objects in STATE_DIR/state.json first). Safe to run twice.
#
# Usage: deploy/kubernetes/testserver/stop.sh [options]
#   --state-dir DIR   its state directory (default $TRAINYARD_KUBE_DIR, else .local-kube/ in
#                     the repository)
#   --purge           also delete the state directory (objects, certificates, checkpoints)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../../.." && pwd)"
# shellcheck source=deploy/local/common.sh
source "${REPO}/deploy/local/common.sh"  # ty_log, ty_die, ty_pid_alive, ty_stop_pid

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

STATE_DIR="${TRAINYARD_KUBE_DIR:-${REPO}/.local-kube}"
PURGE=0
while (($# > 0)); do
  case "$1" in
    --state-dir) STATE_DIR="$2"; shift ;;
    --purge) PURGE=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; ty_die "unknown argument: $1" ;;
  esac
  shift
done

if [[ ! -d "${STATE_DIR}/run" ]]; then
  ty_log "nothing to stop in ${STATE_DIR}"
else
  ty_stop_pid "${STATE_DIR}/run/server.pid" server.py 10
  # (When the watchdog runs this script, its command line is this script's: not stopped.)
  ty_stop_pid "${STATE_DIR}/run/watchdog.pid" watchdog 2
  ty_log "API server in ${STATE_DIR} stopped"
fi
if ((PURGE)); then rm -rf "${STATE_DIR}"; fi
