#include "services/scheduler/policy/job_classes.h"

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "services/scheduler/policy/preemption.h"
#include "services/scheduler/policy/pricing.h"

namespace trainyard::scheduler::policy::internal {

int32_t ClassTable::ClassOf(const Snapshot& s, const PolicyConfig& config,
                            const PendingJob& job) {
  const Queue& queue = s.queues[job.queue];
  // The candidate flavors depend on the queue, the spot policy, the gang's
  // resources and the pricing inputs only: computed once per such
  // combination.
  const PricingKey pricing = {job.queue,
                              job.spot_policy,
                              job.worker.gpus * job.workers,
                              job.worker.cpu_millis * job.workers,
                              job.worker.memory_bytes * job.workers,
                              job.expected_runtime_micros,
                              job.time_limit_micros,
                              job.can_checkpoint,
                              job.checkpoint_interval_micros,
                              job.worker.backends};
  auto [known, added] = list_of_pricing_.try_emplace(pricing, 0);
  if (added) {
    std::vector<FlavorId> flavors = CandidateFlavors(s, job, config);
    // Jobs with no candidate flavor are told which spot policy excluded
    // them: a negative id per policy.
    int32_t id = -1 - static_cast<int32_t>(job.spot_policy);
    if (!flavors.empty()) {
      auto [it, inserted] = list_ids_.try_emplace(
          flavors, static_cast<int32_t>(flavor_lists_.size()));
      if (inserted) flavor_lists_.push_back(std::move(flavors));
      id = it->second;
    }
    known->second = id;
  }
  int32_t list = known->second;
  // Preemption rules compare priorities (and, for LowerOrNewerEqualPriority,
  // start and submit times), so there the class also holds them; so does
  // the borrowing hold (hold_borrowing_for_priority) compare priorities.
  const bool preempts = PreemptionEnabled(queue, config);
  const bool by_priority = preempts || config.hold_borrowing_for_priority;
  // A budget (the queue's or the job's own) compares each flavor's expected
  // cost; jobs of different budgets of their own spend different money. (A
  // user's hourly spend cap compares the hourly price, which the gang and
  // worker shape in the key decide.)
  const bool budget = queue.budget.has_value() || job.budget.has_value();
  const Key key = {
      job.queue,
      job.budget.value_or(-1),
      job.tenant_rate_cap.value_or(-1),
      job.project_rate_cap.value_or(-1),
      job.workers,
      job.worker.gpus,
      job.worker.gpus > 0 ? job.worker.gpu_model : kAnyGpuModel,
      job.worker.cpu_millis,
      job.worker.memory_bytes,
      job.worker.backends,
      job.required_topology,
      list,
      budget ? job.expected_runtime_micros : 0,
      job.time_limit_micros,
      budget ? job.can_checkpoint : true,
      budget ? job.checkpoint_interval_micros : 0,
      by_priority ? s.priority_classes[job.priority_class].value : 0,
      preempts && queue.within_queue_preemption ==
                      WithinQueuePreemption::kLowerOrNewerEqualPriority
          ? job.submit_time
          : 0};
  auto [it, inserted] =
      ids_.try_emplace(key, static_cast<int32_t>(info_.size()));
  if (inserted) {
    if (list < 0) {
      // No candidate flavor: FlavorsOf() gives an (interned) empty list.
      if (empty_list_ < 0) {
        empty_list_ = static_cast<int32_t>(flavor_lists_.size());
        flavor_lists_.emplace_back();
      }
      list = empty_list_;
    }
    const WorkerKey shape = {
        job.worker.gpus,
        job.worker.gpus > 0 ? job.worker.gpu_model : kAnyGpuModel,
        job.worker.cpu_millis, job.worker.memory_bytes, job.worker.backends};
    info_.push_back({.flavors = list,
                     .shape = shape_ids_
                                  .try_emplace(shape, static_cast<int32_t>(
                                                          shape_ids_.size()))
                                  .first->second});
    for (const std::optional<BudgetId>& own :
         {job.budget, job.tenant_rate_cap, job.project_rate_cap}) {
      if (own.has_value() &&
          job_budget_pairs_.insert({*own, job.queue}).second) {
        job_budget_queues_.push_back({*own, job.queue});
      }
    }
    PendingJob& representative = representatives_.emplace_back(job);
    representative.name.clear();
    representative.name.shrink_to_fit();
  }
  return it->second;
}

void ClassTable::clear() {
  ids_.clear();
  list_ids_.clear();
  list_of_pricing_.clear();
  flavor_lists_.clear();
  info_.clear();
  representatives_.clear();
  shape_ids_.clear();
  job_budget_pairs_.clear();
  job_budget_queues_.clear();
  empty_list_ = -1;
  generation_ = NewGeneration();
}

uint64_t ClassTable::NewGeneration() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace trainyard::scheduler::policy::internal
