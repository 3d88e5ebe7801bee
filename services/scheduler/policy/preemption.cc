#include "services/scheduler/policy/preemption.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "services/scheduler/policy/placement.h"
#include "services/scheduler/policy/pricing.h"
#include "services/scheduler/policy/quota.h"

namespace trainyard::scheduler::policy {
namespace {

int64_t Saturate(__int128 v) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return v > kMax ? kMax : static_cast<int64_t>(v);
}

// Whether q uses more than its nominal quota of flavor f for a resource the
// job needs.
bool Borrows(const QuotaTree& quota, QueueId q, FlavorId f,
             const Resources& need) {
  for (Resource r : kAllResources) {
    if (need.Get(r) > 0 && quota.Tracks(q, f, r) &&
        quota.Usage(q, f, r) > quota.Nominal(q, f, r)) {
      return true;
    }
  }
  return false;
}

// Whether q stays within its nominal quota of f after taking `need`.
bool WithinNominalAfter(const QuotaTree& quota, QueueId q, FlavorId f,
                        const Resources& need) {
  for (Resource r : kAllResources) {
    if (need.Get(r) > 0 && quota.Tracks(q, f, r) &&
        quota.Usage(q, f, r) + need.Get(r) > quota.Nominal(q, f, r)) {
      return false;
    }
  }
  return true;
}

void TakeAttempt(const RunningAttempt& r, QuotaTree& quota,
                 std::vector<Resources>& free) {
  // The inverse of ReleaseAttempt.
  quota.Add(r.queue, r.flavor, r.resources);
  if (r.placement.empty()) return;
  for (size_t i = 0; i < r.placement.size(); ++i) {
    free[r.placement[i]] -= WorkerShare(r, i);
  }
}

struct Candidate {
  int index;
  // Rule that allows it: 1 within queue, 2 reclaim, 3 fair share, 4 node
  // capacity.
  int rule;
};

}  // namespace

int64_t NodeShare(const Snapshot& s, const QuotaTree& quota, int node) {
  const double weight = node < quota.QueueCount()
                            ? s.queues[node].weight
                            : s.cohorts[node - quota.QueueCount()].weight;
  return quota.Share(node, weight);
}

Resources WorkerShare(const RunningAttempt& r, size_t i) {
  if (r.worker_resources != Resources{}) return r.worker_resources;
  const int64_t n = static_cast<int64_t>(r.placement.size());
  Resources share = {r.resources.gpus / n, r.resources.cpu_millis / n,
                     r.resources.memory_bytes / n};
  if (i == 0) {
    share.gpus += r.resources.gpus % n;
    share.cpu_millis += r.resources.cpu_millis % n;
    share.memory_bytes += r.resources.memory_bytes % n;
  }
  return share;
}

int CohortRoot(const Snapshot& s, QueueId q) {
  if (!s.queues[q].cohort.has_value()) return -1;
  CohortId c = *s.queues[q].cohort;
  while (s.cohorts[c].parent.has_value()) c = *s.cohorts[c].parent;
  return c;
}

bool PreemptionEnabled(const Queue& queue, const PolicyConfig& config) {
  return queue.within_queue_preemption != WithinQueuePreemption::kNever ||
         queue.reclaim_within_cohort != ReclaimWithinCohort::kNever ||
         queue.fair_share_preemption || config.preempt_for_capacity;
}

TimeMicros MinRuntime(const Snapshot& s, const PolicyConfig& config,
                      QueueId q) {
  const TimeMicros of_queue = q >= 0 && static_cast<size_t>(q) < s.queues.size()
                                  ? s.queues[q].min_runtime
                                  : 0;
  return std::max(config.min_runtime_guarantee, of_queue);
}

int64_t LostWork(const Snapshot& s, const RunningAttempt& r) {
  const TimeMicros since = r.last_checkpoint_time.value_or(r.start_time);
  const TimeMicros elapsed = std::max<TimeMicros>(0, s.now - since);
  return Saturate(
      static_cast<__int128>(std::max<int64_t>(0, r.resources.gpus)) * elapsed);
}

void ReleaseAttempt(const RunningAttempt& r, QuotaTree& quota,
                    std::vector<Resources>& free) {
  Resources negative;
  negative -= r.resources;
  quota.Add(r.queue, r.flavor, negative);
  if (r.placement.empty()) return;
  for (size_t i = 0; i < r.placement.size(); ++i) {
    free[r.placement[i]] += WorkerShare(r, i);
  }
}

std::optional<PreemptionPlan> PlanPreemption(const Snapshot& s,
                                             const PolicyConfig& config,
                                             const CycleState& state,
                                             const PendingJob& job,
                                             FlavorId f) {
  const Queue& queue = s.queues[job.queue];
  if (!PreemptionEnabled(queue, config)) return std::nullopt;
  const Resources need = job.worker.AsResources() * job.workers;
  const int32_t priority = s.priority_classes[job.priority_class].value;
  const int root =
      state.tree_of_queue != nullptr
          ? (queue.cohort.has_value() ? (*state.tree_of_queue)[job.queue] : -1)
          : CohortRoot(s, job.queue);
  auto same_tree = [&](QueueId q) {
    if (root < 0) return false;
    return state.tree_of_queue != nullptr ? (*state.tree_of_queue)[q] == root
                                          : CohortRoot(s, q) == root;
  };
  const bool within_nominal_after =
      WithinNominalAfter(*state.quota, job.queue, f, need);
  const bool reclaim_ok =
      queue.reclaim_within_cohort != ReclaimWithinCohort::kNever &&
      within_nominal_after;
  // Kueue's borrowWithinCohort: a job that will borrow may still reclaim,
  // from jobs of lower priority at or below the threshold.
  const bool borrow_reclaim_ok =
      queue.reclaim_within_cohort != ReclaimWithinCohort::kNever &&
      !within_nominal_after &&
      queue.borrow_within_cohort_max_priority.has_value();
  // Rule 4: only capacity is missing, and the job keeps its queue within
  // nominal quota.
  const bool capacity_ok = config.preempt_for_capacity &&
                           state.quota->Fits(job.queue, f, need) &&
                           WithinNominalAfter(*state.quota, job.queue, f, need);

  // Eligible victims and the first rule that allows each. Their order here
  // does not matter: they are sorted by a key that ends with the index.
  std::vector<Candidate> candidates;
  auto consider = [&](size_t i) {
    const RunningAttempt& r = s.running[i];
    if ((*state.preempted)[i] || r.flavor != f) return;
    if (state.awaited != nullptr && !state.awaited->empty() &&
        (*state.awaited)[i]) {
      return;
    }
    const PriorityClass& pc = s.priority_classes[r.priority_class];
    if (!pc.preemptible) return;
    if (s.now - r.start_time < MinRuntime(s, config, r.queue)) return;
    int rule = 0;
    if (r.queue == job.queue) {
      switch (queue.within_queue_preemption) {
        case WithinQueuePreemption::kNever:
          break;
        case WithinQueuePreemption::kLowerPriority:
          if (pc.value < priority) rule = 1;
          break;
        case WithinQueuePreemption::kLowerOrNewerEqualPriority:
          if (pc.value < priority ||
              (pc.value == priority && r.start_time > job.submit_time)) {
            rule = 1;
          }
          break;
      }
    } else if (same_tree(r.queue)) {
      // Rules 2 and 3 take only from queues that borrow. Releasing victims
      // only lowers usage, so a queue that does not borrow now never will
      // during this search (the loop below checks again as victims go).
      if (Borrows(*state.quota, r.queue, f, need)) {
        if (reclaim_ok &&
            (queue.reclaim_within_cohort == ReclaimWithinCohort::kAny ||
             pc.value < priority)) {
          rule = 2;
        } else if (borrow_reclaim_ok && pc.value < priority &&
                   pc.value <= *queue.borrow_within_cohort_max_priority) {
          rule = 2;
        } else if (queue.fair_share_preemption && pc.value <= priority) {
          rule = 3;
        }
      }
    }
    if (rule == 0 && capacity_ok && pc.value < priority) rule = 4;
    if (rule > 0) candidates.push_back({static_cast<int>(i), rule});
  };
  auto consider_all = [&](const std::vector<int>& indexes) {
    for (int i : indexes) consider(static_cast<size_t>(i));
  };
  const bool by_queue =
      !capacity_ok && state.running_of_queue_flavor != nullptr &&
      state.queues_of_tree_flavor != nullptr && state.tree_of_queue != nullptr;
  if (by_queue) {
    const size_t flavors = s.flavors.size();
    if (!queue.cohort.has_value() ||
        (!reclaim_ok && !borrow_reclaim_ok && !queue.fair_share_preemption)) {
      // Only rule 1 can apply: the queue's own attempts, if it has any of a
      // lower (or, for LowerOrNewerEqualPriority, equal) priority.
      const size_t queue_flavor = static_cast<size_t>(job.queue) * flavors + f;
      const int32_t lowest =
          state.lowest_priority_of_queue_flavor != nullptr
              ? (*state.lowest_priority_of_queue_flavor)[queue_flavor]
              : std::numeric_limits<int32_t>::min();
      const bool possible =
          queue.within_queue_preemption ==
                  WithinQueuePreemption::kLowerOrNewerEqualPriority
              ? lowest <= priority
              : lowest < priority;
      if (queue.within_queue_preemption != WithinQueuePreemption::kNever &&
          possible) {
        consider_all((*state.running_of_queue_flavor)[queue_flavor]);
      }
    } else {
      // Rules 2 and 3 take only from queues of the tree that borrow.
      for (QueueId q :
           (*state.queues_of_tree_flavor)[static_cast<size_t>(root) * flavors +
                                          f]) {
        if (q != job.queue && !Borrows(*state.quota, q, f, need)) continue;
        consider_all(
            (*state.running_of_queue_flavor)[static_cast<size_t>(q) * flavors +
                                             f]);
      }
    }
  } else {
    const std::vector<int>* subset = nullptr;
    if (capacity_ok) {
      // Victims may be in any cohort tree.
      if (state.running_of_flavor != nullptr)
        subset = &(*state.running_of_flavor)[f];
    } else if (state.running_of_tree_flavor != nullptr &&
               state.tree_of_queue != nullptr) {
      subset = &(
          *state.running_of_tree_flavor)[static_cast<size_t>((
                                             *state.tree_of_queue)[job.queue]) *
                                             s.flavors.size() +
                                         f];
    } else if (state.running_of_flavor != nullptr) {
      subset = &(*state.running_of_flavor)[f];
    }
    if (subset != nullptr) {
      consider_all(*subset);
    } else {
      for (size_t i = 0; i < s.running.size(); ++i) consider(i);
    }
  }
  if (candidates.empty()) return std::nullopt;

  // Least lost work, then least cost (of the lost work plus a restart), then
  // lowest priority, then newest, then job id.
  using Key = std::tuple<int64_t, __int128, int32_t, TimeMicros, JobId, int>;
  auto key_of = [&](int i) -> Key {
    const RunningAttempt& r = s.running[i];
    const int64_t lost = LostWork(s, r);
    const __int128 gpu_micros =
        static_cast<__int128>(lost) +
        static_cast<__int128>(std::max<int64_t>(0, r.resources.gpus)) *
            RestartOverhead(s.flavors[r.flavor], config);
    const __int128 cost =
        gpu_micros *
        std::max<int64_t>(0, s.flavors[r.flavor].price_micros_per_gpu_hour);
    return {lost,          cost,  s.priority_classes[r.priority_class].value,
            -r.start_time, r.job, i};
  };
  std::vector<std::pair<Key, Candidate>> sorted;
  sorted.reserve(candidates.size());
  for (const Candidate& c : candidates) sorted.emplace_back(key_of(c.index), c);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });

  // The search works on the cycle's quota and free capacity in place and
  // undoes every change (all are integer additions) before it returns.
  QuotaTree& quota = *state.quota;
  std::vector<Resources>& free = *state.free;
  // How many workers the eligible nodes of f hold (PlaceGang's capacity
  // check, kept up to date as victims come and go): PlaceGang runs only when
  // it is enough.
  const std::vector<NodeId>& nodes = (*state.nodes_of_flavor)[f];
  auto eligible = [&](NodeId n) {
    const Node& node = s.nodes[n];
    return node.flavor == f && node.schedulable &&
           NodeMatches(node, job.worker);
  };
  auto workers_on = [&](NodeId n) {
    return eligible(n) ? WorkersThatFit(free[n], job.worker, job.workers) : 0;
  };
  // Computed when quota first fits (-1 until then), unless the cycle knows
  // it already.
  int64_t capacity = -1;
  if (state.free_workers != nullptr) {
    if (std::optional<int64_t> known = (*state.free_workers)(f, job))
      capacity = *known;
  }
  // Applies (release) or undoes (take) a victim, keeping `capacity`.
  auto change = [&](const RunningAttempt& r, bool release) {
    for (size_t i = 0; capacity >= 0 && i < r.placement.size(); ++i) {
      if (std::find(r.placement.begin(), r.placement.begin() + i,
                    r.placement[i]) == r.placement.begin() + i) {
        capacity -= workers_on(r.placement[i]);
      }
    }
    if (release) {
      ReleaseAttempt(r, quota, free);
    } else {
      TakeAttempt(r, quota, free);
    }
    for (size_t i = 0; capacity >= 0 && i < r.placement.size(); ++i) {
      if (std::find(r.placement.begin(), r.placement.begin() + i,
                    r.placement[i]) == r.placement.begin() + i) {
        capacity += workers_on(r.placement[i]);
      }
    }
  };
  auto fits = [&](PlacementResult* placement) {
    if (!quota.Fits(job.queue, f, need)) return false;
    if (capacity < 0) {
      capacity = 0;
      for (NodeId n : nodes) capacity += workers_on(n);
    }
    if (capacity < job.workers) return false;
    PlacementResult p = PlaceGang(s, free, *state.nodes_of_flavor, f, job);
    if (p.failure != PlacementFailure::kNone) return false;
    if (placement != nullptr) *placement = std::move(p);
    return true;
  };

  for (int max_rule = 1; max_rule <= 4; ++max_rule) {
    bool new_rule = false;
    for (const Candidate& c : candidates) new_rule |= c.rule == max_rule;
    if (!new_rule) continue;
    std::vector<int> chosen;
    std::vector<PreemptionReason> reasons;
    bool ok = false;
    for (const auto& [key, c] : sorted) {
      if (c.rule > max_rule) continue;
      const RunningAttempt& r = s.running[c.index];
      PreemptionReason reason = PreemptionReason::kPreemptedByPriority;
      if (c.rule == 2) {
        if (!Borrows(quota, r.queue, f, need)) continue;
        reason = PreemptionReason::kReclaimedByCohort;
      } else if (c.rule == 3) {
        if (!Borrows(quota, r.queue, f, need)) continue;
        // The shares that decide: the victim's and the preemptor's nodes
        // below their lowest common cohort (the queues themselves when
        // they are siblings).
        const auto [victim_node, my_node] = quota.AlmostLca(r.queue, job.queue);
        const int64_t victim_with = NodeShare(s, quota, victim_node);
        const int64_t mine_without = NodeShare(s, quota, my_node);
        change(r, true);
        const int64_t victim_without = NodeShare(s, quota, victim_node);
        quota.Add(job.queue, f, need);
        const int64_t mine_with = NodeShare(s, quota, my_node);
        Resources negative;
        negative -= need;
        quota.Add(job.queue, f, negative);
        change(r, false);
        const bool allowed =
            queue.fair_share_strategy ==
                    FairShareStrategy::kLessThanInitialShare
                ? mine_with < victim_with
                : mine_with <= victim_without && mine_without < victim_with;
        if (!allowed) continue;
        reason = PreemptionReason::kFairShare;
      }
      change(r, true);
      chosen.push_back(c.index);
      reasons.push_back(reason);
      if (fits(nullptr)) {
        ok = true;
        break;
      }
    }
    auto undo = [&] {
      for (int v : chosen) change(s.running[v], false);
    };
    if (!ok) {
      undo();
      continue;
    }
    // Give back victims that are not needed, latest first (the last one is
    // needed: the job did not fit without it).
    for (int k = static_cast<int>(chosen.size()) - 2; k >= 0; --k) {
      const RunningAttempt& r = s.running[chosen[k]];
      change(r, false);
      if (fits(nullptr)) {
        chosen.erase(chosen.begin() + k);
        reasons.erase(reasons.begin() + k);
      } else {
        change(r, true);
      }
    }
    PreemptionPlan plan;
    const bool placed = fits(&plan.placement);
    undo();
    if (!placed) continue;  // Defensive.
    plan.victims = std::move(chosen);
    plan.reasons = std::move(reasons);
    return plan;
  }
  return std::nullopt;
}

}  // namespace trainyard::scheduler::policy
