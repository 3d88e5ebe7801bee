#ifndef TRAINYARD_STORAGE_POSTGRES_JOB_STORE_H_
#define TRAINYARD_STORAGE_POSTGRES_JOB_STORE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/postgres/job_rows.h"
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

// The order of a job listing; ties (and kCreateTime itself) go by id, which
// grows with creation.
enum class JobOrder { kCreateTime, kPriority, kDisplayName, kState, kQueue };

// Where a page starts: after the job `id` whose order column held `value`
// (text).
struct JobCursor {
  std::string value;
  int64_t id = 0;
};

struct JobQuery {
  std::vector<std::string>
      tenants;  // one or more (the tenants the caller can read)
  std::string project;
  std::string queue;
  std::string job_set;
  std::string creator;  // the submitting principal; empty = anyone
  std::optional<absl::Time> created_after;   // inclusive
  std::optional<absl::Time> created_before;  // exclusive
  std::vector<trainyard::v1::JobState> states;
  std::vector<std::pair<std::string, std::string>> labels;
  JobOrder order = JobOrder::kCreateTime;
  bool descending = true;
  std::optional<JobCursor> after;  // the previous page's last job
  int limit = 100;
  bool with_attempts = false;
};

struct JobPage {
  std::vector<trainyard::v1::Job> jobs;
  std::optional<JobCursor> next;  // unset on the last page
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

// Jobs as the api reads and writes them: submission, reads, cancel, hold,
// transitions, checkpoints and the job-event outbox. Every state change writes
// its event rows in the same transaction (job_rows.h), and every change bumps
// the job's version. The methods the other services share with the api live
// here too: LastEventSequence (the scheduler's full load), Get,
// ListCheckpoints and ReportCheckpoint (the dispatchers). The scheduler's own
// statements are SchedulerStore's (scheduler_store.h), the dispatchers'
// DispatcherStore's (dispatcher_store.h). Thread-safe.
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
  // Sets each job's `cost` from the accounting ledger (usage_lines): what its
  // attempts' lines add up to, and whether it is final (the job is terminal
  // and every attempt that started is metered for good). Jobs with no line
  // and no accounting currency stored are left without a cost. One query.
  absl::Status FillCosts(const std::vector<trainyard::v1::Job*>& jobs);

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
  // The queue's weighted fair share and what it lends, as the scheduler last
  // wrote them (queue_shares); 0 and nothing where it wrote none.
  struct QueueShareInfo {
    double weighted_share = 0.0;
    // (flavor id, ResourceName number) -> amount lent, non-zero amounts only.
    std::map<std::pair<std::string, int>, int64_t> lent;
  };
  absl::StatusOr<QueueShareInfo> QueueShare(const std::string& tenant,
                                            const std::string& queue);

  // Events with sequence > after, ascending, at most `limit`.
  absl::StatusOr<std::vector<trainyard::v1::JobEvent>> ReadEvents(
      uint64_t after, const EventFilter& filter, int limit);
  // Highest committed event sequence (0 if none).
  absl::StatusOr<uint64_t> LastEventSequence();

  // The output a dispatcher copied of one attempt (attempt_logs); nullopt
  // when nothing has been copied yet.
  struct AttemptLog {
    // Bytes of output read so far; `data` holds the newest of them, ending
    // at this offset.
    int64_t size = 0;
    std::string data;
    bool complete = false;
    std::string error;
    absl::Time update_time;
  };
  absl::StatusOr<std::optional<AttemptLog>> GetAttemptLog(int64_t job_id,
                                                          int32_t attempt);

  // The scheduler's explanation of a job, if it wrote one.
  absl::StatusOr<std::optional<Explanation>> GetExplanation(int64_t job_id);

 private:
  Database* db_;
};

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_JOB_STORE_H_
