#!/usr/bin/env bash
# Stops the local Trainyard stack started by deploy/local/up.sh: trainyard (SIGTERM, wait,
# then SIGKILL), Redis, PostgreSQL (pg_ctl stop -m fast). Parts that are already stopped
# are skipped.
#
# Usage: deploy/local/down.sh [--purge] [-h|--help]
#
#   --purge   also delete the state directory (database, tokens, logs)
#
# Environment: see deploy/local/common.sh (TRAINYARD_STACK_DIR etc.) and
#   TRAINYARD_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL (default 20)
set -euo pipefail

# shellcheck source=deploy/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

PURGE=0
while (($# > 0)); do
  case "$1" in
    --purge) PURGE=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; ty_die "unknown argument: $1" ;;
  esac
  shift
done
STOP_TIMEOUT="${TRAINYARD_STOP_TIMEOUT:-20}"

ty_resolve_stack
ty_pg_adopt_owner
failed=0

# trainyard
if pid="$(ty_pid_alive "${TY_PID}" trainyard)"; then
  ty_log "trainyard: stopping pid ${pid}"
  if ty_stop_pid "${TY_PID}" trainyard "${STOP_TIMEOUT}"; then
    ty_log "trainyard: stopped"
  else
    ty_warn "trainyard: pid ${pid} would not die"
    failed=1
  fi
else
  rm -f "${TY_PID}"
  ty_log "trainyard: not running"
fi

# Redis
if pid="$(ty_pid_alive "${TY_REDIS_PID}" redis-server)"; then
  ty_log "redis: stopping pid ${pid}"
  if ty_stop_pid "${TY_REDIS_PID}" redis-server "${STOP_TIMEOUT}"; then
    ty_log "redis: stopped"
  else
    ty_warn "redis: pid ${pid} would not die"
    failed=1
  fi
else
  rm -f "${TY_REDIS_PID}"
  ty_log "redis: not running"
fi

# PostgreSQL
if ty_pg_running; then
  bindir="$(ty_pg_bindir)"
  ty_log "postgres: stopping (data ${TY_PGDATA})"
  if ty_as_pg "${bindir}/pg_ctl" stop -D "${TY_PGDATA}" -m fast -w -t 60; then
    ty_log "postgres: stopped"
  else
    ty_warn "postgres: pg_ctl stop failed; see ${TY_PG_LOG}"
    failed=1
  fi
else
  ty_log "postgres: not running"
fi

if ((PURGE)); then
  if ((failed)); then
    ty_die "not purging ${TY_STACK}: some parts did not stop"
  fi
  if [[ -d "${TY_STACK}" ]]; then
    case "${TY_STACK}" in
      / | "${TY_REPO}" | "${HOME:-/}") ty_die "refusing to delete ${TY_STACK}" ;;
    esac
    if [[ ! -e "${TY_STACK}/${TY_STACK_MARKER}" && -n "$(ls -A "${TY_STACK}")" ]]; then
      ty_die "refusing to delete ${TY_STACK}: it has no ${TY_STACK_MARKER} marker (not created by up.sh?)"
    fi
    rm -rf -- "${TY_STACK}"
    ty_log "purged ${TY_STACK}"
  else
    ty_log "nothing to purge at ${TY_STACK}"
  fi
  if [[ -L "${TY_STACK_LINK}" ]]; then
    rm -f -- "${TY_STACK_LINK}"
  fi
fi

exit "${failed}"
