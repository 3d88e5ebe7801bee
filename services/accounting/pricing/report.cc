#include "services/accounting/pricing/report.h"

#include <csv.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/money.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing {
namespace {
// Named, so that the unity build's other anonymous helpers cannot clash.
namespace report_impl {

using domain::Cat;
using domain::CheckedAdd;
using domain::FieldError;
using domain::IndexField;
using domain::JoinField;
using domain::KeyField;
namespace reason = domain::reason;
using Json = nlohmann::ordered_json;

constexpr TimeMs kMaxWindowMs = int64_t{366} * 24 * kMsPerHour;

std::string Rfc3339(TimeMs t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", absl::FromUnixMillis(t),
                          absl::UTCTimeZone());
}

absl::Status CheckTime(TimeMs t, std::string_view field) {
  if (t < 0 || t >= kMaxTimeMs) {
    return FieldError(field, reason::kOutOfRange,
                      Cat("must be in [0, ", kMaxTimeMs,
                          ") ms since the Unix epoch, got ", t));
  }
  if (t % kMsPerHour != 0) {
    return FieldError(
        field, reason::kInvalidValue,
        Cat("must be a whole UTC hour, got ", Rfc3339(t),
            ": ledger lines are cut at UTC hours only, so a report can only "
            "be split at whole UTC hours"));
  }
  return absl::OkStatus();
}

bool KnownDimension(Dimension d) { return !DimensionLabel(d).empty(); }

bool KnownResourceLabel(std::string_view v) {
  return v == "GPU" || v == "CPU" || v == "MEMORY";
}

std::string_view StepLabel(Step step) {
  switch (step) {
    case Step::kNone:
      return "NONE";
    case Step::kHour:
      return "HOUR";
    case Step::kDay:
      return "DAY";
    case Step::kMonth:
      return "MONTH";
  }
  return "";
}

// Boundaries of q's periods; q's fields other than the zone's boundaries
// already checked.
absl::StatusOr<std::vector<TimeMs>> Boundaries(const ReportQuery& q,
                                               const absl::TimeZone& tz) {
  std::vector<TimeMs> b = {q.start};
  switch (q.step) {
    case Step::kNone:
      break;
    case Step::kHour:
      for (TimeMs t = q.start + kMsPerHour; t < q.end; t += kMsPerHour) {
        b.push_back(t);
      }
      break;
    case Step::kDay:
    case Step::kMonth: {
      const absl::Time s = absl::FromUnixMillis(q.start);
      // The civil day (month) holding the start, then every next one whose
      // first instant is inside the window. absl::FromCivil takes a skipped
      // local midnight (a DST jump at 00:00) as the instant of the jump.
      absl::CivilDay day = absl::ToCivilDay(s, tz);
      absl::CivilMonth month = absl::ToCivilMonth(s, tz);
      for (;;) {
        absl::CivilSecond next;
        if (q.step == Step::kDay) {
          next = absl::CivilSecond(++day);
        } else {
          next = absl::CivilSecond(++month);
        }
        const TimeMs t = absl::ToUnixMillis(absl::FromCivil(next, tz));
        if (t >= q.end) break;
        if (t <= b.back()) continue;
        if (t % kMsPerHour != 0) {
          return FieldError(
              "time_zone", reason::kInconsistent,
              Cat(q.step == Step::kDay ? "day" : "month", " boundaries of ",
                  q.time_zone, " are not whole UTC hours (its midnight of ",
                  absl::FormatCivilTime(absl::CivilDay(next)), " is ",
                  Rfc3339(t),
                  "): ledger lines are cut at UTC hours only, so a report "
                  "can only be split at whole UTC hours; use step HOUR or "
                  "NONE, or a time zone whose midnights are whole UTC hours"));
        }
        b.push_back(t);
      }
      break;
    }
  }
  b.push_back(q.end);
  return b;
}

absl::StatusOr<absl::TimeZone> CheckQuery(const ReportQuery& q) {
  TY_RETURN_IF_ERROR(CheckTime(q.start, "start_time"));
  TY_RETURN_IF_ERROR(CheckTime(q.end, "end_time"));
  if (q.end <= q.start) {
    return FieldError("end_time", reason::kInconsistent,
                      Cat("must be after start_time (", Rfc3339(q.start),
                          "), got ", Rfc3339(q.end)));
  }
  if (q.end - q.start > kMaxWindowMs) {
    return FieldError(
        "end_time", reason::kOutOfRange,
        Cat("the window from ", Rfc3339(q.start), " to ", Rfc3339(q.end), " (",
            (q.end - q.start) / kMsPerHour,
            " hours) exceeds a year per call (at most 366 days); split it "
            "into several calls"));
  }
  absl::TimeZone tz;
  // "localtime" is the machine's zone: a report must not depend on where it
  // runs.
  if (q.time_zone.empty() || q.time_zone == "localtime" ||
      !absl::LoadTimeZone(domain::AbslView(q.time_zone), &tz)) {
    return FieldError(
        "time_zone", reason::kInvalidValue,
        Cat("unknown time zone \"", q.time_zone,
            "\": expected an IANA name such as UTC or America/New_York"));
  }
  if (StepLabel(q.step).empty()) {
    return FieldError("step", reason::kInvalidValue,
                      Cat("must be NONE, HOUR, DAY or MONTH, got ",
                          static_cast<int>(q.step)));
  }
  std::set<Dimension> seen;
  for (size_t i = 0; i < q.group_by.size(); ++i) {
    const Dimension d = q.group_by[i];
    if (!KnownDimension(d)) {
      return FieldError(IndexField("group_by", static_cast<int64_t>(i)),
                        reason::kInvalidValue,
                        Cat("unknown dimension ", static_cast<int>(d)));
    }
    if (!seen.insert(d).second) {
      return FieldError(IndexField("group_by", static_cast<int64_t>(i)),
                        reason::kDuplicate,
                        Cat("dimension ", DimensionLabel(d),
                            " is repeated: group by each dimension once"));
    }
  }
  for (const auto& [d, value] : q.filters) {
    if (!KnownDimension(d)) {
      return FieldError("filters", reason::kInvalidValue,
                        Cat("unknown dimension ", static_cast<int>(d)));
    }
    if (d == Dimension::kResource && !KnownResourceLabel(value)) {
      return FieldError(KeyField("filters", DimensionLabel(d)),
                        reason::kInvalidValue,
                        Cat("must be GPU, CPU or MEMORY, got \"", value, "\""));
    }
  }
  // Idle cost is a pool's in an hour; a share of it, a tenant's too. A
  // grouping or filter they cannot honour is refused, not ignored.
  if (q.share_idle) {
    for (Dimension d : q.group_by) {
      if (d != Dimension::kTenant && d != Dimension::kFlavor) {
        return FieldError(
            "share_idle", reason::kInvalidValue,
            Cat("idle cost is shared by tenant and pool only: it cannot be "
                "grouped by ",
                DimensionLabel(d)));
      }
    }
  }
  if (q.include_idle || q.share_idle) {
    const char* field = q.share_idle ? "share_idle" : "include_idle";
    for (const auto& [d, value] : q.filters) {
      if (d == Dimension::kFlavor) continue;
      if (d == Dimension::kTenant) {
        if (q.share_idle) continue;
        return FieldError(
            field, reason::kInvalidValue,
            "idle cost is no tenant's: a report of one tenant can hold its "
            "share of it (share_idle), not the idle cost itself");
      }
      return FieldError(field, reason::kInvalidValue,
                        Cat("idle cost cannot be filtered by ",
                            DimensionLabel(d), ": it belongs to a pool"));
    }
    if (!q.label_filters.empty()) {
      return FieldError(field, reason::kInvalidValue,
                        "idle cost cannot be filtered by job labels: it "
                        "belongs to a pool");
    }
  }
  return tz;
}

const std::string& Key(const LedgerLine& line, Dimension d,
                       const std::string& resource) {
  switch (d) {
    case Dimension::kTenant:
      return line.keys.tenant;
    case Dimension::kProject:
      return line.keys.project;
    case Dimension::kUser:
      return line.keys.user;
    case Dimension::kQueue:
      return line.keys.queue;
    case Dimension::kCluster:
      return line.keys.cluster;
    case Dimension::kFlavor:
      return line.keys.flavor;
    case Dimension::kJob:
      return line.keys.job;
    case Dimension::kResource:
      return resource;
  }
  return resource;  // unreachable: dimensions are validated
}

bool Matches(const LedgerLine& line, const ReportQuery& q,
             const std::string& resource) {
  for (const auto& [d, value] : q.filters) {
    if (Key(line, d, resource) != value) return false;
  }
  for (const auto& [name, value] : q.label_filters) {
    auto it = line.keys.labels.find(name);
    if (it == line.keys.labels.end() || it->second != value) return false;
  }
  return true;
}

absl::Status CheckLine(const LedgerLine& line, size_t i) {
  const std::string field = IndexField("lines", static_cast<int64_t>(i));
  if (line.period_start < 0 || line.period_start % kMsPerHour != 0) {
    return FieldError(JoinField(field, "period_start"), reason::kInvalidValue,
                      Cat("must be a whole UTC hour, got ", line.period_start));
  }
  if (line.start < line.period_start || line.end < line.start ||
      line.end > line.period_start + kMsPerHour) {
    return FieldError(JoinField(field, "end"), reason::kInconsistent,
                      Cat("the line [", line.start, ", ", line.end,
                          ") is not inside its charge period starting at ",
                          line.period_start));
  }
  if (line.amount < 0) {
    return FieldError(JoinField(field, "amount"), reason::kOutOfRange,
                      Cat("must not be negative, got ", line.amount));
  }
  return absl::OkStatus();
}

absl::Status Add128(__int128& sum, __int128 v) {
  if (__builtin_add_overflow(sum, v, &sum)) {
    return absl::OutOfRangeError("report: quantity overflow");
  }
  return absl::OkStatus();
}

absl::Status AddLine(ReportRow& row, const LedgerLine& line) {
  // The sums every total has (SumLines's), then the report's own.
  LineTotals t{.cost_micros = row.cost_micros,
               .tenant_cost_micros = row.tenant_cost_micros,
               .platform_cost_micros = row.platform_cost_micros,
               .lost_work_cost_micros = row.lost_work_cost_micros,
               .gpu_ms = row.gpu_ms,
               .lost_gpu_ms = row.lost_gpu_ms,
               .spot_price_gap = row.spot_price_gap};
  TY_RETURN_IF_ERROR(AddLineTo(t, line));
  row.cost_micros = t.cost_micros;
  row.tenant_cost_micros = t.tenant_cost_micros;
  row.platform_cost_micros = t.platform_cost_micros;
  row.lost_work_cost_micros = t.lost_work_cost_micros;
  row.gpu_ms = t.gpu_ms;
  row.lost_gpu_ms = t.lost_gpu_ms;
  row.spot_price_gap = t.spot_price_gap;
  TY_ASSIGN_OR_RETURN(row.list_cost_micros,
                      CheckedAdd(row.list_cost_micros, line.list_cost_micros));
  if (line.attempt_start) {
    TY_ASSIGN_OR_RETURN(row.attempts, CheckedAdd(row.attempts, int64_t{1}));
  }
  const __int128 q = Quantity(line);
  switch (line.resource) {
    case Resource::kGpu:
      break;
    case Resource::kCpu:
      TY_RETURN_IF_ERROR(Add128(row.cpu_millicore_ms, q));
      break;
    case Resource::kMemory:
      TY_RETURN_IF_ERROR(Add128(row.memory_byte_ms, q));
      break;
  }
  return absl::OkStatus();
}

std::string Int128ToString(__int128 v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  unsigned __int128 u = negative ? -static_cast<unsigned __int128>(v)
                                 : static_cast<unsigned __int128>(v);
  std::string digits;
  while (u > 0) {
    digits.push_back(static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  }
  if (negative) digits.push_back('-');
  std::reverse(digits.begin(), digits.end());
  return digits;
}

// The FOCUS row of a report row, typed (null: an empty column).
absl::StatusOr<Json> FocusRow(const ReportRow& row, const Report& report,
                              const ReportQuery& q, size_t index) {
  if (row.keys.size() != q.group_by.size()) {
    return FieldError(
        JoinField(IndexField("rows", static_cast<int64_t>(index)), "keys"),
        reason::kInconsistent,
        Cat("has ", row.keys.size(), " keys, the query groups by ",
            q.group_by.size(), " dimensions: pass the report's own query"));
  }
  const std::string* keys[8] = {};
  Json tags = Json::object();
  {
    std::map<std::string_view, const std::string*> sorted;
    for (size_t i = 0; i < q.group_by.size(); ++i) {
      keys[static_cast<int>(q.group_by[i])] = &row.keys[i];
      sorted[DimensionLabel(q.group_by[i])] = &row.keys[i];
    }
    for (const auto& [name, value] : sorted) tags[std::string(name)] = *value;
  }
  auto key_or_null = [&](Dimension d) -> Json {
    const std::string* k = keys[static_cast<int>(d)];
    return k == nullptr ? Json(nullptr) : Json(*k);
  };
  Json quantity = nullptr;
  Json unit = nullptr;
  if (const std::string* r = keys[static_cast<int>(Dimension::kResource)]) {
    if (*r == "GPU") {
      quantity = UnitHoursDecimal(row.gpu_ms, Resource::kGpu);
      unit = std::string(PricingUnit(Resource::kGpu));
    } else if (*r == "CPU") {
      quantity = UnitHoursDecimal(row.cpu_millicore_ms, Resource::kCpu);
      unit = std::string(PricingUnit(Resource::kCpu));
    } else if (*r == "MEMORY") {
      quantity = UnitHoursDecimal(row.memory_byte_ms, Resource::kMemory);
      unit = std::string(PricingUnit(Resource::kMemory));
    }
  }
  Json sku = nullptr;
  if (const std::string* f = keys[static_cast<int>(Dimension::kFlavor)]) {
    const std::string* r = keys[static_cast<int>(Dimension::kResource)];
    sku = r == nullptr ? *f : Cat(*f, "/", *r);
  }
  Json out = Json::object();
  out["BillingAccountId"] = key_or_null(Dimension::kTenant);
  out["SubAccountId"] = key_or_null(Dimension::kProject);
  out["ChargePeriodStart"] = Rfc3339(row.period_start);
  out["ChargePeriodEnd"] = Rfc3339(row.period_end);
  out["BillingPeriodStart"] = Rfc3339(q.start);
  out["BillingPeriodEnd"] = Rfc3339(q.end);
  out["BilledCost"] = MicrosToDecimal(row.tenant_cost_micros);
  out["EffectiveCost"] = MicrosToDecimal(row.tenant_cost_micros);
  out["ListCost"] = MicrosToDecimal(row.list_cost_micros);
  out["BillingCurrency"] = report.currency;
  out["ConsumedQuantity"] = quantity;
  out["ConsumedUnit"] = unit;
  out["PricingQuantity"] = quantity;
  out["PricingUnit"] = unit;
  out["ResourceId"] = key_or_null(Dimension::kJob);
  out["ServiceName"] = "Trainyard";
  out["SkuId"] = sku;
  out["ChargeCategory"] = "Usage";
  out["Tags"] = std::move(tags);
  out["x_LostWorkCost"] = MicrosToDecimal(row.lost_work_cost_micros);
  out["x_PlatformCost"] = MicrosToDecimal(row.platform_cost_micros);
  out["x_SpotPriceGap"] = row.spot_price_gap;
  out["x_Attempts"] = row.attempts;
  out["x_IdleCost"] = MicrosToDecimal(row.idle_cost_micros);
  return out;
}

absl::StatusOr<std::vector<Json>> FocusRows(const Report& report,
                                            const ReportQuery& q) {
  TY_RETURN_IF_ERROR(ValidateReportQuery(q));
  if (!domain::IsKnownCurrency(report.currency)) {
    return FieldError("currency", reason::kInvalidValue,
                      Cat("must be an ISO 4217 code, got \"", report.currency,
                          "\" (BuildReport without a price book leaves it "
                          "empty: set it)"));
  }
  std::vector<Json> rows;
  rows.reserve(report.rows.size());
  for (size_t i = 0; i < report.rows.size(); ++i) {
    TY_ASSIGN_OR_RETURN(Json row, FocusRow(report.rows[i], report, q, i));
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string JsonText(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void AppendCsvField(std::string& out, std::string_view field) {
  const bool quote =
      field.find_first_of(",\"\r\n") != std::string_view::npos ||
      (!field.empty() && (field.front() == ' ' || field.front() == '\t' ||
                          field.back() == ' ' || field.back() == '\t'));
  if (!quote) {
    out.append(field);
    return;
  }
  // libcsv's writer: the field in quotes, quotes doubled. The first call
  // sizes it.
  const size_t n = csv_write(nullptr, 0, field.data(), field.size());
  const size_t at = out.size();
  out.resize(at + n);
  csv_write(out.data() + at, n, field.data(), field.size());
}

}  // namespace report_impl
}  // namespace

std::string_view DimensionLabel(Dimension dimension) {
  switch (dimension) {
    case Dimension::kTenant:
      return "tenant";
    case Dimension::kProject:
      return "project";
    case Dimension::kUser:
      return "user";
    case Dimension::kQueue:
      return "queue";
    case Dimension::kCluster:
      return "cluster";
    case Dimension::kFlavor:
      return "flavor";
    case Dimension::kJob:
      return "job";
    case Dimension::kResource:
      return "resource";
  }
  return "";
}

absl::Status ValidateReportQuery(const ReportQuery& q) {
  return ReportPeriods(q).status();
}

absl::StatusOr<std::vector<TimeMs>> ReportPeriods(const ReportQuery& q) {
  TY_ASSIGN_OR_RETURN(const absl::TimeZone tz, report_impl::CheckQuery(q));
  return report_impl::Boundaries(q, tz);
}

ReportRows::ReportRows(const ReportQuery& q, std::vector<TimeMs> bounds)
    : bounds_(std::move(bounds)) {
  report_.total.period_start = q.start;
  report_.total.period_end = q.end;
}

ReportRows::ReportRows(std::vector<TimeMs> bounds, Report report)
    : bounds_(std::move(bounds)), report_(std::move(report)) {
  for (size_t i = 0; i < report_.rows.size(); ++i) {
    index_.emplace(
        std::pair{report_.rows[i].period_start, report_.rows[i].keys}, i);
  }
}

size_t ReportRows::PeriodOf(TimeMs t) const {
  // The last boundary at or before t.
  return static_cast<size_t>(
      std::upper_bound(bounds_.begin(), bounds_.end(), t) - bounds_.begin() -
      1);
}

ReportRow& ReportRows::Row(size_t period, std::vector<std::string> keys) {
  auto [it, inserted] = index_.try_emplace(
      std::pair{bounds_[period], std::move(keys)}, report_.rows.size());
  if (inserted) {
    ReportRow row;
    row.keys = it->first.second;
    row.period_start = bounds_[period];
    row.period_end = bounds_[period + 1];
    report_.rows.push_back(std::move(row));
  }
  return report_.rows[it->second];
}

Report ReportRows::Finish() && {
  std::vector<ReportRow> rows;
  rows.reserve(index_.size());
  for (const auto& [key, i] : index_) rows.push_back(std::move(report_.rows[i]));
  report_.rows = std::move(rows);
  index_.clear();
  return std::move(report_);
}

absl::StatusOr<Report> BuildReport(absl::Span<const LedgerLine> lines,
                                   const ReportQuery& q,
                                   const PriceBook* list_prices) {
  TY_ASSIGN_OR_RETURN(std::vector<TimeMs> bounds, ReportPeriods(q));
  ReportRows rows(q, std::move(bounds));
  for (size_t i = 0; i < lines.size(); ++i) {
    const LedgerLine& line = lines[i];
    TY_RETURN_IF_ERROR(report_impl::CheckLine(line, i));
    if (line.period_start < q.start || line.period_start >= q.end) continue;
    const std::string resource(ResourceLabel(line.resource));
    if (!report_impl::Matches(line, q, resource)) continue;
    std::vector<std::string> keys;
    keys.reserve(q.group_by.size());
    for (Dimension d : q.group_by)
      keys.push_back(report_impl::Key(line, d, resource));
    TY_RETURN_IF_ERROR(report_impl::AddLine(
        rows.Row(rows.PeriodOf(line.period_start), std::move(keys)), line));
    TY_RETURN_IF_ERROR(report_impl::AddLine(rows.total(), line));
  }
  Report report = std::move(rows).Finish();
  if (list_prices != nullptr) report.currency = list_prices->currency();
  return report;
}

absl::Status AddIdle(absl::Span<const IdleLine> idle,
                     absl::Span<const IdleShareLine> shares,
                     const ReportQuery& q, Report& report) {
  if (!q.include_idle && !q.share_idle) return absl::OkStatus();
  TY_ASSIGN_OR_RETURN(const std::vector<TimeMs> bounds, ReportPeriods(q));
  auto flavor_filter = q.filters.find(Dimension::kFlavor);
  auto tenant_filter = q.filters.find(Dimension::kTenant);
  auto in_report = [&](TimeMs hour, const std::string& pool) {
    return hour >= q.start && hour < q.end &&
           (flavor_filter == q.filters.end() || flavor_filter->second == pool);
  };
  ReportRows rows(bounds, std::move(report));
  // Adds `micros` of pool's idle cost in `hour` to the row of (tenant, pool)
  // and to the total; the tenant's when `charged`, else the platform's.
  auto add = [&](TimeMs hour, const std::string& tenant,
                 const std::string& pool, int64_t micros, bool charged,
                 bool gap) -> absl::Status {
    std::vector<std::string> keys;
    for (Dimension d : q.group_by) {
      keys.push_back(d == Dimension::kTenant   ? tenant
                     : d == Dimension::kFlavor ? pool
                                               : std::string());
    }
    for (ReportRow* row :
         {&rows.Row(rows.PeriodOf(hour), std::move(keys)), &rows.total()}) {
      TY_ASSIGN_OR_RETURN(row->cost_micros,
                          domain::CheckedAdd(row->cost_micros, micros));
      TY_ASSIGN_OR_RETURN(row->idle_cost_micros,
                          domain::CheckedAdd(row->idle_cost_micros, micros));
      int64_t& part =
          charged ? row->tenant_cost_micros : row->platform_cost_micros;
      TY_ASSIGN_OR_RETURN(part, domain::CheckedAdd(part, micros));
      row->spot_price_gap = row->spot_price_gap || gap;
    }
    return absl::OkStatus();
  };
  // What the shares of each line gave to tenants.
  std::map<std::pair<TimeMs, std::string>, int64_t> shared;
  std::map<std::pair<TimeMs, std::string>, bool> gaps;
  for (const IdleLine& line : idle) {
    gaps[{line.period_start, line.pool}] = line.spot_price_gap;
  }
  if (q.share_idle) {
    for (const IdleShareLine& share : shares) {
      int64_t& given = shared[{share.period_start, share.pool}];
      TY_ASSIGN_OR_RETURN(given, domain::CheckedAdd(given, share.micros));
      if (!in_report(share.period_start, share.pool)) continue;
      if (tenant_filter != q.filters.end() &&
          tenant_filter->second != share.tenant) {
        continue;
      }
      TY_RETURN_IF_ERROR(add(share.period_start, share.tenant, share.pool,
                             share.micros, /*charged=*/true,
                             gaps[{share.period_start, share.pool}]));
    }
  }
  for (const IdleLine& line : idle) {
    if (!in_report(line.period_start, line.pool)) continue;
    if (q.share_idle && tenant_filter != q.filters.end()) continue;
    TY_ASSIGN_OR_RETURN(
        const int64_t rest,
        domain::CheckedSub(line.idle_micros,
                           shared[{line.period_start, line.pool}]));
    // An idle line of 0 still has its row: the pool was held and paid for.
    if (rest == 0 && q.share_idle) continue;
    TY_RETURN_IF_ERROR(add(line.period_start, kIdleTenant, line.pool, rest,
                           /*charged=*/false, line.spot_price_gap));
  }
  report = std::move(rows).Finish();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> EffectiveGpuHourPriceMicros(const ReportRow& row) {
  if (row.gpu_ms == 0) return 0;
  return domain::MulDivRoundHalfEven(
      row.cost_micros, UnitMsPerUnitHour(Resource::kGpu), row.gpu_ms);
}

std::string MicrosToDecimal(int64_t micros) {
  const bool negative = micros < 0;
  const uint64_t u =
      negative ? -static_cast<uint64_t>(micros) : static_cast<uint64_t>(micros);
  std::string frac = std::to_string(u % 1'000'000);
  frac.insert(0, 6 - frac.size(), '0');
  while (frac.size() > 2 && frac.back() == '0') frac.pop_back();
  return Cat(negative ? "-" : "", u / 1'000'000, ".", frac);
}

std::string UnitHoursDecimal(__int128 unit_ms, Resource resource) {
  constexpr int64_t kScale = 1'000'000'000;  // 9 decimals
  const bool negative = unit_ms < 0;
  const __int128 q = negative ? -unit_ms : unit_ms;  // quantities are >= 0
  const __int128 unit = UnitMsPerUnitHour(resource);
  __int128 whole = q / unit;
  // rest < unit < 2^62, so rest × 10^9 < 2^92: exact.
  const __int128 scaled = (q % unit) * kScale;
  __int128 frac = scaled / unit;
  const __int128 twice_rem = 2 * (scaled % unit);
  if (twice_rem > unit || (twice_rem == unit && frac % 2 == 1)) ++frac;
  if (frac == kScale) {
    ++whole;
    frac = 0;
  }
  std::string out = report_impl::Int128ToString(whole);
  if (frac != 0) {
    std::string f = report_impl::Int128ToString(frac);
    f.insert(0, 9 - f.size(), '0');
    while (f.back() == '0') f.pop_back();
    out = Cat(out, ".", f);
  }
  return negative && out != "0" ? Cat("-", out) : out;
}

std::string UnitSecondsDecimal(__int128 unit_ms, Resource resource) {
  // UnitMsPerUnitHour / 3600 is 1,000, 10^6 or 2^30 × 1,000: factors 2 and 5
  // only, so the digits end (within 40 places).
  const __int128 den = UnitMsPerUnitHour(resource) / 3600;
  std::string out;
  if (unit_ms < 0) {
    out.push_back('-');
    unit_ms = -unit_ms;
  }
  out += report_impl::Int128ToString(unit_ms / den);
  __int128 rest = unit_ms % den;
  if (rest == 0) return out;
  out.push_back('.');
  while (rest != 0) {
    rest *= 10;
    out.push_back(static_cast<char>('0' + static_cast<int>(rest / den)));
    rest %= den;
  }
  return out;
}

std::string_view PricingUnit(Resource resource) {
  switch (resource) {
    case Resource::kGpu:
      return "GPU-Hours";
    case Resource::kCpu:
      return "Core-Hours";
    case Resource::kMemory:
      return "GiB-Hours";
  }
  return "";
}

const std::vector<std::string>& FocusColumns() {
  static const std::vector<std::string>* const kColumns =
      new std::vector<std::string>{"BillingAccountId",
                                   "SubAccountId",
                                   "ChargePeriodStart",
                                   "ChargePeriodEnd",
                                   "BillingPeriodStart",
                                   "BillingPeriodEnd",
                                   "BilledCost",
                                   "EffectiveCost",
                                   "ListCost",
                                   "BillingCurrency",
                                   "ConsumedQuantity",
                                   "ConsumedUnit",
                                   "PricingQuantity",
                                   "PricingUnit",
                                   "ResourceId",
                                   "ServiceName",
                                   "SkuId",
                                   "ChargeCategory",
                                   "Tags",
                                   "x_LostWorkCost",
                                   "x_PlatformCost",
                                   "x_SpotPriceGap",
                                   "x_Attempts",
                                   "x_IdleCost"};
  return *kColumns;
}

absl::StatusOr<std::string> FocusCsv(const Report& report,
                                     const ReportQuery& q) {
  TY_ASSIGN_OR_RETURN(const std::vector<report_impl::Json> rows,
                      report_impl::FocusRows(report, q));
  const std::vector<std::string>& columns = FocusColumns();
  std::string out;
  for (size_t c = 0; c < columns.size(); ++c) {
    if (c > 0) out.push_back(',');
    report_impl::AppendCsvField(out, columns[c]);
  }
  out.append("\r\n");
  for (const report_impl::Json& row : rows) {
    for (size_t c = 0; c < columns.size(); ++c) {
      if (c > 0) out.push_back(',');
      const report_impl::Json& v = row.at(columns[c]);
      if (v.is_null()) continue;
      if (v.is_string()) {
        report_impl::AppendCsvField(out, v.get_ref<const std::string&>());
      } else {
        // Booleans ("true"/"false"), integers, and Tags (compact JSON).
        report_impl::AppendCsvField(out, report_impl::JsonText(v));
      }
    }
    out.append("\r\n");
  }
  return out;
}

absl::StatusOr<std::string> FocusJson(const Report& report,
                                      const ReportQuery& q) {
  TY_ASSIGN_OR_RETURN(std::vector<report_impl::Json> rows,
                      report_impl::FocusRows(report, q));
  report_impl::Json array = report_impl::Json::array();
  for (report_impl::Json& row : rows) array.push_back(std::move(row));
  return report_impl::JsonText(array);
}

}  // namespace trainyard::accounting::pricing
