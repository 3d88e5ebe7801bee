#ifndef TRAINYARD_STORAGE_POSTGRES_SCHEDULER_STORE_H_
#define TRAINYARD_STORAGE_POSTGRES_SCHEDULER_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/postgres/job_rows.h"
#include "storage/postgres/pool.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::storage::postgres {

// --- What the scheduler reads and writes (services/scheduler) ---

// A job that is not terminal, as the scheduler sees it.
struct ActiveJob {
  trainyard::v1::Job job;
  // Its newest attempt, if any (the running one for ADMITTED … PREEMPTING).
  std::optional<trainyard::v1::Attempt> attempt;
  // When its newest checkpoint was reported, if any.
  std::optional<absl::Time> last_checkpoint;
};

// Admit job_id (QUEUED at expected_version) with `attempt` (index, backend
// name, admit time and resume point are filled in here), once every job in
// `victims` was preempted.
struct AdmitDecision {
  std::string tenant;
  int64_t job_id = 0;
  int64_t expected_version = 0;
  trainyard::v1::Attempt attempt;
  std::string message;
  std::vector<int64_t> victims;
  // The scheduler's expected cost of the attempt
  // (attempts.estimated_cost_micros).
  std::optional<int64_t> estimated_cost_micros;
};

// Preempt job_id (at expected_version): RUNNING → PREEMPTING, or ADMITTED →
// QUEUED (not yet dispatched: the admission is revoked).
struct PreemptDecision {
  std::string tenant;
  int64_t job_id = 0;
  int64_t expected_version = 0;
  std::string reason;
  std::string message;
};

// A row of pending_explanations as a scheduler wrote it, with its write time.
struct WrittenExplanation {
  int64_t job_id = 0;
  std::string reason;
  std::string message;
  absl::Time written;
};

// What of a queue's quota of one flavor and resource others of its cohort
// tree use (queue_shares.lent).
struct QueueLentCell {
  // Flavor id.
  std::string flavor;
  // trainyard.v1.ResourceName number.
  int resource = 0;
  int64_t amount = 0;
  friend bool operator==(const QueueLentCell&, const QueueLentCell&) = default;
};

// A queue's weighted fair share and what it lends (queue_shares).
struct QueueShareRow {
  std::string tenant;
  std::string queue;
  double weighted_share = 0.0;
  // Cells with a non-zero amount.
  std::vector<QueueLentCell> lent;
};

struct DecisionOutcome {
  std::vector<int64_t> admitted;
  std::vector<int64_t> preempted;
  // Decisions dropped because the job changed since the snapshot (version or
  // state), or, for an admission, because one of its victims could not be
  // preempted.
  std::vector<int64_t> dropped;
  // Where the transaction's wall time went (its last try): locking the jobs
  // (SELECT ... FOR UPDATE), the writes before the events (attempts, jobs),
  // waiting for the outbox lock, inserting the events and the notify, COMMIT.
  absl::Duration lock_jobs, writes, outbox_wait, events, commit;
};

// The scheduler's reads of the jobs it schedules and its writes of decisions
// and explanations. Every state change bumps the job's version and writes its
// event rows in the same transaction (job_rows.h). The highest committed
// event sequence, which the scheduler reads before a full load, is the api's
// JobStore::LastEventSequence. Thread-safe.
class SchedulerStore {
 public:
  explicit SchedulerStore(Database* db);

  // Every non-terminal job (ids == nullptr) or those of `ids` that are not
  // terminal, with their newest attempt and checkpoint time. All of them (a
  // new leader's full load) are read on three connections at once, the jobs,
  // their attempts and their checkpoints each in a read transaction of its
  // own (the jobs' rows parsed on two threads, half each): like the one
  // transaction of `ids` (READ COMMITTED: a snapshot per statement), each
  // table as of some moment after the call began, not one moment for all
  // three. The caller reads the outbox's last sequence first
  // (JobStore::LastEventSequence): a job whose rows change while they are read
  // has an event after it, and is read again whole by the next LoadChanges.
  absl::StatusOr<std::vector<ActiveJob>> LoadActiveJobs(
      const std::vector<int64_t>* ids);
  // Every row of pending_explanations (what the scheduler last wrote per
  // job), in no particular order.
  absl::StatusOr<std::vector<WrittenExplanation>> LoadExplanations();
  // What changed since event `after`, in one read transaction: the distinct
  // ids of jobs with events after it (at most `limit` events read), those of
  // them that are not terminal as LoadActiveJobs gives them, the highest
  // sequence read (== after when none) and whether `limit` cut the events
  // short (read again from `last_seq`).
  struct Changes {
    std::vector<int64_t> ids;
    std::vector<ActiveJob> active;
    uint64_t last_seq = 0;
    bool more = false;
    // Events read; wall time of the events' read and of the jobs' (jobs,
    // attempts, checkpoints), the last try's.
    int events = 0;
    absl::Duration read_events, read_jobs;
  };
  absl::StatusOr<Changes> LoadChanges(uint64_t after, int limit);
  // Applies preemptions, then admissions, in ONE transaction, each guarded by
  // the job's version and state (a job that changed since the snapshot is
  // dropped, never applied twice), with their events.
  absl::StatusOr<DecisionOutcome> ApplyDecisions(
      const std::vector<PreemptDecision>& preemptions,
      const std::vector<AdmitDecision>& admissions);
  // Upserts explanations and removes those of `done` jobs.
  absl::Status WriteExplanations(const std::vector<Explanation>& upserts,
                                 const std::vector<int64_t>& done);
  // Upserts queues' weighted fair shares and what they lend.
  absl::Status WriteQueueShares(const std::vector<QueueShareRow>& shares);

 private:
  Database* db_;
};

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_SCHEDULER_STORE_H_
