#!/usr/bin/env bash
# The finance walkthrough, against the stack deploy/local/up.sh started: load a spot price,
# run two jobs (one on spot capacity, interrupted by a spot reclaim, which resumes from its
# checkpoint on another node), and check that this month's FOCUS CSV, `yard cost` and the
# ledger's reconciliation agree to the micro-unit. Takes about two minutes (most of it the
# jobs' 30 s runs and the meter's passes).
#
# Every step prints the command it runs. Exits non-zero, naming the step, if the platform
# does not do what the walkthrough shows.
#
# Environment (defaults: the stack up.sh started):
#   TRAINYARD_ADDR           the api (127.0.0.1:$TRAINYARD_GRPC_PORT or :50051)
#   TRAINYARD_TOKEN          a member of tenant demo (the stack's demo.token)
#   TRAINYARD_FINANCE_TOKEN  finance of tenant demo (the stack's finance.token)
#   TRAINYARD_POSTGRES_URL   the stack's database (for import-spot-prices and reconcile)
#   TRAINYARD_SIM_ADDR       the sim cluster's own gRPC port (127.0.0.1:$TRAINYARD_SIM_PORT or :50061)
#   TRAINYARD_STACK_DIR, TRAINYARD_BIN, YARD (default clients/python/bin/yard)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
cd "${REPO}"
# shellcheck source=deploy/local/common.sh
source "${REPO}/deploy/local/common.sh"
YARD="${YARD:-${REPO}/clients/python/bin/yard}"
STACK_DIR="${TRAINYARD_STACK_DIR:-${REPO}/.local-stack}"
export TRAINYARD_ADDR="${TRAINYARD_ADDR:-${TY_GRPC_ADDR}}"
POSTGRES_URL="${TRAINYARD_POSTGRES_URL:-${TY_POSTGRES_URL}}"
SIM_ADDR="${TRAINYARD_SIM_ADDR:-${TY_SIM_ADDR}}"
token_from() {  # token_from VAR FILE
  if [[ -n "${!1:-}" ]]; then printf '%s' "${!1}"; return; fi
  [[ -r "${STACK_DIR}/$2" ]] || {
    echo "finance-walkthrough: no $1 and no ${STACK_DIR}/$2; run deploy/local/up.sh first" >&2
    exit 2
  }
  cat "${STACK_DIR}/$2"
}
MEMBER_TOKEN="$(token_from TRAINYARD_TOKEN demo.token)"
FINANCE_TOKEN="$(token_from TRAINYARD_FINANCE_TOKEN finance.token)"
PY=/usr/bin/python3
WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT

STEP=""
step() { STEP="$*"; printf '\n==> %s\n' "$*"; }
fail() { printf 'finance-walkthrough: FAILED at "%s": %s\n' "${STEP}" "$*" >&2; exit 1; }
# as_member / as_finance ARGS...: `yard ARGS` with that person's token, printed first.
as_member() { printf '$ yard %s\n' "$*"; TRAINYARD_TOKEN="${MEMBER_TOKEN}" "${YARD}" "$@"; }
as_finance() { printf '$ yard %s   # as finance\n' "$*"; TRAINYARD_TOKEN="${FINANCE_TOKEN}" "${YARD}" "$@"; }
ty() { printf '$ trainyard %s\n' "$*"; "${TY_BIN}" "$@"; }
# job_json JOB: `yard get JOB -o json` as the member.
job_json() { TRAINYARD_TOKEN="${MEMBER_TOKEN}" "${YARD}" get "$1" -o json; }
state() { job_json "$1" | "${PY}" -c \
  'import json,sys; print(json.load(sys.stdin)["state"].removeprefix("JOB_STATE_"))'; }
MONTH="$(date -u +%Y-%m)"

step "1. The price book: list rates per flavor and resource, and the spot market's price"
as_finance prices || fail "yard prices failed"
# The spot market moves: a new observation for the spot pool, effective in a second, from a
# CSV file as a price feed would write it.
cat >"${WORK}/spot.csv" <<EOF
pool,effective_time,price_per_gpu_hour,currency
spot-h100,$(date -u -d '+1 second' +%Y-%m-%dT%H:%M:%S.%3NZ),1.35,USD
EOF
cat "${WORK}/spot.csv"
ty accounting import-spot-prices -f "${WORK}/spot.csv" --postgres_url="${POSTGRES_URL}" ||
  fail "import-spot-prices failed"

step "2. Run a spot job and an on-demand job"
out="$(as_member submit -f examples/jobs/finance-jobs.yaml)" || fail "submit failed: ${out}"
echo "${out}"
mapfile -t JOBS < <(grep -o 'jobs/[0-9]\+' <<<"${out}" | cut -d/ -f2)
((${#JOBS[@]} == 2)) || fail "expected 2 job ids, got: ${JOBS[*]:-none}"
SPOT="${JOBS[0]}" ONDEMAND="${JOBS[1]}"
for _ in $(seq 1 120); do
  [[ "$(state "${SPOT}")" == RUNNING && "$(state "${ONDEMAND}")" == RUNNING ]] && break
  sleep 0.5
done
[[ "$(state "${SPOT}")" == RUNNING ]] || fail "job ${SPOT} is not RUNNING after 60 s"

step "3. The spot market reclaims the spot job's node"
# Let it run and checkpoint for a while first (it checkpoints every 5 s).
sleep 8
NODE="$(job_json "${SPOT}" | "${PY}" -c '
import json, sys
attempt = json.load(sys.stdin)["attempts"][-1]
print(attempt["placements"][0]["node"].rsplit("/", 1)[-1])')"
[[ -n "${NODE}" ]] || fail "no node in job ${SPOT}'s attempt"
ty sim-fault --sim_target="${SIM_ADDR}" reclaim-node "${NODE}" || fail "sim-fault failed"
for _ in $(seq 1 120); do
  (($(job_json "${SPOT}" | "${PY}" -c 'import json,sys; print(len(json.load(sys.stdin)["attempts"]))') > 1)) && break
  sleep 0.5
done
echo "job ${SPOT} lost its node ${NODE}; it resumes from its last checkpoint on another spot node"
ty sim-fault --sim_target="${SIM_ADDR}" recover-node "${NODE}" || fail "recover-node failed"
for id in "${SPOT}" "${ONDEMAND}"; do
  as_member wait "${id}" --timeout 180 -q || fail "job ${id} did not succeed"
done
as_member get "${SPOT}"

step "4. Costs: each job's final cost once the meter has seen its last attempt"
final=""
for _ in $(seq 1 180); do
  final="$(for id in "${SPOT}" "${ONDEMAND}"; do
    job_json "${id}" | "${PY}" -c 'import json,sys; print(json.load(sys.stdin).get("cost", {}).get("final", False))'
  done | sort -u)"
  [[ "${final}" == True ]] && break
  sleep 1
done
[[ "${final}" == True ]] || fail "the jobs' costs are not final after 180 s"
as_member jobs --limit 2
as_finance cost --by project,user || fail "yard cost failed"

step "5. The month's FOCUS CSV, yard cost and the reconciliation agree"
printf '$ yard report --period %s --group-by project,flavor --format csv > focus.csv   # as finance\n' "${MONTH}"
TRAINYARD_TOKEN="${FINANCE_TOKEN}" "${YARD}" report --period "${MONTH}" --group-by project,flavor \
  --format csv >"${WORK}/focus.csv" || fail "yard report failed"
head -n 3 "${WORK}/focus.csv"
TRAINYARD_TOKEN="${FINANCE_TOKEN}" "${YARD}" cost --by project -o json >"${WORK}/cost.json" ||
  fail "yard cost -o json failed"
"${PY}" - "${WORK}/focus.csv" "${WORK}/cost.json" <<'EOF' || fail "the FOCUS CSV and yard cost disagree"
import csv, json, sys
from decimal import Decimal
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
billed = sum(Decimal(r["BilledCost"]) for r in rows)
platform = sum(Decimal(r["x_PlatformCost"]) for r in rows)
lost = sum(Decimal(r["x_LostWorkCost"]) for r in rows)
total = json.load(open(sys.argv[2]))["total"]
def amount(field):
    return Decimal(int(total.get(field, {}).get("micros", 0))) / 1_000_000
print(f"FOCUS CSV: {len(rows)} rows; BilledCost {billed} + x_PlatformCost {platform}"
      f" = {billed + platform}")
print(f"yard cost TOTAL: cost {amount('cost')} (tenant {amount('tenant_cost')},"
      f" platform {amount('platform_cost')}), lost work {amount('lost_work_cost')}")
if billed <= 0 or billed != amount("tenant_cost") or billed + platform != amount("cost"):
    sys.exit("the sums differ")
if lost != amount("lost_work_cost") or lost <= 0:
    sys.exit("no lost work was recorded for the spot reclaim, or the CSV's differs")
print("they agree to the micro-unit; the reclaim's lost work is its own figure")
EOF
ty accounting reconcile --month="${MONTH}" --postgres_url="${POSTGRES_URL}" ||
  fail "the ledger does not reconcile with the attempts and the price book"
echo
echo "finance-walkthrough: done"
