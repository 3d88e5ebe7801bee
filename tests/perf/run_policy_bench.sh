#!/usr/bin/env bash
# Runs the scheduling-policy benchmark and writes perf-results/policy_bench.json.
#   tests/perf/run_policy_bench.sh            full size (10,000 nodes, 100,000 pending jobs)
#   tests/perf/run_policy_bench.sh --smoke    100x smaller, to prove it works (CI)
# Extra arguments go to Google Benchmark (e.g. --benchmark_filter=SteadyState).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/release/bin/policy_bench
[[ -x $bin ]] || { echo "build first: cmake --build --preset release --target policy_bench" >&2; exit 1; }
mkdir -p perf-results
if [[ ${1:-} == --smoke ]]; then
  shift
  "$bin" --small --benchmark_min_time=0.01 --benchmark_out=perf-results/policy_bench_smoke.json \
    --benchmark_out_format=json "$@"
  exit 0
fi
"$bin" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_out=perf-results/policy_bench.json --benchmark_out_format=json "$@"
