// Per-tenant submission rate limits, shared by all Trainyard replicas through
// Redis, degrading to per-process limits when Redis is unavailable.

#ifndef TRAINYARD_STORAGE_REDIS_TENANT_RATE_LIMITER_H_
#define TRAINYARD_STORAGE_REDIS_TENANT_RATE_LIMITER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/redis/redis_client.h"

namespace trainyard::storage::redis {

// Token bucket per tenant, stored in Redis under "ty:rl:<tenant>" (see
// RedisClient::TakeToken). If Redis cannot answer (down, hung, or any other
// error) the decision comes from an in-process token bucket with the same
// parameters, so a Redis outage neither blocks nor unlimits submitters (each
// replica then enforces the limit on its own). Check() never fails and is
// bounded by the client's timeouts (immediate while its circuit breaker is
// open).
//
// Leasing: asking Redis for every submit would cost a round trip per request, so a tenant
// whose limit is high enough takes a lease of kLeaseWindow worth of its rate (at most a
// quarter of its burst) together with a request's own tokens, and spends it locally until
// it runs out or expires after kLeaseTtl. Unused leased tokens are dropped, never returned,
// so leasing can only under-admit (by at most one lease per replica per kLeaseTtl), never
// exceed the limit. Limits below 2 tokens per lease window are checked in Redis every time.
//
// A rate or burst <= 0 (default or per tenant) denies everything with
// retry_after = InfiniteDuration (e.g. a suspended tenant).
//
// Thread-safe. The client must outlive the limiter.
class TenantRateLimiter {
 public:
  TenantRateLimiter(RedisClient* client, double default_rate_per_second,
                    double default_burst);

  TenantRateLimiter(const TenantRateLimiter&) = delete;
  TenantRateLimiter& operator=(const TenantRateLimiter&) = delete;

  // Overrides the default limit for one tenant.
  void SetLimit(std::string tenant, double rate_per_second, double burst);

  RateDecision Check(std::string_view tenant, double cost = 1);

  // "ty:rl:<tenant>".
  static std::string KeyFor(std::string_view tenant);

  static constexpr double kLeaseWindowSeconds = 0.05;
  static constexpr absl::Duration kLeaseTtl = absl::Milliseconds(100);
  // Tokens one lease takes for `limit`, 0 when the tenant is not leased.
  static double LeaseSize(double rate_per_second, double burst);

  // Number of decisions taken by the in-process fallback so far.
  int64_t fallback_decisions() const;

 private:
  struct Limit {
    double rate_per_second = 0;
    double burst = 0;
  };
  struct Lease {
    double tokens = 0;
    std::chrono::steady_clock::time_point expires;
  };
  struct LocalBucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point last;
    Limit limit;
  };

  Limit LimitFor(std::string_view tenant) const;
  RateDecision CheckLocally(std::string_view tenant, const Limit& limit,
                            double cost);

  RedisClient* const client_;
  const Limit default_limit_;

  mutable absl::Mutex mu_;
  std::map<std::string, Limit, std::less<>> limits_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, LocalBucket, std::less<>> local_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Lease, std::less<>> leases_ ABSL_GUARDED_BY(mu_);
  int64_t fallback_decisions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainyard::storage::redis

#endif  // TRAINYARD_STORAGE_REDIS_TENANT_RATE_LIMITER_H_
