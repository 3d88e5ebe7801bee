#ifndef TRAINYARD_STORAGE_POSTGRES_DISPATCHER_STORE_H_
#define TRAINYARD_STORAGE_POSTGRES_DISPATCHER_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/postgres/job_rows.h"
#include "storage/postgres/pool.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::storage::postgres {

// --- What a dispatcher reads and writes (services/dispatcher) ---

// A job with its newest attempt, on the dispatcher's cluster.
struct ClusterAttempt {
  trainyard::v1::Job job;
  trainyard::v1::Attempt attempt;
  // What the dispatcher copied of the attempt's output so far (attempt_logs):
  // bytes read, whether that is all of it, and why it cannot be read.
  int64_t log_size = 0;
  bool log_complete = false;
  std::string log_error;
};

// A piece of an attempt's output to keep (DispatcherStore::AppendLog).
struct LogAppend {
  int64_t job_id = 0;
  int32_t attempt = 0;
  // ClusterAttempt::log_size as read: the append applies only at that size.
  int64_t expected_size = 0;
  // Where `data` starts in the output: expected_size, or later when the
  // bytes between were skipped (more than the tail kept was new).
  int64_t offset = 0;
  std::string data;
  // Nothing more will come (the attempt ended and its output was read).
  bool complete = false;
  // Why the output cannot be read ('' when it can).
  std::string error;
};

// A transition of a job and what its newest attempt records with it.
struct AttemptChange {
  std::string tenant;
  int64_t job_id = 0;
  int64_t expected_version = 0;
  trainyard::v1::JobState to = trainyard::v1::JOB_STATE_UNSPECIFIED;
  std::string reason;
  std::string message;
  // Newest attempt's fields (unset = unchanged).
  std::optional<absl::Time> start_time;
  std::optional<absl::Time> end_time;
  trainyard::v1::FailureClass failure_class =
      trainyard::v1::FAILURE_CLASS_UNSPECIFIED;
  std::optional<int> exit_code;
  int64_t lost_gpu_seconds = 0;
  std::string attempt_message;
  std::string backend_job_id;
};

// A dispatcher's reads of the attempts on its cluster and its writes of their
// progress. Every change bumps the job's version and writes its event rows in
// the same transaction (job_rows.h). What a dispatcher shares with the api
// (Get, ListCheckpoints, ReportCheckpoint) is the api's JobStore.
// Thread-safe.
class DispatcherStore {
 public:
  explicit DispatcherStore(Database* db);

  // Jobs ADMITTED, DISPATCHING, RUNNING, PREEMPTING or RECOVERING (a requeue
  // a dispatcher did not finish) whose newest attempt is on `cluster` (id),
  // oldest first.
  absl::StatusOr<std::vector<ClusterAttempt>> ClusterAttempts(
      const std::string& cluster);
  // Moves the job (at expected_version; ABORTED otherwise) to `to` if the
  // state machine allows it (FAILED_PRECONDITION otherwise) and records the
  // attempt's fields, with its event, in one transaction. Returns the job
  // with its attempts.
  absl::StatusOr<trainyard::v1::Job> ChangeAttempt(const AttemptChange& change);
  // Several changes in ONE transaction (one commit, one outbox lock), applied
  // in order: the dispatcher records a whole pass this way. Each change is
  // checked on its own and gets its own result (the job or why it was
  // refused: NOT_FOUND, ABORTED for a version mismatch, FAILED_PRECONDITION
  // for a transition the state machine forbids); a refused change leaves the
  // others applied, and later changes of the same job are refused too
  // (ABORTED), so expected_version 0 on a follow-up change of a job is safe.
  // A database error fails the whole batch (nothing applied).
  // `logs` (AppendLogs) are written in the same transaction (first: they
  // lock only attempt_logs rows); `logs_applied` (when given) gets how many
  // applied.
  absl::StatusOr<std::vector<absl::StatusOr<trainyard::v1::Job>>>
  ChangeAttempts(const std::vector<AttemptChange>& changes,
                 const std::vector<LogAppend>& logs = {},
                 int64_t log_keep_bytes = 0, int* logs_applied = nullptr);

  // Appends to each attempt's kept output, keeping its newest `keep_bytes`,
  // unless its stored size is not append.expected_size or it is complete
  // (another dispatcher got there first), all in one transaction: returns
  // how many applied.
  absl::StatusOr<int> AppendLogs(const std::vector<LogAppend>& appends,
                                 int64_t keep_bytes);

  // When the job last entered `state`, from its outbox events (the newest
  // 100); nullopt if none of them is a change into `state`.
  absl::StatusOr<std::optional<absl::Time>> StateEnteredAt(
      int64_t job_id, trainyard::v1::JobState state);

  // The message of the job's newest cancel request ("cancelled by
  // users/alice: <reason>", as CancelJob recorded it in the job's
  // CANCEL_REQUESTED event), "" if it has none: the dispatcher that stops a
  // cancelled attempt ends the job with it.
  absl::StatusOr<std::string> CancelRequestMessage(int64_t job_id);

 private:
  absl::StatusOr<std::optional<std::pair<absl::Time, trainyard::v1::JobEvent>>>
  NewestEvent(const char* statement, int64_t job_id,
              absl::FunctionRef<bool(const trainyard::v1::JobEvent&)> match);

  Database* db_;
};

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_DISPATCHER_STORE_H_
