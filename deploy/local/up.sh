#!/usr/bin/env bash
# Trainyard quick start: installs dependencies, builds the release preset, starts a private
# PostgreSQL and Redis, runs migrations, starts `trainyard all` in the background and
# bootstraps a demo tenant with tokens. Safe to run again: running PostgreSQL/Redis are kept
# (restarted only if their port changed), trainyard is restarted with the fresh build.
#
# Usage: deploy/local/up.sh [--infra-only] [--no-build] [--no-deps] [-h|--help]
#
#   --infra-only   developer option: only install deps and start PostgreSQL + Redis
#                  (no build, no trainyard, no bootstrap)
#   --no-build     skip configure/build, use the existing binary (same as TRAINYARD_SKIP_BUILD=1)
#   --no-deps      skip deploy/install-deps.sh (same as TRAINYARD_SKIP_DEPS=1)
#
# Environment: see deploy/local/common.sh (ports, state dir, binary) and
#   TRAINYARD_BUILD_JOBS      parallel build jobs (default: ninja's default)
#   TRAINYARD_READY_TIMEOUT   seconds to wait for /readyz (default 60)
#   TRAINYARD_DEMO_FILE       bootstrap file (default deploy/local/demo.textproto)
set -euo pipefail

# shellcheck source=deploy/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

INFRA_ONLY=0
SKIP_BUILD="${TRAINYARD_SKIP_BUILD:-0}"
SKIP_DEPS="${TRAINYARD_SKIP_DEPS:-0}"
while (($# > 0)); do
  case "$1" in
    --infra-only) INFRA_ONLY=1 ;;
    --no-build) SKIP_BUILD=1 ;;
    --no-deps) SKIP_DEPS=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; ty_die "unknown argument: $1" ;;
  esac
  shift
done
READY_TIMEOUT="${TRAINYARD_READY_TIMEOUT:-60}"
DEMO_FILE="${TRAINYARD_DEMO_FILE:-${TY_REPO}/deploy/local/demo.textproto}"

STEP="startup"
if ((!INFRA_ONLY)) && [[ ! -r "${DEMO_FILE}" ]]; then
  ty_die "bootstrap file ${DEMO_FILE} not found (set TRAINYARD_DEMO_FILE, or use --infra-only)"
fi
STEP_NO=0
if ((INFRA_ONLY)); then STEP_TOTAL=4; else STEP_TOTAL=7; fi
START_TS="$(date +%s)"

on_exit() {
  local rc=$?
  if ((rc != 0)); then
    printf '\nup.sh: FAILED in step "%s" (exit code %d); later steps were not run.\n' "${STEP}" "${rc}" >&2
    printf 'up.sh: fix the problem above and re-run; stop what did start with: bash deploy/local/down.sh\n' >&2
  fi
}
trap on_exit EXIT

step() {
  STEP="$1"
  STEP_NO=$((STEP_NO + 1))
  printf '\n==> [%d/%d] %s  (+%ds)\n' "${STEP_NO}" "${STEP_TOTAL}" "${STEP}" "$(($(date +%s) - START_TS))"
}

# ---------------------------------------------------------------------------------------
step_deps() {
  step "install dependencies"
  if [[ "${SKIP_DEPS}" == "1" ]]; then
    ty_log "skipped (--no-deps / TRAINYARD_SKIP_DEPS=1)"
    return 0
  fi
  bash "${TY_REPO}/deploy/install-deps.sh"
}

step_build() {
  step "configure and build (cmake preset: release)"
  if [[ "${SKIP_BUILD}" == "1" ]]; then
    ty_log "skipped (--no-build / TRAINYARD_SKIP_BUILD=1); using ${TY_BIN}"
    return 0
  fi
  local jobs=()
  if [[ -n "${TRAINYARD_BUILD_JOBS:-}" ]]; then jobs=(--parallel "${TRAINYARD_BUILD_JOBS}"); fi
  ty_log "building the whole tree; on a 2-core machine the first build takes a long while."
  ty_log "progress lines are [finished/total elapsed]; re-runs are incremental."
  cd "${TY_REPO}"
  cmake --preset release
  NINJA_STATUS="[%f/%t %es] " cmake --build --preset release "${jobs[@]}"
  [[ -x "${TY_BIN}" ]] || ty_die "build finished but ${TY_BIN} does not exist"
  build_console
}

# The web console (web/ → web/dist, served by the gateway): npm ci once per lock file, then
# the build (a few seconds when nothing changed).
build_console() {
  if [[ ! -f "${TY_REPO}/web/package.json" ]]; then return 0; fi
  if ! command -v npm >/dev/null 2>&1; then
    ty_warn "npm not found: the web console is not built (the REST API still works)"
    return 0
  fi
  ty_log "building the web console (web/ → web/dist)"
  cd "${TY_REPO}/web"
  local stamp="node_modules/.package-lock.json"
  if [[ ! -f "${stamp}" || "package-lock.json" -nt "${stamp}" ]]; then
    npm ci --no-audit --no-fund
  fi
  npm run --silent build
  cd "${TY_REPO}"
}

prepare_stack() {
  ty_resolve_stack
  mkdir -p "${TY_STACK}"
  chmod 755 "${TY_STACK}"
  touch "${TY_STACK}/${TY_STACK_MARKER}"
  if ((TY_STACK_FALLBACK)); then
    ty_log "note: the postgres OS user cannot reach ${TY_STACK_LINK} (a parent directory is private),"
    ty_log "      so the local stack lives in ${TY_STACK}."
    if [[ ! -e "${TY_STACK_LINK}" || -L "${TY_STACK_LINK}" ]]; then
      ln -sfn "${TY_STACK}" "${TY_STACK_LINK}"
      ty_log "      ${TY_STACK_LINK} is a symlink to it."
    fi
  fi
  ty_pg_adopt_owner
}

# Writes the settings our instance needs into an include file in the data directory, so
# they apply on every (re)start without quoting games on the pg_ctl command line.
write_pg_conf() {
  local sockdir="${TY_PG_RUN}" sock="${TY_PG_RUN}/.s.PGSQL.${TY_PG_PORT}"
  if ((${#sock} > 100)); then
    ty_warn "unix socket path ${sock} is too long for PostgreSQL; TCP only (set TRAINYARD_STACK_DIR to a shorter path to get the socket)"
    sockdir=""
  fi
  local esc_sockdir="${sockdir//\'/\'\'}"
  cat >"${TY_PGDATA}/trainyard-local.conf" <<EOF
# Written by deploy/local/up.sh on every run; do not edit.
listen_addresses = '127.0.0.1'
port = ${TY_PG_PORT}
unix_socket_directories = '${esc_sockdir}'
EOF
  if ty_is_root; then chown "${TY_PG_OS_USER}:" "${TY_PGDATA}/trainyard-local.conf"; fi
  if ! grep -q "^include_if_exists = 'trainyard-local.conf'" "${TY_PGDATA}/postgresql.conf"; then
    printf "\n# Added by deploy/local/up.sh\ninclude_if_exists = 'trainyard-local.conf'\n" \
      >>"${TY_PGDATA}/postgresql.conf"
  fi
}

step_postgres() {
  step "private PostgreSQL on 127.0.0.1:${TY_PG_PORT}"
  local bindir
  bindir="$(ty_pg_bindir)" ||
    ty_die "PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin; run deploy/install-deps.sh or set TRAINYARD_PG_BINDIR"
  if ty_is_root && ! id -u "${TY_PG_OS_USER}" >/dev/null 2>&1; then
    ty_die "OS user '${TY_PG_OS_USER}' does not exist (the Debian postgresql package creates it); PostgreSQL refuses to run as root"
  fi

  mkdir -p "${TY_PGDATA}" "${TY_PG_RUN}"
  touch "${TY_PG_LOG}"
  if ty_is_root; then
    chown "${TY_PG_OS_USER}:" "${TY_PGDATA}" "${TY_PG_RUN}" "${TY_PG_LOG}"
  fi
  chmod 700 "${TY_PGDATA}"

  if [[ ! -f "${TY_PGDATA}/PG_VERSION" ]]; then
    if [[ -n "$(ls -A "${TY_PGDATA}")" ]]; then
      ty_die "${TY_PGDATA} is not empty but is not a PostgreSQL data directory; remove it (bash deploy/local/down.sh --purge)"
    fi
    ty_log "initdb ${TY_PGDATA} (superuser ${TY_DB_USER}, trust auth, UTF8)"
    if ! ty_as_pg "${bindir}/initdb" -D "${TY_PGDATA}" --auth=trust -U "${TY_DB_USER}" -E UTF8 \
      --no-locale >"${TY_STACK}/initdb.log" 2>&1; then
      ty_tail "${TY_STACK}/initdb.log"
      ty_die "initdb failed (full output: ${TY_STACK}/initdb.log)"
    fi
  fi
  write_pg_conf

  if ty_pg_running; then
    local running_port
    running_port="$(sed -n 4p "${TY_PGDATA}/postmaster.pid" 2>/dev/null || true)"
    if [[ "${running_port}" == "${TY_PG_PORT}" ]]; then
      ty_log "already running (data ${TY_PGDATA})"
    else
      ty_log "running on port ${running_port:-?}, restarting on ${TY_PG_PORT}"
      if ! ty_as_pg "${bindir}/pg_ctl" restart -D "${TY_PGDATA}" -l "${TY_PG_LOG}" -m fast -w -t 60; then
        ty_tail "${TY_PG_LOG}"
        ty_die "PostgreSQL restart failed"
      fi
    fi
  else
    if ty_port_open "${TY_PG_PORT}"; then
      ty_die "port ${TY_PG_PORT} is already in use by another process; stop it or set TRAINYARD_PG_PORT"
    fi
    ty_log "starting (log ${TY_PG_LOG})"
    if ! ty_as_pg "${bindir}/pg_ctl" start -D "${TY_PGDATA}" -l "${TY_PG_LOG}" -w -t 60; then
      ty_tail "${TY_PG_LOG}"
      ty_die "PostgreSQL did not start"
    fi
  fi

  local exists
  exists="$(PGCONNECT_TIMEOUT=5 "${bindir}/psql" -X -q -h 127.0.0.1 -p "${TY_PG_PORT}" -U "${TY_DB_USER}" \
    -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '${TY_DB_NAME}'")" ||
    ty_die "cannot connect to PostgreSQL on 127.0.0.1:${TY_PG_PORT}"
  if [[ "${exists}" == "1" ]]; then
    ty_log "database '${TY_DB_NAME}' exists"
  else
    PGCONNECT_TIMEOUT=5 "${bindir}/createdb" -h 127.0.0.1 -p "${TY_PG_PORT}" -U "${TY_DB_USER}" \
      -E UTF8 "${TY_DB_NAME}"
    ty_log "created database '${TY_DB_NAME}'"
  fi
}

step_redis() {
  step "private Redis on ${TY_REDIS_ADDR}"
  command -v redis-server >/dev/null 2>&1 || ty_die "redis-server not found; run deploy/install-deps.sh"
  local pid
  if pid="$(ty_pid_alive "${TY_REDIS_PID}" redis-server)"; then
    if ty_redis_ping; then
      ty_log "already running (pid ${pid})"
      return 0
    fi
    ty_log "pid ${pid} does not answer on ${TY_REDIS_ADDR}; restarting"
    ty_stop_pid "${TY_REDIS_PID}" redis-server 10 || ty_die "could not stop redis-server pid ${pid}"
  fi
  if ty_port_open "${TY_REDIS_PORT}"; then
    ty_die "port ${TY_REDIS_PORT} is already in use by another process; stop it or set TRAINYARD_REDIS_PORT"
  fi
  mkdir -p "${TY_REDIS_DIR}"
  rm -f "${TY_REDIS_PID}"
  ty_log "starting (log ${TY_REDIS_LOG})"
  redis-server --bind 127.0.0.1 --port "${TY_REDIS_PORT}" --save "" --appendonly no \
    --daemonize yes --pidfile "${TY_REDIS_PID}" --logfile "${TY_REDIS_LOG}" --dir "${TY_REDIS_DIR}"
  local i
  for ((i = 0; i < 100; i++)); do
    if ty_redis_ping; then
      ty_log "ready"
      return 0
    fi
    sleep 0.1
  done
  ty_tail "${TY_REDIS_LOG}"
  ty_die "Redis did not answer PING on ${TY_REDIS_ADDR} within 10s"
}

# The key that signs the job tokens attempts get (docs/security.md, "Job tokens"): made
# once per stack and kept, so tokens stay valid across restarts of `trainyard all`.
write_job_token_key() {
  TY_JOB_TOKEN_KEY="${TY_STACK}/job-token.key"
  if [[ ! -s "${TY_JOB_TOKEN_KEY}" ]]; then
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"${TY_JOB_TOKEN_KEY}.tmp" &&
      printf '\n' >>"${TY_JOB_TOKEN_KEY}.tmp") || ty_die "cannot write ${TY_JOB_TOKEN_KEY}"
    mv -f "${TY_JOB_TOKEN_KEY}.tmp" "${TY_JOB_TOKEN_KEY}"
  fi
}

write_trainyard_conf() {
  local template="${TY_REPO}/deploy/local/trainyard.conf.in" line out=""
  [[ -r "${template}" ]] || ty_die "missing ${template}"
  write_job_token_key
  while IFS= read -r line || [[ -n "${line}" ]]; do
    line="${line//@POSTGRES_URL@/${TY_POSTGRES_URL}}"
    line="${line//@REDIS_ADDR@/${TY_REDIS_ADDR}}"
    line="${line//@GRPC_LISTEN@/${TY_GRPC_ADDR}}"
    line="${line//@HTTP_LISTEN@/${TY_HTTP_ADDR}}"
    line="${line//@SIM_LISTEN@/${TY_SIM_ADDR}}"
    line="${line//@GATEWAY_LISTEN@/${TY_GATEWAY_ADDR}}"
    line="${line//@LOG_LEVEL@/${TY_LOG_LEVEL}}"
    line="${line//@REPO@/${TY_REPO}}"
    line="${line//@JOB_TOKEN_KEY_FILE@/${TY_JOB_TOKEN_KEY}}"
    out+="${line}"$'\n'
  done <"${template}"
  printf '%s' "${out}" >"${TY_CONF}.tmp"
  mv -f "${TY_CONF}.tmp" "${TY_CONF}"
}

step_trainyard() {
  step "migrate and start trainyard (gRPC ${TY_GRPC_ADDR}, HTTP ${TY_HTTP_ADDR})"
  [[ -x "${TY_BIN}" ]] || ty_die "${TY_BIN} not found or not executable (build it: cmake --preset release && cmake --build --preset release)"
  command -v curl >/dev/null 2>&1 || ty_die "curl not found; run deploy/install-deps.sh"

  write_trainyard_conf
  ty_log "config: ${TY_CONF}"

  ty_log "applying migrations"
  "${TY_BIN}" migrate --postgres_url="${TY_POSTGRES_URL}"

  local pid
  if pid="$(ty_pid_alive "${TY_PID}" trainyard)"; then
    ty_log "trainyard already running (pid ${pid}); restarting it"
    ty_stop_pid "${TY_PID}" trainyard 20 || ty_die "could not stop trainyard pid ${pid}"
  fi
  local port
  for port in "${TY_GRPC_PORT}" "${TY_HTTP_PORT}" "${TY_SIM_PORT}" "${TY_GATEWAY_PORT}"; do
    if ty_port_open "${port}"; then
      ty_die "port ${port} is already in use by another process (another trainyard?); stop it or set TRAINYARD_GRPC_PORT / TRAINYARD_HTTP_PORT / TRAINYARD_SIM_PORT / TRAINYARD_GATEWAY_PORT"
    fi
  done

  printf '\n==== %s: up.sh starting %s all --config=%s ====\n' "$(date -Is)" "${TY_BIN}" "${TY_CONF}" >>"${TY_LOG}"
  nohup "${TY_BIN}" all --config="${TY_CONF}" </dev/null >>"${TY_LOG}" 2>&1 &
  pid=$!
  printf '%s\n' "${pid}" >"${TY_PID}"
  ty_log "started pid ${pid} (log ${TY_LOG}); waiting up to ${READY_TIMEOUT}s for http://${TY_HTTP_ADDR}/readyz"

  local deadline=$(($(date +%s) + READY_TIMEOUT)) rc
  while true; do
    if ! kill -0 "${pid}" 2>/dev/null; then
      wait "${pid}" 2>/dev/null && rc=0 || rc=$?
      rm -f "${TY_PID}"
      ty_tail "${TY_LOG}" 60
      ty_die "trainyard exited during startup (exit code ${rc}); see ${TY_LOG}"
    fi
    if curl -fsS --max-time 2 "http://${TY_HTTP_ADDR}/readyz" >/dev/null 2>&1; then
      ty_log "ready"
      return 0
    fi
    if (($(date +%s) >= deadline)); then
      ty_tail "${TY_LOG}" 60
      ty_die "trainyard (pid ${pid}) not ready after ${READY_TIMEOUT}s (it is still running; inspect ${TY_LOG}, stop with bash deploy/local/down.sh)"
    fi
    sleep 1
  done
}

# create_token FILE ARGS...: `trainyard token create ARGS` into FILE (mode 600).
create_token() {
  local file="$1" token
  shift
  token="$("${TY_BIN}" token create --postgres_url="${TY_POSTGRES_URL}" "$@")"
  if [[ -z "${token}" || "${token}" == *[[:space:]]* ]]; then
    ty_die "token create $* printed no single-line token"
  fi
  (umask 077 && printf '%s\n' "${token}" >"${file}.tmp")
  chmod 600 "${file}.tmp"
  mv -f "${file}.tmp" "${file}"
}

step_bootstrap() {
  step "bootstrap demo tenant and tokens"
  [[ -r "${DEMO_FILE}" ]] || ty_die "bootstrap file ${DEMO_FILE} not found"
  create_token "${TY_ADMIN_TOKEN}" --principal=users/admin --role=platform-admin --ttl=720h
  ty_log "platform-admin token (users/admin): ${TY_ADMIN_TOKEN}"
  local rc=0
  "${TY_BIN}" apply -f "${DEMO_FILE}" --target="${TY_GRPC_ADDR}" --token="$(cat "${TY_ADMIN_TOKEN}")" || rc=$?
  ((rc == 0)) || ty_die "trainyard apply -f ${DEMO_FILE} failed (exit code ${rc})"
  create_token "${TY_DEMO_TOKEN}" --principal=users/demo --role=member --tenant=demo --ttl=720h
  ty_log "member token (users/demo, tenant demo): ${TY_DEMO_TOKEN}"
  create_token "${TY_FINANCE_TOKEN}" --principal=users/fiona --role=finance --tenant=demo --ttl=720h
  ty_log "finance token (users/fiona, tenant demo): ${TY_FINANCE_TOKEN}"
}

print_summary() {
  step "summary"
  local elapsed=$(($(date +%s) - START_TS))
  if ((INFRA_ONLY)); then
    cat <<EOF
Infrastructure is up (${elapsed}s; --infra-only: trainyard was not built or started).

  PostgreSQL  ${TY_POSTGRES_URL}   (log ${TY_PG_LOG})
  Redis       ${TY_REDIS_ADDR}   (log ${TY_REDIS_LOG})
  State dir   ${TY_STACK}

  Stop:       bash deploy/local/down.sh [--purge]
  Status:     bash deploy/local/status.sh
EOF
    return 0
  fi
  cat <<EOF
Trainyard is running (${elapsed}s).

  Console     http://${TY_GATEWAY_ADDR}/   (open it in a browser; sign in with a token below)
  REST API    http://${TY_GATEWAY_ADDR}/v1/   (OpenAPI: http://${TY_GATEWAY_ADDR}/v1/openapi.json)
  gRPC        ${TY_GRPC_ADDR}   (plaintext, reflection on)
  Metrics     http://${TY_HTTP_ADDR}/metrics
  Health      http://${TY_HTTP_ADDR}/healthz
  Readiness   http://${TY_HTTP_ADDR}/readyz
  Tokens      ${TY_ADMIN_TOKEN}   (platform-admin, users/admin)
              ${TY_DEMO_TOKEN}    (member, users/demo, tenant demo)
              ${TY_FINANCE_TOKEN} (finance, users/fiona, tenant demo)
  Sim faults  ${TY_SIM_ADDR}   (trainyard sim-fault --sim_target=${TY_SIM_ADDR} KIND TARGET)
  Logs        ${TY_LOG}
              ${TY_PG_LOG}, ${TY_REDIS_LOG}
  PostgreSQL  ${TY_POSTGRES_URL}
  Redis       ${TY_REDIS_ADDR}

Try it:
  curl -s -H "Authorization: Bearer \$(cat ${TY_DEMO_TOKEN})" http://${TY_GATEWAY_ADDR}/v1/tenants/demo/jobs
  grpcurl -plaintext -H "authorization: Bearer \$(cat ${TY_DEMO_TOKEN})" ${TY_GRPC_ADDR} list
  curl -s http://${TY_HTTP_ADDR}/metrics | head

Status:  bash deploy/local/status.sh
Stop:    bash deploy/local/down.sh            (add --purge to delete ${TY_STACK})
EOF
  if ! command -v grpcurl >/dev/null 2>&1; then
    printf '\n(grpcurl is not packaged in Debian 12; get it from https://github.com/fullstorydev/grpcurl)\n'
  fi
}

# ---------------------------------------------------------------------------------------
step_deps
if ((!INFRA_ONLY)); then step_build; fi
prepare_stack
step_postgres
step_redis
if ((!INFRA_ONLY)); then
  step_trainyard
  step_bootstrap
fi
print_summary
