#include "services/accounting/pricing/idle.h"

#include <algorithm>
#include <map>
#include <string>

#include "services/lib/domain/errors.h"
#include "services/lib/domain/money.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing {
namespace {

using domain::Cat;
using domain::CheckedAdd;
using domain::FieldError;
namespace reason = domain::reason;

// Lines of the pool in the period, summed per tenant (ascending tenant).
absl::StatusOr<std::map<std::string, int64_t>> AllocatedByTenant(
    std::string_view pool, TimeMs period_start,
    absl::Span<const LedgerLine> lines) {
  std::map<std::string, int64_t> out;
  for (const LedgerLine& line : lines) {
    if (line.keys.flavor != pool || line.period_start != period_start) continue;
    int64_t& sum = out[line.keys.tenant];
    TY_ASSIGN_OR_RETURN(sum, CheckedAdd(sum, line.cost_micros));
  }
  return out;
}

}  // namespace

absl::StatusOr<int64_t> CommitmentPart(const Commitment& commitment,
                                       TimeMs from, TimeMs to) {
  const TimeMs s = commitment.start_time;
  const TimeMs e = commitment.end_time;
  if (e <= s) {
    return absl::InvalidArgumentError("CommitmentPart: empty commitment");
  }
  from = std::clamp(from, s, e);
  to = std::clamp(to, s, e);
  if (to <= from) return 0;
  TY_ASSIGN_OR_RETURN(
      int64_t upto_to,
      domain::MulDivRoundHalfEven(commitment.amount.micros, to - s, e - s));
  TY_ASSIGN_OR_RETURN(
      int64_t upto_from,
      domain::MulDivRoundHalfEven(commitment.amount.micros, from - s, e - s));
  return upto_to - upto_from;
}

absl::StatusOr<IdleLine> ComputeIdle(const PriceBook& book,
                                     const PoolPeriod& pool_period,
                                     absl::Span<const LedgerLine> lines,
                                     const MeterOptions& options) {
  if (pool_period.pool.empty()) {
    return FieldError("pool_period.pool", reason::kRequired, "required");
  }
  const TimeMs p = pool_period.period_start;
  if (p < 0 || p >= kMaxTimeMs || p % kMsPerHour != 0) {
    return FieldError("pool_period.period_start", reason::kInvalidValue,
                      Cat("must be a UTC hour boundary, got ", p));
  }
  const TimeMs q = p + kMsPerHour;
  IdleLine out;
  out.pool = pool_period.pool;
  out.period_start = p;
  // Commitments: their parts of the period, and the time they cover.
  std::vector<std::pair<TimeMs, TimeMs>> covered;
  for (const Commitment& c : book.Commitments(pool_period.pool)) {
    if (c.end_time <= p || c.start_time >= q) continue;
    out.reserved = true;
    TY_ASSIGN_OR_RETURN(int64_t part, CommitmentPart(c, p, q));
    TY_ASSIGN_OR_RETURN(out.paid_micros, CheckedAdd(out.paid_micros, part));
    covered.emplace_back(std::max(c.start_time, p), std::min(c.end_time, q));
  }
  std::sort(covered.begin(), covered.end());
  // Held capacity outside the commitments: at the book's prices.
  for (size_t i = 0; i < pool_period.held.size(); ++i) {
    const CapacityHeld& h = pool_period.held[i];
    const std::string field = domain::IndexField("pool_period.held", i);
    if (h.gpus < 0 || h.cpu_millis < 0 || h.memory_bytes < 0) {
      return FieldError(field, reason::kOutOfRange,
                        "amounts must not be negative");
    }
    if (h.end_time < h.start_time) {
      return FieldError(domain::JoinField(field, "end_time"),
                        reason::kOutOfRange, "must not be before start_time");
    }
    // [from, to) minus the covered intervals.
    std::vector<std::pair<TimeMs, TimeMs>> pieces;
    TimeMs from = std::max(h.start_time, p);
    const TimeMs to = std::min(h.end_time, q);
    for (const auto& [cs, ce] : covered) {
      if (from >= to) break;
      if (ce <= from) continue;
      if (cs >= to) break;
      if (cs > from) pieces.emplace_back(from, cs);
      from = std::max(from, ce);
    }
    if (from < to) pieces.emplace_back(from, to);
    for (const auto& [a, b] : pieces) {
      for (Resource r : kAllResources) {
        const int64_t amount = r == Resource::kGpu   ? h.gpus
                               : r == Resource::kCpu ? h.cpu_millis
                                                     : h.memory_bytes;
        TY_ASSIGN_OR_RETURN(
            std::vector<PricedSpan> spans,
            PriceUsage(book, pool_period.pool, pool_period.spot, r, amount, a,
                       b, std::nullopt, options, /*since=*/0));
        for (const PricedSpan& span : spans) {
          TY_ASSIGN_OR_RETURN(out.paid_micros,
                              CheckedAdd(out.paid_micros, span.cost_micros));
          out.spot_price_gap = out.spot_price_gap || span.spot_price_gap;
        }
      }
    }
  }
  TY_ASSIGN_OR_RETURN(auto by_tenant,
                      AllocatedByTenant(pool_period.pool, p, lines));
  for (const auto& [tenant, micros] : by_tenant) {
    TY_ASSIGN_OR_RETURN(out.allocated_micros,
                        CheckedAdd(out.allocated_micros, micros));
  }
  TY_ASSIGN_OR_RETURN(
      out.idle_micros,
      domain::CheckedSub(out.paid_micros, out.allocated_micros));
  return out;
}

std::vector<IdleShare> ShareIdle(const IdleLine& idle,
                                 absl::Span<const LedgerLine> lines) {
  std::vector<IdleShare> out;
  absl::StatusOr<std::map<std::string, int64_t>> by_tenant =
      AllocatedByTenant(idle.pool, idle.period_start, lines);
  if (!by_tenant.ok()) return out;
  // Weights: allocated cost; tenants with a non-positive total get nothing.
  __int128 total = 0;
  for (const auto& [tenant, micros] : *by_tenant) {
    if (micros > 0) total += micros;
  }
  if (total == 0) return out;
  const bool negative = idle.idle_micros < 0;
  const __int128 pot = negative ? -static_cast<__int128>(idle.idle_micros)
                                : static_cast<__int128>(idle.idle_micros);
  struct Part {
    size_t index;
    __int128 remainder;
  };
  std::vector<Part> parts;
  __int128 given = 0;
  for (const auto& [tenant, micros] : *by_tenant) {
    if (micros <= 0) continue;
    const __int128 exact = pot * micros;  // < 2^127
    out.push_back({tenant, static_cast<int64_t>(exact / total)});
    parts.push_back({out.size() - 1, exact % total});
    given += exact / total;
  }
  // Fewer than out.size() micros are left over.
  std::stable_sort(
      parts.begin(), parts.end(),
      [](const Part& a, const Part& b) { return a.remainder > b.remainder; });
  for (__int128 left = pot - given, i = 0; left > 0; --left, ++i) {
    ++out[parts[static_cast<size_t>(i)].index].micros;
  }
  if (negative) {
    for (IdleShare& share : out) share.micros = -share.micros;
  }
  return out;
}

}  // namespace trainyard::accounting::pricing
