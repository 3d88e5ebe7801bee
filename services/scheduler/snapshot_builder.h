// Turns the platform's objects (API protos as stored) into the policy's
// Snapshot, and the policy's Decisions back into names. Pure: no I/O, no
// clock (now is an argument), deterministic (objects are visited in key
// order), so it is unit-tested without a database. See docs/scheduler.md.
#ifndef TRAINYARD_SERVICES_SCHEDULER_SNAPSHOT_BUILDER_H_
#define TRAINYARD_SERVICES_SCHEDULER_SNAPSHOT_BUILDER_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/snapshot.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/job.pb.h"
#include "trainyard/v1/queue.pb.h"

namespace trainyard::scheduler {

// A job that is not terminal, with its newest attempt and checkpoint time.
struct JobView {
  trainyard::v1::Job job;
  std::optional<trainyard::v1::Attempt> attempt;
  std::optional<absl::Time> last_checkpoint;
};

// A flavor's prices in the price book at the cycle's time (micros per
// unit-hour); a price the book does not have falls back to the flavor's own
// gpu_hour_price (GPU) or to zero (CPU, memory).
struct BookPrices {
  std::optional<int64_t> gpu_hour;  // a spot flavor: its latest spot price
  std::optional<int64_t> cpu_hour;
  std::optional<int64_t> gib_hour;
  friend bool operator==(const BookPrices&, const BookPrices&) = default;
};

// A budget as the scheduler acts on it: its HOLD limit (amount x the lowest
// HOLD threshold), the meter's forecast of the month, the action in force
// (from the budget's thresholds and that forecast). See docs/accounting.md.
struct BudgetView {
  std::string name;  // "tenants/{t}/budgets/{b}"
  std::optional<int64_t> hold_limit_micros;
  // The meter's forecast for the current month (0 before its first pass of
  // the month), and when the meter computed it: attempts admitted since are
  // not in it.
  int64_t forecast_micros = 0;
  absl::Time status_time = absl::InfinitePast();
  bool hold = false;
  bool restrict_to_spot = false;
  // The budget's user hourly spend cap (0 = none): the most the hourly
  // prices of one user's running work in the scope may sum to.
  int64_t user_hourly_cap_micros = 0;
};

// Everything a cycle looks at. Keys are ids without their collection prefix.
struct PlatformState {
  std::map<std::string, trainyard::v1::Flavor> flavors;
  std::map<std::string, trainyard::v1::Cluster> clusters;
  // (cluster, pool) and (cluster, node).
  std::map<std::pair<std::string, std::string>, trainyard::v1::Pool> pools;
  std::map<std::pair<std::string, std::string>, trainyard::v1::Node> nodes;
  std::map<std::string, trainyard::v1::Cohort> cohorts;
  // (tenant, queue).
  std::map<std::pair<std::string, std::string>, trainyard::v1::Queue> queues;
  std::map<std::string, trainyard::v1::PriorityClass> priority_classes;
  // Non-terminal jobs by id.
  std::map<int64_t, JobView> jobs;
  // The price book's prices by flavor id (empty without a price book).
  std::map<std::string, BookPrices> prices;
  // Budgets by (tenant, project); project "" = the whole tenant.
  std::map<std::pair<std::string, std::string>, BudgetView> budgets;
};

// Names for the snapshot's dense ids, and what the commit needs per job.
struct SnapshotIndex {
  // policy NodeId -> "clusters/{c}/nodes/{n}" and its cluster id.
  std::vector<std::string> node_names;
  std::vector<std::string> node_clusters;
  // policy FlavorId -> flavor id.
  std::vector<std::string> flavor_ids;
  // policy QueueId -> (tenant, queue).
  std::vector<std::pair<std::string, std::string>> queue_keys;
  // Pending jobs left out of the snapshot, with the reason they wait (their
  // queue is stopped, it or its cohort names something unknown ...).
  std::vector<std::pair<int64_t, std::string>> excluded;
};

// Builds the policy's snapshot:
//   - flavors with their GPU-hour price (micros), reclaim rate and restart
//     overhead (where set);
//   - nodes of every cluster (READY and the cluster not cordoned, not
//     UNHEALTHY and its dispatcher not gone == schedulable), GPU model ids
//     interned by name, block and rack labels (a rack is identified by block +
//     rack), `used` = what the attempts of ADMITTED … PREEMPTING jobs hold on
//     them (each worker the job's shape); a PREEMPTING job holds its nodes
//     until it stops, but no quota (its preemptor is charged it);
//   - cohorts and queues with their quotas (flavors not in `flavors` are
//     dropped), weights, strategies, preemption policies and minimum
//     runtimes;
//   - priority classes by name (a job whose class is unknown gets its
//     resolved priority value, preemptible); jobs being preempted are not
//     preemptible again;
//   - running attempts (ADMITTED, DISPATCHING, RUNNING, PREEMPTING) and
//     pending jobs (QUEUED; HELD ones wait for their hold to lift);
//   - budgets: each budget with a HOLD threshold (or in HOLD) is a policy
//     budget, the tenant's on its queues, a project's on its pending jobs
//     (remaining 0 here: SchedulerState::UpdateBudgets sets it each cycle);
//     and per (scope with a user hourly cap, user of a pending job there) an
//     hourly policy budget, the job's tenant_rate_cap or project_rate_cap
//     (ids after the monthly ones, in the order the users are first met;
//     remaining 0 here as well);
//     a pending job whose tenant or project budget restricts to spot gets
//     SpotPolicy::kRequiredByBudget (kept kRequired where the job asked for
//     it).
// Jobs of queues that do not exist or are stopped (stop_policy HOLD …), and
// jobs waiting out a retry backoff, are left out and listed in
// index->excluded with a reason.
//
// A cluster gets no new work (its nodes are not schedulable) while it is
// cordoned, while its dispatcher reports its backend UNHEALTHY, and once its
// dispatcher's heartbeat (Cluster.heartbeat_time, written at least every
// 30 s) is older than `liveness.timeout` at `liveness.wall_now`: its
// dispatcher is gone and would never launch what was admitted there. A
// cluster no dispatcher has reported for yet has no heartbeat and is not
// held back.
struct DispatcherLiveness {
  // Wall-clock time of the check: heartbeats are written in wall time, while
  // `now` may be a virtual clock (the simulator, tests). InfinitePast: no
  // heartbeat check.
  absl::Time wall_now = absl::InfinitePast();
  absl::Duration timeout = absl::Minutes(2);
};
class SnapshotMapper;
// `mapper`, if given, receives the mapper it used (to map later changes
// against the same ids).
void BuildSnapshot(const PlatformState& state, absl::Time now,
                   policy::Snapshot* snapshot, SnapshotIndex* index,
                   const DispatcherLiveness& liveness = {},
                   SnapshotMapper* mapper = nullptr);

// What one job is to the policy (SnapshotMapper::MapJob).
struct JobEntry {
  enum class Kind {
    kNone,      // Terminal, or holds nothing the policy sees.
    kRunning,   // ADMITTED … PREEMPTING: `running`.
    kPending,   // QUEUED: `pending`.
    kExcluded,  // QUEUED but left out: `excluded` says why.
  };
  Kind kind = Kind::kNone;
  policy::RunningAttempt running;
  policy::PendingJob pending;
  // "<CODE>: <details>" (RETRY_BACKOFF, QUEUE_NOT_FOUND, QUEUE_STOPPED).
  std::string excluded;
  // For a retry backoff: when it ends (the job is mapped again then).
  std::optional<absl::Time> excluded_until;
};

// The one mapping from platform objects to the policy's model, used whole by
// BuildSnapshot and piece by piece by the scheduler service, which keeps an
// incremental policy::Scheduler up to date with the jobs that changed.
// Interned ids (GPU models, clusters, blocks, racks, priority classes) are
// append-only: mapping the configuration again keeps the ids of the names it
// knew, so jobs mapped before stay valid.
class SnapshotMapper {
 public:
  // The configuration part of a snapshot (everything but `now`, running
  // work, pending jobs and node use), and its index (without `excluded`).
  void MapConfig(const PlatformState& state, const DispatcherLiveness& liveness,
                 policy::Snapshot* snapshot, SnapshotIndex* index);
  // What `view` (job `id`) is at `now`, against the configuration last
  // mapped. May intern priority classes and GPU model names: priority_classes()
  // and gpu_model_names() then grow.
  JobEntry MapJob(int64_t id, const JobView& view, absl::Time now);
  // Every priority class and GPU model name interned so far, by id.
  const std::vector<policy::PriorityClass>& priority_classes() const {
    return priority_classes_;
  }
  const std::vector<std::string>& gpu_model_names() const {
    return gpu_model_names_;
  }
  // Whether jobs mapped by `other` map the same here: the same priority
  // classes are configured (with the same preemptibility) and interned, and
  // the same budgets hold or restrict them.
  bool SameClassesAs(const SnapshotMapper& other) const {
    return class_preemptible_ == other.class_preemptible_ &&
           priority_classes_.size() == other.priority_classes_.size() &&
           budget_ids_ == other.budget_ids_ &&
           restricted_ == other.restricted_ &&
           SameScopes(capped_, other.capped_) &&
           rate_cap_ids_ == other.rate_cap_ids_;
  }
  // The policy budget of (tenant, project) ("" = the tenant's), if any.
  std::optional<policy::BudgetId> BudgetOf(const std::string& tenant,
                                           const std::string& project) const;
  // The hourly policy budget of `user` (a job's creator) in the scope
  // (tenant, project), if a job mapped so far has it.
  std::optional<policy::BudgetId> RateCapOf(const std::string& tenant,
                                            const std::string& project,
                                            const std::string& user) const;
  // Every policy budget mapped so far, by id: the monthly ones of the
  // configuration, then the hourly ones (`remaining_micros` 0; the caps as
  // last mapped). Grows as MapJob() meets new users of capped scopes.
  const std::vector<policy::Budget>& budgets() const { return budgets_; }
  // Scope and user of each hourly budget, by id - the number of monthly
  // budgets (budgets().size() - rate_caps().size()).
  struct RateCapKey {
    std::string tenant;
    std::string project;
    std::string user;
    friend auto operator<=>(const RateCapKey&, const RateCapKey&) = default;
  };
  const std::vector<RateCapKey>& rate_caps() const { return rate_caps_; }
  // The cost model's view of a job (its gang, time limit, estimate and
  // checkpointing), for the expected cost of its attempt.
  static policy::PendingJob CostShapeOf(const trainyard::v1::Job& job);

 private:
  policy::GpuModelId ModelId(const std::string& name);
  policy::PriorityClassId ClassId(const std::string& name, int32_t value,
                                  bool preemptible);
  policy::PriorityClassId JobClass(const trainyard::v1::Job& job,
                                   bool preemptible);

  // Append-only interners.
  absl::flat_hash_map<std::string, policy::GpuModelId> models_;
  std::vector<std::string> gpu_model_names_;
  absl::flat_hash_map<std::string, int32_t> clusters_, blocks_, racks_;
  absl::flat_hash_map<std::pair<std::string, int32_t>, policy::PriorityClassId>
      classes_;
  std::vector<policy::PriorityClass> priority_classes_;
  absl::flat_hash_map<std::tuple<std::string, int32_t, bool>,
                      policy::PriorityClassId>
      class_of_;
  // Of the configuration last mapped.
  absl::flat_hash_map<std::string, policy::FlavorId> flavor_ids_;
  absl::flat_hash_map<std::string, policy::NodeId> node_ids_;
  absl::flat_hash_map<std::pair<std::string, std::string>, policy::QueueId>
      queue_ids_;
  absl::flat_hash_set<std::pair<std::string, std::string>> known_queues_;
  // Configured priority classes: name -> preemptible.
  absl::flat_hash_map<std::string, bool> class_preemptible_;
  // Budgets of the configuration last mapped, and the scopes restricted to
  // spot.
  std::map<std::pair<std::string, std::string>, policy::BudgetId> budget_ids_;
  std::set<std::pair<std::string, std::string>> restricted_;
  // Scopes with a user hourly cap: (tenant, project) -> (budget name, cap).
  std::map<std::pair<std::string, std::string>, std::pair<std::string, int64_t>>
      capped_;
  // Hourly budgets interned by MapJob (append-only while the monthly
  // budgets and the capped scopes stay the same).
  std::map<RateCapKey, policy::BudgetId> rate_cap_ids_;
  std::vector<RateCapKey> rate_caps_;
  std::vector<policy::Budget> budgets_;
  template <typename Map>
  static bool SameScopes(const Map& a, const Map& b) {
    return std::equal(
        a.begin(), a.end(), b.begin(), b.end(),
        [](const auto& x, const auto& y) { return x.first == y.first; });
  }
  policy::BudgetId RateCap(const std::string& tenant,
                           const std::string& project, const std::string& user);
};

// The policy's backend of a cluster of `kind`.
policy::Backend BackendOf(trainyard::v1::BackendKind kind);
// The backends a job of `preference` may run on: the kinds
// domain::BackendMatches() (the check at submit) allows; kAnyBackend when it
// allows all.
policy::BackendSet BackendsOf(trainyard::v1::BackendPreference preference);

// Whether the cluster's dispatcher counts as gone at liveness.wall_now.
bool DispatcherGone(const trainyard::v1::Cluster& cluster,
                    const DispatcherLiveness& liveness);

// When a QUEUED job whose newest attempt failed by its own fault (user or
// backend error) may run again: that attempt's end + its retry backoff
// (spec.retry.initial_backoff, default 10 s, doubling per attempt up to
// max_backoff, default 10 min, with a deterministic ±10 % jitter per job and
// attempt). nullopt when it need not wait (never failed, or a platform failure:
// those resume at once). BuildSnapshot leaves such a job out until then
// (RETRY_BACKOFF).
std::optional<absl::Time> RetryNotBefore(const JobView& view);

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SERVICES_SCHEDULER_SNAPSHOT_BUILDER_H_
