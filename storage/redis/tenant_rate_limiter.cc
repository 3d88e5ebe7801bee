#include "storage/redis/tenant_rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace trainyard::storage::redis {
namespace {

bool Usable(double rate, double burst) {
  return std::isfinite(rate) && rate > 0 && std::isfinite(burst) && burst > 0;
}

}  // namespace

TenantRateLimiter::TenantRateLimiter(RedisClient* client,
                                     double default_rate_per_second,
                                     double default_burst)
    : client_(client), default_limit_{default_rate_per_second, default_burst} {}

void TenantRateLimiter::SetLimit(std::string tenant, double rate_per_second,
                                 double burst) {
  absl::MutexLock lock(&mu_);
  limits_[std::move(tenant)] = Limit{rate_per_second, burst};
}

std::string TenantRateLimiter::KeyFor(std::string_view tenant) {
  return absl::StrCat("ty:rl:", internal::AsAbsl(tenant));
}

int64_t TenantRateLimiter::fallback_decisions() const {
  absl::MutexLock lock(&mu_);
  return fallback_decisions_;
}

TenantRateLimiter::Limit TenantRateLimiter::LimitFor(
    std::string_view tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = limits_.find(tenant);
  return it != limits_.end() ? it->second : default_limit_;
}

double TenantRateLimiter::LeaseSize(double rate_per_second, double burst) {
  const double size = std::floor(std::min(rate_per_second * kLeaseWindowSeconds, burst / 4));
  return size >= 2 ? size : 0;
}

RateDecision TenantRateLimiter::Check(std::string_view tenant, double cost) {
  if (!(std::isfinite(cost) && cost >= 0)) cost = 1;
  const Limit limit = LimitFor(tenant);
  if (!Usable(limit.rate_per_second, limit.burst)) {
    return RateDecision{false, absl::InfiniteDuration(), 0};
  }
  const double lease = LeaseSize(limit.rate_per_second, limit.burst);
  if (lease > 0) {
    const auto now = std::chrono::steady_clock::now();
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(tenant);
    if (it != leases_.end() && now < it->second.expires && it->second.tokens >= cost) {
      it->second.tokens -= cost;
      return RateDecision{true, absl::ZeroDuration(), it->second.tokens};
    }
  }
  if (lease > 0) {
    // This request's tokens plus a new lease, in one round trip.
    absl::StatusOr<RateDecision> leased = client_->TakeToken(
        KeyFor(tenant), limit.rate_per_second, limit.burst, cost + lease);
    if (leased.ok() && leased->allowed) {
      const auto now = std::chrono::steady_clock::now();
      absl::MutexLock lock(&mu_);
      Lease& l = leases_[std::string(tenant)];
      l.tokens = lease;
      l.expires = now + absl::ToChronoNanoseconds(kLeaseTtl);
      return RateDecision{true, absl::ZeroDuration(), leased->remaining + lease};
    }
    if (!leased.ok()) return CheckLocally(tenant, limit, cost);
    // Not enough for a lease: fall through and ask for this request alone.
  }
  absl::StatusOr<RateDecision> decision = client_->TakeToken(
      KeyFor(tenant), limit.rate_per_second, limit.burst, cost);
  if (decision.ok()) return *decision;
  return CheckLocally(tenant, limit, cost);
}

RateDecision TenantRateLimiter::CheckLocally(std::string_view tenant,
                                             const Limit& limit, double cost) {
  const auto now = std::chrono::steady_clock::now();
  absl::MutexLock lock(&mu_);
  ++fallback_decisions_;
  auto it = local_.find(tenant);
  if (it == local_.end()) {
    it = local_
             .emplace(std::string(tenant), LocalBucket{limit.burst, now, limit})
             .first;
  }
  LocalBucket& bucket = it->second;
  if (bucket.limit.rate_per_second != limit.rate_per_second ||
      bucket.limit.burst != limit.burst) {
    bucket.limit = limit;  // Limit changed: keep the tokens, clamp below.
  }
  const double elapsed =
      std::chrono::duration<double>(now - bucket.last).count();
  if (elapsed > 0) {
    bucket.tokens += elapsed * limit.rate_per_second;
    bucket.last = now;
  }
  bucket.tokens = std::min(bucket.tokens, limit.burst);
  RateDecision decision;
  if (cost <= bucket.tokens) {
    bucket.tokens -= cost;
    decision.allowed = true;
  } else if (cost > limit.burst) {
    decision.retry_after = absl::InfiniteDuration();
  } else {
    decision.retry_after = absl::Ceil(
        absl::Seconds((cost - bucket.tokens) / limit.rate_per_second),
        absl::Microseconds(1));
  }
  decision.remaining = bucket.tokens;
  return decision;
}

}  // namespace trainyard::storage::redis
