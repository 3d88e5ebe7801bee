// Preemption and the limits on borrowing within a cycle: a job that fits no
// flavor may preempt running work (preemption.h); after a preemption in a
// cohort tree, later jobs there may not borrow on that flavor in the same
// cycle; and with PolicyConfig::hold_borrowing_for_priority, a job that found
// no room in its tree holds the tree's unused quota against lower-priority
// borrowers. Internal to the policy library (engine.h).
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_CYCLE_PREEMPTION_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_CYCLE_PREEMPTION_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "services/scheduler/policy/decisions.h"
#include "services/scheduler/policy/engine_state.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy::internal {

// The preemptions and borrowing limits of one cycle, against `state`.
class CyclePreemption {
 public:
  explicit CyclePreemption(EngineState& state);
  CyclePreemption(const CyclePreemption&) = delete;
  CyclePreemption& operator=(const CyclePreemption&) = delete;

  // Starts a cycle: no limits on borrowing yet.
  void Reset() {
    rebalancing_.clear();
    held_for_priority_.clear();
  }

  // After a preemption in the cohort tree of `job` on flavor f, later
  // admissions there in this cycle may not borrow: they would take quota the
  // victims still hold and undo the rebalancing.
  bool BorrowsWhileRebalancing(const PendingJob& job, FlavorId f,
                               const Resources& need) const {
    if (rebalancing_.empty() ||
        !state_.s->queues[job.queue].cohort.has_value() ||
        !rebalancing_.contains({state_.root_of_queue[job.queue], f})) {
      return false;
    }
    return state_.OverNominal(job.queue, f, need).has_value();
  }

  // PolicyConfig::hold_borrowing_for_priority: a job whose own queue's
  // limits allow it but whose cohort tree has no room left on f holds the
  // tree's unused quota on f for the rest of the cycle against jobs of lower
  // priority that would borrow it, so that quota freed by ending work
  // collects for it instead of going to borrowers of lower priority.
  void HoldBorrowingFor(const PendingJob& job, FlavorId f,
                        const Resources& need) {
    if (!state_.config->hold_borrowing_for_priority ||
        !state_.s->queues[job.queue].cohort.has_value() ||
        !state_.quota->WithinBorrowingLimit(job.queue, f, need)) {
      return;
    }
    const int32_t priority =
        state_.s->priority_classes[job.priority_class].value;
    const int root = state_.root_of_queue[job.queue];
    auto [it, inserted] = held_for_priority_.try_emplace({root, f}, priority);
    if (!inserted && it->second >= priority) return;
    it->second = priority;
    // Jobs of the tree may now fail where they fitted: no earlier failure of
    // a class there is reused.
    ++state_.QuotaEpoch(root, f);
    ++state_.events;
  }

  // The priority that holds the quota `job` would borrow on f, or nullptr.
  const int32_t* BorrowsWhileHeld(const PendingJob& job, FlavorId f,
                                  const Resources& need) const {
    if (held_for_priority_.empty() ||
        !state_.s->queues[job.queue].cohort.has_value())
      return nullptr;
    auto it = held_for_priority_.find({state_.root_of_queue[job.queue], f});
    if (it == held_for_priority_.end() ||
        it->second <= state_.s->priority_classes[job.priority_class].value) {
      return nullptr;
    }
    return state_.OverNominal(job.queue, f, need).has_value() ? &it->second
                                                              : nullptr;
  }

  // Admits job `id` on the first flavor where preempting running work makes
  // it fit (preemption.h) and records the preemptions. `job` is it or its
  // class's representative (as for EngineState::Admit: everything a
  // preemption plan reads of a job but its id is the same for every job of
  // its class, the priority value included), so that a failed attempt need
  // not touch the (cold) job itself. Appends to `victim_queues` the queue of
  // each victim (in the plan's order) that is not the job's: their shares
  // went down.
  bool TryPreempt(const PendingJob& job, JobId id,
                  const std::vector<FlavorId>& flavors, Decisions& out,
                  std::vector<QueueId>& victim_queues);

  // Whether TryPreempt() would admit the job now; changes nothing (for a
  // speculative attempt, which must fail as TryPreempt() would or not
  // attempt at all).
  bool CanPreempt(const PendingJob& job, const std::vector<FlavorId>& flavors);

 private:
  // The state PlanPreemption() works on, with the lists of running work
  // built on the cycle's first use.
  CycleState PlanState();

  EngineState& state_;
  // Per flavor: its running attempts (built with EngineState::preempted).
  std::vector<std::vector<int>> running_of_flavor_;
  // Per (cohort tree, flavor): its running attempts (built with
  // EngineState::preempted).
  std::vector<std::vector<int>> running_of_tree_flavor_;
  // Per (queue, flavor): its running attempts; per (cohort tree, flavor):
  // the queues with attempts there (CycleState).
  std::vector<std::vector<int>> running_of_queue_flavor_;
  std::vector<std::vector<QueueId>> queues_of_tree_flavor_;
  std::vector<int32_t> lowest_priority_of_queue_flavor_;
  // CycleState::free_workers, from the placement index where it is usable.
  std::function<std::optional<int64_t>(FlavorId, const PendingJob&)>
      free_workers_;
  // (root of the cohort tree, flavor) pairs where a preemption happened.
  absl::flat_hash_set<std::pair<int, FlavorId>> rebalancing_;
  // (root of the cohort tree, flavor) -> the highest priority of a job that
  // found no room for it in the tree (HoldBorrowingFor).
  absl::flat_hash_map<std::pair<int, FlavorId>, int32_t> held_for_priority_;
};

}  // namespace trainyard::scheduler::policy::internal

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_CYCLE_PREEMPTION_H_
