#!/usr/bin/env bash
# The quick start's walkthrough, against the stack deploy/local/up.sh started
# (or any stack with deploy/local/demo.textproto and the simulated cluster of
# deploy/local/sim-cluster.textproto): submit four training jobs with `yard`,
# watch them run, submit an urgent one that preempts one of them, and see the
# preempted job resume from its checkpoint and finish. Takes about a minute.
#
# Every step prints the `yard` command it runs. Exits non-zero, naming the
# step, if the platform does not do what the walkthrough shows.
#
# Environment: TRAINYARD_ADDR (default 127.0.0.1:$TRAINYARD_GRPC_PORT or
# :50051), TRAINYARD_TOKEN (default: the demo token in the stack directory),
# TRAINYARD_STACK_DIR (default .local-stack), YARD (default
# clients/python/bin/yard).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
cd "${REPO}"
YARD="${YARD:-${REPO}/clients/python/bin/yard}"
STACK_DIR="${TRAINYARD_STACK_DIR:-${REPO}/.local-stack}"
export TRAINYARD_ADDR="${TRAINYARD_ADDR:-127.0.0.1:${TRAINYARD_GRPC_PORT:-50051}}"
if [[ -z "${TRAINYARD_TOKEN:-}" ]]; then
  if [[ ! -r "${STACK_DIR}/demo.token" ]]; then
    echo "walkthrough: no TRAINYARD_TOKEN and no ${STACK_DIR}/demo.token; run deploy/local/up.sh first" >&2
    exit 2
  fi
  TRAINYARD_TOKEN="$(cat "${STACK_DIR}/demo.token")"
fi
export TRAINYARD_TOKEN

STEP=""
step() { STEP="$*"; printf '\n==> %s\n' "$*"; }
show() { printf '$ yard %s\n' "$*"; "${YARD}" "$@"; }
fail() { printf 'walkthrough: FAILED at "%s": %s\n' "${STEP}" "$*" >&2; exit 1; }
# state JOB: the job's state, e.g. RUNNING.
state() { "${YARD}" get "$1" -o json | /usr/bin/python3 -c \
  'import json,sys; print(json.load(sys.stdin)["state"].removeprefix("JOB_STATE_"))'; }
# attempts JOB: number of attempts.
attempts() { "${YARD}" get "$1" -o json | /usr/bin/python3 -c \
  'import json,sys; print(len(json.load(sys.stdin).get("attempts", [])))'; }

step "1. Submit four 8-GPU training jobs; they fill the demo queue's 32 GPUs"
out="$(show submit -f examples/jobs/quickstart-train.yaml)" || fail "submit failed: ${out}"
echo "${out}"
mapfile -t TRAIN < <(grep -o 'jobs/[0-9]\+' <<<"${out}" | cut -d/ -f2)
((${#TRAIN[@]} == 4)) || fail "expected 4 job ids, got: ${TRAIN[*]:-none}"

step "2. Watch them start"
for _ in $(seq 1 120); do
  running=0
  for id in "${TRAIN[@]}"; do [[ "$(state "${id}")" == RUNNING ]] && running=$((running + 1)); done
  ((running == 4)) && break
  sleep 0.5
done
((running == 4)) || fail "only ${running} of 4 jobs running after 60 s"
show jobs --limit 4

step "3. Submit an urgent high-priority job: the quota is full, so a training job is preempted"
out="$(show submit -f examples/jobs/quickstart-urgent.yaml)" || fail "submit failed: ${out}"
echo "${out}"
URGENT="$(grep -o 'jobs/[0-9]\+' <<<"${out}" | head -n1 | cut -d/ -f2)"
[[ -n "${URGENT}" ]] || fail "no job id in: ${out}"
VICTIM=""
for _ in $(seq 1 120); do
  for id in "${TRAIN[@]}"; do
    s="$(state "${id}")"
    if [[ "${s}" == PREEMPTING || "${s}" == QUEUED || "$(attempts "${id}")" -gt 1 ]]; then
      VICTIM="${id}"
      break 2
    fi
  done
  sleep 0.5
done
[[ -n "${VICTIM}" ]] || fail "no training job was preempted within 60 s"
echo "job ${VICTIM} is being preempted: it checkpoints in its grace period, then waits in its queue"
show why "${VICTIM}" || true

step "4. Follow the preempted job until it has resumed from its checkpoint and finished"
show watch "${VICTIM}" || fail "watch failed"
show get "${VICTIM}"
resumed="$("${YARD}" get "${VICTIM}" -o json | /usr/bin/python3 -c '
import json, sys
job = json.load(sys.stdin)
attempts = job.get("attempts", [])
print(attempts[-1].get("resumed_from", "") if len(attempts) > 1 else "")')"
[[ -n "${resumed}" ]] || fail "job ${VICTIM}'s last attempt did not resume from a checkpoint"
[[ "$(state "${VICTIM}")" == SUCCEEDED ]] || fail "job ${VICTIM} did not succeed"
echo "job ${VICTIM} resumed from ${resumed} and succeeded"
show checkpoints "${VICTIM}"
out="$(show logs "${VICTIM}" --attempt 1)" || fail "logs failed"
echo "${out}"
grep -q "STOP_REQUESTED ty-${VICTIM}-1 .*reason=preemption" <<<"${out}" ||
  fail "attempt 1's output does not show its preemption"

step "5. Wait for the rest"
for id in "${URGENT}" "${TRAIN[@]}"; do
  show wait "${id}" --timeout 180 -q || fail "job ${id} did not succeed"
done
show jobs --limit 5
echo
echo "walkthrough: done"
