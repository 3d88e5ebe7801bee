// Equivalence classes (docs/scheduling.md, "Engine"): jobs that get the same
// decision in the same state share a class, and a class that failed is not
// evaluated again while that state lasts. ClassTable interns the classes;
// ClassFailure is the per-class record of a cycle's failure and of the
// class's last explanation. Internal to the policy library (engine.h).
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_JOB_CLASSES_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_JOB_CLASSES_H_

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "services/scheduler/policy/decisions.h"
#include "services/scheduler/policy/explanation.h"
#include "services/scheduler/policy/policy_config.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy::internal {

// Interns equivalence classes. A class holds everything a job's admission
// attempt depends on besides the cycle state: queue, its own budget and its
// user's hourly spend caps (if any),
// gang size, worker shape, topology requirement, its candidate flavors in
// order (CandidateFlavors(), which folds in the spot policy and the pricing
// inputs), its time limit (backfill) and, where the queue or the job has a
// budget, its pricing inputs (expected cost), and, for a queue with
// preemption (or with
// PolicyConfig::hold_borrowing_for_priority), the priority value and
// (LowerOrNewerEqualPriority) the submit time.
class ClassTable {
 public:
  int32_t ClassOf(const Snapshot& s, const PolicyConfig& config,
                  const PendingJob& job);
  size_t size() const { return info_.size(); }
  // The candidate flavors of a class's jobs, most preferred first.
  const std::vector<FlavorId>& FlavorsOf(int32_t job_class) const {
    return flavor_lists_[info_[job_class].flavors];
  }
  // The first job seen of a class (its name dropped). Everything a failed
  // admission attempt reads of a job is the same for every job of its class,
  // so the engine evaluates this compact copy instead of the (cold) job.
  const PendingJob& RepresentativeOf(int32_t job_class) const {
    return representatives_[job_class];
  }
  // Classes with equal worker shapes (as placement sees them) share a dense
  // shape id < num_shapes().
  int32_t ShapeOf(int32_t job_class) const { return info_[job_class].shape; }
  // Where FlavorsOf() and ShapeOf() read (for prefetching).
  const void* InfoAddress(int32_t job_class) const { return &info_[job_class]; }
  size_t num_shapes() const { return shape_ids_.size(); }
  // Each (budget, queue) once where a class of the queue has that budget of
  // its own (PendingJob::budget, tenant_rate_cap, project_rate_cap): whose
  // failures a spend of the budget may change (EngineState::Charge).
  const std::vector<std::pair<BudgetId, QueueId>>& JobBudgetQueues() const {
    return job_budget_queues_;
  }
  // Unique per table contents: changes whenever clear() renumbers classes,
  // so a runner may keep per-class data across cycles while it is the same.
  uint64_t generation() const { return generation_; }
  void clear();

 private:
  using Key =
      std::tuple<QueueId, BudgetId, BudgetId, BudgetId, int32_t, int64_t,
                 GpuModelId, int64_t, int64_t, BackendSet, TopologyLevel,
                 int32_t, int64_t, int64_t, bool, int64_t, int64_t, TimeMicros>;
  absl::flat_hash_map<Key, int32_t> ids_;
  using PricingKey = std::tuple<QueueId, SpotPolicy, int64_t, int64_t, int64_t,
                                int64_t, int64_t, bool, int64_t, BackendSet>;
  absl::flat_hash_map<PricingKey, int32_t> list_of_pricing_;
  absl::flat_hash_map<std::vector<FlavorId>, int32_t> list_ids_;
  std::vector<std::vector<FlavorId>> flavor_lists_;
  // Per class, side by side (a class's first attempt in a cycle reads both):
  // its list in flavor_lists_ and its shape id.
  struct Info {
    int32_t flavors;
    int32_t shape;
  };
  std::vector<Info> info_;
  std::vector<PendingJob> representatives_;
  // GPUs, GPU model (kAnyGpuModel without GPUs), CPU, memory, backends.
  using WorkerKey =
      std::tuple<int64_t, GpuModelId, int64_t, int64_t, BackendSet>;
  absl::flat_hash_map<WorkerKey, int32_t> shape_ids_;
  absl::flat_hash_set<std::pair<BudgetId, QueueId>> job_budget_pairs_;
  std::vector<std::pair<BudgetId, QueueId>> job_budget_queues_;
  int32_t empty_list_ = -1;
  uint64_t generation_ = NewGeneration();
  static uint64_t NewGeneration();
};

// Details kept per class; an explanation with more is not kept.
constexpr size_t kKeptDetails = 4;

// Per class. What it got when it last failed in this cycle, and the state it
// saw: the quota epoch of the queue's cohort tree and the capacity epoch of
// each candidate flavor. And, across cycles, its last explanation with the
// details it was formatted from (a failure's reason and message are these).
// One record, so that a job's attempt reads one (prefetched) cache line.
struct alignas(64) ClassFailure {
  // The first cache line holds everything a job that reuses the failure
  // reads (ScanRun() included); the static_assert below keeps it so.
  // The cycle (EngineState::cycle) of its failure: valid in that cycle only.
  uint32_t cycle = 0;
  PendingReason reason = PendingReason::kNoCapacity;
  // Whether it went on to a reservation search (which failed); a job that
  // reuses the failure counts that search too, so that the search limit is
  // reached exactly as without the shortcut.
  bool searched = false;
  // The last explanation: `message` was formatted from `details`.
  bool text_valid = false;
  uint8_t num_details = 0;
  // For speculative runs (flavor ids below 32): the flavors whose capacity
  // its placements depended on (where no index says more), and those whose
  // quota state it read (its candidate flavors).
  uint32_t flavor_mask = 0;
  uint32_t quota_mask = 0;
  // The state it depended on when it failed (EngineState::Stamp): the quota
  // epochs of its cohort tree on its candidate flavors, its queue's budget
  // epoch (which covers the queue's budget and its classes' own budgets),
  // and the capacity epochs of its candidate flavors, less those at
  // positions in `skip` (where it failed before placement: on budget or
  // quota).
  uint64_t stamp = 0;
  const std::vector<FlavorId>* flavors = nullptr;
  uint64_t skip = 0;
  // For speculative runs: the placement indexes (by id, below 64) whose
  // counts its placements depended on.
  uint64_t index_mask = 0;
  Message message;
};
static_assert(sizeof(ClassFailure) == 64, "one cache line per class");

// Per class: the details its last explanation (ClassFailure::message) was
// formatted from, read only where a failure is explained again (apart from
// ClassFailure, so that the records reused within a cycle stay small).
struct alignas(64) KeptDetails {
  Detail details[kKeptDetails];
};
static_assert(offsetof(ClassFailure, message) + sizeof(Message) <= 64,
              "a reused failure is read from one cache line");

}  // namespace trainyard::scheduler::policy::internal

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_JOB_CLASSES_H_
