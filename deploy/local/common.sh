# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this file
# Shared settings and helpers for deploy/local/{up,down,status}.sh. Source it; don't run it.
#
# Environment overrides (all optional):
#   TRAINYARD_STACK_DIR     state directory (default: <repo>/.local-stack, see ty_resolve_stack)
#   TRAINYARD_PG_PORT       private PostgreSQL port       (default 55432)
#   TRAINYARD_REDIS_PORT    private Redis port            (default 56379)
#   TRAINYARD_GRPC_PORT     trainyard gRPC port           (default 50051)
#   TRAINYARD_HTTP_PORT     trainyard HTTP port           (default 8081; /metrics /healthz /readyz)
#   TRAINYARD_SIM_PORT      the sim cluster's own gRPC port (default 50061; fault injection)
#   TRAINYARD_LOG_LEVEL     trainyard --log_level         (default info)
#   TRAINYARD_BIN           trainyard binary              (default <repo>/build/release/bin/trainyard)
#   TRAINYARD_PG_BINDIR     PostgreSQL server binaries    (default: newest /usr/lib/postgresql/*/bin)
#   TRAINYARD_PG_OS_USER    OS user that runs PostgreSQL when we are root (default postgres)

TY_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
TY_PG_PORT="${TRAINYARD_PG_PORT:-55432}"
TY_REDIS_PORT="${TRAINYARD_REDIS_PORT:-56379}"
TY_GRPC_PORT="${TRAINYARD_GRPC_PORT:-50051}"
TY_HTTP_PORT="${TRAINYARD_HTTP_PORT:-8081}"
TY_SIM_PORT="${TRAINYARD_SIM_PORT:-50061}"
TY_GATEWAY_PORT="${TRAINYARD_GATEWAY_PORT:-8090}"
TY_LOG_LEVEL="${TRAINYARD_LOG_LEVEL:-info}"
TY_BIN="${TRAINYARD_BIN:-${TY_REPO}/build/release/bin/trainyard}"
TY_DB_NAME="trainyard"
TY_DB_USER="trainyard"
TY_GRPC_ADDR="127.0.0.1:${TY_GRPC_PORT}"
TY_HTTP_ADDR="127.0.0.1:${TY_HTTP_PORT}"
TY_SIM_ADDR="127.0.0.1:${TY_SIM_PORT}"
TY_GATEWAY_ADDR="127.0.0.1:${TY_GATEWAY_PORT}"
TY_REDIS_ADDR="127.0.0.1:${TY_REDIS_PORT}"
TY_POSTGRES_URL="postgresql://${TY_DB_USER}@127.0.0.1:${TY_PG_PORT}/${TY_DB_NAME}"
TY_STACK_MARKER=".trainyard-local-stack"

ty_log() { printf '%s\n' "$*"; }
ty_warn() { printf 'WARNING: %s\n' "$*" >&2; }
ty_die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

for _ty_port_var in TY_PG_PORT TY_REDIS_PORT TY_GRPC_PORT TY_HTTP_PORT TY_SIM_PORT TY_GATEWAY_PORT; do
  if ! [[ "${!_ty_port_var}" =~ ^[0-9]+$ ]] || ((${!_ty_port_var} < 1 || ${!_ty_port_var} > 65535)); then
    ty_die "${_ty_port_var#TY_} must be a port number (1-65535), got '${!_ty_port_var}'"
  fi
done
unset _ty_port_var

ty_is_root() { [[ "$(id -u)" -eq 0 ]]; }

# OS user that owns and runs the private PostgreSQL instance.
if ty_is_root; then
  TY_PG_OS_USER="${TRAINYARD_PG_OS_USER:-postgres}"
else
  TY_PG_OS_USER="$(id -un)"
fi

# ty_as_pg CMD ARGS...: run a command as the PostgreSQL OS user (PostgreSQL refuses to
# run as root). Runs from / so the command never trips over an unreadable cwd.
ty_as_pg() {
  if ty_is_root; then
    (cd / && runuser -u "${TY_PG_OS_USER}" -- "$@")
  else
    (cd / && "$@")
  fi
}

# ty_pg_bindir: prints the directory with initdb/pg_ctl/psql (Debian keeps them off PATH).
ty_pg_bindir() {
  if [[ -n "${TRAINYARD_PG_BINDIR:-}" ]]; then
    printf '%s\n' "${TRAINYARD_PG_BINDIR}"
    return 0
  fi
  local dirs=() d best=""
  shopt -s nullglob
  dirs=(/usr/lib/postgresql/*/bin)
  shopt -u nullglob
  if ((${#dirs[@]} > 0)); then
    best="$(printf '%s\n' "${dirs[@]}" | sort -V | tail -n 1)"
  fi
  if [[ -n "${best}" && -x "${best}/pg_ctl" ]]; then
    printf '%s\n' "${best}"
    return 0
  fi
  d="$(command -v pg_ctl 2>/dev/null || true)"
  if [[ -n "${d}" ]]; then
    dirname "$(readlink -f "${d}")"
    return 0
  fi
  return 1
}

# ty_nearest_existing PATH: PATH itself or its closest existing ancestor.
ty_nearest_existing() {
  local p="$1"
  while [[ ! -e "${p}" && "${p}" != "/" ]]; do
    p="$(dirname "${p}")"
  done
  printf '%s\n' "${p}"
}

# ty_resolve_stack: sets TY_STACK and the paths below it.
#
# Default is <repo>/.local-stack. When we run as root, PostgreSQL runs as the `postgres`
# OS user, which must be able to reach the data directory; a clone under a private
# directory (typically /root, mode 0700) is not reachable. In that case — and only when
# TRAINYARD_STACK_DIR is not set — the stack lives in /var/tmp/trainyard-stack-<hash of
# the repo path> instead (deterministic, so down.sh/status.sh find the same place), and
# <repo>/.local-stack becomes a symlink to it for convenience.
ty_resolve_stack() {
  local default="${TY_REPO}/.local-stack"
  TY_STACK_FALLBACK=0
  if [[ -n "${TRAINYARD_STACK_DIR:-}" ]]; then
    TY_STACK="${TRAINYARD_STACK_DIR}"
  else
    TY_STACK="${default}"
    if ty_is_root && id -u "${TY_PG_OS_USER}" >/dev/null 2>&1; then
      if ! ty_as_pg test -x "$(ty_nearest_existing "${default}")" 2>/dev/null; then
        local hash
        hash="$(printf '%s' "${TY_REPO}" | md5sum | cut -c1-10)"
        TY_STACK="/var/tmp/trainyard-stack-${hash}"
        TY_STACK_FALLBACK=1
      fi
    fi
  fi
  # Absolute path, without requiring it to exist.
  case "${TY_STACK}" in
    /*) ;;
    *) TY_STACK="${PWD}/${TY_STACK}" ;;
  esac
  TY_STACK_LINK="${default}"
  TY_PGDATA="${TY_STACK}/pg"
  TY_PG_RUN="${TY_STACK}/run"
  TY_PG_LOG="${TY_STACK}/pg.log"
  TY_REDIS_DIR="${TY_STACK}/redis"
  TY_REDIS_PID="${TY_STACK}/redis.pid"
  TY_REDIS_LOG="${TY_STACK}/redis.log"
  TY_CONF="${TY_STACK}/trainyard.conf"
  TY_PID="${TY_STACK}/trainyard.pid"
  TY_LOG="${TY_STACK}/trainyard.log"
  TY_ADMIN_TOKEN="${TY_STACK}/admin.token"
  TY_DEMO_TOKEN="${TY_STACK}/demo.token"
  TY_FINANCE_TOKEN="${TY_STACK}/finance.token"
}

# ty_port_open PORT: true if something accepts TCP connections on 127.0.0.1:PORT.
ty_port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ty_pid_alive PIDFILE NAME: prints the pid and succeeds if PIDFILE names a live process
# whose command line mentions NAME (guards against a recycled pid).
ty_pid_alive() {
  local pidfile="$1" name="$2" pid
  [[ -r "${pidfile}" ]] || return 1
  pid="$(tr -dc '0-9' <"${pidfile}")"
  [[ -n "${pid}" ]] || return 1
  kill -0 "${pid}" 2>/dev/null || return 1
  if [[ -r "/proc/${pid}/cmdline" ]]; then
    tr '\0' ' ' <"/proc/${pid}/cmdline" | grep -q -- "${name}" || return 1
  fi
  printf '%s\n' "${pid}"
}

# ty_stop_pid PIDFILE NAME TIMEOUT_S: SIGTERM, wait up to TIMEOUT_S, then SIGKILL.
# Succeeds (and removes PIDFILE) when the process is gone or was not running.
ty_stop_pid() {
  local pidfile="$1" name="$2" timeout="$3" pid i
  if ! pid="$(ty_pid_alive "${pidfile}" "${name}")"; then
    rm -f "${pidfile}"
    return 0
  fi
  kill -TERM "${pid}" 2>/dev/null || true
  for ((i = 0; i < timeout * 10; i++)); do
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "${pid}" 2>/dev/null; then
    ty_warn "${name} (pid ${pid}) still running after ${timeout}s; sending SIGKILL"
    kill -KILL "${pid}" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      kill -0 "${pid}" 2>/dev/null || break
      sleep 0.1
    done
  fi
  if kill -0 "${pid}" 2>/dev/null; then
    return 1
  fi
  rm -f "${pidfile}"
}

# ty_pg_running: true if the private PostgreSQL (TY_PGDATA) is running.
ty_pg_running() {
  local bindir
  [[ -f "${TY_PGDATA}/PG_VERSION" ]] || return 1
  bindir="$(ty_pg_bindir)" || return 1
  ty_as_pg "${bindir}/pg_ctl" status -D "${TY_PGDATA}" >/dev/null 2>&1
}

# ty_redis_ping: true if our Redis answers PING.
ty_redis_ping() {
  local reply
  if command -v redis-cli >/dev/null 2>&1; then
    reply="$(redis-cli -h 127.0.0.1 -p "${TY_REDIS_PORT}" ping 2>/dev/null || true)"
    [[ "${reply}" == "PONG" ]]
  else
    reply="$(
      {
        exec 3<>"/dev/tcp/127.0.0.1/${TY_REDIS_PORT}" &&
          printf 'PING\r\n' >&3 &&
          IFS= read -r -t 2 line <&3 &&
          printf '%s' "${line}"
      } 2>/dev/null || true
    )"
    [[ "${reply}" == "+PONG"* ]]
  fi
}

# ty_pg_adopt_owner: when root and the data directory exists, run PostgreSQL commands as
# the OS user that owns it (normally `postgres`).
ty_pg_adopt_owner() {
  local owner
  if ty_is_root && [[ -d "${TY_PGDATA}" ]]; then
    owner="$(stat -c %U "${TY_PGDATA}")"
    if [[ -n "${owner}" && "${owner}" != "root" && "${owner}" != "UNKNOWN" ]]; then
      TY_PG_OS_USER="${owner}"
    fi
  fi
}

# ty_tail FILE [N]: print the last N (default 40) lines of FILE, indented, to stderr.
ty_tail() {
  local file="$1" n="${2:-40}"
  if [[ -r "${file}" ]]; then
    printf -- '---- last %s lines of %s ----\n' "${n}" "${file}" >&2
    tail -n "${n}" "${file}" | sed 's/^/  | /' >&2
    printf -- '---- end of %s ----\n' "${file}" >&2
  else
    printf '(no log at %s)\n' "${file}" >&2
  fi
}
