#!/usr/bin/env bash
# Runs the whole Trainyard test suite (CI entry point, via .ci/run):
#
#   1. deploy/install-deps.sh                      (skip: TRAINYARD_SKIP_DEPS=1)
#   2. for each preset in TRAINYARD_TEST_PRESETS (default "release asan"):
#        cmake --preset P && cmake --build --preset P
#        release: ctest --preset release -j2   (with asan also selected: -LE 'crash|slurm', the
#                 crash and Slurm integration tests, the longest, run once, under the sanitizers)
#        asan:    ctest --preset asan -j2 -LE perf   (the asan preset builds no benchmarks,
#                                                     so the perf-labelled tests do not exist there)
#        debug:   ctest --preset debug -j2
#   3. benchmark smoke run: tests/perf/run_submit_bench.sh --smoke
#        (only if the release preset was built, build/release/bin/submit_bench exists and
#         the script exists)
#   4. Python tests: /usr/bin/python3 -m pytest -q clients/python/tests (if present), and the
#      Kubernetes tests: the API test server's own, tests/fixtures/kube_apiserver (kubectl and
#      python3-kubernetes against it), and the deploy manifests', tests/deploy (deploy/kubernetes
#      rendered with kubectl kustomize and validated); they need ../shared/k8s-schema/v1.30
#   5. the web console: tests/web.sh (npm ci, lint, typecheck, unit tests, build, bundle size)
#   6. the console in the browser: tests/e2e (playwright-core driving Debian's chromium against
#      a private stack with the gateway; if present)
#   7. the console's jobs-page benchmark with 100,000 jobs (tests/e2e -m bench), last, on a
#      quiet machine: its limits are frame times, which a build beside it would break
#
#   With both release and asan (the default), 2-4's release part (ctest release, the
#   benchmark smoke run, the Python tests) runs in the background while the asan preset
#   builds at nice 19; the asan CTest stage starts once both are done.
#
# Stops at the first failing stage and prints a PASS/FAIL/SKIP summary of every stage.
#
# Environment:
#   TRAINYARD_TEST_PRESETS   space-separated presets to build and test (default "release asan")
#   TRAINYARD_SKIP_DEPS=1    do not run deploy/install-deps.sh
#   TRAINYARD_BUILD_JOBS     parallel build jobs (default: ninja's default)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${REPO}"

PRESETS="${TRAINYARD_TEST_PRESETS:-release asan}"
read -r -a PRESET_LIST <<<"${PRESETS}"
if ((${#PRESET_LIST[@]} == 0)); then
  echo "tests/run.sh: TRAINYARD_TEST_PRESETS is empty" >&2
  exit 2
fi
for p in "${PRESET_LIST[@]}"; do
  case "${p}" in
    release | debug | asan) ;;
    *) echo "tests/run.sh: unknown preset '${p}' in TRAINYARD_TEST_PRESETS (known: release debug asan)" >&2; exit 2 ;;
  esac
done

BUILD_JOBS=()
if [[ -n "${TRAINYARD_BUILD_JOBS:-}" ]]; then BUILD_JOBS=(--parallel "${TRAINYARD_BUILD_JOBS}"); fi
export NINJA_STATUS="${NINJA_STATUS:-[%f/%t %es] }"

SUITE_START="$(date +%s)"
STAGE_NAMES=()
STAGE_RESULTS=()
STAGE_TIMES=()
FAILED_STAGE=""

record() { STAGE_NAMES+=("$1"); STAGE_RESULTS+=("$2"); STAGE_TIMES+=("$3"); }

# stage NAME CMD ARGS...: runs one stage unless an earlier stage failed.
stage() {
  local name="$1" start rc
  shift
  if [[ -n "${FAILED_STAGE}" ]]; then
    record "${name}" "NOT RUN" "-"
    return 0
  fi
  printf '\n==> %s\n    $ %s\n' "${name}" "$*"
  start="$(date +%s)"
  set +e
  "$@"
  rc=$?
  set -e
  if ((rc == 0)); then
    record "${name}" PASS "$(($(date +%s) - start))s"
  else
    record "${name}" "FAIL (exit ${rc})" "$(($(date +%s) - start))s"
    FAILED_STAGE="${name}"
  fi
}

skip() {
  if [[ -n "${FAILED_STAGE}" ]]; then
    record "$1" "NOT RUN" "-"
  else
    record "$1" "SKIP" "-  ($2)"
    printf '\n==> %s: skipped (%s)\n' "$1" "$2"
  fi
}

summary() {
  local i
  printf '\n==================== tests/run.sh summary (%ss) ====================\n' \
    "$(($(date +%s) - SUITE_START))"
  for i in "${!STAGE_NAMES[@]}"; do
    printf '  %-34s %-18s %s\n' "${STAGE_NAMES[$i]}" "${STAGE_RESULTS[$i]}" "${STAGE_TIMES[$i]}"
  done
  if [[ -n "${FAILED_STAGE}" ]]; then
    printf 'RESULT: FAIL (first failing stage: %s)\n' "${FAILED_STAGE}"
  else
    printf 'RESULT: PASS\n'
  fi
}

# ---------------------------------------------------------------------------------------
if [[ "${TRAINYARD_SKIP_DEPS:-0}" == "1" ]]; then
  skip "install-deps" "TRAINYARD_SKIP_DEPS=1"
else
  stage "install-deps" bash deploy/install-deps.sh
fi

# The checks that use the release build besides its CTest stage: the benchmark smoke run and
# the Python client tests (they run build/release/bin/trainyard).
release_checks() {
  if [[ ! -x build/release/bin/submit_bench ]]; then
    skip "benchmark smoke" "no build/release/bin/submit_bench"
  elif [[ ! -f tests/perf/run_submit_bench.sh ]]; then
    skip "benchmark smoke" "no tests/perf/run_submit_bench.sh"
  else
    stage "benchmark smoke" bash tests/perf/run_submit_bench.sh --smoke
  fi
  if [[ -d clients/python/tests ]]; then
    # Two pytest workers, a file each at a time (each starts its own stack): the tests wait
    # on servers and the sim's clock far more than they compute.
    stage "python client tests" /usr/bin/python3 -m pytest -q -n 2 --dist loadfile \
      clients/python/tests
  else
    skip "python client tests" "no clients/python/tests"
  fi
  if [[ -f ../shared/k8s-schema/v1.30/pod-v1.json || -n "${TRAINYARD_K8S_SCHEMAS:-}" ]]; then
    stage "kubernetes tests (test server, deploy)" \
      /usr/bin/python3 -m pytest -q tests/fixtures/kube_apiserver tests/deploy
  else
    skip "kubernetes tests (test server, deploy)" "no ../shared/k8s-schema/v1.30"
  fi
  if [[ -f web/package.json ]]; then
    stage "web console (lint, tests, build)" bash tests/web.sh
  else
    skip "web console (lint, tests, build)" "no web/package.json"
  fi
  if [[ -f tests/e2e/package.json && -f web/dist/index.html ]]; then
    stage "console in the browser (tests/e2e)" bash -c \
      'cd tests/e2e && npm ci --no-audit --no-fund && cd ../.. && /usr/bin/python3 -m pytest -q tests/e2e'
  else
    skip "console in the browser (tests/e2e)" "no tests/e2e or no web/dist"
  fi
}

# The release tests (CTest, then release_checks) in a background shell while the asan preset
# builds at the lowest CPU priority (nice 19): the tests spend much of their time waiting on
# servers and timers, and the build takes the CPU they leave, without slowing them. Their
# output goes to build/release-tests.log (printed once they end), their results to
# build/release-tests.stages.
BG_PID=""
BG_LOG="${REPO}/build/release-tests.log"
BG_STAGES="${REPO}/build/release-tests.stages"
start_release_tests_in_background() {
  mkdir -p build
  : >"${BG_STAGES}"
  (
    STAGE_NAMES=() STAGE_RESULTS=() STAGE_TIMES=()
    stage "ctest release (-LE crash|slurm)" ctest --preset release -j2 -LE 'crash|slurm'
    release_checks
    for i in "${!STAGE_NAMES[@]}"; do
      printf '%s\t%s\t%s\n' "${STAGE_NAMES[$i]}" "${STAGE_RESULTS[$i]}" "${STAGE_TIMES[$i]}"
    done >"${BG_STAGES}"
  ) >"${BG_LOG}" 2>&1 &
  BG_PID=$!
  printf '\n==> release tests started in the background (pid %s; log %s)\n' "${BG_PID}" "${BG_LOG}"
}
wait_release_tests() {
  [[ -n "${BG_PID}" ]] || return 0
  local rc=0 name result time
  wait "${BG_PID}" || rc=$?
  BG_PID=""
  printf '\n==> release tests (background) ended: exit %s; their output:\n' "${rc}"
  cat "${BG_LOG}"
  while IFS=$'\t' read -r name result time; do
    record "${name}" "${result}" "${time}"
    if [[ "${result}" == FAIL* && -z "${FAILED_STAGE}" ]]; then FAILED_STAGE="${name}"; fi
  done <"${BG_STAGES}"
  if ((rc != 0)) && [[ -z "${FAILED_STAGE}" ]]; then FAILED_STAGE="release tests (background)"; fi
}
trap '[[ -n "${BG_PID}" ]] && kill "${BG_PID}" 2>/dev/null || true' EXIT

both=0
[[ " ${PRESETS} " == *" release "* && " ${PRESETS} " == *" asan "* ]] && both=1
for p in "${PRESET_LIST[@]}"; do
  stage "configure ${p}" cmake --preset "${p}"
  if [[ "${p}" == asan && -n "${BG_PID}" ]]; then
    stage "build asan (nice 19, beside the release tests)" \
      nice -n 19 cmake --build --preset asan "${BUILD_JOBS[@]}"
    wait_release_tests
  else
    stage "build ${p}" cmake --build --preset "${p}" "${BUILD_JOBS[@]}"
  fi
  case "${p}" in
    release)
      if ((both)); then
        if [[ -z "${FAILED_STAGE}" ]]; then start_release_tests_in_background; fi
      else
        stage "ctest release" ctest --preset release -j2
        release_checks
      fi
      ;;
    debug) stage "ctest debug" ctest --preset debug -j2 ;;
    asan) stage "ctest asan (-LE perf)" ctest --preset asan -j3 -LE perf ;;
  esac
done
wait_release_tests
# The browser benchmark measures frame times: it runs alone, after everything else.
if [[ " ${PRESETS} " == *" release "* && -f tests/e2e/package.json && -f web/dist/index.html \
      && -d tests/e2e/node_modules ]]; then
  # The medians of 3 runs against the limits themselves (tests/e2e/test_bench.py).
  stage "console benchmark (100,000 jobs)" \
    /usr/bin/python3 -m pytest -q -s -m bench tests/e2e
else
  skip "console benchmark (100,000 jobs)" "no release build, console or tests/e2e"
fi
if ((!both)) && [[ " ${PRESETS} " != *" release "* ]]; then
  skip "benchmark smoke" "release preset not selected"
  skip "python client tests" "release preset not selected"
  skip "kubernetes tests (test server, deploy)" "release preset not selected"
fi

summary
[[ -z "${FAILED_STAGE}" ]]
