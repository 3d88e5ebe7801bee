#!/usr/bin/env bash
# Prints which parts of the local Trainyard stack (deploy/local/up.sh) are running.
# Exit code: 0 if PostgreSQL, Redis and trainyard all run (trainyard also answering
# /readyz), 1 otherwise.
#
# Usage: deploy/local/status.sh [-h|--help]
set -euo pipefail

# shellcheck source=deploy/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if (($# > 0)); then
  case "$1" in
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) ty_die "unknown argument: $1" ;;
  esac
fi

ty_resolve_stack
ty_pg_adopt_owner
all_up=1
row() { printf '  %-11s %-8s %s\n' "$1" "$2" "$3"; }

printf 'Trainyard local stack: %s\n' "${TY_STACK}"
if [[ ! -d "${TY_STACK}" ]]; then
  printf '  (state directory does not exist; start with: bash deploy/local/up.sh)\n'
fi

if ty_pg_running; then
  pg_pid="$(head -n 1 "${TY_PGDATA}/postmaster.pid" 2>/dev/null || true)"
  pg_port="$(sed -n 4p "${TY_PGDATA}/postmaster.pid" 2>/dev/null || true)"
  row postgres running "pid ${pg_pid:-?}, 127.0.0.1:${pg_port:-?}, log ${TY_PG_LOG}"
else
  row postgres stopped ""
  all_up=0
fi

if pid="$(ty_pid_alive "${TY_REDIS_PID}" redis-server)"; then
  if ty_redis_ping; then
    row redis running "pid ${pid}, ${TY_REDIS_ADDR}, log ${TY_REDIS_LOG}"
  else
    row redis "no-ping" "pid ${pid} alive but ${TY_REDIS_ADDR} does not answer PING"
    all_up=0
  fi
else
  row redis stopped ""
  all_up=0
fi

if pid="$(ty_pid_alive "${TY_PID}" trainyard)"; then
  if curl -fsS --max-time 2 "http://${TY_HTTP_ADDR}/readyz" >/dev/null 2>&1; then
    row trainyard running "pid ${pid}, gRPC ${TY_GRPC_ADDR}, http://${TY_HTTP_ADDR}/readyz ok, log ${TY_LOG}"
  else
    row trainyard "no-ready" "pid ${pid} alive but http://${TY_HTTP_ADDR}/readyz fails; log ${TY_LOG}"
    all_up=0
  fi
else
  row trainyard stopped ""
  all_up=0
fi

for f in "${TY_ADMIN_TOKEN}" "${TY_DEMO_TOKEN}"; do
  if [[ -s "${f}" ]]; then
    printf '  token       %s\n' "${f}"
  fi
done

if ((all_up)); then exit 0; else exit 1; fi
