#include "services/accounting/pricing/price_book.h"

#include <algorithm>
#include <string>

#include "services/lib/domain/errors.h"
#include "services/lib/domain/money.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing {
namespace {

using domain::Cat;
using domain::FieldError;
namespace reason = domain::reason;

const std::vector<PriceAt>& EmptySeries() {
  static const auto* empty = new std::vector<PriceAt>();
  return *empty;
}

const std::vector<Commitment>& EmptyCommitments() {
  static const auto* empty = new std::vector<Commitment>();
  return *empty;
}

absl::Status CheckNotClosed(TimeMs t, TimeMs closed_before,
                            std::string_view field) {
  if (t < 0 || t >= kMaxTimeMs) {
    return FieldError(field, reason::kOutOfRange,
                      Cat("must be in [0, ", kMaxTimeMs,
                          ") ms since the Unix epoch, got ", t));
  }
  if (t < closed_before) {
    return FieldError(
        field, reason::kOutOfRange,
        Cat("must not be before ", closed_before,
            " ms (the start of the first open month): closed months are "
            "immutable, record a correction as an adjustment line, got ",
            t));
  }
  return absl::OkStatus();
}

absl::Status CheckFlavor(std::string_view flavor, std::string_view field) {
  if (flavor.empty()) {
    return FieldError(field, reason::kRequired, "required");
  }
  return absl::OkStatus();
}

// Index of the version in force at t in an ascending series, or -1.
int64_t IndexAt(const std::vector<PriceAt>& series, TimeMs t) {
  auto it = std::upper_bound(
      series.begin(), series.end(), t,
      [](TimeMs v, const PriceAt& p) { return v < p.effective_time; });
  return static_cast<int64_t>(it - series.begin()) - 1;
}

// Inserts keeping ascending order; false if the instant is taken.
bool InsertUnique(std::vector<PriceAt>& series, PriceAt p) {
  auto it = std::lower_bound(
      series.begin(), series.end(), p.effective_time,
      [](const PriceAt& a, TimeMs v) { return a.effective_time < v; });
  if (it != series.end() && it->effective_time == p.effective_time) {
    return false;
  }
  series.insert(it, p);
  return true;
}

}  // namespace

std::string_view ResourceLabel(Resource resource) {
  switch (resource) {
    case Resource::kGpu:
      return "GPU";
    case Resource::kCpu:
      return "CPU";
    case Resource::kMemory:
      return "MEMORY";
  }
  return "UNKNOWN";
}

int64_t UnitMsPerUnitHour(Resource resource) {
  switch (resource) {
    case Resource::kGpu:
      return kMsPerHour;
    case Resource::kCpu:
      return int64_t{1000} * kMsPerHour;
    case Resource::kMemory:
      return (int64_t{1} << 30) * kMsPerHour;
  }
  return kMsPerHour;
}

absl::StatusOr<PriceBook> PriceBook::Create(std::string_view currency) {
  if (!domain::IsKnownCurrency(currency)) {
    return FieldError("currency", reason::kInvalidValue,
                      Cat("must be an ISO 4217 currency code, e.g. USD, got \"",
                          currency.substr(0, 16), "\""));
  }
  return PriceBook(std::string(currency));
}

absl::Status PriceBook::CheckPrice(const Price& price, std::string_view field,
                                   bool cap) const {
  const std::string micros_field = domain::JoinField(field, "micros");
  if (price.micros < 0) {
    return FieldError(micros_field, reason::kOutOfRange,
                      Cat("must not be negative, got ", price.micros));
  }
  if (cap && price.micros > kMaxPricePerUnitHourMicros) {
    return FieldError(micros_field, reason::kOutOfRange,
                      Cat("must be at most ", kMaxPricePerUnitHourMicros,
                          " (one billion per unit-hour), got ", price.micros));
  }
  if (!price.currency_code.empty()) {
    const std::string currency_field =
        domain::JoinField(field, "currency_code");
    if (!domain::IsKnownCurrency(price.currency_code)) {
      return FieldError(
          currency_field, reason::kInvalidValue,
          Cat("must be an ISO 4217 currency code, got \"",
              std::string_view(price.currency_code).substr(0, 16), "\""));
    }
    if (price.currency_code != currency_) {
      return FieldError(
          currency_field, reason::kInconsistent,
          Cat("must be the price book's currency ", currency_,
              " (one currency per book), got ", price.currency_code));
    }
  }
  return absl::OkStatus();
}

absl::Status PriceBook::AddRate(const RateVersion& rate, TimeMs closed_before) {
  TY_RETURN_IF_ERROR(CheckFlavor(rate.flavor, "rate.flavor"));
  switch (rate.resource) {
    case Resource::kGpu:
    case Resource::kCpu:
    case Resource::kMemory:
      break;
    default:
      return FieldError("rate.resource", reason::kInvalidValue,
                        "must be GPU, CPU or MEMORY");
  }
  TY_RETURN_IF_ERROR(
      CheckPrice(rate.price_per_unit_hour, "rate.price_per_unit_hour", true));
  TY_RETURN_IF_ERROR(CheckNotClosed(rate.effective_time, closed_before,
                                    "rate.effective_time"));
  std::vector<PriceAt>& series = rates_[{rate.flavor, rate.resource}];
  if (!InsertUnique(series,
                    {rate.price_per_unit_hour.micros, rate.effective_time})) {
    return FieldError(
        "rate.effective_time", reason::kDuplicate,
        Cat("a ", ResourceLabel(rate.resource), " rate of flavor ", rate.flavor,
            " already takes effect at ", rate.effective_time,
            " ms (overlapping versions)"));
  }
  return absl::OkStatus();
}

absl::Status PriceBook::AddSpotPrice(const SpotPrice& spot_price,
                                     TimeMs closed_before) {
  TY_RETURN_IF_ERROR(CheckFlavor(spot_price.flavor, "spot_price.flavor"));
  TY_RETURN_IF_ERROR(
      CheckPrice(spot_price.gpu_hour_price, "spot_price.gpu_hour_price", true));
  TY_RETURN_IF_ERROR(CheckNotClosed(spot_price.effective_time, closed_before,
                                    "spot_price.effective_time"));
  auto [it, inserted] = spot_.try_emplace(spot_price.flavor);
  if (!InsertUnique(it->second, {spot_price.gpu_hour_price.micros,
                                 spot_price.effective_time})) {
    return FieldError(
        "spot_price.effective_time", reason::kDuplicate,
        Cat("pool ", spot_price.flavor, " already has a spot price at ",
            spot_price.effective_time, " ms"));
  }
  return absl::OkStatus();
}

absl::Status PriceBook::AddCommitment(const Commitment& commitment,
                                      TimeMs closed_before) {
  TY_RETURN_IF_ERROR(CheckFlavor(commitment.flavor, "commitment.flavor"));
  TY_RETURN_IF_ERROR(CheckPrice(commitment.amount, "commitment.amount", false));
  TY_RETURN_IF_ERROR(CheckNotClosed(commitment.start_time, closed_before,
                                    "commitment.start_time"));
  if (commitment.end_time <= commitment.start_time ||
      commitment.end_time > kMaxTimeMs) {
    return FieldError(
        "commitment.end_time", reason::kOutOfRange,
        Cat("must be after start_time ", commitment.start_time, " and at most ",
            kMaxTimeMs, ", got ", commitment.end_time));
  }
  commitments_[commitment.flavor].push_back(commitment);
  return absl::OkStatus();
}

std::optional<PriceAt> PriceBook::RateAt(std::string_view flavor,
                                         Resource resource, TimeMs t) const {
  auto it = rates_.find({std::string(flavor), resource});
  if (it == rates_.end()) return std::nullopt;
  const int64_t i = IndexAt(it->second, t);
  if (i < 0) return std::nullopt;
  return it->second[static_cast<size_t>(i)];
}

std::vector<TimeMs> PriceBook::RateChanges(std::string_view flavor,
                                           Resource resource) const {
  std::vector<TimeMs> out;
  auto it = rates_.find({std::string(flavor), resource});
  if (it == rates_.end()) return out;
  out.reserve(it->second.size());
  for (const PriceAt& p : it->second) out.push_back(p.effective_time);
  return out;
}

const std::vector<PriceAt>& PriceBook::RateSeries(std::string_view flavor,
                                                  Resource resource) const {
  auto it = rates_.find({std::string(flavor), resource});
  return it == rates_.end() ? EmptySeries() : it->second;
}

const std::vector<PriceAt>& PriceBook::SpotSeries(
    std::string_view flavor) const {
  auto it = spot_.find(flavor);
  return it == spot_.end() ? EmptySeries() : it->second;
}

const std::vector<Commitment>& PriceBook::Commitments(
    std::string_view flavor) const {
  auto it = commitments_.find(flavor);
  return it == commitments_.end() ? EmptyCommitments() : it->second;
}

std::vector<RateVersion> PriceBook::AllRates() const {
  std::vector<RateVersion> out;
  for (const auto& [key, series] : rates_) {
    for (const PriceAt& p : series) {
      out.push_back(
          {key.first, key.second, {p.micros, currency_}, p.effective_time});
    }
  }
  return out;
}

std::vector<SpotPrice> PriceBook::AllSpotPrices() const {
  std::vector<SpotPrice> out;
  for (const auto& [flavor, series] : spot_) {
    for (const PriceAt& p : series) {
      out.push_back({flavor, {p.micros, currency_}, p.effective_time});
    }
  }
  return out;
}

std::vector<Commitment> PriceBook::AllCommitments() const {
  std::vector<Commitment> out;
  for (const auto& [flavor, list] : commitments_) {
    for (const Commitment& c : list) {
      out.push_back(c);
      if (out.back().amount.currency_code.empty()) {
        out.back().amount.currency_code = currency_;
      }
    }
  }
  return out;
}

}  // namespace trainyard::accounting::pricing
