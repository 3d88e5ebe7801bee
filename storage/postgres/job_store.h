#ifndef TRAINYARD_STORAGE_POSTGRES_JOB_STORE_H_
#define TRAINYARD_STORAGE_POSTGRES_JOB_STORE_H_

#include <cstdint>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/postgres/pool.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::storage::postgres {

// A job to insert. `job` carries display_name, labels, spec, creator and
// priority.
struct NewJob {
  std::string tenant;
  std::string client_request_id;
  // Hash of the request's content: a repeated client_request_id with another
  // hash is refused.
  std::string request_hash;
  trainyard::v1::Job job;
};

// Outcome of one NewJob: the stored job, or an error for that item alone.
struct SubmitOutcome {
  absl::Status status;
  trainyard::v1::Job job;
  bool deduplicated = false;
};

struct JobQuery {
  std::vector<std::string>
      tenants;  // one or more (the tenants the caller can read)
  std::string project;
  std::string queue;
  std::string job_set;
  std::vector<trainyard::v1::JobState> states;
  std::vector<std::pair<std::string, std::string>> labels;
  int64_t before_id = 0;  // page token: jobs with id < before_id (newest first)
  int limit = 100;
  bool with_attempts = false;
};

struct JobPage {
  std::vector<trainyard::v1::Job> jobs;
  int64_t next_before_id = 0;  // 0 on the last page
};

struct EventFilter {
  std::vector<std::string> tenants;  // empty = all tenants
  int64_t job_id = 0;                // 0 = all jobs
  std::string queue;
  std::string job_set;
};

struct PendingPosition {
  trainyard::v1::JobState state = trainyard::v1::JOB_STATE_UNSPECIFIED;
  int64_t position = 0;  // 1-based; 0 when not pending
  int64_t queue_length = 0;
};

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

struct DecisionOutcome {
  std::vector<int64_t> admitted;
  std::vector<int64_t> preempted;
  // Decisions dropped because the job changed since the snapshot (version or
  // state), or, for an admission, because one of its victims could not be
  // preempted.
  std::vector<int64_t> dropped;
};

// Why a pending job waits, as the scheduler last explained it.
struct Explanation {
  int64_t job_id = 0;
  std::string reason;
  std::string message;
  int64_t position = 0;
};

// --- What a dispatcher reads and writes (services/dispatcher) ---

// A job with its newest attempt, on the dispatcher's cluster.
struct ClusterAttempt {
  trainyard::v1::Job job;
  trainyard::v1::Attempt attempt;
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

// Jobs, their checkpoints and the job-event outbox. Every state change writes
// its event rows in the same transaction, and every change bumps the job's
// version. Thread-safe.
class JobStore {
 public:
  explicit JobStore(Database* db);

  // Inserts the jobs and their SUBMITTED events in ONE transaction (group
  // commit), idempotent by (tenant, client_request_id): an existing job is
  // returned with deduplicated = true, or ALREADY_EXISTS for that item if its
  // request hash differs. Items sharing a key within the batch resolve to one
  // job. Returns one outcome per input, or an error for the whole batch (e.g.
  // UNAVAILABLE). `atomic`: any per-item error fails the whole batch and
  // nothing is written (SubmitBatch semantics).
  absl::StatusOr<std::vector<SubmitOutcome>> SubmitMany(
      const std::vector<NewJob>& jobs, bool atomic);

  absl::StatusOr<trainyard::v1::Job> Get(const std::string& tenant,
                                         int64_t job_id, bool with_attempts);
  absl::StatusOr<JobPage> List(const JobQuery& query);

  // Ends a pending job at once, or asks the dispatcher to stop a running one.
  // Idempotent; a terminal job is returned unchanged.
  absl::StatusOr<trainyard::v1::Job> Cancel(const std::string& tenant,
                                            int64_t job_id,
                                            const std::string& reason,
                                            const std::string& principal);

  // Hold (hold = true: QUEUED → HELD) or release (HELD → QUEUED) a pending
  // job, with a STATE_CHANGED event naming `principal` and `reason`
  // (HELD_BY_USER / RELEASED_BY_USER). Idempotent: a job already in the
  // target state is returned unchanged; any other state is
  // FAILED_PRECONDITION naming it. The job keeps its place in line (its id,
  // priority and create_time are unchanged).
  absl::StatusOr<trainyard::v1::Job> SetHold(const std::string& tenant,
                                             int64_t job_id, bool hold,
                                             const std::string& reason,
                                             const std::string& principal);

  // Moves a job to `to` if it is at `expected_version` (0 = any) and the state
  // machine allows it: ABORTED on a version conflict, FAILED_PRECONDITION on a
  // forbidden transition.
  absl::StatusOr<trainyard::v1::Job> Transition(const std::string& tenant,
                                                int64_t job_id,
                                                int64_t expected_version,
                                                trainyard::v1::JobState to,
                                                const std::string& reason,
                                                const std::string& message);

  // Records a checkpoint; the newest step becomes the job's resume point.
  absl::StatusOr<trainyard::v1::Checkpoint> ReportCheckpoint(
      const std::string& tenant, int64_t job_id,
      const trainyard::v1::Checkpoint& checkpoint);

  struct CheckpointPage {
    std::vector<trainyard::v1::Checkpoint> checkpoints;
    int64_t next_before_id = 0;
  };
  absl::StatusOr<CheckpointPage> ListCheckpoints(const std::string& tenant,
                                                 int64_t job_id,
                                                 int64_t before_id, int limit);

  absl::StatusOr<PendingPosition> Position(const std::string& tenant,
                                           int64_t job_id);

  // Count of jobs per state in a queue.
  absl::StatusOr<std::vector<std::pair<trainyard::v1::JobState, int64_t>>>
  CountByState(const std::string& tenant, const std::string& queue);

  // Quota a queue's jobs hold, per flavor id: jobs ADMITTED, DISPATCHING or
  // RUNNING (what the scheduler admits against; a PREEMPTING job has given
  // its quota back), summed over their latest attempt's flavor, workers ×
  // per-worker resources.
  struct FlavorHeld {
    int64_t gpus = 0;
    int64_t cpu_millis = 0;
    int64_t memory_bytes = 0;
  };
  absl::StatusOr<std::map<std::string, FlavorHeld>> QueueUsage(
      const std::string& tenant, const std::string& queue);

  // Events with sequence > after, ascending, at most `limit`.
  absl::StatusOr<std::vector<trainyard::v1::JobEvent>> ReadEvents(
      uint64_t after, const EventFilter& filter, int limit);
  // Highest committed event sequence (0 if none).
  absl::StatusOr<uint64_t> LastEventSequence();

  // Scheduler: every non-terminal job (ids == nullptr) or those of `ids` that
  // are not terminal, with their newest attempt and checkpoint time.
  absl::StatusOr<std::vector<ActiveJob>> LoadActiveJobs(
      const std::vector<int64_t>* ids);
  // Scheduler: what changed since event `after`, in one read transaction:
  // the distinct ids of jobs with events after it (at most `limit` events
  // read), those of them that are not terminal as LoadActiveJobs gives them,
  // the highest sequence read (== after when none) and whether `limit` cut
  // the events short (read again from `last_seq`).
  struct Changes {
    std::vector<int64_t> ids;
    std::vector<ActiveJob> active;
    uint64_t last_seq = 0;
    bool more = false;
  };
  absl::StatusOr<Changes> LoadChanges(uint64_t after, int limit);
  // Scheduler: applies preemptions, then admissions, in ONE transaction, each
  // guarded by the job's version and state (a job that changed since the
  // snapshot is dropped, never applied twice), with their events.
  absl::StatusOr<DecisionOutcome> ApplyDecisions(
      const std::vector<PreemptDecision>& preemptions,
      const std::vector<AdmitDecision>& admissions);
  // Scheduler: upserts explanations and removes those of `done` jobs.
  absl::Status WriteExplanations(const std::vector<Explanation>& upserts,
                                 const std::vector<int64_t>& done);
  // Dispatcher: jobs ADMITTED, DISPATCHING, RUNNING, PREEMPTING or RECOVERING
  // (a requeue a dispatcher did not finish) whose newest
  // attempt is on `cluster` (id), oldest first.
  absl::StatusOr<std::vector<ClusterAttempt>> ClusterAttempts(
      const std::string& cluster);
  // Dispatcher: moves the job (at expected_version; ABORTED otherwise) to `to`
  // if the state machine allows it (FAILED_PRECONDITION otherwise) and records
  // the attempt's fields, with its event, in one transaction. Returns the job
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
  absl::StatusOr<std::vector<absl::StatusOr<trainyard::v1::Job>>>
  ChangeAttempts(const std::vector<AttemptChange>& changes);

  // When the job last entered `state`, from its outbox events (the newest
  // 100); nullopt if none of them is a change into `state`.
  absl::StatusOr<std::optional<absl::Time>> StateEnteredAt(
      int64_t job_id, trainyard::v1::JobState state);

  // The scheduler's explanation of a job, if it wrote one.
  absl::StatusOr<std::optional<Explanation>> GetExplanation(int64_t job_id);

 private:
  Database* db_;
};

// Event rows to append in a transaction (helper shared by every writer of job
// state).
struct PendingEvent {
  std::string tenant;
  int64_t job_id = 0;
  trainyard::v1::JobEvent event;  // sequence is assigned on insert
};

// Appends events in order under the outbox lock (sequence order = commit order)
// and notifies the relay (NOTIFY ty_events) at commit. Must be the last
// statement group of the transaction that made the changes, to hold the lock
// briefly.
void AppendEvents(pqxx::work& txn, const std::vector<PendingEvent>& events);

// Name of the PostgreSQL notification channel raised when events commit.
inline constexpr char kEventChannel[] = "ty_events";

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_JOB_STORE_H_
