// Reports of ledger lines and their FOCUS 1.0 exports.
//
// BuildReport is the reference computation of a chargeback report: it groups
// ledger lines by any of their dimensions and by time steps (hours, or days or
// months of a time zone), and sums them with checked, exact integer
// arithmetic. The service's fast database rollups are checked against it.
// FocusCsv and FocusJson write a report in the columns of the FinOps FOCUS 1.0
// specification (plus x_ extensions). Pure and deterministic (no I/O). See
// docs/accounting.md, "Reports and FOCUS exports".
#ifndef TRAINYARD_SERVICES_ACCOUNTING_PRICING_REPORT_H_
#define TRAINYARD_SERVICES_ACCOUNTING_PRICING_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/accounting/pricing/idle.h"
#include "services/accounting/pricing/meter.h"
#include "services/accounting/pricing/price_book.h"

namespace trainyard::accounting::pricing {

// What a report groups (and filters) by: the keys of a line's Attribution,
// and its resource.
enum class Dimension {
  kTenant = 0,
  kProject,
  kUser,
  kQueue,
  kCluster,
  kFlavor,
  kJob,
  kResource,  // "GPU", "CPU", "MEMORY"
};
// "tenant", "project", "user", "queue", "cluster", "flavor", "job",
// "resource" (the names of the Tags column); "" for a value out of range.
std::string_view DimensionLabel(Dimension dimension);

// The time step of a report's rows.
enum class Step {
  kNone = 0,  // one period: the whole window
  kHour,      // UTC hours (elapsed hours from the window's start)
  kDay,       // calendar days of the query's time zone
  kMonth,     // calendar months of the query's time zone
};

struct ReportQuery {
  // The window [start, end): whole UTC hours, at most 366 days.
  TimeMs start = 0;
  TimeMs end = 0;
  // IANA name (absl::LoadTimeZone). Day and month boundaries are local
  // midnights of this zone; every one inside the window must be a whole UTC
  // hour (ledger lines are cut at UTC hours only).
  std::string time_zone = "UTC";
  Step step = Step::kNone;
  // Dimensions of the rows' keys, in order; no repeats.
  std::vector<Dimension> group_by;
  // Only lines whose key equals the value (kResource: "GPU", "CPU" or
  // "MEMORY").
  std::map<Dimension, std::string> filters;
  // Only lines whose keys.labels hold every one of these (name, value).
  std::map<std::string, std::string> label_filters;
  // Adds the pools' idle cost (AddIdle): the report's total is then what
  // the platform paid for the pools (allocated + idle). Idle cost belongs to
  // a pool (flavor) and hour only: it can be filtered by flavor alone.
  bool include_idle = false;
  // Also hands each pool-hour's idle cost to the tenants that used the pool
  // in that hour, in proportion to their cost (ShareIdle); implies
  // include_idle. A share belongs to a tenant, pool and hour: it can be
  // grouped and filtered by tenant and flavor alone.
  bool share_idle = false;
};

// The tenant key of idle cost that is no tenant's (OpenCost's __idle__).
inline constexpr char kIdleTenant[] = "__idle__";

// OK, or InvalidArgument naming the field (domain::FieldError): start_time,
// end_time (bounds in [0, kMaxTimeMs), end after start, at most 366 days,
// whole UTC hours), time_zone (known; day/month boundaries on whole UTC
// hours), step, group_by[i] (known, no repeats), filters[<dimension>].
absl::Status ValidateReportQuery(const ReportQuery& q);

// The periods of a valid query: their boundaries, ascending, from q.start to
// q.end (kNone: {start, end}; kDay/kMonth: the window's start, each local
// midnight (of a month's first day) inside it, the window's end). Errors as
// ValidateReportQuery.
absl::StatusOr<std::vector<TimeMs>> ReportPeriods(const ReportQuery& q);

// One row: the lines of one period with the same keys.
struct ReportRow {
  // One per group_by dimension, in order (kResource: "GPU"/"CPU"/"MEMORY").
  std::vector<std::string> keys;
  // The step's period, cut to the window (the whole window for kNone).
  TimeMs period_start = 0;
  TimeMs period_end = 0;
  int64_t cost_micros = 0;
  int64_t tenant_cost_micros = 0;    // what tenants are charged
  int64_t platform_cost_micros = 0;  // lost work the platform pays
  int64_t lost_work_cost_micros = 0;
  // What the same usage costs at the rate book's (list) price: the sum of
  // the lines' list_cost_micros (set by the meter, see LedgerLine).
  int64_t list_cost_micros = 0;
  int64_t gpu_ms = 0;
  int64_t lost_gpu_ms = 0;
  __int128 cpu_millicore_ms = 0;
  __int128 memory_byte_ms = 0;
  // Attempts that started in the row: its lines with attempt_start (each
  // attempt has one such line, in the period and row of its start). Unlike
  // "distinct attempts with a line", rows add up to the total, which lets
  // rollups serve reports exactly.
  int64_t attempts = 0;
  bool spot_price_gap = false;
  // The part of cost that is idle cost (AddIdle): all of it in an idle row,
  // the tenant's share when idle cost is shared.
  int64_t idle_cost_micros = 0;
};

struct Report {
  // Ascending by (period_start, keys); only (period, keys) with lines.
  std::vector<ReportRow> rows;
  // All the lines of the window that pass the filters: no keys, the window as
  // its period. Every row's sums add up exactly to it (attempts included).
  ReportRow total;
  // The list price book's currency; "" when BuildReport had none (set it
  // before exporting).
  std::string currency;
};

// The rows of a report being assembled for the periods `bounds` (period i
// is [bounds[i], bounds[i + 1]), ReportPeriods), each keyed by (period, keys)
// and created empty on first use, and the total over the whole window: what
// BuildReport, ReportFromRollups and AddIdle share.
class ReportRows {
 public:
  ReportRows(const ReportQuery& q, std::vector<TimeMs> bounds);
  // Continues `report` (its rows and total), built for `q` over `bounds`.
  ReportRows(std::vector<TimeMs> bounds, Report report);
  // The index of the period that holds `t` (bounds[0] <= t < bounds.back()).
  size_t PeriodOf(TimeMs t) const;
  // The row of period `period` with `keys`.
  ReportRow& Row(size_t period, std::vector<std::string> keys);
  ReportRow& total() { return report_.total; }
  // The report, its rows ascending by (period_start, keys).
  Report Finish() &&;

 private:
  std::vector<TimeMs> bounds_;
  Report report_;
  std::map<std::pair<TimeMs, std::vector<std::string>>, size_t> index_;
};

// The report of `lines` for `q`. A line is in the window (period) that holds
// its period_start: lines never cross a UTC hour and periods are bounded by
// whole UTC hours, so a line is wholly in or out. List cost sums the lines'
// list_cost_micros and attempts counts their attempt_start (both set by the
// meter). `list_prices` (may be null) only sets the report's currency.
// InvalidArgument as ValidateReportQuery; OutOfRange on overflow.
absl::StatusOr<Report> BuildReport(absl::Span<const LedgerLine> lines,
                                   const ReportQuery& q,
                                   const PriceBook* list_prices);

// Adds idle cost to `report` (built for `q`) when q asks for it: the idle
// lines whose hour is in the window (and whose pool passes the flavor
// filter). Without share_idle, each goes to the row of its period with the
// keys tenant = kIdleTenant, flavor = its pool, every other key empty: its
// cost, platform cost and idle cost. With share_idle, each tenant's share
// (`shares`, of every tenant: the tenant filter is applied here) goes to the
// row of its tenant and pool (cost, tenant cost and idle cost), and what no
// tenant was given (a pool-hour without usage) to the idle row, unless the
// report is filtered by tenant. Rows stay ascending by (period, keys); the
// total moves by the same amounts. InvalidArgument as ValidateReportQuery;
// OutOfRange on overflow.
absl::Status AddIdle(absl::Span<const IdleLine> idle,
                     absl::Span<const IdleShareLine> shares,
                     const ReportQuery& q, Report& report);

// The row's cost (all its resources) per GPU-hour it used: cost_micros ×
// 3,600,000 / gpu_ms, rounded half to even; 0 when gpu_ms is 0. OutOfRange
// when it does not fit in int64.
absl::StatusOr<int64_t> EffectiveGpuHourPriceMicros(const ReportRow& row);

// Exact decimal text of micros: at least 2 and at most 6 decimals, trailing
// zeros past the second dropped ("12.345678", "3.00", "0.50", "-0.50").
std::string MicrosToDecimal(int64_t micros);
// A unit-ms quantity of `resource` in its priced unit-hours (GPU-hours,
// core-hours, GiB-hours) as decimal text, rounded half to even to 9 decimals,
// trailing zeros (and a trailing '.') dropped: 1,800,000 GPU-ms = "0.5",
// 1,000 GPU-ms = "0.000277778", 7,200,000 GPU-ms = "2".
std::string UnitHoursDecimal(__int128 unit_ms, Resource resource);
// The same quantity in unit-seconds (GPU-seconds, core-seconds,
// GiB-seconds), exact: a unit-second is 1,000 GPU-ms, 10^6 millicore-ms or
// 2^30 × 1,000 byte-ms, so the decimal always ends (a reclaim 0.8 s after a
// start on one GPU is "0.8"). No trailing zeros; "0" for 0.
std::string UnitSecondsDecimal(__int128 unit_ms, Resource resource);
// The priced unit of `resource` as FOCUS writes it: "GPU-Hours",
// "Core-Hours", "GiB-Hours".
std::string_view PricingUnit(Resource resource);

// The FOCUS column names, in the order of the exports.
const std::vector<std::string>& FocusColumns();

// One row of the export per report row (the total is not a row). CSV: RFC
// 4180, a header row, CRLF line ends, fields quoted (libcsv's csv_write) only
// when they hold a comma, a quote, CR, LF or leading/trailing blanks.
// InvalidArgument when report.currency is not an ISO 4217 code ("currency")
// or the query is invalid; `q` must be the query the report was built with.
absl::StatusOr<std::string> FocusCsv(const Report& report,
                                     const ReportQuery& q);
// A JSON array of objects with the same names: decimal columns as strings,
// x_SpotPriceGap a boolean, x_Attempts a number, Tags an object, empty columns
// null.
absl::StatusOr<std::string> FocusJson(const Report& report,
                                      const ReportQuery& q);

}  // namespace trainyard::accounting::pricing

#endif  // TRAINYARD_SERVICES_ACCOUNTING_PRICING_REPORT_H_
