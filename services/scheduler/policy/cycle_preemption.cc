#include "services/scheduler/policy/cycle_preemption.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/scheduler/policy/preemption.h"

namespace trainyard::scheduler::policy::internal {

CyclePreemption::CyclePreemption(EngineState& state)
    : state_(state),
      free_workers_(
          [this](FlavorId f, const PendingJob& job) -> std::optional<int64_t> {
            if (!state_.config->use_placement_index || job.workers < 1)
              return std::nullopt;
            ShapeIndex* index =
                state_.indexes.IndexFor(*state_.s, state_.free, f, job.worker);
            if (index == nullptr) return std::nullopt;
            return index->Workers(job.workers);
          }) {}

CycleState CyclePreemption::PlanState() {
  if (state_.preempted.empty()) {
    state_.preempted.assign(state_.s->running.size(), false);
    running_of_flavor_.resize(state_.s->flavors.size());
    for (auto& running : running_of_flavor_) running.clear();
    running_of_tree_flavor_.resize(
        (state_.s->cohorts.size() + state_.s->queues.size()) *
        state_.s->flavors.size());
    for (auto& running : running_of_tree_flavor_) running.clear();
    for (auto& queues : queues_of_tree_flavor_) queues.clear();
    queues_of_tree_flavor_.resize(running_of_tree_flavor_.size());
    running_of_queue_flavor_.resize(state_.s->queues.size() *
                                    state_.s->flavors.size());
    for (auto& running : running_of_queue_flavor_) running.clear();
    lowest_priority_of_queue_flavor_.assign(
        running_of_queue_flavor_.size(), std::numeric_limits<int32_t>::max());
    for (size_t i = 0; i < state_.s->running.size(); ++i) {
      const RunningAttempt& r = state_.s->running[i];
      running_of_flavor_[r.flavor].push_back(static_cast<int>(i));
      const size_t tree_flavor =
          static_cast<size_t>(state_.root_of_queue[r.queue]) *
              state_.s->flavors.size() +
          r.flavor;
      running_of_tree_flavor_[tree_flavor].push_back(static_cast<int>(i));
      std::vector<int>& of_queue =
          running_of_queue_flavor_[static_cast<size_t>(r.queue) *
                                       state_.s->flavors.size() +
                                   r.flavor];
      if (of_queue.empty())
        queues_of_tree_flavor_[tree_flavor].push_back(r.queue);
      of_queue.push_back(static_cast<int>(i));
      if (const PriorityClass& pc =
              state_.s->priority_classes[r.priority_class];
          pc.preemptible) {
        int32_t& lowest =
            lowest_priority_of_queue_flavor_[static_cast<size_t>(r.queue) *
                                                 state_.s->flavors.size() +
                                             r.flavor];
        lowest = std::min(lowest, pc.value);
      }
    }
  }
  return CycleState{
      .quota = &*state_.quota,
      .free = &state_.free,
      .nodes_of_flavor = &state_.indexes.nodes_of_flavor(),
      .total = state_.total,
      .preempted = &state_.preempted,
      .awaited = &state_.awaited_attempts,
      .running_of_flavor = &running_of_flavor_,
      .tree_of_queue = &state_.root_of_queue,
      .running_of_tree_flavor = &running_of_tree_flavor_,
      .running_of_queue_flavor = &running_of_queue_flavor_,
      .queues_of_tree_flavor = &queues_of_tree_flavor_,
      .lowest_priority_of_queue_flavor = &lowest_priority_of_queue_flavor_,
      .free_workers = &free_workers_};
}

bool CyclePreemption::CanPreempt(const PendingJob& job,
                                 const std::vector<FlavorId>& flavors) {
  const CycleState plan_state = PlanState();
  for (FlavorId f : flavors) {
    if (PlanPreemption(*state_.s, *state_.config, plan_state, job, f))
      return true;
  }
  return false;
}

bool CyclePreemption::TryPreempt(const PendingJob& job, JobId id,
                                 const std::vector<FlavorId>& flavors,
                                 Decisions& out,
                                 std::vector<QueueId>& victim_queues) {
  const CycleState plan_state = PlanState();
  for (FlavorId f : flavors) {
    std::optional<PreemptionPlan> plan =
        PlanPreemption(*state_.s, *state_.config, plan_state, job, f);
    if (!plan.has_value()) continue;
    const int32_t priority =
        state_.s->priority_classes[job.priority_class].value;
    // Victims keep running through their grace period: what they free
    // beyond what the job takes stays unavailable this cycle.
    std::vector<std::pair<NodeId, Resources>> held;
    for (int v : plan->victims) {
      for (NodeId n : state_.s->running[v].placement)
        held.emplace_back(n, state_.free[n]);
    }
    for (size_t k = 0; k < plan->victims.size(); ++k) {
      const RunningAttempt& r = state_.s->running[plan->victims[k]];
      state_.preempted[plan->victims[k]] = true;
      ReleaseAttempt(r, *state_.quota, state_.free);
      state_.share_valid[r.queue] = false;
      ++state_.QuotaEpoch(state_.root_of_queue[r.queue], r.flavor);
      ++state_.flavor_epoch[r.flavor];
      ++state_.events;
      const PreemptionReason reason = plan->reasons[k];
      out.preemptions.push_back(
          {.victim = r.job,
           .victim_queue = r.queue,
           .preemptor = id,
           .reason = reason,
           .grace_period = state_.config->preemption_grace_period,
           .message = absl::StrCat(
               PreemptionReasonCode(reason), ": job ", id, " (priority ",
               priority, ", queue ", state_.s->queues[job.queue].name,
               ") preempts job ", r.job, " (priority ",
               state_.s->priority_classes[r.priority_class].value, ", queue ",
               state_.s->queues[r.queue].name, ") on flavor ",
               state_.s->flavors[f].name, "; ", r.resources.gpus, " GPUs lose ",
               (state_.s->now - r.last_checkpoint_time.value_or(r.start_time)) /
                   1000000,
               " s since the last checkpoint")});
    }
    // Commit() only lowers free capacity, as the indexes require: restore
    // the victims' nodes to what they had before (they are still busy), and
    // charge the job's workers on top only where the victims' release does
    // not cover them.
    std::vector<NodeId> nodes = std::move(plan->placement.worker_nodes);
    for (NodeId n : nodes) state_.free[n] -= job.worker.AsResources();
    for (const auto& [n, before] : held) {
      Resources& free = state_.free[n];
      free.gpus = std::min(free.gpus, before.gpus);
      free.cpu_millis = std::min(free.cpu_millis, before.cpu_millis);
      free.memory_bytes = std::min(free.memory_bytes, before.memory_bytes);
    }
    for (NodeId n : nodes) state_.free[n] += job.worker.AsResources();
    state_.Admit(job, id, f, std::move(nodes), out);
    for (const auto& [n, before] : held)
      state_.indexes.Update(state_.s->nodes[n].flavor, n, state_.free[n]);
    // Nor may a later job of the cohort tree borrow the quota they free.
    rebalancing_.insert({state_.root_of_queue[job.queue], f});
    for (int v : plan->victims) {
      const QueueId vq = state_.s->running[v].queue;
      if (vq != job.queue) victim_queues.push_back(vq);
    }
    return true;
  }
  return false;
}

}  // namespace trainyard::scheduler::policy::internal
