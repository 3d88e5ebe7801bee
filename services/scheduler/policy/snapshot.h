// The scheduler's input: a self-contained, immutable picture of the platform at
// one instant. Plain structs with dense integer ids (an id is the index of the
// entity in its Snapshot vector), so the policy can use arrays instead of maps.
// Names are carried only for explanations. The policy never reads the clock:
// "now" is part of the snapshot. See docs/scheduling.md.
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_SNAPSHOT_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_SNAPSHOT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace trainyard::scheduler::policy {

// Dense ids: index into the corresponding Snapshot vector.
using NodeId = int32_t;
using FlavorId = int32_t;
using QueueId = int32_t;
using CohortId = int32_t;
using PriorityClassId = int32_t;
using BudgetId = int32_t;
// GPU model ids: 0 means "unspecified" (on a job: any model).
using GpuModelId = int32_t;
inline constexpr GpuModelId kAnyGpuModel = 0;
// External job id (not an index).
using JobId = int64_t;
// Times are microseconds since the Unix epoch; durations are microseconds.
using TimeMicros = int64_t;
// Topology labels; kNoLabel means the node carries no such label (it then forms
// a group of its own at that level and can never satisfy a required level).
using TopologyLabel = int32_t;
inline constexpr TopologyLabel kNoLabel = -1;

// The engine that runs a node's cluster (its dispatcher's backend). A job may
// ask for some of them (WorkerShape::backends): one queue spans clusters of
// every backend, and a job that must run on Slurm, say, is placed on Slurm
// nodes only.
enum class Backend : uint8_t { kUnknown = 0, kSim, kSlurm, kKubernetes };
// A set of backends, bit (1 << Backend) each; kAnyBackend = every node, of
// whatever backend, unknown included.
using BackendSet = uint8_t;
inline constexpr BackendSet kAnyBackend = 0;
inline constexpr BackendSet BackendBit(Backend b) {
  return static_cast<BackendSet>(1u << static_cast<unsigned>(b));
}
// "unknown", "sim", "slurm", "kubernetes" (for explanations).
const char* BackendName(Backend b);

enum class Resource : int { kGpu = 0, kCpu = 1, kMemory = 2 };
inline constexpr int kNumResources = 3;
inline constexpr std::array<Resource, kNumResources> kAllResources = {
    Resource::kGpu, Resource::kCpu, Resource::kMemory};
// "gpu", "cpu", "memory".
const char* ResourceName(Resource r);

// An amount of each resource: GPUs (count), CPU (millicores), memory (bytes).
struct Resources {
  int64_t gpus = 0;
  int64_t cpu_millis = 0;
  int64_t memory_bytes = 0;

  int64_t Get(Resource r) const {
    switch (r) {
      case Resource::kGpu:
        return gpus;
      case Resource::kCpu:
        return cpu_millis;
      case Resource::kMemory:
        return memory_bytes;
    }
    return 0;
  }
  int64_t& Mutable(Resource r) {
    switch (r) {
      case Resource::kCpu:
        return cpu_millis;
      case Resource::kMemory:
        return memory_bytes;
      case Resource::kGpu:
        break;
    }
    return gpus;
  }
  Resources& operator+=(const Resources& o);
  Resources& operator-=(const Resources& o);
  friend Resources operator*(const Resources& a, int64_t k) {
    return {a.gpus * k, a.cpu_millis * k, a.memory_bytes * k};
  }
  friend bool operator==(const Resources&, const Resources&) = default;
};

enum class FlavorKind { kOnDemand, kReserved, kSpot };

struct Flavor {
  std::string name;
  FlavorKind kind = FlavorKind::kOnDemand;
  // Money is integer micros, never floating point. Prices per hour of one
  // GPU, one whole CPU (1000 cpu_millis) and one GiB (2^30 bytes) of memory;
  // a job's expected cost sums all three over its gang (pricing.h).
  int64_t price_micros_per_gpu_hour = 0;
  int64_t price_micros_per_cpu_hour = 0;
  int64_t price_micros_per_gib_hour = 0;
  // Expected reclaims per hour (spot); 0 for on-demand/reserved.
  double reclaim_rate_per_hour = 0.0;
  // Time each restart on this flavor loses on top of the work since the last
  // checkpoint (rescheduling, image pull, restore): a Slurm requeue and a
  // cloud VM replacement differ by minutes. nullopt =
  // PolicyConfig::restart_overhead (RestartOverhead() in pricing.h).
  std::optional<TimeMicros> restart_overhead_micros;
  // The backends of the clusters that offer it (their pools);
  // kAnyBackend = not known (every job may try it). A job bound to other
  // backends does not count it among its candidates (CandidateFlavors).
  BackendSet backends = kAnyBackend;
  friend bool operator==(const Flavor&, const Flavor&) = default;
};

struct Node {
  std::string name;
  int32_t cluster = 0;
  // Its cluster's backend.
  Backend backend = Backend::kUnknown;
  int32_t pool = 0;
  FlavorId flavor = 0;
  GpuModelId gpu_model = kAnyGpuModel;
  // Capacity.
  Resources capacity;
  TopologyLabel block = kNoLabel;
  // Rack labels are globally unique (not per block).
  TopologyLabel rack = kNoLabel;
  bool schedulable = true;
  // Resources already taken by running work (authoritative for capacity; the
  // running attempts below are used for quota accounting).
  Resources used;
  friend bool operator==(const Node&, const Node&) = default;
};

// Quota for one resource of one flavor, of a queue or of a cohort (quota.h).
struct ResourceQuota {
  int64_t nominal = 0;
  // How much more than nominal the queue may borrow from its cohort;
  // nullopt = unlimited. On a cohort: how much more than its subtree quota
  // (its own nominal plus what its children lend it) the whole cohort
  // subtree may borrow from the parent cohort.
  std::optional<int64_t> borrowing_limit;
  // How much of nominal the queue lends to its cohort; the rest
  // (nominal - lending_limit) is withheld for the queue itself.
  // nullopt = all of nominal may be lent. On a cohort: how much of its subtree
  // quota it lends to its parent; the rest is withheld for its subtree.
  std::optional<int64_t> lending_limit;
  friend bool operator==(const ResourceQuota&, const ResourceQuota&) = default;
};

// A queue's (or cohort's) quota for one flavor. A resource without quota
// (nullopt) in a queue's entry is not limited by quota for that flavor. A
// queue may only use flavors it lists.
struct FlavorQuota {
  FlavorId flavor = 0;
  std::array<std::optional<ResourceQuota>, kNumResources> resources;
  friend bool operator==(const FlavorQuota&, const FlavorQuota&) = default;
};

enum class QueueingStrategy { kStrictFifo, kBestEffortFifo };

// Preemption policies of a queue, as Kueue's ClusterQueue.preemption.
// Within the queue: which of its own running jobs a pending job may preempt.
enum class WithinQueuePreemption {
  kNever,
  kLowerPriority,
  // Lower priority, or equal priority and started later than the preemptor
  // was submitted.
  kLowerOrNewerEqualPriority,
};
// Reclaim within the cohort: when the queue is below its nominal quota, which
// running jobs of other queues that borrow it may preempt.
enum class ReclaimWithinCohort { kNever, kLowerPriority, kAny };
// When fair-share preemption may take a victim (Kueue's fair sharing
// preemption strategies), with A the node of the victim's side and B the
// preemptor's (QuotaTree::AlmostLca):
//   kLessThanOrEqualToFinalShare: share(B with the job) <= share(A without
//     the victim), and share(B without the job) < share(A with the victim);
//   kLessThanInitialShare: share(B with the job) < share(A with the victim).
enum class FairShareStrategy {
  kLessThanOrEqualToFinalShare,
  kLessThanInitialShare
};

struct Cohort {
  std::string name;
  std::optional<CohortId> parent;
  // The cohort's own quota, as Kueue's Cohort resource groups: per flavor and
  // resource a nominal quota that queues of its subtree (and, up to its
  // lending limit, the rest of the cohort tree) may borrow, and limits on what
  // the whole subtree borrows from / lends to the parent cohort (ignored on a
  // root cohort). Only matters for (flavor, resource) pairs that queues track:
  // it never lets a queue use a flavor, nor limits a resource, that the queue
  // itself has no quota entry for (quota.h). At most one entry per flavor.
  std::vector<FlavorQuota> quotas;
  // Fair-share weight among its siblings (> 0; 0 means "always last when
  // borrowing"): divides the cohort's share where two queues of its tree
  // are compared across it (QuotaTree::AlmostLca).
  double weight = 1.0;
  friend bool operator==(const Cohort&, const Cohort&) = default;
};

struct Queue {
  std::string name;
  std::string tenant;
  std::optional<CohortId> cohort;
  // Fair-share weight (> 0; 0 means "always last when borrowing").
  double weight = 1.0;
  QueueingStrategy strategy = QueueingStrategy::kBestEffortFifo;
  // Order matters: flavors of the same class (non-spot / spot) are tried in
  // this order.
  std::vector<FlavorQuota> quotas;
  // Preemption (docs/scheduling.md, "Preemption"); all off by default.
  WithinQueuePreemption within_queue_preemption = WithinQueuePreemption::kNever;
  ReclaimWithinCohort reclaim_within_cohort = ReclaimWithinCohort::kNever;
  // Kueue's borrowWithinCohort (LowerPriority, maxPriorityThreshold): with
  // reclaim on, a job that will borrow may still reclaim from borrowing
  // jobs of other queues whose priority is below its own and at most this.
  // nullopt: reclaim only while the job keeps its queue within nominal.
  std::optional<int32_t> borrow_within_cohort_max_priority;
  // Whether jobs of this queue may preempt borrowing jobs of other queues in
  // its cohort tree whose fair share would stay above the preemptor's.
  bool fair_share_preemption = false;
  FairShareStrategy fair_share_strategy =
      FairShareStrategy::kLessThanOrEqualToFinalShare;
  // Flavor fungibility (Kueue's flavorFungibility), over the job's candidate
  // flavors in order. When a flavor takes the job only by borrowing:
  // try_next_when_borrowing tries the later flavors for one within nominal
  // quota first, and borrows on the first such flavor only if none is; off,
  // it borrows there at once. When a flavor takes it only by preempting:
  // try_next_when_preempting tries every later flavor without preemption
  // first (preemption comes after all of them); off, it preempts on that
  // flavor at once if a plan exists there.
  bool try_next_when_borrowing = true;
  bool try_next_when_preempting = true;
  // The budget its jobs spend (usually the tenant's); none = unlimited.
  std::optional<BudgetId> budget;
  // A running job of this queue younger than this (now - start time) is
  // never a victim, by any preemption rule; the larger of this and
  // PolicyConfig::min_runtime_guarantee applies (MinRuntime()).
  TimeMicros min_runtime = 0;
  friend bool operator==(const Queue&, const Queue&) = default;
};

// Money a tenant (or project) may still commit. A job is admitted on a flavor
// only if its expected cost there (pricing.h) fits in what remains of its
// queue's budget (Queue::budget, usually the tenant's) and of its own
// (PendingJob::budget, usually its project's), where it has them; each
// admission or reservation commits its expected cost to both. Jobs that fit
// nowhere stay pending with BUDGET_HOLD, before an overrun rather than after.
//
// A budget may instead be a user's hourly spend cap in a tenant or project
// (`hourly`; PendingJob::tenant_rate_cap, project_rate_cap): it limits a rate,
// not an amount, so an admission is charged the gang's price per hour on the
// flavor (HourlyPriceMicros) rather than its expected cost, and what remains
// is the cap less the hourly price of the user's running work in the scope.
struct Budget {
  std::string name;
  // Integer micros; may be negative (already overspent: everything waits).
  int64_t remaining_micros = 0;
  // A user's hourly spend cap: its user and cap (explanations only).
  bool hourly = false;
  std::string user;
  int64_t hourly_cap_micros = 0;
  friend bool operator==(const Budget&, const Budget&) = default;
};

struct PriorityClass {
  std::string name;
  int32_t value = 0;
  bool preemptible = true;
};

// A running attempt of a job (the whole gang).
struct RunningAttempt {
  JobId job = 0;
  QueueId queue = 0;
  FlavorId flavor = 0;
  PriorityClassId priority_class = 0;
  // Node of each worker.
  std::vector<NodeId> placement;
  // Total resources of the whole gang (counted against the queue's quota).
  Resources resources;
  TimeMicros start_time = 0;
  std::optional<TimeMicros> last_checkpoint_time;
  // The attempt is stopped at start_time + time_limit_micros; 0 = no limit.
  // Backfill plans reservations around these ends.
  int64_t time_limit_micros = 0;
  // What each worker holds on its node (capacity accounting), where it is not
  // an equal share of `resources`: a job being preempted, or one whose queue
  // is gone, holds its nodes but no quota. Zero = the equal share
  // (WorkerShare() in preemption.h).
  Resources worker_resources;
};

// What one worker needs of a node: its resources, and which nodes may hold
// it at all (a GPU model, backends).
struct WorkerShape {
  int64_t gpus = 0;
  GpuModelId gpu_model = kAnyGpuModel;  // Only checked when gpus > 0.
  // The backends whose nodes may hold it (the job's backend preference);
  // kAnyBackend = every node. (Beside gpu_model: it takes no room.)
  BackendSet backends = kAnyBackend;
  int64_t cpu_millis = 0;
  int64_t memory_bytes = 0;
  Resources AsResources() const { return {gpus, cpu_millis, memory_bytes}; }
};

// Whether `node` is of the kind a worker of `shape` may run on: its GPU model
// (when the worker has GPUs and names one) and its backend. The one rule
// placement, its indexes and preemption share; schedulability and free
// resources are checked apart.
inline bool NodeMatches(const Node& node, const WorkerShape& shape) {
  if (shape.gpus > 0 && shape.gpu_model != kAnyGpuModel &&
      node.gpu_model != shape.gpu_model) {
    return false;
  }
  return shape.backends == kAnyBackend ||
         (shape.backends & BackendBit(node.backend)) != 0;
}

// Whether `flavor` is offered on a backend a worker of `shape` may use (or
// either side says any).
inline bool FlavorServes(const Flavor& flavor, const WorkerShape& shape) {
  return shape.backends == kAnyBackend || flavor.backends == kAnyBackend ||
         (shape.backends & flavor.backends) != 0;
}

enum class TopologyLevel { kNone, kBlock, kRack };
// kRequiredByBudget: spot only, as kRequired, because a budget of the job's
// tenant or project is past its RESTRICT_TO_SPOT threshold (explanations say
// so).
enum class SpotPolicy {
  kNever,
  kAllowed,
  kPreferred,
  kRequired,
  kRequiredByBudget
};

// Whether the policy allows spot flavors only.
inline bool SpotOnly(SpotPolicy p) {
  return p == SpotPolicy::kRequired || p == SpotPolicy::kRequiredByBudget;
}

// "never", "allowed", "preferred", "required", "required by a budget" (for
// explanations).
const char* SpotPolicyName(SpotPolicy p);

struct PendingJob {
  JobId id = 0;
  std::string name;
  QueueId queue = 0;
  // The job's own budget (usually its project's), which it spends in
  // addition to its queue's (Queue::budget): it is admitted only where its
  // expected cost fits both. None = only the queue's budget limits it; the
  // queue's own budget counts once.
  std::optional<BudgetId> budget;
  // The hourly spend caps (Budget::hourly) of the job's user in its tenant
  // and in its project, where they have one: its hourly price must fit
  // both as well.
  std::optional<BudgetId> tenant_rate_cap;
  std::optional<BudgetId> project_rate_cap;
  PriorityClassId priority_class = 0;
  TimeMicros submit_time = 0;
  int32_t workers = 1;
  WorkerShape worker;
  TopologyLevel required_topology = TopologyLevel::kNone;
  SpotPolicy spot_policy = SpotPolicy::kAllowed;
  // 0 = no limit. Used as the expected runtime when there is no estimate.
  int64_t time_limit_micros = 0;
  // Expected-cost flavor choice (pricing.h). Estimated runtime; 0 = unknown
  // (the time limit, else PolicyConfig::default_expected_runtime, is used).
  int64_t expected_runtime_micros = 0;
  // Whether the job checkpoints; one that does not is placed on spot only
  // under SpotPolicy::kRequired (or kRequiredByBudget).
  bool can_checkpoint = true;
  // Interval between checkpoints; a reclaim loses half of it on average
  // (0 = checkpoints continuously: only the restart overhead is lost).
  int64_t checkpoint_interval_micros = 0;
};

struct Snapshot {
  TimeMicros now = 0;
  std::vector<Flavor> flavors;
  std::vector<Node> nodes;
  std::vector<Cohort> cohorts;
  std::vector<Queue> queues;
  std::vector<PriorityClass> priority_classes;
  std::vector<RunningAttempt> running;
  std::vector<PendingJob> pending;
  std::vector<Budget> budgets;
  // Optional names for GPU model ids (index = id), for explanations only.
  std::vector<std::string> gpu_model_names;
};

// Checks referential integrity: ids in range, no cohort cycles, positive gang
// sizes, non-negative quantities (resources, queue and cohort quotas, prices,
// reclaim rates, restart overheads, queue minimum runtimes, time limits,
// runtime estimates, checkpoint intervals), unique pending job ids, at most one
// quota entry per flavor per queue and per cohort. The error names the field,
// e.g. "flavors[2].reclaim_rate_per_hour: must be finite and >= 0". Decide()
// refuses (every job pending with INVALID_SNAPSHOT) a snapshot that fails this.
absl::Status ValidateSnapshot(const Snapshot& snapshot);

}  // namespace trainyard::scheduler::policy

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_SNAPSHOT_H_
