#include "services/accounting/pricing/rollup.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing {
namespace {
// Named, so that the unity build's other anonymous helpers cannot clash.
namespace rollup_impl {

constexpr TimeMs kMsPerDay = 24 * kMsPerHour;

TimeMs CeilTo(TimeMs t, TimeMs (*floor)(TimeMs), TimeMs (*next)(TimeMs)) {
  const TimeMs f = floor(t);
  return f == t ? t : next(t);
}

TimeMs NextUtcDayStart(TimeMs t) { return UtcDayStart(t) + kMsPerDay; }

void Add(std::vector<RollupRange>& out, RollupGranularity g, TimeMs from,
         TimeMs to) {
  if (from < to) out.push_back({.granularity = g, .from = from, .to = to});
}

// [a, b) by whole UTC days, then hours.
void CoverDays(std::vector<RollupRange>& out, TimeMs a, TimeMs b) {
  const TimeMs d0 = CeilTo(a, &UtcDayStart, &NextUtcDayStart);
  const TimeMs d1 = UtcDayStart(b);
  if (d0 >= d1) {
    Add(out, RollupGranularity::kHour, a, b);
    return;
  }
  Add(out, RollupGranularity::kHour, a, d0);
  Add(out, RollupGranularity::kDay, d0, d1);
  Add(out, RollupGranularity::kHour, d1, b);
}

absl::StatusOr<int64_t> Fit64(__int128 v, std::string_view what) {
  if (v < std::numeric_limits<int64_t>::min() ||
      v > std::numeric_limits<int64_t>::max()) {
    return absl::OutOfRangeError(
        domain::Cat("report: ", what, " overflows int64"));
  }
  return static_cast<int64_t>(v);
}

absl::Status AddTo(ReportRow& row, const RollupSum& s) {
  struct Field {
    int64_t* dst;
    __int128 v;
    std::string_view name;
  };
  const Field fields[] = {
      {&row.cost_micros, s.cost_micros, "cost"},
      {&row.tenant_cost_micros, s.tenant_cost_micros, "tenant cost"},
      {&row.platform_cost_micros, s.platform_cost_micros, "platform cost"},
      {&row.lost_work_cost_micros, s.lost_work_cost_micros, "lost work cost"},
      {&row.list_cost_micros, s.list_cost_micros, "list cost"},
      {&row.gpu_ms, s.gpu_ms, "GPU-ms"},
      {&row.lost_gpu_ms, s.lost_gpu_ms, "lost GPU-ms"},
      {&row.attempts, s.attempts, "attempts"},
  };
  for (const Field& f : fields) {
    TY_ASSIGN_OR_RETURN(*f.dst, Fit64(__int128{*f.dst} + f.v, f.name));
  }
  if (__builtin_add_overflow(row.cpu_millicore_ms, s.cpu_millicore_ms,
                             &row.cpu_millicore_ms) ||
      __builtin_add_overflow(row.memory_byte_ms, s.memory_byte_ms,
                             &row.memory_byte_ms)) {
    return absl::OutOfRangeError("report: quantity overflow");
  }
  row.spot_price_gap = row.spot_price_gap || s.spot_gap_lines > 0;
  return absl::OkStatus();
}

}  // namespace rollup_impl
}  // namespace

TimeMs UtcDayStart(TimeMs t) {
  return t - ((t % rollup_impl::kMsPerDay) + rollup_impl::kMsPerDay) %
                 rollup_impl::kMsPerDay;
}

TimeMs UtcMonthStart(TimeMs t) {
  const absl::CivilMonth m =
      absl::ToCivilMonth(absl::FromUnixMillis(t), absl::UTCTimeZone());
  return absl::ToUnixMillis(absl::FromCivil(m, absl::UTCTimeZone()));
}

TimeMs NextUtcMonthStart(TimeMs t) {
  const absl::CivilMonth m =
      absl::ToCivilMonth(absl::FromUnixMillis(t), absl::UTCTimeZone());
  return absl::ToUnixMillis(absl::FromCivil(m + 1, absl::UTCTimeZone()));
}

std::vector<RollupRange> CoverWithRollups(TimeMs start, TimeMs end) {
  std::vector<RollupRange> out;
  if (start >= end) return out;
  const TimeMs m0 =
      rollup_impl::CeilTo(start, &UtcMonthStart, &NextUtcMonthStart);
  const TimeMs m1 = UtcMonthStart(end);
  if (m0 >= m1) {
    rollup_impl::CoverDays(out, start, end);
    return out;
  }
  rollup_impl::CoverDays(out, start, m0);
  rollup_impl::Add(out, RollupGranularity::kMonth, m0, m1);
  rollup_impl::CoverDays(out, m1, end);
  return out;
}

bool RollupsServe(const ReportQuery& q) {
  if (!q.label_filters.empty()) return false;
  if (q.filters.contains(Dimension::kJob)) return false;
  return std::find(q.group_by.begin(), q.group_by.end(), Dimension::kJob) ==
         q.group_by.end();
}

absl::StatusOr<Report> ReportFromRollups(const ReportQuery& q,
                                         const std::vector<RollupSum>& sums,
                                         const PriceBook* list_prices) {
  TY_ASSIGN_OR_RETURN(std::vector<TimeMs> bounds, ReportPeriods(q));
  const size_t periods = bounds.size() - 1;
  ReportRows rows(q, std::move(bounds));
  for (const RollupSum& s : sums) {
    if (s.period >= periods) {
      return absl::InvalidArgumentError(domain::Cat(
          "rollup sum of period ", s.period, ", the query has ", periods));
    }
    if (s.keys.size() != q.group_by.size()) {
      return absl::InvalidArgumentError(
          domain::Cat("rollup sum has ", s.keys.size(), " keys, the query ",
                      q.group_by.size()));
    }
    if (s.lines <= 0) continue;
    TY_RETURN_IF_ERROR(rollup_impl::AddTo(rows.Row(s.period, s.keys), s));
    TY_RETURN_IF_ERROR(rollup_impl::AddTo(rows.total(), s));
  }
  Report report = std::move(rows).Finish();
  if (list_prices != nullptr) report.currency = list_prices->currency();
  return report;
}

}  // namespace trainyard::accounting::pricing
