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
//     nodes it chooses among; the result equals PlaceGang's (placement.h)
//     (placement_index.h);
//   - equivalence classes: jobs with the same queue, gang size, worker shape,
//     topology requirement, spot policy and pricing inputs (and, where the
//     queue preempts or borrowing holds are on, priority) get the same
//     decision while the quota tree of their queue and the capacity of their
//     candidate flavors are unchanged,
//     so a failed class is not re-evaluated (Kueue's equivalence hashing;
//     job_classes.h);
//   - speculative runs: once admissions have stopped for a while, a queue's
//     next jobs that would fail without changing the state are taken from
//     its own order without a round through the heap of heads each, and
//     given back to be attempted at their turn when an earlier attempt
//     changes what they depend on (engine.cc, "Speculative runs");
//   - the free-capacity indexes kept across cycles by the incremental
//     Scheduler while the nodes are the same but for their use;
//   - explanations kept per class across cycles: a failed attempt records
//     why each flavor failed compactly (Detail in explanation.h) and reuses the
//     class's last text while the records are equal, so steady-state cycles
//     format and allocate few texts; texts live in shared blocks, so copying
//     a Message touches one hot reference count;
//   - preemption searches that look only at attempts that can be victims:
//     per (queue, flavor) and per (cohort tree, flavor) lists of running
//     work, built once a cycle, and per (queue, flavor) the lowest priority
//     of a preemptible attempt, so a job that may take only from its own
//     queue usually knows without a scan that it can take nothing
//     (cycle_preemption.h, CycleState in preemption.h);
//   - quota availability remembered per (queue, flavor) while the quota
//     epoch of the queue's cohort tree on the flavor is unchanged
//     (EngineState::AvailableQuota in engine_state.h).
// PolicyConfig::use_placement_index and use_equivalence_classes turn both off,
// so tests can check that they never change a decision.
//
// Its files, all internal: engine.cc (the cycle driver: the loop over queue
// heads, an attempt, speculative runs), queue_order.h (queue order and the
// heap of heads), job_classes.h (equivalence classes and their failure
// records), engine_state.h (the state a cycle changes: quota, free capacity,
// budgets, epochs), placement_index.h, backfill.h (reservations and
// backfill), cycle_preemption.h (preemption and borrowing limits within a
// cycle) and explanation.h (the texts of pending decisions).
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_ENGINE_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_ENGINE_H_

#include <memory>
#include <vector>

#include "services/scheduler/policy/decisions.h"
#include "services/scheduler/policy/job_classes.h"
#include "services/scheduler/policy/policy_config.h"
#include "services/scheduler/policy/queue_order.h"
#include "services/scheduler/policy/quota.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy::internal {

// Runs cycles, keeping its working memory between them: what the incremental
// Scheduler uses.
class CycleRunner {
 public:
  virtual ~CycleRunner() = default;
  // Sets `out` to RunCycle(s, config, running_quota, jobs, classes), reusing
  // the memory of its vectors. Without `explain` the pending decisions carry
  // their reasons and positions but empty messages: no explanation is
  // formatted (or compared with the class's last one), which is most of a
  // steady cycle's work on jobs that stay pending.
  virtual void Run(const Snapshot& s, const PolicyConfig& config,
                   const QuotaTree& running_quota,
                   const std::vector<std::vector<QueueEntry>>& jobs,
                   const ClassTable& classes, Decisions& out,
                   bool explain = true) = 0;
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
