// Budgets over the ledger: after each metering pass the meter computes every
// budget's month (spent from the ledger, the forecast with the work still
// running or admitted, the action in force) and the thresholds newly
// reached, which become notices: an event on the tenant's Watch stream, a log
// line and, when configured, a signed webhook. The rules are the pure
// pricing/budget.h; the scheduler acts on the status rows (HOLD and
// RESTRICT_TO_SPOT). See docs/accounting.md "Budgets".
#ifndef TRAINYARD_SERVICES_ACCOUNTING_BUDGETS_H_
#define TRAINYARD_SERVICES_ACCOUNTING_BUDGETS_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "services/accounting/budget_rule.h"
#include "services/accounting/pricing/budget.h"
#include "services/accounting/pricing/meter.h"
#include "storage/postgres/accounting_store.h"
#include "trainyard/v1/accounting.pb.h"

namespace trainyard::accounting {

// A threshold newly reached.
struct BudgetNotice {
  std::string tenant;
  std::string budget;  // "tenants/{t}/budgets/{b}"
  std::string project;
  pricing::BudgetThreshold threshold;
  int64_t amount_micros = 0;
  int64_t spent_micros = 0;
  int64_t forecast_micros = 0;
  std::string currency;
  pricing::TimeMs month_start_ms = 0;
  pricing::TimeMs time_ms = 0;
};

// The notice as the webhook's JSON body and as a Watch event.
std::string NoticeJson(const BudgetNotice& notice);
trainyard::v1::JobEvent NoticeEvent(const BudgetNotice& notice);

struct BudgetPass {
  std::vector<storage::postgres::BudgetStatusRow> rows;
  std::vector<BudgetNotice> notices;
  // Open attempts whose forecast could not be priced, with why.
  std::vector<std::pair<std::string, absl::Status>> unpriced;
};

// What an open attempt (admitted or running) is expected to cost from the
// meter's cursor (its start, or `now` if it has not started) until its time
// limit (or the month's end without one), capped at the month's end:
// the lines it would have if it completed then, less what the ledger holds
// of the line that contains the cursor.
absl::StatusOr<int64_t> RemainingCostMicros(
    const pricing::PriceBook& book, const storage::postgres::MeterCandidate& c,
    pricing::TimeMs now, const pricing::MeterOptions& options);

// Every budget's status at `now` and the notices due, from the ledger's
// tenant cost per (tenant, project) in the month of `now`, the open attempts
// and the previous statuses. A threshold is notified once per month; after
// an edit of the budget those it no longer reaches are armed again.
BudgetPass ComputeBudgetPass(
    const std::vector<storage::postgres::StoredBudget>& budgets,
    const std::vector<storage::postgres::BudgetStatusRow>& previous,
    const std::map<std::pair<std::string, std::string>, int64_t>& cost,
    const std::vector<storage::postgres::MeterCandidate>& open,
    const pricing::PriceBook& book, pricing::TimeMs now,
    const pricing::MeterOptions& options);

}  // namespace trainyard::accounting

#endif  // TRAINYARD_SERVICES_ACCOUNTING_BUDGETS_H_
