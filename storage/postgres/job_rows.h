// Row codecs and write helpers shared by the job stores: JobStore (the api's,
// job_store.h), SchedulerStore (scheduler_store.h) and DispatcherStore
// (dispatcher_store.h). A job, attempt, checkpoint or event row read into its
// proto, the jobs table's column list, the array literals the batch
// statements take, and the job-event outbox every writer of job state appends
// to. docs/storage.md lists which file prepares which statement.
#ifndef TRAINYARD_STORAGE_POSTGRES_JOB_ROWS_H_
#define TRAINYARD_STORAGE_POSTGRES_JOB_ROWS_H_

#include <cstdint>
#include <pqxx/pqxx>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/time_util.h"
#include "storage/postgres/pool.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::storage::postgres {

// Name of the PostgreSQL notification channel raised when events commit.
inline constexpr char kEventChannel[] = "ty_events";

// Why a pending job waits, as the scheduler last explained it (a row of
// pending_explanations): SchedulerStore::WriteExplanations writes it,
// JobStore::GetExplanation reads it.
struct Explanation {
  int64_t job_id = 0;
  std::string reason;
  std::string message;
  int64_t position = 0;
  // When the scheduler evaluated the job to this explanation (its cycle's
  // time); InfinitePast: not known (the write's time stands in).
  absl::Time evaluate_time = absl::InfinitePast();
  // What the scheduler expects the job to cost on the flavor it would try
  // first (micros; pending_explanations.estimated_cost_micros).
  std::optional<int64_t> estimated_cost_micros;
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
// `outbox_wait` (optional) gets the time spent waiting for the outbox lock,
// `events` that of the insert and the notify.
void AppendEvents(pqxx::work& txn, const std::vector<PendingEvent>& events,
                  absl::Duration* outbox_wait = nullptr,
                  absl::Duration* events_time = nullptr);

// --- For the job stores' own .cc files ---

// Registers the statements of AppendEvents (outbox_lock, events_insert,
// events_notify) and CloseUndispatchedAttempt (attempt_latest_lock,
// attempt_update). Every job store's constructor calls it (registering a
// statement twice is a no-op).
void PrepareJobRowStatements(Database* db);

// Text form of a PostgreSQL array literal, built element by element.
class ArrayLiteral {
 public:
  void Text(std::string_view value) {
    std::string quoted = "\"";
    for (char c : value) {
      if (c == '"' || c == '\\') quoted.push_back('\\');
      quoted.push_back(c);
    }
    quoted.push_back('"');
    elements_.push_back(std::move(quoted));
  }
  void Bytes(const std::string& bytes) {
    elements_.push_back(
        absl::StrCat("\"\\\\x", absl::BytesToHexString(bytes), "\""));
  }
  void Int(int64_t value) { elements_.push_back(absl::StrCat(value)); }
  void Bool(bool value) { elements_.push_back(value ? "t" : "f"); }
  void Null() { elements_.push_back("NULL"); }
  std::string str() const {
    return absl::StrCat("{", absl::StrJoin(elements_, ","), "}");
  }

 private:
  std::vector<std::string> elements_;
};

// `ids` as a bigint[] literal.
std::string IdArray(const std::vector<int64_t>& ids);

// The job's labels as the jsonb text of the labels column ("{}" if none).
std::string LabelsJson(const trainyard::v1::Job& job);

// "tenants/<tenant>/jobs/<id>".
std::string JobName(const std::string& tenant, int64_t id);

// The jobs table's columns as RowToJob reads them (21 columns: a statement
// that selects more puts them after these).
const std::string& JobColumns();
// How many columns JobColumns() names (a statement's own columns follow).
inline constexpr int kJobColumnCount = 21;
trainyard::v1::Job RowToJob(const pqxx::row& row);

// An event of `job` (its name, tenant, queue, job set and attempt), now.
trainyard::v1::JobEvent MakeEvent(const trainyard::v1::Job& job,
                                  trainyard::v1::JobEventType type,
                                  trainyard::v1::JobState from,
                                  trainyard::v1::JobState to,
                                  const std::string& reason,
                                  const std::string& message);
PendingEvent Pending(const trainyard::v1::Job& job, int64_t id,
                     trainyard::v1::JobEvent event);

// What the ledger and the scheduler hold of each job of the bigint[] $1 (jobs
// that do not exist have no row): tenant, queue, job set, state, spent,
// tenant and lost-work cost, GPU-ms, whether every started attempt is metered
// for good, the accounting currency (NULL before the first price), and the
// scheduler's estimates (pending, last attempt). Read by SetJobCost.
const std::string& JobCostsQuery();
// Column indexes of JobCostsQuery.
enum JobCostColumn {
  kJobCostId = 0,
  kJobCostTenant,
  kJobCostQueue,
  kJobCostJobSet,
  kJobCostState,
};
// Fills `cost` from a row of JobCostsQuery (docs/accounting.md, "A job's
// cost"); false, leaving it alone, when there is no accounting currency yet.
bool SetJobCost(const pqxx::row& row, trainyard::v1::JobCost* cost);

// Ends the latest attempt of a job that never reached its backend (cancelled
// or preempted while ADMITTED), so that every attempt row has an end: body
// end_time, failure class and message, and the end_time column.
void CloseUndispatchedAttempt(pqxx::work& txn, int64_t job_id, absl::Time now,
                              trainyard::v1::FailureClass failure,
                              const std::string& message);

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_JOB_ROWS_H_
