// The price book of chargeback: versioned rates per flavor and resource, spot
// prices as a time series per spot pool, and reserved commitments per pool.
// Pure and deterministic (no I/O); money in int64 micro-units of the book's one
// currency; times in milliseconds since the Unix epoch (UTC). See
// docs/accounting.md.
#ifndef TRAINYARD_SERVICES_ACCOUNTING_PRICING_PRICE_BOOK_H_
#define TRAINYARD_SERVICES_ACCOUNTING_PRICING_PRICE_BOOK_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard::accounting::pricing {

// Milliseconds since the Unix epoch, UTC.
using TimeMs = int64_t;
inline constexpr TimeMs kMsPerHour = 3'600'000;
// Accepted times: [0, kMaxTimeMs), 1970-01-01 to 10000-01-01 UTC.
inline constexpr TimeMs kMaxTimeMs = 253'402'300'800'000;

// A priced resource. Usage is metered in exact integer unit-milliseconds:
//   kGpu     GPU-ms        (whole GPUs × ms),      priced per GPU-hour
//   kCpu     millicore-ms  (CPU millicores × ms),  priced per core-hour
//   kMemory  byte-ms       (bytes × ms),           priced per GiB-hour
enum class Resource { kGpu = 0, kCpu = 1, kMemory = 2 };
inline constexpr Resource kAllResources[] = {Resource::kGpu, Resource::kCpu,
                                             Resource::kMemory};

// "GPU", "CPU", "MEMORY".
std::string_view ResourceLabel(Resource resource);
// Unit-ms in one priced unit-hour: 3,600,000 (GPU-hour), 3,600,000,000
// (core-hour = 1000 millicores × 1 h), 3,865,470,566,400,000 (GiB-hour =
// 2^30 bytes × 1 h).
int64_t UnitMsPerUnitHour(Resource resource);

// Largest accepted price per unit-hour: 10^15 micros (one billion currency
// units per unit-hour). Anything above is a typo, and it keeps every line of a
// plausible job far from int64 overflow.
inline constexpr int64_t kMaxPricePerUnitHourMicros = 1'000'000'000'000'000;

// An amount of money: micros of an ISO 4217 currency (empty = the book's).
// The same shape as trainyard.v1.Money.
struct Price {
  int64_t micros = 0;
  std::string currency_code;
};

// A rate version: the price of one unit-hour of `resource` on `flavor` from
// `effective_time` (inclusive) until the next version of the same flavor and
// resource.
struct RateVersion {
  std::string flavor;
  Resource resource = Resource::kGpu;
  Price price_per_unit_hour;
  TimeMs effective_time = 0;
};

// A spot price observation of a spot pool (flavor), per GPU-hour. It is fresh
// from `effective_time` for the meter's max age (default 2 h) or until the
// next observation of the pool, whichever comes first.
struct SpotPrice {
  std::string flavor;
  Price gpu_hour_price;
  TimeMs effective_time = 0;
};

// A reserved commitment: the platform pays `amount` for `flavor`'s capacity
// over [start_time, end_time), whether it is used or not. Commitments of one
// pool add up where they overlap.
struct Commitment {
  std::string flavor;
  Price amount;
  TimeMs start_time = 0;
  TimeMs end_time = 0;
};

// A price in force at an instant and the instant it took effect.
struct PriceAt {
  int64_t micros = 0;
  TimeMs effective_time = 0;
};

// The price book. Every Add validates its input against the book and either
// adds it or returns InvalidArgument naming the field (e.g.
// "rate.price_per_unit_hour.micros: must not be negative, got -1") and
// changes nothing. `closed_before` is the start of the first open month: an
// entry taking effect before it would rewrite a closed month (closed months
// are immutable; corrections are adjustment lines), and is refused.
class PriceBook {
 public:
  // A book in `currency`, an ISO 4217 code (IsKnownCurrency); InvalidArgument
  // on "currency" otherwise.
  static absl::StatusOr<PriceBook> Create(std::string_view currency);

  const std::string& currency() const { return currency_; }

  // Field errors under "rate.": flavor (required), price_per_unit_hour.micros
  // (0 ≤ micros ≤ kMaxPricePerUnitHourMicros),
  // price_per_unit_hour.currency_code (ISO 4217, and the book's),
  // effective_time (in [0, kMaxTimeMs), not before closed_before; no other
  // version of the same flavor and resource at the same instant).
  absl::Status AddRate(const RateVersion& rate, TimeMs closed_before);
  // The same rules under "spot_price." (flavor, gpu_hour_price.*,
  // effective_time: one observation per pool and instant).
  absl::Status AddSpotPrice(const SpotPrice& spot_price, TimeMs closed_before);
  // Under "commitment.": flavor, amount.* (0 ≤ micros), start_time (not
  // before closed_before), end_time (after start_time).
  absl::Status AddCommitment(const Commitment& commitment,
                             TimeMs closed_before);

  // The rate version of (flavor, resource) in force at t, if any.
  std::optional<PriceAt> RateAt(std::string_view flavor, Resource resource,
                                TimeMs t) const;
  // Effective times of the versions of (flavor, resource), ascending.
  std::vector<TimeMs> RateChanges(std::string_view flavor,
                                  Resource resource) const;
  // The versions of (flavor, resource), ascending by effective_time (empty if
  // none).
  const std::vector<PriceAt>& RateSeries(std::string_view flavor,
                                         Resource resource) const;
  // Spot observations of a pool, ascending by effective_time (empty if none).
  const std::vector<PriceAt>& SpotSeries(std::string_view flavor) const;
  // Commitments of a pool, in the order added (empty if none).
  const std::vector<Commitment>& Commitments(std::string_view flavor) const;

  // Everything, for listing: rates by flavor, resource, effective time; spot
  // prices by flavor, effective time; commitments by flavor, then as added.
  std::vector<RateVersion> AllRates() const;
  std::vector<SpotPrice> AllSpotPrices() const;
  std::vector<Commitment> AllCommitments() const;

 private:
  explicit PriceBook(std::string currency) : currency_(std::move(currency)) {}
  absl::Status CheckPrice(const Price& price, std::string_view field,
                          bool cap) const;

  std::string currency_;
  // Ascending by effective_time, unique times.
  std::map<std::pair<std::string, Resource>, std::vector<PriceAt>, std::less<>>
      rates_;
  std::map<std::string, std::vector<PriceAt>, std::less<>> spot_;
  std::map<std::string, std::vector<Commitment>, std::less<>> commitments_;
};

}  // namespace trainyard::accounting::pricing

#endif  // TRAINYARD_SERVICES_ACCOUNTING_PRICING_PRICE_BOOK_H_
