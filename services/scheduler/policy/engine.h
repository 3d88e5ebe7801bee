// The one scheduling engine behind Decide() (policy.h) and the incremental
// Scheduler (incremental.h). Internal to the policy library: callers use
// Decide() or Scheduler.
//
// One cycle takes the best queue head (priority, aging, weighted fair share,
// submit time) until every queue is exhausted, and for each job tries its
// candidate flavors in expected-cost order (pricing.h): quota (quota.h), then
// placement, then preemption (preemption.h), then a reservation and backfill
// (docs/scheduling.md, "Backfill"). It gets there fast with
//   - a free-capacity index per (flavor, worker shape): per rack, a histogram
//     of how many workers each node can still hold, so a gang's capacity check
//     is O(max workers per node) and a placement looks only at the racks and
//     nodes it chooses among; the result equals PlaceGang's (placement.h);
//   - equivalence classes: jobs with the same queue, gang size, worker shape,
//     topology requirement, spot policy and pricing inputs (and, where the
//     queue preempts or borrowing holds are on, priority) get the same
//     decision while the quota tree of their queue and the capacity of their
//     candidate flavors are unchanged,
//     so a failed class is not re-evaluated (Kueue's equivalence hashing);
//   - speculative runs: once admissions have stopped for a while, a queue's
//     next jobs that would fail without changing the state are taken from
//     its own order without a round through the heap of heads each, and
//     given back to be attempted at their turn when an earlier attempt
//     changes what they depend on (engine.cc, "Speculative runs");
//   - the free-capacity indexes kept across cycles by the incremental
//     Scheduler while the nodes are the same but for their use;
//   - explanations kept per class across cycles: a failed attempt records
//     why each flavor failed compactly (Detail in engine.cc) and reuses the
//     class's last text while the records are equal, so steady-state cycles
//     format and allocate few texts; texts live in shared blocks, so copying
//     a Message touches one hot reference count;
//   - quota availability remembered per (queue, flavor) while the quota
//     epoch of the queue's cohort tree on the flavor is unchanged.
// PolicyConfig::use_placement_index and use_equivalence_classes turn both off,
// so tests can check that they never change a decision.
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_ENGINE_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/quota.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy::internal {

// A pending job in its queue's order: priority (descending), submit time, id;
// `index` is its position in Snapshot::pending.
struct QueueEntry {
  int64_t neg_priority;
  TimeMicros submit_time;
  JobId id;
  int index;
  // Equivalence class: jobs with equal class keys get equal decisions in
  // equal states.
  int32_t job_class;
};

bool EntryLess(const QueueEntry& a, const QueueEntry& b);

// Interns equivalence classes. A class holds everything a job's admission
// attempt depends on besides the cycle state: queue, gang size, worker shape,
// topology requirement, its candidate flavors in order (CandidateFlavors(),
// which folds in the spot policy and the pricing inputs), its time limit
// (backfill) and, where the queue has a budget, its pricing inputs (expected
// cost), and, for a queue with preemption (or with
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
  // Unique per table contents: changes whenever clear() renumbers classes,
  // so a runner may keep per-class data across cycles while it is the same.
  uint64_t generation() const { return generation_; }
  void clear();

 private:
  using Key = std::tuple<QueueId, int32_t, int64_t, GpuModelId, int64_t,
                         int64_t, TopologyLevel, int32_t, int64_t, int64_t,
                         bool, int64_t, int64_t, TimeMicros>;
  absl::flat_hash_map<Key, int32_t> ids_;
  using PricingKey =
      std::tuple<QueueId, SpotPolicy, int64_t, int64_t, int64_t, bool, int64_t>;
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
  // GPUs, GPU model (kAnyGpuModel without GPUs), CPU, memory.
  using WorkerKey = std::tuple<int64_t, GpuModelId, int64_t, int64_t>;
  absl::flat_hash_map<WorkerKey, int32_t> shape_ids_;
  int32_t empty_list_ = -1;
  uint64_t generation_ = NewGeneration();
  static uint64_t NewGeneration();
};

QueueEntry MakeEntry(const Snapshot& s, const PolicyConfig& config,
                     ClassTable& classes, int index);

// Every queue's pending jobs in queue order.
void BuildQueues(const Snapshot& s, const PolicyConfig& config,
                 ClassTable& classes,
                 std::vector<std::vector<QueueEntry>>& jobs);

// Runs cycles, keeping its working memory between them: what the incremental
// Scheduler uses.
class CycleRunner {
 public:
  virtual ~CycleRunner() = default;
  // Sets `out` to RunCycle(s, config, running_quota, jobs, classes), reusing
  // the memory of its vectors.
  virtual void Run(const Snapshot& s, const PolicyConfig& config,
                   const QuotaTree& running_quota,
                   const std::vector<std::vector<QueueEntry>>& jobs,
                   const ClassTable& classes, Decisions& out) = 0;
};
std::unique_ptr<CycleRunner> NewCycleRunner();

// One cycle. `s` must be valid (ValidateSnapshot); `running_quota` charges
// its running work (QuotaTree(s)); `jobs` lists each queue's pending jobs in
// queue order, with classes from `classes` (built with the same config).
Decisions RunCycle(const Snapshot& s, const PolicyConfig& config,
                   const QuotaTree& running_quota,
                   const std::vector<std::vector<QueueEntry>>& jobs,
                   const ClassTable& classes);

}  // namespace trainyard::scheduler::policy::internal

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_ENGINE_H_
