#include "services/scheduler/policy/pricing.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"

namespace trainyard::scheduler::policy {
namespace {

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > kMaxInt64 - b ? kMaxInt64 : a + b;
}

}  // namespace

TimeMicros ExpectedRuntime(const PendingJob& job, const PolicyConfig& config) {
  if (job.expected_runtime_micros > 0) return job.expected_runtime_micros;
  if (job.time_limit_micros > 0) return job.time_limit_micros;
  return std::max<TimeMicros>(0, config.default_expected_runtime);
}

TimeMicros RestartOverhead(const Flavor& flavor, const PolicyConfig& config) {
  return std::max<TimeMicros>(
      0, flavor.restart_overhead_micros.value_or(config.restart_overhead));
}

TimeMicros LossPerReclaim(const PendingJob& job, const Flavor& flavor,
                          const PolicyConfig& config) {
  const TimeMicros lost =
      job.can_checkpoint
          ? std::max<TimeMicros>(0, job.checkpoint_interval_micros) / 2
          : ExpectedRuntime(job, config) / 2;
  return SaturatingAdd(lost, RestartOverhead(flavor, config));
}

TimeMicros InflatedRuntime(const PendingJob& job, const Flavor& flavor,
                           const PolicyConfig& config) {
  const TimeMicros runtime = ExpectedRuntime(job, config);
  if (!(flavor.reclaim_rate_per_hour > 0.0)) return runtime;
  const double reclaims = flavor.reclaim_rate_per_hour *
                          (static_cast<double>(runtime) / kMicrosPerHour);
  const double extra =
      reclaims * static_cast<double>(LossPerReclaim(job, flavor, config));
  if (!(extra < 9.0e18)) return kMaxInt64;
  return SaturatingAdd(runtime, std::llround(extra));
}

int64_t ExpectedCostMicros(const PendingJob& job, const Flavor& flavor,
                           const PolicyConfig& config) {
  const int64_t price = std::max<int64_t>(0, flavor.price_micros_per_gpu_hour);
  const int64_t gpus = std::max<int64_t>(0, job.worker.gpus);
  const int64_t workers = std::max<int32_t>(0, job.workers);
  const TimeMicros runtime = InflatedRuntime(job, flavor, config);
  // The magnitude check uses long double only to rule out overflow; below the
  // bound the product fits in 128 bits (< 2^63 x 3.6e9) and is exact.
  const long double approx = static_cast<long double>(price) * gpus * workers *
                             runtime / kMicrosPerHour;
  if (approx >= 9.2e18L) return kMaxInt64;
  const __int128 product =
      static_cast<__int128>(price) * gpus * workers * runtime;
  const __int128 cost = (product + kMicrosPerHour / 2) / kMicrosPerHour;
  return cost > kMaxInt64 ? kMaxInt64 : static_cast<int64_t>(cost);
}

std::vector<FlavorId> CandidateFlavors(const Snapshot& s, const PendingJob& job,
                                       const PolicyConfig& config) {
  const Queue& queue = s.queues[job.queue];
  const bool spot_ok =
      job.spot_policy == SpotPolicy::kRequired ||
      (job.spot_policy != SpotPolicy::kNever && job.can_checkpoint);
  const bool regular_ok = job.spot_policy != SpotPolicy::kRequired;
  // (group, expected cost, spot, position in the queue's list, flavor).
  std::vector<std::tuple<int, int64_t, bool, size_t, FlavorId>> keyed;
  keyed.reserve(queue.quotas.size());
  for (size_t i = 0; i < queue.quotas.size(); ++i) {
    const FlavorId f = queue.quotas[i].flavor;
    const bool spot = s.flavors[f].kind == FlavorKind::kSpot;
    if (spot ? !spot_ok : !regular_ok) continue;
    const int group =
        job.spot_policy == SpotPolicy::kPreferred && !spot ? 1 : 0;
    keyed.emplace_back(group, ExpectedCostMicros(job, s.flavors[f], config),
                       spot, i, f);
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<FlavorId> out;
  out.reserve(keyed.size());
  for (const auto& k : keyed) out.push_back(std::get<4>(k));
  return out;
}

std::string FormatMicros(int64_t micros) {
  // Magnitude as unsigned so INT64_MIN works.
  const uint64_t m = micros < 0 ? 0 - static_cast<uint64_t>(micros)
                                : static_cast<uint64_t>(micros);
  std::string frac = std::to_string(m % 1000000);
  frac.insert(0, 6 - frac.size(), '0');
  return absl::StrCat(micros < 0 ? "-" : "", m / 1000000, ".", frac);
}

}  // namespace trainyard::scheduler::policy
