// Expected-cost flavor choice. A flavor's expected cost for a job is the
// gang's price per hour there (GPUs x price per GPU-hour + CPUs x price per
// CPU-hour + GiB of memory x price per GiB-hour, over all workers) x the
// expected runtime, where the expected runtime is the job's runtime inflated
// by the expected number of reclaims (reclaim rate per hour x runtime in
// hours) times the work lost per reclaim (half the checkpoint interval, or
// half the runtime for a job that cannot checkpoint, plus the flavor's
// restart overhead, RestartOverhead()). Money is integer micros; the only
// floating-point step is the reclaim count (rate is a double), whose product
// with the loss is rounded to the nearest microsecond with std::llround, so
// the result is deterministic. See docs/scheduling.md.
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_PRICING_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_PRICING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "services/scheduler/policy/policy_config.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy {

inline constexpr int64_t kMicrosPerHour = int64_t{3600} * 1000 * 1000;
// Flavor::price_micros_per_cpu_hour is per whole CPU, price_micros_per_gib_hour
// per GiB of memory.
inline constexpr int64_t kMillisPerCpu = 1000;
inline constexpr int64_t kBytesPerGib = int64_t{1} << 30;

// The runtime the cost model assumes for `job`: its estimate, else its time
// limit, else config.default_expected_runtime.
TimeMicros ExpectedRuntime(const PendingJob& job, const PolicyConfig& config);

// Time each restart on `flavor` loses on top of the work since the last
// checkpoint: the flavor's own restart_overhead_micros where set, else
// config.restart_overhead (never negative).
TimeMicros RestartOverhead(const Flavor& flavor, const PolicyConfig& config);

// Work lost by one reclaim of `job` on `flavor`: half its checkpoint interval
// (half its runtime if it cannot checkpoint) plus RestartOverhead().
TimeMicros LossPerReclaim(const PendingJob& job, const Flavor& flavor,
                          const PolicyConfig& config);

// The runtime inflated by expected reclaims on `flavor`:
// runtime + round(reclaim_rate_per_hour x runtime_hours x loss_per_reclaim).
// Saturates at INT64_MAX.
TimeMicros InflatedRuntime(const PendingJob& job, const Flavor& flavor,
                           const PolicyConfig& config);

// The gang's price per hour on `flavor` x `runtime` / 1 h, in micros:
//   workers x (gpus x price_micros_per_gpu_hour
//              + cpu_millis x price_micros_per_cpu_hour / 1000
//              + memory_bytes x price_micros_per_gib_hour / 2^30)
//   x runtime / kMicrosPerHour,
// rounded half up once, on the exact sum (integer arithmetic, 128-bit
// intermediates, no floating point); saturates at INT64_MAX; 0 for a
// runtime <= 0.
int64_t GangCostMicros(const PendingJob& job, const Flavor& flavor,
                       TimeMicros runtime);

// GangCostMicros() over InflatedRuntime(): the expected cost.
int64_t ExpectedCostMicros(const PendingJob& job, const Flavor& flavor,
                           const PolicyConfig& config);

// GangCostMicros() over one hour: the gang's price per hour (what a user's
// hourly spend cap, Budget::hourly, counts).
int64_t HourlyPriceMicros(const PendingJob& job, const Flavor& flavor);

// The flavors `job` may use in its queue, most preferred first:
//   - kNever: non-spot flavors; kRequired: spot flavors; kAllowed: all;
//     kPreferred: spot flavors first, then non-spot ones;
//   - a job that cannot checkpoint gets spot flavors only under kRequired;
//   - a job bound to some backends gets only the flavors offered there
//     (FlavorServes);
//   - within each group (all of them for kAllowed), lowest expected cost
//     first; ties keep the queue's order, non-spot before spot.
// The caller tries them in order and falls back to the next on missing quota
// or capacity.
// Micros as a decimal amount with six places: 178666667 -> "178.666667",
// -5 -> "-0.000005" (explanations only).
std::string FormatMicros(int64_t micros);

std::vector<FlavorId> CandidateFlavors(const Snapshot& s, const PendingJob& job,
                                       const PolicyConfig& config);

}  // namespace trainyard::scheduler::policy

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_PRICING_H_
