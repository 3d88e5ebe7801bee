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

using U128 = unsigned __int128;

struct DivMod {
  U128 quotient;
  U128 remainder;
};

// a x b into `product`; false where it overflows 128 bits. Where a fits in
// 64 bits it cannot (one 64 x 64-bit multiplication).
bool Multiply(U128 a, uint64_t b, U128* product) {
  if (a >> 64 == 0) {
    *product = a * b;
    return true;
  }
  return !__builtin_mul_overflow(a, U128{b}, product);
}

// n / kDivisor and n % kDivisor, in 64 bits (a multiplication, for a
// constant divisor) where n fits: 128-bit division is a library call.
template <int64_t kDivisor>
DivMod Divide(U128 n) {
  constexpr uint64_t d = static_cast<uint64_t>(kDivisor);
  if (n <= std::numeric_limits<uint64_t>::max()) {
    const uint64_t m = static_cast<uint64_t>(n);
    return {m / d, m % d};
  }
  return {n / d, n % d};
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
  return GangCostMicros(job, flavor, InflatedRuntime(job, flavor, config));
}

int64_t HourlyPriceMicros(const PendingJob& job, const Flavor& flavor) {
  return GangCostMicros(job, flavor, kMicrosPerHour);
}

int64_t GangCostMicros(const PendingJob& job, const Flavor& flavor,
                       TimeMicros runtime) {
  const uint64_t workers =
      static_cast<uint64_t>(std::max<int32_t>(0, job.workers));
  if (runtime <= 0 || workers == 0) return 0;
  auto amount = [](int64_t v) {
    return static_cast<U128>(std::max<int64_t>(0, v));
  };
  // The gang's price per hour in micros is
  //   gpus x gpu_price + cpu_millis x cpu_price / 1000
  //     + memory_bytes x gib_price / 2^30,
  // kept exact as whole + fraction / F with F = 1000 x 2^30. The cost is
  // round_half_up(rate x runtime / 1 h) = floor((N + D / 2) / D) with
  // N = (whole x F + fraction) x runtime and D = F x kMicrosPerHour,
  // evaluated without overflow by splitting whole x runtime at whole hours.
  // A product that overflows 128 bits (a 64 x 64-bit one cannot) means a
  // cost far above INT64_MAX (runtime >= 1 us): saturated.
  // (Jobs and flavors without CPU and memory prices skip their terms.)
  constexpr int kGibShift = 30;
  static_assert(kBytesPerGib == int64_t{1} << kGibShift);
  U128 whole;
  if (!Multiply(
          amount(job.worker.gpus) * amount(flavor.price_micros_per_gpu_hour),
          workers, &whole)) {
    return kMaxInt64;
  }
  // In 1 / F micros per hour; below 2^41.
  U128 fraction = 0;
  if (flavor.price_micros_per_cpu_hour > 0 && job.worker.cpu_millis > 0) {
    U128 gang_cpu;
    if (!Multiply(amount(job.worker.cpu_millis) *
                      amount(flavor.price_micros_per_cpu_hour),
                  workers, &gang_cpu)) {
      return kMaxInt64;
    }
    const DivMod cpus = Divide<kMillisPerCpu>(gang_cpu);
    if (__builtin_add_overflow(whole, cpus.quotient, &whole)) return kMaxInt64;
    fraction += cpus.remainder << kGibShift;
  }
  if (flavor.price_micros_per_gib_hour > 0 && job.worker.memory_bytes > 0) {
    U128 gang_memory;
    if (!Multiply(amount(job.worker.memory_bytes) *
                      amount(flavor.price_micros_per_gib_hour),
                  workers, &gang_memory) ||
        __builtin_add_overflow(whole, gang_memory >> kGibShift, &whole)) {
      return kMaxInt64;
    }
    fraction +=
        (gang_memory & (kBytesPerGib - 1)) * static_cast<U128>(kMillisPerCpu);
  }
  U128 scaled;
  if (!Multiply(whole, static_cast<uint64_t>(runtime), &scaled))
    return kMaxInt64;
  const DivMod hours = Divide<kMicrosPerHour>(scaled);
  U128 cost = hours.quotient;
  if (fraction == 0) {
    // floor((remainder + H / 2) / H), remainder < H.
    cost += 2 * hours.remainder >= static_cast<U128>(kMicrosPerHour) ? 1 : 0;
  } else {
    // floor((remainder x F + fraction x runtime + D / 2) / D): below 2^105;
    // D = 2^30 x (1000 x H), and floor(floor(n / a) / b) = floor(n / ab).
    const U128 rest = hours.remainder * (U128{kMillisPerCpu} << kGibShift) +
                      fraction * static_cast<U128>(runtime) +
                      (U128{kMillisPerCpu * kMicrosPerHour} << (kGibShift - 1));
    cost += Divide<kMillisPerCpu * kMicrosPerHour>(rest >> kGibShift).quotient;
  }
  return cost > static_cast<U128>(kMaxInt64) ? kMaxInt64
                                             : static_cast<int64_t>(cost);
}

std::vector<FlavorId> CandidateFlavors(const Snapshot& s, const PendingJob& job,
                                       const PolicyConfig& config) {
  const Queue& queue = s.queues[job.queue];
  const bool spot_ok =
      SpotOnly(job.spot_policy) ||
      (job.spot_policy != SpotPolicy::kNever && job.can_checkpoint);
  const bool regular_ok = !SpotOnly(job.spot_policy);
  // (group, expected cost, spot, position in the queue's list, flavor).
  std::vector<std::tuple<int, int64_t, bool, size_t, FlavorId>> keyed;
  keyed.reserve(queue.quotas.size());
  for (size_t i = 0; i < queue.quotas.size(); ++i) {
    const FlavorId f = queue.quotas[i].flavor;
    const bool spot = s.flavors[f].kind == FlavorKind::kSpot;
    if (spot ? !spot_ok : !regular_ok) continue;
    if (!FlavorServes(s.flavors[f], job.worker)) continue;
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
