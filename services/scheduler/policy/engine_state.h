// The state one engine cycle works on, shared by its parts (engine.cc, the
// cycle driver; backfill.h; cycle_preemption.h): quota and free capacity
// after the cycle's decisions so far, budgets, the placement indexes, the
// queues' fair shares, and the epochs that tell a class's failure record
// whether what it depended on changed. Internal to the policy library
// (engine.h).
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_ENGINE_STATE_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_ENGINE_STATE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "services/scheduler/policy/decisions.h"
#include "services/scheduler/policy/job_classes.h"
#include "services/scheduler/policy/placement.h"
#include "services/scheduler/policy/placement_index.h"
#include "services/scheduler/policy/policy_config.h"
#include "services/scheduler/policy/preemption.h"
#include "services/scheduler/policy/pricing.h"
#include "services/scheduler/policy/quota.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy::internal {

// A struct: the cycle's parts read and change its fields directly; its
// functions are the small steps they share (most of them on the hot path of
// every attempt, so they are defined here).
struct EngineState {
  // Starts a cycle on `s` (valid) whose running work `running_quota`
  // charges, with the job classes `classes`. What an earlier cycle left
  // only lends its memory, but the placement indexes, kept while the nodes
  // are the same but for their use. Returns true when `cycle` wrapped
  // around: records stamped with a cycle must forget theirs.
  bool Reset(const Snapshot& s, const PolicyConfig& config,
             const QuotaTree& running_quota, const ClassTable& classes);

  // --- Quota ---

  // The quota epoch of (root of a cohort tree, flavor): grows with every
  // change of the tree's quota state on the flavor (its usage, holds and
  // rebalancing).
  uint64_t& QuotaEpoch(int root, FlavorId f) {
    return quota_epoch[static_cast<size_t>(root) * s->flavors.size() + f];
  }
  uint64_t QuotaEpoch(int root, FlavorId f) const {
    return quota_epoch[static_cast<size_t>(root) * s->flavors.size() + f];
  }
  // The quota epochs of q's tree on the flavors, summed.
  uint64_t QuotaSum(const std::vector<FlavorId>& flavors, QueueId q) const {
    uint64_t sum = 0;
    for (FlavorId f : flavors) sum += QuotaEpoch(root_of_queue[q], f);
    return sum;
  }

  // QuotaTree::Available(q, f, r), remembered per (queue, flavor) while the
  // quota epoch of q's cohort tree on f stays the same: the jobs of a queue
  // ask for it again and again (about 2 calls per job class in a cycle
  // between two changes of the tree's quota), and each call walks up the
  // tree. Not remembered without use_equivalence_classes, so that the
  // property tests compare it with QuotaTree's own answers.
  int64_t AvailableQuota(QueueId q, FlavorId f, Resource r) {
    if (!config->use_equivalence_classes) return quota->Available(q, f, r);
    QuotaAvailable& a =
        available[static_cast<size_t>(q) * s->flavors.size() + f];
    const uint64_t epoch = QuotaEpoch(root_of_queue[q], f);
    if (a.cycle != cycle || a.epoch != epoch) {
      a.cycle = cycle;
      a.epoch = epoch;
      a.known = 0;
    }
    const int i = static_cast<int>(r);
    if ((a.known >> i & 1) == 0) {
      a.value[i] = quota->Available(q, f, r);
      a.known |= static_cast<uint8_t>(1 << i);
    }
    return a.value[i];
  }
  // QuotaTree::BindingLimit(q, f, r, want) through AvailableQuota().
  QuotaTree::Binding BindingLimit(QueueId q, FlavorId f, Resource r,
                                  int64_t want) {
    return quota->BindingLimitWith(q, f, r, want, AvailableQuota(q, f, r),
                                   [&] { return quota->TreeBinding(q, f, r); });
  }
  // QuotaTree::Fits() through AvailableQuota().
  bool FitsQuota(QueueId q, FlavorId f, const Resources& amount,
                 Resource* failed) {
    return QuotaTree::FitsAvailable(
        amount, [&](Resource r) { return AvailableQuota(q, f, r); }, failed);
  }

  // The first resource of which `need` more would take the queue above its
  // nominal quota on f (the job would borrow it), if any.
  std::optional<Resource> OverNominal(QueueId q, FlavorId f,
                                      const Resources& need) const {
    for (Resource r : kAllResources) {
      if (need.Get(r) > 0 && quota->Tracks(q, f, r) &&
          quota->Usage(q, f, r) + need.Get(r) > quota->Nominal(q, f, r)) {
        return r;
      }
    }
    return std::nullopt;
  }

  // --- Budgets ---

  // Whether the job fits on f in its queue's budget, its own and its user's
  // hourly spend caps (always without any): its expected cost in the first
  // two, its hourly price in the caps (Budget::hourly). `cost` gets what the
  // refused budget would be charged and `refused` that budget (the first
  // one of the queue's, the job's own, the tenant's and the project's cap
  // that the job does not fit).
  bool Affordable(const PendingJob& job, FlavorId f, int64_t* cost,
                  BudgetId* refused) const {
    const std::optional<BudgetId>& budget = s->queues[job.queue].budget;
    if (!budget.has_value() && !job.budget.has_value() &&
        !job.tenant_rate_cap.has_value() && !job.project_rate_cap.has_value())
      return true;
    if (budget.has_value() || job.budget.has_value()) {
      *cost = ExpectedCostMicros(job, s->flavors[f], *config);
      if (budget.has_value() && *cost > budget_remaining[*budget]) {
        *refused = *budget;
        return false;
      }
      if (job.budget.has_value() && *cost > budget_remaining[*job.budget]) {
        *refused = *job.budget;
        return false;
      }
    }
    if (job.tenant_rate_cap.has_value() || job.project_rate_cap.has_value()) {
      const int64_t hourly = HourlyPriceMicros(job, s->flavors[f]);
      for (const std::optional<BudgetId>& cap :
           {job.tenant_rate_cap, job.project_rate_cap}) {
        if (cap.has_value() && hourly > budget_remaining[*cap]) {
          *cost = hourly;
          *refused = *cap;
          return false;
        }
      }
    }
    return true;
  }

  // Commits the job's expected cost on f to its queue's budget and its own,
  // if any (once where they are the same), and its hourly price to its
  // user's hourly spend caps.
  void Spend(const PendingJob& job, FlavorId f) {
    const std::optional<BudgetId>& budget = s->queues[job.queue].budget;
    if (!budget.has_value() && !job.budget.has_value() &&
        !job.tenant_rate_cap.has_value() && !job.project_rate_cap.has_value())
      return;
    if (budget.has_value() || job.budget.has_value()) {
      const int64_t cost = ExpectedCostMicros(job, s->flavors[f], *config);
      if (budget.has_value()) Charge(*budget, cost);
      if (job.budget.has_value() && job.budget != budget)
        Charge(*job.budget, cost);
    }
    if (job.tenant_rate_cap.has_value() || job.project_rate_cap.has_value()) {
      const int64_t hourly = HourlyPriceMicros(job, s->flavors[f]);
      if (job.tenant_rate_cap.has_value()) Charge(*job.tenant_rate_cap, hourly);
      if (job.project_rate_cap.has_value() &&
          job.project_rate_cap != job.tenant_rate_cap)
        Charge(*job.project_rate_cap, hourly);
    }
    ++events;
  }

  // Takes `cost` from budget b, and bumps the budget epoch of each queue
  // whose jobs' affordability it changes.
  void Charge(BudgetId b, int64_t cost) {
    budget_remaining[b] -= cost;
    for (QueueId q : queues_of_budget[b]) ++budget_epoch[q];
  }

  // --- Failure stamps ---

  // Epochs only grow, so their sum changes exactly when one of them does.
  // The state a job of queue q with these candidate flavors depends on:
  // the quota epochs of q's cohort tree on the flavors, their capacity
  // epochs and q's budget epoch.
  // (Capacity epochs of flavors at positions in `skip` (below 64) left out.)
  uint64_t Stamp(const std::vector<FlavorId>& flavors, uint64_t skip,
                 QueueId q) const {
    return StampWith(flavors, skip, q, QuotaSum(flavors, q));
  }
  // Stamp() with `quota_sum` as QuotaSum(flavors, q).
  uint64_t StampWith(const std::vector<FlavorId>& flavors, uint64_t skip,
                     QueueId q, uint64_t quota_sum) const {
    uint64_t stamp = quota_sum + budget_epoch[q];
    for (size_t i = 0; i < flavors.size(); ++i) {
      if (i < 64 && (skip >> i & 1) != 0) continue;
      stamp += flavor_epoch[flavors[i]];
    }
    return stamp;
  }

  // --- Placement ---

  // Where the job would go on f now; `shape` is the job's
  // ClassTable::ShapeOf().
  PlacementResult Place(FlavorId f, const PendingJob& job, int32_t shape) {
    if (!config->use_placement_index)
      return PlaceGang(*s, free, indexes.nodes_of_flavor(), f, job);
    if (ShapeIndex* index = indexes.Lookup(*s, free, f, shape, job.worker);
        index != nullptr) {
      return index->Place(free, job);
    }
    return PlaceGang(*s, free, indexes.nodes_of_flavor(), f, job);
  }

  // The placement index Place() used for `shape` on f, if it used one.
  const ShapeIndex* IndexOf(FlavorId f, int32_t shape) const {
    if (!config->use_placement_index) return nullptr;
    return indexes.LookedUp(f, shape);
  }

  // --- Admission ---

  // Admits job `id`; `job` is it or its class's representative (everything
  // an admission reads of a job but its id is the same for every job of its
  // class), so that an admission need not touch the (cold) job itself.
  void Admit(const PendingJob& job, JobId id, FlavorId f,
             std::vector<NodeId> nodes, Decisions& out);

  // Charges the job's workers on `nodes` (ascending) of f, its quota and
  // its budget.
  void Commit(const PendingJob& job, FlavorId f,
              const std::vector<NodeId>& nodes);

  // --- Fair share ---

  // Share() changes only when the queue's own usage does; cached per queue.
  int64_t CachedShare(QueueId q) {
    if (!share_valid[q]) {
      share[q] = QueueShare(*s, *quota, q);
      share_valid[q] = true;
    }
    return share[q];
  }

  const Snapshot* s = nullptr;
  const PolicyConfig* config = nullptr;
  const ClassTable* classes = nullptr;
  std::optional<QuotaTree> quota;
  // Per node: its free resources.
  std::vector<Resources> free;
  // The schedulable capacity.
  Resources total;
  PlacementIndexes indexes;
  // Per queue: the root of its cohort tree (an id of its own without a
  // cohort); quota epochs are per root.
  std::vector<int> root_of_queue;
  // Per root node (as root_of_queue): the queues of its tree, in id order.
  std::vector<std::vector<QueueId>> queues_of_root;
  // Per (root of the cohort tree, flavor): QuotaEpoch().
  std::vector<uint64_t> quota_epoch;
  // Per flavor: grows with every change of its nodes' free capacity.
  std::vector<uint64_t> flavor_epoch;
  // Per budget: what is left.
  std::vector<int64_t> budget_remaining;
  // Per queue: its budget epoch, which grows whenever a budget its jobs may
  // spend is spent: its own budget, or one of its classes' own
  // (ClassTable::JobBudgetQueues()). Per queue rather than per budget, so
  // that a stamp reads one counter of the queue whatever the jobs' budgets.
  std::vector<uint64_t> budget_epoch;
  // Per budget: the queues whose budget epoch its spending bumps.
  std::vector<std::vector<QueueId>> queues_of_budget;
  // Epoch increments so far (any change of the state a failure depends on).
  uint64_t events = 0;
  // Counts Reset()s (ClassFailure::cycle); never 0.
  uint32_t cycle = 0;
  // Per running attempt: preempted in this cycle (sized on first use).
  std::vector<bool> preempted;
  // Per running attempt: a reservation waits for its end (sized on first
  // use).
  std::vector<bool> awaited_attempts;
  // Per queue: CachedShare(), and whether it is valid.
  std::vector<int64_t> share;
  std::vector<bool> share_valid;
  // Per (queue, flavor): AvailableQuota() of the resources in `known`,
  // computed in `cycle` at quota epoch `epoch`.
  struct QuotaAvailable {
    uint32_t cycle = 0;
    uint8_t known = 0;
    uint64_t epoch = 0;
    int64_t value[kNumResources] = {};
  };
  std::vector<QuotaAvailable> available;
};

}  // namespace trainyard::scheduler::policy::internal

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_ENGINE_STATE_H_
