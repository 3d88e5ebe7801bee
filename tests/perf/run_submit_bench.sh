#!/usr/bin/env bash
# Runs the submit benchmark against a private stack and writes perf-results/*.json.
#   tests/perf/run_submit_bench.sh            full run: max throughput (256 in flight), then
#                                             open loop at 2,000/s
#   tests/perf/run_submit_bench.sh --smoke    a few seconds, to prove it works (CI)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/release/bin/submit_bench
[[ -x $bin && -x build/release/bin/trainyard ]] || { echo "build first: cmake --build --preset release" >&2; exit 1; }
mkdir -p perf-results
if [[ ${1:-} == --smoke ]]; then
  "$bin" --concurrency=8 --duration=2s --warmup=1s --output=perf-results/submit_smoke.json
  exit 0
fi
"$bin" --concurrency=256 --duration=20s --warmup=3s --output=perf-results/submit_max.json
"$bin" --concurrency=256 --rate=2000 --duration=20s --warmup=3s --output=perf-results/submit_2000.json
