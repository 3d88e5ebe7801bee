#include "services/accounting/reconcile.h"

#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "services/accounting/meter_service.h"
#include "services/lib/domain/errors.h"

namespace trainyard::accounting {

using pricing::LedgerLine;
using pricing::TimeMs;

absl::StatusOr<std::pair<TimeMs, TimeMs>> MonthWindow(std::string_view month) {
  absl::CivilMonth m;
  if (month.size() != 7 || !absl::ParseCivilTime(std::string(month), &m)) {
    return domain::FieldError(
        "month", "INVALID_VALUE",
        absl::StrCat("must be YYYY-MM, got \"", std::string(month), "\""));
  }
  const TimeMs start =
      absl::ToUnixMillis(absl::FromCivil(m, absl::UTCTimeZone()));
  const TimeMs end =
      absl::ToUnixMillis(absl::FromCivil(m + 1, absl::UTCTimeZone()));
  if (start < 0 || end > pricing::kMaxTimeMs) {
    return domain::FieldError("month", "INVALID_VALUE",
                              "must be from 1970-01 to 9999-12");
  }
  return std::make_pair(start, end);
}

namespace {

std::string Describe(const LedgerLine& l) {
  return absl::StrCat("cost ", l.cost_micros, " (tenant ", l.tenant_cost_micros,
                      ", platform ", l.platform_cost_micros, "), end ", l.end,
                      ", amount ", l.amount, ", unit price ",
                      l.unit_price_micros, ", list cost ", l.list_cost_micros,
                      l.lost_work ? ", lost work" : "",
                      l.attempt_start ? ", attempt start" : "");
}

bool Same(const LedgerLine& a, const LedgerLine& b) {
  return a.end == b.end && a.period_start == b.period_start &&
         a.amount == b.amount && a.unit_price_micros == b.unit_price_micros &&
         a.price_source == b.price_source &&
         a.spot_price_gap == b.spot_price_gap &&
         a.cost_micros == b.cost_micros && a.lost_work == b.lost_work &&
         a.tenant_cost_micros == b.tenant_cost_micros &&
         a.platform_cost_micros == b.platform_cost_micros && a.spot == b.spot &&
         a.list_cost_micros == b.list_cost_micros &&
         a.attempt_start == b.attempt_start && a.keys.tenant == b.keys.tenant &&
         a.keys.project == b.keys.project && a.keys.queue == b.keys.queue &&
         a.keys.user == b.keys.user && a.keys.cluster == b.keys.cluster &&
         a.keys.flavor == b.keys.flavor;
}

}  // namespace

absl::StatusOr<ReconcileResult> Reconcile(
    storage::postgres::AccountingStore& store, const pricing::PriceBook& book,
    TimeMs start_ms, TimeMs end_ms, const pricing::MeterOptions& options) {
  ReconcileResult result;
  absl::StatusOr<std::vector<storage::postgres::MeterCandidate>> attempts =
      store.AttemptsIn(start_ms, end_ms);
  if (!attempts.ok()) return attempts.status();
  // By LineKey.
  std::map<std::string, LedgerLine> recomputed;
  for (const storage::postgres::MeterCandidate& c : *attempts) {
    ++result.attempts;
    if (!c.metered_until_ms.has_value()) {
      ++result.unmetered;
      continue;
    }
    pricing::AttemptUsage usage = UsageOf(c);
    // As far as the meter has got: to its end, or to its cursor.
    const TimeMs until =
        usage.end_time.has_value() ? *usage.end_time : *c.metered_until_ms;
    absl::StatusOr<std::vector<LedgerLine>> lines =
        pricing::MeterAttempt(book, usage, until, options);
    if (!lines.ok()) {
      result.differences.push_back(
          absl::StrCat(usage.keys.job, "/", c.attempt,
                       ": cannot be priced: ", lines.status().message()));
      continue;
    }
    for (LedgerLine& line : *lines) {
      if (line.period_start < start_ms || line.period_start >= end_ms) continue;
      ++result.lines;
      result.recomputed_micros += line.cost_micros;
      recomputed.emplace(pricing::LineKey(line), std::move(line));
    }
  }
  absl::StatusOr<std::vector<LedgerLine>> ledger =
      store.LoadLines("", start_ms, end_ms);
  if (!ledger.ok()) return ledger.status();
  for (const LedgerLine& line : *ledger) {
    ++result.ledger_lines;
    result.ledger_micros += line.cost_micros;
    const std::string key = pricing::LineKey(line);
    auto it = recomputed.find(key);
    if (it == recomputed.end()) {
      result.differences.push_back(
          absl::StrCat(key, ": in the ledger only (", Describe(line), ")"));
      continue;
    }
    if (!Same(line, it->second)) {
      result.differences.push_back(absl::StrCat(key, ": ledger ",
                                                Describe(line), "; recomputed ",
                                                Describe(it->second)));
    }
    recomputed.erase(it);
  }
  for (const auto& [key, line] : recomputed) {
    result.differences.push_back(
        absl::StrCat(key, ": missing from the ledger (", Describe(line), ")"));
  }
  return result;
}

}  // namespace trainyard::accounting
