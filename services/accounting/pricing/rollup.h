// Report rollups: the pure half of serving reports from pre-summed buckets.
//
// The ledger's lines are summed per hour, UTC day and UTC month and per
// (tenant, project, queue, user, cluster, flavor, resource) into rollup rows
// (storage: usage_rollups, migration 0007_usage_rollups.sql). Every sum a
// ReportRow has is a plain sum of its lines (list cost and attempts included,
// see LedgerLine), so a report that groups and filters only by those keys is
// the sum of the rollup rows that cover its periods: CoverWithRollups picks
// the coarsest aligned buckets (whole UTC months, then whole UTC days, then
// hours) for each period, and ReportFromRollups builds the same Report that
// BuildReport builds from the raw lines. Pure and deterministic (no I/O). See
// docs/accounting.md, "Rollups".
#ifndef TRAINYARD_SERVICES_ACCOUNTING_PRICING_ROLLUP_H_
#define TRAINYARD_SERVICES_ACCOUNTING_PRICING_ROLLUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/accounting/pricing/price_book.h"
#include "services/accounting/pricing/report.h"

namespace trainyard::accounting::pricing {

// A rollup bucket's size; the values are the stored `granularity`.
enum class RollupGranularity {
  kHour = 0,
  kDay = 1,    // a UTC day
  kMonth = 2,  // a UTC calendar month
};

// The starts of the UTC day and the UTC month that hold `t`, and of the next
// UTC month (t in [0, kMaxTimeMs)).
TimeMs UtcDayStart(TimeMs t);
TimeMs UtcMonthStart(TimeMs t);
TimeMs NextUtcMonthStart(TimeMs t);

// The buckets of one granularity whose start is in [from, to).
struct RollupRange {
  RollupGranularity granularity = RollupGranularity::kHour;
  TimeMs from = 0;
  TimeMs to = 0;
  bool operator==(const RollupRange&) const = default;
};

// The coarsest buckets that cover [start, end) exactly (start < end, whole UTC
// hours): the whole UTC months inside it, then the whole UTC days inside what
// is left, then the hours of the rest. Ascending, disjoint, without empty
// ranges; their buckets tile [start, end). At most 2 hour ranges, 2 day
// ranges and 1 month range.
std::vector<RollupRange> CoverWithRollups(TimeMs start, TimeMs end);

// Whether rollups can serve `q`: it groups and filters only by keys a rollup
// row has (no job, no labels).
bool RollupsServe(const ReportQuery& q);

// The sums of the rollup rows of one (period, keys): `period` indexes the
// query's ReportPeriods (period i is [bounds[i], bounds[i + 1])), `keys` as
// ReportRow's (kResource: "GPU"/"CPU"/"MEMORY"). Sums are wide, as the
// database adds them; ReportFromRollups checks that they fit.
struct RollupSum {
  size_t period = 0;
  std::vector<std::string> keys;
  __int128 lines = 0;
  __int128 cost_micros = 0;
  __int128 tenant_cost_micros = 0;
  __int128 platform_cost_micros = 0;
  __int128 lost_work_cost_micros = 0;
  __int128 list_cost_micros = 0;
  __int128 gpu_ms = 0;
  __int128 lost_gpu_ms = 0;
  __int128 cpu_millicore_ms = 0;
  __int128 memory_byte_ms = 0;
  __int128 attempts = 0;
  // Lines with spot_price_gap.
  __int128 spot_gap_lines = 0;
};

// The Report of `q` from the sums of the rollup rows that cover each of its
// periods (one RollupSum per (period, keys); sums of the same (period, keys)
// are added): field for field what BuildReport makes of the lines they sum.
// Sums with no lines make no row. `list_prices` (may be null) sets the
// currency, as BuildReport's. InvalidArgument as ValidateReportQuery (or a
// period index or key count that does not fit q); OutOfRange when a sum does
// not fit its field.
absl::StatusOr<Report> ReportFromRollups(const ReportQuery& q,
                                         const std::vector<RollupSum>& sums,
                                         const PriceBook* list_prices);

}  // namespace trainyard::accounting::pricing

#endif  // TRAINYARD_SERVICES_ACCOUNTING_PRICING_ROLLUP_H_
