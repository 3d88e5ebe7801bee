// An incremental scheduler: keeps a snapshot and per-cycle indexes so that a
// cycle after a few hundred arrivals and completions is cheap. Every Cycle()
// returns exactly what Decide(snapshot()) would (incremental_test.cc checks
// this on random snapshots); it only gets there faster:
//   - a free-capacity index per (flavor, worker shape): per rack, a histogram
//     of how many workers each node can still hold, so a gang's capacity check
//     is O(max workers per node) and a placement looks only at the racks and
//     nodes it chooses among (see FastPlacer in incremental.cc);
//   - equivalence classes: jobs with the same queue, gang size, worker shape,
//     topology requirement and spot policy get the same decision while the
//     quota tree of their queue and the capacity of their flavors are
//     unchanged, so a failed class is not re-evaluated (Kueue's equivalence
//     hashing);
//   - the snapshot is validated once and then per mutation, queue orders are
//     re-sorted only for queues that changed, and the quota tree of running
//     work is kept up to date instead of rebuilt.
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_INCREMENTAL_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_INCREMENTAL_H_

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/quota.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy {

class Scheduler {
 public:
  explicit Scheduler(Snapshot snapshot, PolicyConfig config = {});
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const Snapshot& snapshot() const { return s_; }

  // Mutations between cycles. The order of snapshot().pending may change.
  void SetNow(TimeMicros now) { s_.now = now; }
  void AddPending(PendingJob job);
  // Returns false if no pending job has this id.
  bool RemovePending(JobId id);
  // Turns an admission of the last cycle into running work: removes the
  // pending job, charges its workers to the nodes and its resources to the
  // queue's quota, and records a running attempt started now.
  bool ApplyAdmission(const Admission& admission);
  // Removes a running attempt and releases its resources (an equal share of
  // attempt.resources per placement entry from each node's `used`; quota-only
  // attempts release quota only). Returns false if there is none.
  bool CompleteRunning(JobId id);

  // One scheduling cycle on the current snapshot; == Decide(snapshot()).
  Decisions Cycle();

  // Decide(snapshot, config) computed by the same indexed engine without
  // keeping any state (and without copying the snapshot): the same Decisions.
  // policy.cc's Decide() could return this; see docs/scheduling.md.
  static Decisions DecideOnce(const Snapshot& snapshot,
                              const PolicyConfig& config = {});

 private:
  class Engine;
  // A pending job in its queue's order: priority (descending), submit time,
  // id; `index` is its position in s_.pending.
  struct QueueEntry {
    int64_t neg_priority;
    TimeMicros submit_time;
    JobId id;
    int index;
    // Equivalence class: jobs with equal ClassKeys get equal decisions in
    // equal states.
    int32_t job_class;
  };
  // Queue, gang size, worker shape (GPUs, model, CPU, memory), required
  // topology, spot policy, and what its expected cost depends on (runtime
  // estimate, time limit, checkpointing): everything a job's admission
  // attempt depends on.
  using ClassKey =
      std::tuple<QueueId, int32_t, int64_t, GpuModelId, int64_t, int64_t,
                 TopologyLevel, SpotPolicy, int64_t, int64_t, bool, int64_t>;

  using ClassIds = absl::flat_hash_map<ClassKey, int32_t>;

  static QueueEntry MakeEntry(const Snapshot& s, ClassIds& class_ids,
                              int index);
  // Every queue's pending jobs in queue order.
  static void BuildQueues(const Snapshot& s, ClassIds& class_ids,
                          std::vector<std::vector<QueueEntry>>& jobs);
  QueueEntry EntryOf(int index);
  void InsertEntry(int index);
  std::vector<QueueEntry>::iterator FindEntry(int index);
  // Removes s_.pending[index] (the last job moves into its slot).
  void ErasePending(int index);
  bool PendingJobValid(const PendingJob& job) const;

  Snapshot s_;
  PolicyConfig config_;
  // Rebuilds the indexes below from s_, which must be valid.
  void Rebuild();

  // Whether the indexes below are built (the snapshot is known to be valid).
  // A mutation that may make it invalid drops them; Cycle() then revalidates
  // and defers to Decide() while the snapshot is invalid.
  bool built_ = false;
  // Quota charged by running work (each cycle starts from a copy).
  std::optional<QuotaTree> running_quota_;
  absl::flat_hash_map<JobId, int> pending_index_;
  absl::flat_hash_map<JobId, int> running_index_;
  std::vector<std::vector<QueueEntry>> jobs_of_queue_;
  ClassIds class_ids_;
};

}  // namespace trainyard::scheduler::policy

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_INCREMENTAL_H_
