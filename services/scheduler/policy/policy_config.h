// The scheduling policy's settings (docs/scheduling.md): aging, pricing,
// preemption, borrowing, ordering, backfill, and the engine's speed-ups.
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_POLICY_CONFIG_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_POLICY_CONFIG_H_

#include <cstdint>

#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy {

struct PolicyConfig {
  // A job that has waited at least this long is "aged": among jobs of equal
  // priority, aged jobs go first, oldest first, regardless of fair share.
  // <= 0 disables aging.
  TimeMicros aging_threshold = int64_t{3600} * 1000 * 1000;

  // Expected-cost flavor choice (pricing.h).
  // Runtime assumed for a job with neither an estimate nor a time limit.
  TimeMicros default_expected_runtime = int64_t{3600} * 1000 * 1000;
  // Time lost by each reclaim on top of the work since the last checkpoint
  // (rescheduling, image pull, restore).
  TimeMicros restart_overhead = int64_t{600} * 1000 * 1000;

  // Preemption (preemption.h).
  // A running job younger than this (now - start time) is never preempted.
  TimeMicros min_runtime_guarantee = 0;
  // Time a victim is given to checkpoint before it is stopped.
  TimeMicros preemption_grace_period = int64_t{300} * 1000 * 1000;
  // Preemption for node capacity by priority, across queues and cohort
  // trees (as Slurm's priority preemption; Kueue preempts for quota only): a
  // job that fits its queue's quota and stays within the queue's nominal
  // quota on the flavor, but finds no nodes with room, may preempt running
  // jobs of strictly lower priority of any queue on that flavor
  // (PREEMPTED_BY_PRIORITY), after the queue's own rules found nothing
  // (preemption.h, rule 4). Within nominal quota, so that the victim's queue
  // can never take the capacity back by reclaiming borrowed quota.
  bool preempt_for_capacity = false;

  // When a job finds no room in its cohort tree for quota its own queue's
  // limits allow (QUOTA_EXHAUSTED), jobs of lower priority in the same tree
  // may not borrow on that flavor for the rest of the cycle: quota freed by
  // ending work collects for the higher-priority job instead of going to
  // lower-priority borrowers one small job at a time (which can starve a
  // large job indefinitely). Jobs within their own queue's nominal quota are
  // not held back. false = Kueue's BestEffortFIFO: anything that fits goes.
  bool hold_borrowing_for_priority = false;

  // Kueue's ordering across queues: a job whose queue can take it within its
  // own nominal quota (on at least one of its candidate flavors, at the
  // queue's usage when its turn comes) goes before every job that would have
  // to borrow, whatever their priorities; priority, aging, fair share and
  // submit time order each group. Such a job could reclaim its nominal quota
  // from borrowers anyway, so it need not wait behind them. false = priority
  // first (docs/scheduling.md, "Ordering").
  bool nominal_before_borrowing = false;

  // Backfill (docs/scheduling.md, "Backfill and reservations"). The first
  // `max_reservations` jobs of the cycle that fit quota but not capacity get
  // a reservation, if running attempts with time limits free enough capacity
  // for them; 0 turns reservations (and so backfill) off. At most
  // `max_reservation_searches` jobs per cycle are searched (Slurm's
  // bf_max_job_test).
  int32_t max_reservations = 8;
  int32_t max_reservation_searches = 64;

  // Speed-ups that never change a decision (engine.h); tests turn them off to
  // check exactly that.
  // Place gangs through the per-shape free-capacity index (else PlaceGang).
  bool use_placement_index = true;
  // Skip a job whose equivalence class already failed in the same state.
  bool use_equivalence_classes = true;
};

}  // namespace trainyard::scheduler::policy

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_POLICY_CONFIG_H_
