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
//     queue preempts, priority) get the same decision while the quota tree of
//     their queue and the capacity of their candidate flavors are unchanged,
//     so a failed class is not re-evaluated (Kueue's equivalence hashing).
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

// Interns class keys. The key holds everything a job's admission attempt
// depends on besides the cycle state: queue, gang size, worker shape,
// topology requirement, spot policy, pricing inputs (runtime estimate, time
// limit, checkpointing) and, for a queue with preemption, the priority value
// and (LowerOrNewerEqualPriority) the submit time.
class ClassTable {
 public:
  int32_t ClassOf(const Snapshot& s, const PendingJob& job);
  size_t size() const { return ids_.size(); }
  void clear() { ids_.clear(); }

 private:
  using Key = std::tuple<QueueId, int32_t, int64_t, GpuModelId, int64_t,
                         int64_t, TopologyLevel, SpotPolicy, int64_t, int64_t,
                         bool, int64_t, int64_t, TimeMicros>;
  absl::flat_hash_map<Key, int32_t> ids_;
};

QueueEntry MakeEntry(const Snapshot& s, ClassTable& classes, int index);

// Every queue's pending jobs in queue order.
void BuildQueues(const Snapshot& s, ClassTable& classes,
                 std::vector<std::vector<QueueEntry>>& jobs);

// Runs cycles, keeping its working memory (and the candidate flavors of each
// class) between them: what the incremental Scheduler uses.
class CycleRunner {
 public:
  virtual ~CycleRunner() = default;
  // == RunCycle(s, config, running_quota, jobs, num_classes).
  virtual Decisions Run(const Snapshot& s, const PolicyConfig& config,
                        const QuotaTree& running_quota,
                        const std::vector<std::vector<QueueEntry>>& jobs,
                        size_t num_classes) = 0;
  // Class ids were renumbered (ClassTable cleared), or queues, flavors or the
  // config changed: drop what was cached per class.
  virtual void ForgetClasses() = 0;
};
std::unique_ptr<CycleRunner> NewCycleRunner();

// One cycle. `s` must be valid (ValidateSnapshot); `running_quota` charges
// its running work (QuotaTree(s)); `jobs` lists each queue's pending jobs in
// queue order, with class ids below `num_classes`.
Decisions RunCycle(const Snapshot& s, const PolicyConfig& config,
                   const QuotaTree& running_quota,
                   const std::vector<std::vector<QueueEntry>>& jobs,
                   size_t num_classes);

}  // namespace trainyard::scheduler::policy::internal

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_ENGINE_H_
