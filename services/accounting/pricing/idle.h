// Idle cost: what the platform paid for a pool in a charge period minus what
// the metered lines allocated to tenants, so that allocated + idle = paid to
// the micro-unit; and share-idle (OpenCost's shareIdle), which hands a pool's
// idle cost to its tenants in proportion to their allocated cost. Pure and
// deterministic. See docs/accounting.md.
#ifndef TRAINYARD_SERVICES_ACCOUNTING_PRICING_IDLE_H_
#define TRAINYARD_SERVICES_ACCOUNTING_PRICING_IDLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/accounting/pricing/meter.h"
#include "services/accounting/pricing/price_book.h"

namespace trainyard::accounting::pricing {

// Capacity a pool held (all its nodes together) over [start_time, end_time).
struct CapacityHeld {
  TimeMs start_time = 0;
  TimeMs end_time = 0;
  int64_t gpus = 0;
  int64_t cpu_millis = 0;
  int64_t memory_bytes = 0;
};

// A pool (flavor) in one charge period.
struct PoolPeriod {
  std::string pool;
  // Priced like spot attempts (GPU time by the spot series, gaps flagged).
  bool spot = false;
  // A UTC hour boundary.
  TimeMs period_start = 0;
  // What it held; parts outside the period, and parts a commitment of the
  // pool covers (already paid by it), are ignored.
  std::vector<CapacityHeld> held;
};

// The idle line of a pool and period.
struct IdleLine {
  std::string pool;
  TimeMs period_start = 0;
  // The pool has a commitment overlapping the period (paid, at least in
  // part, from commitments rather than from held capacity at the book's
  // prices).
  bool reserved = false;
  // What the platform paid, what the lines allocated, and the difference
  // (negative when the lines allocated more than was paid, e.g. rates above a
  // commitment's cost).
  int64_t paid_micros = 0;
  int64_t allocated_micros = 0;
  int64_t idle_micros = 0;
  // Some of the paid capacity was priced in a spot price gap.
  bool spot_price_gap = false;
};

// The part of a commitment that falls in [from, to) (clipped to the
// commitment): C(to) - C(from), with C(t) = round_half_even(amount × (t -
// start) / (end - start)); the parts of any partition of the commitment sum
// exactly to its amount.
absl::StatusOr<int64_t> CommitmentPart(const Commitment& commitment,
                                       TimeMs from, TimeMs to);

// paid (the commitments' parts of the period, plus held capacity outside the
// time they cover priced as usage), allocated (the
// cost of `lines` whose flavor is the pool and whose period is the period;
// other lines are ignored), idle = paid - allocated. InvalidArgument naming
// "pool_period.*" for bad input; FailedPrecondition for a missing price.
absl::StatusOr<IdleLine> ComputeIdle(const PriceBook& book,
                                     const PoolPeriod& pool_period,
                                     absl::Span<const LedgerLine> lines,
                                     const MeterOptions& options);

// A tenant's share of an idle line.
struct IdleShare {
  std::string tenant;
  int64_t micros = 0;
};

// Shares `idle` to the tenants of the lines in its pool and period in
// proportion to their allocated cost, by largest remainder: each gets the
// floor of its exact share, and the micros left over go one each to the
// largest remainders (ties to the smaller tenant id), so the shares sum
// exactly to idle_micros (a negative idle is shared the same way, negated).
// Ascending by tenant. Empty when nothing was allocated (the idle stays the
// platform's).
std::vector<IdleShare> ShareIdle(const IdleLine& idle,
                                 absl::Span<const LedgerLine> lines);

// A tenant's share of the idle line of (pool, period_start), as stored.
struct IdleShareLine {
  std::string pool;
  TimeMs period_start = 0;
  std::string tenant;
  int64_t micros = 0;
};

}  // namespace trainyard::accounting::pricing

#endif  // TRAINYARD_SERVICES_ACCOUNTING_PRICING_IDLE_H_
