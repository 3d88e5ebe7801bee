// The policy's picture of the platform, kept up to date between cycles: an
// incremental policy::Scheduler (one engine, the same as Decide()) fed with
// what changed — jobs named by outbox events, configuration edits, retry
// backoffs that end, clusters whose dispatcher comes or goes — instead of a
// snapshot rebuilt every cycle. Pure (no I/O, no clock): the scheduler
// service reads PostgreSQL and calls it; scheduler_state_test.cc checks that
// its decisions equal Decide() on a snapshot built afresh from the same
// platform state, over random sequences of every kind of change.
#ifndef TRAINYARD_SERVICES_SCHEDULER_SCHEDULER_STATE_H_
#define TRAINYARD_SERVICES_SCHEDULER_SCHEDULER_STATE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "services/scheduler/policy/incremental.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/snapshot_builder.h"

namespace trainyard::scheduler {

class SchedulerState {
 public:
  explicit SchedulerState(policy::PolicyConfig config = {}) : config_(config) {}

  // Maps everything anew (the first cycle, a leader takeover, a reload after
  // a failure, a configuration change that adds or removes entities).
  void Reset(const PlatformState& state, absl::Time now,
             const DispatcherLiveness& liveness);
  bool built() const { return scheduler_ != nullptr; }

  // The configuration tables changed (state holds the new ones). Edits every
  // flavor, node, queue and cohort in place while each keeps its id (the same
  // names, the same queues stopped, the same priority classes); otherwise
  // Reset(). Returns whether it reset.
  bool ConfigChanged(const PlatformState& state, absl::Time now,
                     const DispatcherLiveness& liveness);

  // Job `id` changed: `view` is what it is now (nullptr: terminal or gone).
  void JobChanged(int64_t id, const JobView* view, absl::Time now);

  // Moves to `now`: jobs whose retry backoff has ended are mapped again (from
  // state.jobs), and nodes of clusters whose dispatcher came or went (at
  // liveness.wall_now) change schedulability.
  void Advance(const PlatformState& state, absl::Time now,
               const DispatcherLiveness& liveness);

  // Sets what each policy budget has left before a cycle: its HOLD limit
  // less the meter's forecast (state.budgets) less the expected cost
  // (policy::ExpectedCostMicros) of the attempts of its scope admitted after
  // the meter computed that forecast, running or since ended (remembered
  // until a forecast covers them); -1 while the budget is in HOLD. And what
  // each user's hourly spend cap in a scope has left: the cap
  // (BudgetView::user_hourly_cap_micros) less the hourly prices
  // (policy::HourlyPriceMicros) of the user's running attempts there. Call
  // after the configuration and jobs are up to date.
  void UpdateBudgets(const PlatformState& state);

  // One cycle into `out` (its memory reused). Requires built().
  void Cycle(policy::Decisions& out, bool explain = true) {
    scheduler_->Cycle(out, explain);
  }

  const policy::Snapshot& snapshot() const { return scheduler_->snapshot(); }

  // What the scheduler expects the pending job `id` to cost on the flavor it
  // would try first (policy::CandidateFlavors' first, priced by
  // policy::ExpectedCostMicros), in micros; nullopt if it is not pending here
  // or may use no flavor. Requires built().
  std::optional<int64_t> PendingEstimate(int64_t id) const;
  // The expected cost of `job` on `flavor` (what the admission reserves from
  // its budgets). Requires built().
  int64_t ExpectedCost(const trainyard::v1::Job& job,
                       policy::FlavorId flavor) const;
  // Each queue's weighted fair share (policy::Scheduler::QueueShares), by
  // the snapshot's queue ids.
  std::vector<int64_t> QueueShares() const {
    return scheduler_ != nullptr ? scheduler_->QueueShares()
                                 : std::vector<int64_t>{};
  }
  // What each queue lends (policy::Scheduler::QueueLent), by the snapshot's
  // queue and flavor ids.
  std::optional<policy::QuotaTree::Lent> QueueLent() const {
    return scheduler_ != nullptr ? scheduler_->QueueLent() : std::nullopt;
  }
  // Names of the snapshot's ids (its `excluded` is unused: see excluded()).
  const SnapshotIndex& index() const { return index_; }
  // Pending jobs left out of the snapshot, with why ("<CODE>: ...").
  const std::map<int64_t, std::string>& excluded() const { return excluded_; }

 private:
  enum class Where : uint8_t { kPending, kRunning, kExcluded };
  void Forget(int64_t id);
  // UpdateBudgets() of the users' hourly spend caps.
  void UpdateRateCaps(const PlatformState& state);
  void Add(int64_t id, JobEntry entry);
  // Hands interned priority classes and GPU model names to the scheduler.
  void SyncInterned();
  static std::set<std::string> GoneClusters(const PlatformState& state,
                                            const DispatcherLiveness& liveness);

  const policy::PolicyConfig config_;
  std::unique_ptr<policy::Scheduler> scheduler_;
  SnapshotMapper mapper_;
  SnapshotIndex index_;
  absl::flat_hash_map<int64_t, Where> where_;
  std::map<int64_t, std::string> excluded_;
  // Jobs waiting out a retry backoff: (until, id).
  std::set<std::pair<absl::Time, int64_t>> backoff_;
  absl::flat_hash_map<int64_t, absl::Time> backoff_until_;
  // Clusters whose dispatcher counted as gone at the last mapping.
  std::set<std::string> gone_;
  // Attempts seen running in a budgeted scope, by (job, attempt index), with
  // their admission time and expected cost, until every forecast covers them.
  struct AdmittedCost {
    absl::Time admitted;
    int64_t cost = 0;
    std::string tenant;
    std::string project;
  };
  std::map<std::pair<int64_t, int32_t>, AdmittedCost> admitted_;
};

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SERVICES_SCHEDULER_SCHEDULER_STATE_H_
