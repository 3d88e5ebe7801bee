#!/usr/bin/env bash
# Runs the Kubernetes backend's benchmarks against the Kubernetes API test server and writes
# perf-results/kube_*.json (docs/kubernetes.md, "Performance"):
#   kube_dispatch.json        1,000 single-pod jobs, submit to RUNNING, the client's default
#                             rate limit (--kube_qps=50 --kube_burst=100)
#   kube_dispatch_qps500.json the same with --kube_qps=500 --kube_burst=1000
#   kube_watch.json           the dispatcher process over 5,000 nodes and 50,000 pods: memory,
#                             and CPU over 30 idle seconds
# Needs the release build, python3 and ../shared/k8s-schema/v1.30; takes about 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/release/bin/kube_dispatch_bench
[[ -x $bin && -x build/release/bin/trainyard ]] || { echo "build first: cmake --build --preset release" >&2; exit 1; }
export TRAINYARD_BIN="${PWD}/build/release/bin/trainyard" TRAINYARD_SOURCE_DIR="${PWD}"
mkdir -p perf-results
"$bin" --mode=dispatch --jobs=1000 --output=perf-results/kube_dispatch.json
"$bin" --mode=dispatch --jobs=1000 --qps=500 --burst=1000 --output=perf-results/kube_dispatch_qps500.json
"$bin" --mode=watch --nodes=5000 --pods=50000 --idle_seconds=30 --output=perf-results/kube_watch.json
