#!/usr/bin/env bash
# Starts the Kubernetes API test server (tests/fixtures/kube_apiserver/server.py) for a local
# try-out of `trainyard dispatcher --backend=kubernetes`: HTTPS on 127.0.0.1 with its own CA,
# a bearer token, GKE-like GPU nodes (pool `ondemand`, and pool `spot` whose nodes carry the
# GKE spot label) and a pod script, so that pods "train": they run for --run-seconds and write
# trainyard-checkpoint.json into their TRAINYARD_CHECKPOINT_DIR every --checkpoint-every
# seconds. No containers run: the server's fake kubelet plays the pods (its README.md).
#
# Usage: deploy/kubernetes/testserver/start.sh [options]
#   --state-dir DIR         state directory (default $TRAINYARD_KUBE_DIR, else .local-kube/ in
#                           the repository); created if missing
#   --port P                HTTPS port on 127.0.0.1 (default 16443; 0: a free one)
#   --nodes N               nodes per pool (default 2): gpu-od-0.. and gpu-spot-0..
#   --gpus-per-node N       H100s per node (default 8)
#   --run-seconds S         how long each pod trains before exiting 0 (default 10)
#   --checkpoint-every S    seconds between a pod's checkpoints (default 2; 0: none)
#   --schemas DIR           the strict v1.30 schemas (default $TRAINYARD_K8S_SCHEMAS, else
#                           ../shared/k8s-schema/v1.30 next to the repository)
#   --watch-pid PID         stop the server when process PID exits (tests)
#   --timeout S             seconds to wait for the server (default 30)
#
# On success the server answers and DIR holds:
#   kubeconfig      for --kubeconfig (and kubectl: KUBECONFIG=DIR/kubeconfig kubectl get pods)
#   settings.conf   for --kube_settings: deploy/kubernetes/testserver/settings.conf with the
#                   checkpoint directory DIR/checkpoints filled in
#   job.yaml        a 2-worker job for `yard submit -f`, checkpointing under DIR/checkpoints
#   port, token     the server's port and bearer token (the admin API: its README.md)
# Objects persist in DIR/state.json: started again on the same DIR, the server keeps its
# nodes, Jobs and pods. Stop it with deploy/kubernetes/testserver/stop.sh --state-dir DIR.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../../.." && pwd)"
# shellcheck source=deploy/local/common.sh
source "${REPO}/deploy/local/common.sh"  # ty_log, ty_die, ty_stop_pid

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

STATE_DIR="${TRAINYARD_KUBE_DIR:-${REPO}/.local-kube}"
PORT=16443
NODES=2
GPUS=8
RUN_SECONDS=10
CHECKPOINT_EVERY=2
SCHEMAS="${TRAINYARD_K8S_SCHEMAS:-${REPO}/../shared/k8s-schema/v1.30}"
WATCH_PID=""
TIMEOUT=30
while (($# > 0)); do
  case "$1" in
    --state-dir) STATE_DIR="$2"; shift ;;
    --port) PORT="$2"; shift ;;
    --nodes) NODES="$2"; shift ;;
    --gpus-per-node) GPUS="$2"; shift ;;
    --run-seconds) RUN_SECONDS="$2"; shift ;;
    --checkpoint-every) CHECKPOINT_EVERY="$2"; shift ;;
    --schemas) SCHEMAS="$2"; shift ;;
    --watch-pid) WATCH_PID="$2"; shift ;;
    --timeout) TIMEOUT="$2"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; ty_die "unknown argument: $1" ;;
  esac
  shift
done

[[ -x /usr/bin/python3 ]] || ty_die "/usr/bin/python3 not found"
/usr/bin/python3 -c 'import jsonschema' 2>/dev/null ||
  ty_die "python3-jsonschema missing; install: apt-get install python3-jsonschema"
for bin in openssl curl; do
  command -v "${bin}" >/dev/null 2>&1 || ty_die "${bin} not found; install: apt-get install ${bin}"
done
[[ -r "${SCHEMAS}/pod-v1.json" ]] ||
  ty_die "no Kubernetes v1.30 schemas in ${SCHEMAS} (--schemas DIR or TRAINYARD_K8S_SCHEMAS)"

mkdir -p "${STATE_DIR}"
STATE_DIR="$(cd "${STATE_DIR}" && pwd)"
RUN="${STATE_DIR}/run"
mkdir -p "${RUN}" "${STATE_DIR}/checkpoints"
chmod 0700 "${STATE_DIR}"

# Started again: the running server stops first (it saves its state).
ty_stop_pid "${RUN}/server.pid" server.py 10
ty_stop_pid "${RUN}/watchdog.pid" watchdog 2

FRESH=1
[[ -e "${STATE_DIR}/state.json" ]] && FRESH=0
if [[ ! -s "${STATE_DIR}/token" ]]; then
  (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"${STATE_DIR}/token")
fi
TOKEN="$(cat "${STATE_DIR}/token")"

rm -f "${STATE_DIR}/port"
setsid /usr/bin/python3 "${REPO}/tests/fixtures/kube_apiserver/server.py" \
  --listen "127.0.0.1:${PORT}" --port-file "${STATE_DIR}/port" --schemas "${SCHEMAS}" \
  --tls-dir "${STATE_DIR}/tls" --token "${TOKEN}" --state-file "${STATE_DIR}/state.json" \
  --namespace trainyard >>"${STATE_DIR}/server.log" 2>&1 </dev/null &
SERVER_PID=$!
echo "${SERVER_PID}" >"${RUN}/server.pid"

# Alive by its pid alone: until the forked shell has exec'd python (a busy machine may take
# a while), its command line is still this script's, not server.py's.
for ((i = 0; i < TIMEOUT * 10; i++)); do
  [[ -s "${STATE_DIR}/port" ]] && break
  kill -0 "${SERVER_PID}" 2>/dev/null ||
    { tail -n 20 "${STATE_DIR}/server.log" >&2; ty_die "the server exited; see ${STATE_DIR}/server.log"; }
  sleep 0.1
done
[[ -s "${STATE_DIR}/port" ]] || ty_die "the server did not start within ${TIMEOUT}s; see ${STATE_DIR}/server.log"
PORT="$(tr -dc '0-9' <"${STATE_DIR}/port")"
URL="https://127.0.0.1:${PORT}"

# admin METHOD PATH [JSON]: the server's admin API (/_testserver/...).
admin() {
  curl -sS --fail-with-body --max-time 30 --cacert "${STATE_DIR}/tls/ca.crt" \
    -H "Authorization: Bearer ${TOKEN}" -H 'Content-Type: application/json' \
    -X "$1" "${URL}/_testserver$2" ${3:+--data "$3"} >/dev/null
}

curl -sf --max-time 5 --cacert "${STATE_DIR}/tls/ca.crt" -H "Authorization: Bearer ${TOKEN}" \
  "${URL}/version" >/dev/null || ty_die "the server does not answer ${URL}/version"

if ((FRESH)); then
  product='"gpu_product": "NVIDIA-H100-80GB-HBM3", "zone": "us-central1-a"'
  admin POST /nodes "{\"count\": ${NODES}, \"prefix\": \"gpu-od-\", \"gpus\": ${GPUS}, ${product},
    \"labels\": {\"cloud.google.com/gke-nodepool\": \"ondemand\"}}"
  admin POST /nodes "{\"count\": ${NODES}, \"prefix\": \"gpu-spot-\", \"gpus\": ${GPUS}, ${product},
    \"spot\": true, \"labels\": {\"cloud.google.com/gke-nodepool\": \"spot\"}}"
fi
# Every pod of namespace trainyard trains: runs, checkpoints, and on SIGTERM (a preemption's
# graceful deletion) writes one more checkpoint before it exits.
admin DELETE /scripts
admin POST /scripts "{\"selector\": \"\", \"namespace\": \"trainyard\",
  \"run_seconds\": ${RUN_SECONDS}, \"checkpoint_every\": ${CHECKPOINT_EVERY},
  \"checkpoint_steps\": 100, \"checkpoint_on_term\": true,
  \"log\": [\"training (deploy/kubernetes/testserver: ${RUN_SECONDS}s, a checkpoint every ${CHECKPOINT_EVERY}s)\"]}"

cp "${STATE_DIR}/tls/kubeconfig" "${STATE_DIR}/kubeconfig.tmp"
mv "${STATE_DIR}/kubeconfig.tmp" "${STATE_DIR}/kubeconfig"
for f in settings.conf job.yaml; do
  sed "s|@STATE_DIR@|${STATE_DIR}|g" "${HERE}/${f}" >"${STATE_DIR}/${f}.tmp"
  mv "${STATE_DIR}/${f}.tmp" "${STATE_DIR}/${f}"
done

if [[ -n "${WATCH_PID}" ]]; then
  # shellcheck disable=SC2016  # expanded by the inner bash
  setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec bash "$2" --state-dir "$3"' \
    watchdog "${WATCH_PID}" "${HERE}/stop.sh" "${STATE_DIR}" >>"${STATE_DIR}/server.log" 2>&1 </dev/null &
  echo $! >"${RUN}/watchdog.pid"
fi
ty_log "API server ${URL} up in ${STATE_DIR}: $((NODES * 2)) nodes, kubeconfig ${STATE_DIR}/kubeconfig, settings ${STATE_DIR}/settings.conf"
