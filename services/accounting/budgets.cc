#include "services/accounting/budgets.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "services/accounting/meter_service.h"
#include "services/accounting/pricing/report.h"

namespace trainyard::accounting {

namespace pg = storage::postgres;
namespace v1 = trainyard::v1;
using pricing::BudgetAction;
using pricing::TimeMs;

namespace {

std::string Rfc3339(TimeMs ms) {
  return absl::FormatTime(absl::RFC3339_full, absl::FromUnixMillis(ms),
                          absl::UTCTimeZone());
}

std::string Amount(int64_t micros) { return pricing::MicrosToDecimal(micros); }

int64_t SumTenantCost(const std::vector<pricing::LedgerLine>& lines) {
  int64_t sum = 0;
  for (const pricing::LedgerLine& line : lines) sum += line.tenant_cost_micros;
  return sum;
}

}  // namespace

std::string NoticeJson(const BudgetNotice& n) {
  nlohmann::json j = {
      {"type", "budget.threshold_reached"},
      {"tenant", n.tenant},
      {"budget", n.budget},
      {"project", n.project},
      {"threshold_percent", n.threshold.percent},
      {"action", pricing::BudgetActionName(n.threshold.action)},
      {"currency", n.currency},
      {"monthly_amount", Amount(n.amount_micros)},
      {"spent", Amount(n.spent_micros)},
      {"forecast", Amount(n.forecast_micros)},
      {"month_start", Rfc3339(n.month_start_ms)},
      {"time", Rfc3339(n.time_ms)},
  };
  return j.dump();
}

v1::JobEvent NoticeEvent(const BudgetNotice& n) {
  v1::JobEvent e;
  e.set_type(v1::JOB_EVENT_TYPE_BUDGET_THRESHOLD);
  e.set_tenant(n.tenant);
  e.set_budget(n.budget);
  e.set_reason(
      absl::StrCat("BUDGET_", pricing::BudgetActionName(n.threshold.action)));
  e.set_message(absl::StrCat(
      n.budget, " reached ", n.threshold.percent, "% of ",
      Amount(n.amount_micros), " ", n.currency, ": forecast ",
      Amount(n.forecast_micros), ", spent ", Amount(n.spent_micros),
      n.threshold.action == BudgetAction::kHold ? "; new work is held"
      : n.threshold.action == BudgetAction::kRestrictToSpot
          ? "; new work runs on spot capacity only"
          : ""));
  e.mutable_time()->set_seconds(n.time_ms / 1000);
  e.mutable_time()->set_nanos(static_cast<int32_t>(n.time_ms % 1000) *
                              1'000'000);
  return e;
}

absl::StatusOr<int64_t> RemainingCostMicros(
    const pricing::PriceBook& book, const pg::MeterCandidate& c, TimeMs now,
    const pricing::MeterOptions& options) {
  const TimeMs month_end = pricing::NextMonthStartMs(now);
  pricing::AttemptUsage running = UsageOf(c);
  running.end_time.reset();
  running.end_reason = pricing::EndReason::kRunning;
  const TimeMs start = c.started ? c.start_ms : now;
  running.start_time = start;
  TimeMs end = c.time_limit_ms.has_value() && *c.time_limit_ms > 0
                   ? start + *c.time_limit_ms
                   : month_end;
  end = std::clamp(end, now, month_end);
  if (end <= start) return 0;
  // The meter's cursor: the ledger holds the attempt up to it.
  const bool metered = c.started && c.metered_until_ms.has_value();
  const TimeMs cursor =
      metered ? std::clamp(*c.metered_until_ms, start, end) : start;
  // From just before the cursor: the lines that contain it, or end at it.
  const TimeMs since = cursor - 1;
  pricing::AttemptUsage done = running;
  done.end_time = end;
  done.end_reason = pricing::EndReason::kCompleted;
  absl::StatusOr<std::vector<pricing::LedgerLine>> whole =
      pricing::MeterAttemptSince(book, done, since, end, options);
  if (!whole.ok()) return whole.status();
  int64_t remaining = SumTenantCost(*whole);
  if (metered && cursor > start) {
    absl::StatusOr<std::vector<pricing::LedgerLine>> held =
        pricing::MeterAttemptSince(book, running, since, cursor, options);
    if (!held.ok()) return held.status();
    remaining -= SumTenantCost(*held);
  }
  return std::max<int64_t>(0, remaining);
}

BudgetPass ComputeBudgetPass(
    const std::vector<pg::StoredBudget>& budgets,
    const std::vector<pg::BudgetStatusRow>& previous,
    const std::map<std::pair<std::string, std::string>, int64_t>& cost,
    const std::vector<pg::MeterCandidate>& open, const pricing::PriceBook& book,
    TimeMs now, const pricing::MeterOptions& options) {
  BudgetPass pass;
  const TimeMs month_start = pricing::MonthStartMs(now);
  std::map<std::pair<std::string, std::string>, int64_t> remaining;
  for (const pg::MeterCandidate& c : open) {
    absl::StatusOr<int64_t> r = RemainingCostMicros(book, c, now, options);
    if (!r.ok()) {
      pass.unpriced.emplace_back(
          absl::StrCat("tenants/", c.tenant, "/jobs/", c.job_id), r.status());
      continue;
    }
    remaining[{c.tenant, c.project}] += *r;
  }
  std::map<std::pair<std::string, std::string>, const pg::BudgetStatusRow*>
      before;
  for (const pg::BudgetStatusRow& row : previous) {
    before[{row.tenant, row.id}] = &row;
  }
  auto scope_sum =
      [](const std::map<std::pair<std::string, std::string>, int64_t>& by,
         const std::string& tenant, const std::string& project) {
        int64_t sum = 0;
        for (auto it = by.lower_bound({tenant, ""});
             it != by.end() && it->first.first == tenant; ++it) {
          if (project.empty() || it->first.second == project) {
            sum += it->second;
          }
        }
        return sum;
      };
  for (const pg::StoredBudget& stored : budgets) {
    v1::Budget budget;
    if (!budget.ParseFromString(stored.body)) continue;
    const pricing::BudgetRule rule = RuleOf(budget);
    const int64_t spent = scope_sum(cost, stored.tenant, stored.project);
    const int64_t forecast =
        spent + scope_sum(remaining, stored.tenant, stored.project);
    int32_t notified = 0;
    if (auto it = before.find({stored.tenant, stored.id});
        it != before.end() && it->second->month_start_ms == month_start) {
      notified = it->second->notified_percent;
      if (it->second->budget_version != stored.version) {
        notified = std::min(notified, pricing::ReachedPercent(rule, forecast));
      }
    }
    const std::string name =
        absl::StrCat("tenants/", stored.tenant, "/budgets/", stored.id);
    for (const pricing::BudgetThreshold& t :
         pricing::NewlyReached(rule, forecast, notified)) {
      pass.notices.push_back({.tenant = stored.tenant,
                              .budget = name,
                              .project = stored.project,
                              .threshold = t,
                              .amount_micros = rule.monthly_amount_micros,
                              .spent_micros = spent,
                              .forecast_micros = forecast,
                              .currency = book.currency(),
                              .month_start_ms = month_start,
                              .time_ms = now});
      notified = std::max(notified, t.percent);
    }
    pass.rows.push_back({.tenant = stored.tenant,
                         .id = stored.id,
                         .month_start_ms = month_start,
                         .spent_micros = spent,
                         .forecast_micros = forecast,
                         .active_action = static_cast<int32_t>(
                             pricing::ActiveAction(rule, forecast)),
                         .notified_percent = notified,
                         .budget_version = stored.version,
                         .status_ms = now});
  }
  return pass;
}

}  // namespace trainyard::accounting
