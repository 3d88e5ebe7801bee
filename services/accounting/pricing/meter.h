// Metering: an attempt's usage -> ledger lines, exactly and idempotently.
//
// One line per (resource, piece of time): an attempt's time is cut at every
// UTC hour boundary (the charge period), at every instant its price can change
// (rate versions; for spot GPU time, spot observations and the instants they go
// stale), and, for an attempt interrupted by the platform, at the start of the
// lost work, so every line is wholly lost work or wholly not. Each line's cost
// is rounded once, half to even, from its exact quantity × price; totals are
// sums of lines. Lines are keyed by (job, attempt, resource, start): metering
// the same attempt again, or further (a running attempt every minute up to
// now), reproduces the lines it already produced and only the last, open line
// grows. Pure and deterministic. See docs/accounting.md.
#ifndef TRAINYARD_SERVICES_ACCOUNTING_PRICING_METER_H_
#define TRAINYARD_SERVICES_ACCOUNTING_PRICING_METER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/accounting/pricing/price_book.h"

namespace trainyard::accounting::pricing {

// How an attempt ended.
enum class EndReason {
  kRunning = 0,  // not ended: metered up to `now`
  kCompleted,    // exit 0
  kUserError,    // non-zero exit, OOM, bad image ...: the tenant's
  kSpotReclaim,  // the cloud took the spot node back: lost work
  kNodeFailure,  // a node died: lost work
  kPreemption,   // Trainyard preempted it: lost work
  kCancelled,    // a user cancelled it: the tenant's
};
// Spot reclaim, node failure and preemption: work since the last checkpoint is
// lost work.
bool IsInterruption(EndReason reason);

// Who is charged for lost work.
enum class LostWorkRule {
  kTenant = 0,  // the tenant whose job lost it
  kPlatform,    // the platform (shown apart, charged to no tenant)
  kSplit,       // split_tenant_percent to the tenant, the rest to the platform
};

struct MeterOptions {
  // How long a spot observation stays fresh (> 0).
  TimeMs spot_max_age_ms = 2 * kMsPerHour;
  LostWorkRule lost_work_rule = LostWorkRule::kTenant;
  // For kSplit: the tenant's percent, 0..100.
  int32_t split_tenant_percent = 50;
};

// Who used it: the report dimensions.
struct Attribution {
  std::string tenant;
  std::string project;
  std::string user;
  std::string queue;
  std::string cluster;
  std::string flavor;  // the pool; prices are looked up by it
  std::string job;     // job resource name or id
  int32_t attempt = 0;
  std::map<std::string, std::string> labels;
};

// One attempt's usage. The amounts are per worker; the attempt holds them on
// `workers` workers from start_time to end_time (or to `now` while running).
struct AttemptUsage {
  Attribution keys;
  bool spot = false;  // GPU time priced by the pool's spot series
  int32_t workers = 1;
  int64_t gpus_per_worker = 0;
  int64_t cpu_millis_per_worker = 0;
  int64_t memory_bytes_per_worker = 0;
  TimeMs start_time = 0;
  // Set iff end_reason is not kRunning.
  std::optional<TimeMs> end_time;
  // The last checkpoint the attempt wrote, if any (only matters for an
  // interruption; times before start_time count as start_time).
  std::optional<TimeMs> last_checkpoint_time;
  EndReason end_reason = EndReason::kRunning;
};

// Where a line's unit price came from.
enum class PriceSource {
  kRate = 0,             // the flavor's rate version in force
  kSpot,                 // a fresh spot observation
  kSpotGapCarryForward,  // gap: the last observation, stale
  kSpotGapFirstLater,    // gap: no observation before, the first later one
  kSpotGapOnDemand,      // gap: the pool has no spot prices, its GPU rate
};
std::string_view PriceSourceLabel(PriceSource source);

// A priced piece of usage of one resource: [start, end) inside one charge
// period [period_start, period_start + 1 h).
struct PricedSpan {
  TimeMs period_start = 0;
  TimeMs start = 0;
  TimeMs end = 0;
  int64_t unit_price_micros = 0;  // per unit-hour
  PriceSource price_source = PriceSource::kRate;
  bool spot_price_gap = false;
  // MulDivRoundHalfEven(unit_price, amount × (end - start), unit-ms per
  // unit-hour), computed exactly for any amount.
  int64_t cost_micros = 0;
};

// A ledger line.
struct LedgerLine {
  Attribution keys;
  Resource resource = Resource::kGpu;
  bool spot = false;
  // The charge period (UTC hour) and the piece of it.
  TimeMs period_start = 0;
  TimeMs start = 0;
  TimeMs end = 0;
  // GPUs, CPU millicores or memory bytes over all workers; the quantity is
  // amount × (end - start) unit-ms (Quantity(); a line's byte-ms can exceed
  // int64).
  int64_t amount = 0;
  int64_t unit_price_micros = 0;
  PriceSource price_source = PriceSource::kRate;
  bool spot_price_gap = false;
  int64_t cost_micros = 0;
  // Work lost to an interruption; its cost is split by the lost-work rule.
  bool lost_work = false;
  // cost_micros = tenant_cost_micros + platform_cost_micros. Not lost work:
  // all the tenant's.
  int64_t tenant_cost_micros = 0;
  int64_t platform_cost_micros = 0;
  // The last line of a running attempt: it ends at `now` and will grow.
  bool open = false;
  // What the same usage costs at the rate book's (list) price: the cost of a
  // line priced from the rate (kRate), of a line that is not spot GPU time,
  // or of a spot GPU line whose flavor has no GPU rate in force at its start;
  // else LineCost(that GPU rate, amount, duration). Set when the line is made
  // (MeterAttemptSince), so that reports and their rollups only sum it.
  int64_t list_cost_micros = 0;
  // The attempt's first line: the line starting at the attempt's start of its
  // first resource with a non-zero amount (GPU, else CPU, else MEMORY). A
  // report counts an attempt in the period and row of this line, so that the
  // attempts of rows add up (docs/accounting.md, "Reports").
  bool attempt_start = false;
};

// The key a line is upserted by: "<job>/<attempt>/<RESOURCE>/<start ms>".
std::string LineKey(const LedgerLine& line);
// amount × (end - start), in unit-ms.
__int128 Quantity(const LedgerLine& line);
int64_t DurationMs(const LedgerLine& line);

// The exact cost of `amount` units of `resource` for `duration_ms` at
// `price_micros` per unit-hour, rounded half to even. OutOfRange on overflow.
absl::StatusOr<int64_t> LineCost(int64_t price_micros, int64_t amount,
                                 int64_t duration_ms, Resource resource);

// `amount` units of `resource` of `flavor` over [from, to), cut and priced as
// above (lost-work cut `extra_cut` when set); the building block of
// MeterAttempt and of the platform's own cost of held capacity (idle.h).
// Only the spans that end after `since` are returned (all of them for since <=
// from); they are the same spans, with the same starts, as without it.
// FailedPrecondition when some instant has no price (no rate version in force
// for a resource of non-zero amount).
absl::StatusOr<std::vector<PricedSpan>> PriceUsage(
    const PriceBook& book, std::string_view flavor, bool spot,
    Resource resource, int64_t amount, TimeMs from, TimeMs to,
    std::optional<TimeMs> extra_cut, const MeterOptions& options, TimeMs since);

// The lines of one attempt metered up to `now` (ended attempts: up to their
// end whatever `now` is). Lines ascend by (resource GPU, CPU, MEMORY; start);
// resources with a zero amount have none. InvalidArgument naming the field
// ("usage.workers", "usage.end_time", "options.split_tenant_percent", ...) for
// bad input; FailedPrecondition for a missing price; OutOfRange on overflow.
absl::StatusOr<std::vector<LedgerLine>> MeterAttempt(
    const PriceBook& book, const AttemptUsage& usage, TimeMs now,
    const MeterOptions& options);

// The incremental pass: only the lines of MeterAttempt(book, usage, now,
// options) that end after `since` (e.g. the previous pass's `now`, or the
// start of the open line), identical to them. Its work grows with now - since,
// not with the attempt's age. Upsert them by LineKey. For an attempt that
// ended by an interruption, `since` is moved back before the start of the lost
// work, so the line the cut at the last checkpoint shortened comes back too.
absl::StatusOr<std::vector<LedgerLine>> MeterAttemptSince(
    const PriceBook& book, const AttemptUsage& usage, TimeMs since, TimeMs now,
    const MeterOptions& options);

// Sums of an attempt's (or any) lines, with checked arithmetic.
struct LineTotals {
  int64_t cost_micros = 0;
  int64_t tenant_cost_micros = 0;
  int64_t platform_cost_micros = 0;
  int64_t lost_work_cost_micros = 0;
  int64_t gpu_ms = 0;
  int64_t lost_gpu_ms = 0;
  bool spot_price_gap = false;
};
absl::StatusOr<LineTotals> SumLines(absl::Span<const LedgerLine> lines);
// SumLines's step: adds one line to `totals` (OutOfRange on overflow, and
// `totals` is then unchanged or partly added to: discard it).
absl::Status AddLineTo(LineTotals& totals, const LedgerLine& line);

}  // namespace trainyard::accounting::pricing

#endif  // TRAINYARD_SERVICES_ACCOUNTING_PRICING_METER_H_
