// The two halves of a batch transaction over many jobs, shared by
// SchedulerStore::ApplyDecisions and DispatcherStore::ChangeAttempts: lock and
// read the jobs' rows in one statement (LockedJobs), then write their state
// changes, attempt updates and events in a fixed number of statements
// (JobSaves).
#ifndef TRAINYARD_STORAGE_POSTGRES_JOB_BATCH_H_
#define TRAINYARD_STORAGE_POSTGRES_JOB_BATCH_H_

#include <cstdint>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "storage/postgres/job_rows.h"
#include "storage/postgres/pool.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::storage::postgres {

// Registers the statements of LockedJobs (jobs_lock_ordered) and JobSaves
// (jobs_save_many, attempts_update_many). The constructors of SchedulerStore
// and DispatcherStore call it (registering a statement twice is a no-op).
void PrepareJobBatchStatements(Database* db);

// The rows of a batch's jobs, locked (FOR UPDATE) and read in ONE statement in
// ascending id order before the batch changes them one by one. Every
// transaction that locks more than one job row does this, so two batches
// (the scheduler's decisions and a dispatcher's pass) never wait for each
// other in a cycle: a deadlock PostgreSQL breaks only after deadlock_timeout
// (1 s), both services stalled meanwhile (kueue_baseline's samples of
// pg_stat_activity showed such a pair most of the time), and one round trip
// replaces one per job.
class LockedJobs {
 public:
  LockedJobs(pqxx::work& txn, std::vector<int64_t> ids);
  // The locked job, as this transaction last saved it; NOT_FOUND when it is
  // not the tenant's job (as JobStore's single-job lock).
  absl::StatusOr<trainyard::v1::Job> Get(const std::string& tenant,
                                         int64_t job_id) const;
  void Saved(int64_t job_id, const trainyard::v1::Job& job) {
    rows_[job_id] = job;
  }

 private:
  absl::flat_hash_map<int64_t, trainyard::v1::Job> rows_;
};

// The changes of a batch transaction, written together by Flush(): attempt
// updates in one statement, job state changes in another, then the jobs'
// events appended in the order they were added (what JobStore's single-job
// save and AppendEvents do one job at a time). Each job at most once per
// Flush().
class JobSaves {
 public:
  bool Has(int64_t job_id) const { return job_ids_.contains(job_id); }
  // Writes attempt (job_id, idx) as `a`; a start or end time given also sets
  // its column.
  void AddAttempt(int64_t job_id, int idx, const trainyard::v1::Attempt& a,
                  std::optional<int64_t> start_micros,
                  std::optional<int64_t> end_micros);
  // Inserts a new attempt row (job_id, idx), in the same statement as the
  // jobs' changes.
  // `estimated_cost_micros`: attempts.estimated_cost_micros (NULL without).
  void AddNewAttempt(int64_t job_id, int idx, const std::string& cluster_id,
                     const std::string& flavor_id,
                     const trainyard::v1::Attempt& a,
                     std::optional<int64_t> estimated_cost_micros = {});
  // `job` holds its new state, reason and message; `from` is its old state.
  void Add(int64_t job_id, const trainyard::v1::Job& job,
           trainyard::v1::JobState from);
  // Writes everything added and starts over; returns the saved jobs.
  // `outbox_wait` and `events_time` (optional): AppendEvents's.
  absl::flat_hash_map<int64_t, trainyard::v1::Job> Flush(
      pqxx::work& txn, absl::Duration* outbox_wait = nullptr,
      absl::Duration* events_time = nullptr);

 private:
  struct Change {
    int64_t job_id;
    trainyard::v1::JobState from, to;
    std::string reason, message;
  };
  ArrayLiteral new_attempt_jobs_, new_attempt_indexes_, new_attempt_clusters_,
      new_attempt_flavors_, new_attempt_bodies_, new_attempt_estimates_;
  int new_attempt_rows_ = 0;
  ArrayLiteral ids_, states_, reasons_, messages_, attempt_counts_, resumes_,
      cancels_, terminals_;
  std::vector<Change> changes_;
  absl::flat_hash_set<int64_t> job_ids_;
  ArrayLiteral attempt_jobs_, attempt_indexes_, attempt_bodies_,
      attempt_starts_, attempt_ends_;
  int attempt_rows_ = 0;
};

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_JOB_BATCH_H_
