#!/usr/bin/env bash
# Runs the scheduler-service benchmark (tests/perf/scheduler_service_bench.cc) and writes
# perf-results/scheduler_service_<jobs>.json.
#   tests/perf/run_scheduler_service_bench.sh           10,000 jobs / 1,000 nodes, then
#                                                       100,000 jobs / 10,000 nodes
#   tests/perf/run_scheduler_service_bench.sh --large   1,000,000 jobs / 50,000 nodes
#   tests/perf/run_scheduler_service_bench.sh --smoke   tiny sizes, seconds (CI runs it as CTest
#                                                       scheduler_service_bench_smoke)
# Extra arguments go to every run (e.g. --cycles=30 --rate=500).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/release/bin/scheduler_service_bench
[[ -x $bin ]] || { echo "build first: cmake --build --preset release --target scheduler_service_bench" >&2; exit 1; }
mkdir -p perf-results
label="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo +dirty)"
run() {  # jobs nodes [args...]
  local jobs=$1 nodes=$2
  shift 2
  "$bin" --jobs="$jobs" --nodes="$nodes" --label="$label" \
    --out="perf-results/scheduler_service_${jobs}.json" "$@" >/dev/null
  echo "wrote perf-results/scheduler_service_${jobs}.json" >&2
}
case "${1:-}" in
  --smoke) shift; "$bin" --smoke --label="$label" --out=perf-results/scheduler_service_smoke.json "$@" >/dev/null ;;
  --large) shift; run 1000000 50000 "$@" ;;
  *) run 10000 1000 "$@"; run 100000 10000 "$@" ;;
esac
