#!/usr/bin/env bash
# Runs the submit benchmark against a private stack and writes perf-results/*.json.
#   tests/perf/run_submit_bench.sh            full run: max throughput, then open loop at 2,000/s
#   tests/perf/run_submit_bench.sh --smoke    a few seconds, to prove it works (CI)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/release/bin/submit_bench
[[ -x $bin ]] || { echo "build first: cmake --build --preset release --target submit_bench" >&2; exit 1; }
mkdir -p perf-results
if [[ ${1:-} == --smoke ]]; then
  "$bin" --concurrency=8 --duration=2s --warmup=1s --output=perf-results/submit_smoke.json
  exit 0
fi
"$bin" --concurrency=64 --duration=20s --warmup=3s --output=perf-results/submit_max.json
"$bin" --concurrency=64 --rate=2000 --duration=20s --warmup=3s --output=perf-results/submit_2000.json
