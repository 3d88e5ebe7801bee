// Preemption: when a pending job fits no flavor, find running
// attempts whose removal lets it fit, under its queue's policies (Kueue's
// ClusterQueue.preemption), in this order of rules:
//   1. within its queue (Queue::within_queue_preemption): lower priority, or
//      also equal priority started after the preemptor was submitted ->
//      PREEMPTED_BY_PRIORITY;
//   2. reclaim within the cohort (Queue::reclaim_within_cohort): if the
//      preemptor's queue stays within its nominal quota after admitting the
//      job, jobs of other queues of its cohort tree that borrow (use more than
//      their nominal quota of the flavor) -> RECLAIMED_BY_COHORT; and, with
//      Queue::borrow_within_cohort_max_priority set (Kueue's
//      borrowWithinCohort), also when the preemptor's queue will borrow,
//      but then only jobs of lower priority that is at most the threshold;
//   3. fair share (Queue::fair_share_preemption): borrowing jobs of other
//      queues of the cohort tree with priority <= the preemptor's, when the
//      shares of the two sides (QuotaTree::AlmostLca: the queues, or the
//      cohorts below their lowest common one) meet the queue's
//      FairShareStrategy (snapshot.h) -> FAIR_SHARE. The default strategy
//      makes the reverse preemption impossible (no loops; see
//      docs/scheduling.md).
//   4. node capacity (PolicyConfig::preempt_for_capacity): if the job fits
//      its quota and its queue stays within its nominal quota on the flavor,
//      jobs of strictly lower priority of any queue -> PREEMPTED_BY_PRIORITY.
//      (A victim cannot preempt back: its priority is lower, and the
//      preemptor's queue does not borrow, so nothing can be reclaimed from
//      it.)
// Rule k is tried only if rules < k cannot free enough. Among the allowed
// candidates, victims are taken in order of least lost work (GPUs x time since
// the last checkpoint, or since the start), then least cost of that lost work
// plus a restart, then lowest priority, then newest, until the job fits both
// quota and capacity; then victims that turn out unnecessary are given back
// (last taken kept). Never preempted: non-preemptible priority classes, jobs
// that started less than MinRuntime() ago (the larger of
// PolicyConfig::min_runtime_guarantee and the victim's Queue::min_runtime),
// jobs already
// chosen as victims this cycle, jobs whose end a reservation waits for. Victims
// are whole running attempts (gangs are never split). Only victims on the
// flavor being tried are considered.
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_PREEMPTION_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_PREEMPTION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "services/scheduler/policy/decisions.h"
#include "services/scheduler/policy/placement.h"
#include "services/scheduler/policy/policy_config.h"
#include "services/scheduler/policy/quota.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy {

// The weighted share (QuotaTree::Share) of a node of the quota tree: a queue
// with its weight, or a cohort with its.
int64_t NodeShare(const Snapshot& s, const QuotaTree& quota, int node);
// The weighted share of queue q (its node's): what the ordering uses.
inline int64_t QueueShare(const Snapshot& s, const QuotaTree& quota,
                          QueueId q) {
  return NodeShare(s, quota, q);
}

// Root cohort of q's cohort tree; -1 for a queue without a cohort.
int CohortRoot(const Snapshot& s, QueueId q);

// Whether a job of the queue may preempt: the queue has a preemption policy
// enabled, or the cluster preempts for capacity.
bool PreemptionEnabled(const Queue& queue, const PolicyConfig& config);

struct PreemptionPlan {
  // Indexes into Snapshot::running, in the order they were chosen.
  std::vector<int> victims;
  std::vector<PreemptionReason> reasons;
  // The job's placement once the victims are gone.
  PlacementResult placement;
};

// The state of one cycle the search runs against: quota and free capacity
// after this cycle's earlier admissions and preemptions. The search changes
// them while it tries victims and restores them exactly before it returns.
struct CycleState {
  QuotaTree* quota = nullptr;
  std::vector<Resources>* free = nullptr;
  const std::vector<std::vector<NodeId>>* nodes_of_flavor = nullptr;
  Resources total;
  // Per running attempt: already a victim in this cycle.
  const std::vector<bool>* preempted = nullptr;
  // Optional, per running attempt: a reservation of this cycle waits for it
  // to end, so it is never a victim (its capacity would go to the preemptor
  // and the reservation would be delayed).
  const std::vector<bool>* awaited = nullptr;
  // Optional speed-ups (same result without them): the indexes into
  // Snapshot::running of the attempts of each flavor, ascending; an id per
  // queue equal for queues of the same cohort tree and unique for a queue
  // without a cohort.
  const std::vector<std::vector<int>>* running_of_flavor = nullptr;
  const std::vector<int>* tree_of_queue = nullptr;
  // With tree_of_queue: the indexes of the attempts of each (tree, flavor),
  // ascending, at [tree * flavors + flavor]. Only these can be victims (every
  // rule needs the victim in the preemptor's queue or cohort tree).
  const std::vector<std::vector<int>>* running_of_tree_flavor = nullptr;
  // With running_of_tree_flavor: the indexes of the attempts of each (queue,
  // flavor), ascending, at [queue * flavors + flavor], and per (tree,
  // flavor) the queues with attempts there. A job that may take only from
  // its own queue then looks at its queue's attempts alone, and one that may
  // reclaim (or preempt for fair share) only at the queues that borrow.
  const std::vector<std::vector<int>>* running_of_queue_flavor = nullptr;
  const std::vector<std::vector<QueueId>>* queues_of_tree_flavor = nullptr;
  // Optional, with those: per (queue, flavor), the lowest priority value of
  // its preemptible attempts there (INT32_MAX without one). A job that may
  // take only from its own queue finds no victim there without looking when
  // it is not below its own priority.
  const std::vector<int32_t>* lowest_priority_of_queue_flavor = nullptr;
  // Optional: how many of the job's workers the free capacity of flavor f
  // holds now (the sum over eligible nodes of WorkersThatFit(free, worker,
  // workers)), or nullopt where unknown. Saves a scan of every node of f.
  const std::function<std::optional<int64_t>(FlavorId, const PendingJob&)>*
      free_workers = nullptr;
};

// Victims that let `job` be admitted on flavor f, or nullopt. Deterministic;
// leaves `state` as it found it.
std::optional<PreemptionPlan> PlanPreemption(const Snapshot& s,
                                             const PolicyConfig& config,
                                             const CycleState& state,
                                             const PendingJob& job, FlavorId f);

// What worker `i` of a running gang holds on its node: its worker_resources
// where set, else an even split of the gang's resources, the remainder on
// worker 0.
Resources WorkerShare(const RunningAttempt& r, size_t i);

// Releases a victim's quota and node resources (WorkerShare() per placement
// entry).
void ReleaseAttempt(const RunningAttempt& r, QuotaTree& quota,
                    std::vector<Resources>& free);

// How long a running attempt of queue q is protected from preemption after
// its start: the larger of PolicyConfig::min_runtime_guarantee (the
// platform's floor) and the queue's own Queue::min_runtime.
TimeMicros MinRuntime(const Snapshot& s, const PolicyConfig& config, QueueId q);

// Lost work of a running attempt: GPUs x (now - last checkpoint, or start),
// in GPU-microseconds, saturating.
int64_t LostWork(const Snapshot& s, const RunningAttempt& r);

}  // namespace trainyard::scheduler::policy

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_PREEMPTION_H_
