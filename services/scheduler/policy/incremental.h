// An incremental scheduler: keeps a snapshot and the state a cycle needs
// (queue orders, equivalence classes, the quota charged by running work) up to
// date across mutations, so that a cycle after a few hundred arrivals and
// completions does not rebuild them. Every Cycle() returns exactly what
// Decide(snapshot()) would: both run the same engine (engine.h);
// incremental_test.cc checks that the maintained state equals a rebuilt one
// on random mutation sequences.
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_INCREMENTAL_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_INCREMENTAL_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "services/scheduler/policy/engine.h"
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
  // The pending job with this id, or nullptr.
  const PendingJob* FindPending(JobId id) const {
    const int i = PendingIndex(id);
    return i < 0 ? nullptr : &s_.pending[i];
  }

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
  // attempt.resources per placement entry, WorkerShare() in preemption.h, from
  // each node's `used`; quota-only attempts release quota only). Returns false
  // if there is none.
  bool CompleteRunning(JobId id);

  // Running work that changes outside an admission of this scheduler (the
  // scheduler service learns it from the database).
  // Adds a running attempt: charges WorkerShare() of each placement entry to
  // its node and its resources to its queue's quota. Returns false (nothing
  // changed) if the job already runs here.
  bool AddRunning(RunningAttempt attempt);
  // Replaces the running attempt of attempt.job (CompleteRunning, then
  // AddRunning): e.g. the job is being preempted now and holds no quota.
  // Returns false if it does not run here.
  bool UpdateRunning(RunningAttempt attempt);
  // A new checkpoint of a running attempt (its lost work, for the choice of
  // victims). Returns false if it does not run here.
  bool SetLastCheckpoint(JobId id, std::optional<TimeMicros> time);
  // Replaces the pending job with job.id (RemovePending, then AddPending).
  // Returns false if no pending job has this id.
  bool UpdatePending(PendingJob job);

  // Configuration, replaced in place: ids stay what they are (a snapshot
  // with more or fewer entities needs a new Scheduler). A node's `used` is
  // kept as the running work charged it; the free-capacity indexes notice
  // changed nodes by themselves. A flavor, queue, cohort or budget edit
  // rebuilds the queue orders, classes and quota charges at the next cycle.
  void SetNode(NodeId id, Node node);
  void SetFlavor(FlavorId id, Flavor flavor);
  void SetQueue(QueueId id, Queue queue);
  void SetCohort(CohortId id, Cohort cohort);
  void SetBudget(BudgetId id, Budget budget);
  // Appends a budget (jobs may then use its id; none does yet, so nothing
  // is rebuilt).
  BudgetId AddBudget(Budget budget);
  // Appends a priority class (jobs may then use its id).
  PriorityClassId AddPriorityClass(PriorityClass priority_class);
  // Appends a GPU model name (for explanations); returns its id.
  GpuModelId AddGpuModelName(std::string name);

  // Each queue's weighted fair share under the running work
  // (QuotaTree::Share, in units of 1 / QuotaTree::kShareOne), as of the last
  // cycle; zeros before the first.
  std::vector<int64_t> QueueShares() const;
  // What of each queue's quota others of its cohort tree use under the
  // running work (QuotaTree::LentByQueue), as of the last cycle; nullopt
  // before the first.
  std::optional<QuotaTree::Lent> QueueLent() const;

  // One scheduling cycle on the current snapshot; == Decide(snapshot()).
  Decisions Cycle();
  // The same, into `out` (its earlier contents replaced), reusing the memory
  // of its vectors: a caller that keeps one Decisions from cycle to cycle
  // saves allocating (and faulting in) megabytes per cycle. Without
  // `explain` the pending decisions' messages are left empty (their reasons
  // and positions are set): a caller that publishes explanations only now
  // and then saves formatting them in the cycles between.
  void Cycle(Decisions& out, bool explain = true);

 private:
  using QueueEntry = internal::QueueEntry;

  QueueEntry EntryOf(int index);
  void InsertEntry(int index);
  std::vector<QueueEntry>::iterator FindEntry(int index);
  // Removes s_.pending[index] (the last job moves into its slot).
  void ErasePending(int index);
  bool PendingJobValid(const PendingJob& job) const;
  bool RunningValid(const RunningAttempt& attempt) const;
  // Adds (sign 1) or releases (-1) what the attempt's workers hold on their
  // nodes (those in range).
  void ChargeNodes(const RunningAttempt& attempt, int64_t sign);
  int RunningIndex(JobId id) const;
  int PendingIndex(JobId id) const;

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
  internal::ClassTable classes_;
  // Reuses its memory and per-class caches from cycle to cycle.
  std::unique_ptr<internal::CycleRunner> runner_;
};

}  // namespace trainyard::scheduler::policy

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_INCREMENTAL_H_
