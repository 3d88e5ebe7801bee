#!/usr/bin/env bash
# Installs the Debian 12 packages Trainyard needs to build, test and run locally.
#
# Idempotent: asks dpkg which packages are missing and installs only those, so a
# second run (or a run on a machine that already has everything) is a quick no-op.
# `apt-get install` is tried first; only if it fails (e.g. stale or empty package
# lists on a fresh image) is `apt-get update` run and the install retried.
#
# Needs root when something is missing (uses sudo if available and not root).
# Does not start, stop or depend on the Debian-packaged PostgreSQL/Redis system
# services: the local stack (deploy/local/up.sh) runs its own instances on other ports.
#
# Environment:
#   TRAINYARD_EXTRA_PACKAGES   extra Debian packages to ensure (space separated)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libpqxx-dev libhiredis-dev libabsl-dev libssl-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  postgresql postgresql-contrib redis-server
  curl python3 python3-grpcio python3-protobuf python3-pytest python3-pytest-xdist python3-yaml openssl clang-format
  slurmctld slurmd slurmrestd slurm-client slurm-wlm-jwt-plugin munge
  libcurl4-openssl-dev nlohmann-json3-dev libcsv-dev
  libcpp-httplib-dev libyaml-cpp-dev zlib1g-dev golang-github-gogo-googleapis-dev
  chromium fonts-liberation
)
# The web console builds with Node.js and npm: the machine's own when it has them (a newer
# Node.js than Debian's), else Debian's.
if ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(nodejs npm)
fi
# The Kubernetes API test server (tests/fixtures/kube_apiserver) and its tests: jsonschema
# and the Python Kubernetes client; kubectl from Debian's kubernetes-client only when the
# machine has no kubectl (its own kubectl package conflicts with kubernetes-client).
PACKAGES+=(python3-jsonschema python3-kubernetes)
if ! command -v kubectl >/dev/null 2>&1; then
  PACKAGES+=(kubernetes-client)
fi
if [[ -n "${TRAINYARD_EXTRA_PACKAGES:-}" ]]; then
  read -r -a extra <<<"${TRAINYARD_EXTRA_PACKAGES}"
  PACKAGES+=("${extra[@]}")
fi

log() { printf 'install-deps: %s\n' "$*"; }
die() { printf 'install-deps: ERROR: %s\n' "$*" >&2; exit 1; }

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found; this script supports Debian 12 (bookworm) only"

missing=()
for pkg in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "${pkg}" 2>/dev/null || true)"
  if [[ "${status}" != "installed" ]]; then
    missing+=("${pkg}")
  fi
done

if ((${#missing[@]} == 0)); then
  log "all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

log "missing packages (${#missing[@]}): ${missing[*]}"

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    die "not running as root and sudo is not available; install as root: apt-get install ${missing[*]}"
  fi
fi

apt_install() {
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
}

if apt_install; then
  log "installed: ${missing[*]}"
  exit 0
fi

log "apt-get install failed; running apt-get update and retrying"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update \
  || die "apt-get update failed (is the Debian mirror reachable?)"
apt_install || die "apt-get install failed for: ${missing[*]}"
log "installed: ${missing[*]}"
