#include "storage/postgres/dispatcher_store.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "services/lib/domain/job_state.h"
#include "services/lib/domain/status_macros.h"
#include "storage/postgres/job_batch.h"

namespace trainyard::storage::postgres {

using trainyard::v1::Job;
using trainyard::v1::JobEvent;
using trainyard::v1::JobState;

namespace {

// The appends as the arrays of attempt_logs_update and attempt_logs_insert
// ($1..$7), in one statement each whatever their number; counts those that
// applied.
int AppendLogsIn(pqxx::work& txn, const std::vector<LogAppend>& appends,
                 int64_t keep_bytes) {
  if (appends.empty()) return 0;
  ArrayLiteral jobs, attempts, expected, offsets, data, complete, errors;
  for (const LogAppend& a : appends) {
    jobs.Int(a.job_id);
    attempts.Int(a.attempt);
    expected.Int(a.expected_size);
    offsets.Int(a.offset);
    data.Bytes(a.data);
    complete.Bool(a.complete);
    errors.Text(a.error);
  }
  int applied = 0;
  for (const char* statement : {"attempt_logs_update", "attempt_logs_insert"}) {
    applied += static_cast<int>(
        txn.exec_prepared(statement, jobs.str(), attempts.str(), expected.str(),
                          offsets.str(), data.str(), complete.str(),
                          errors.str(), keep_bytes)
            .size());
  }
  return applied;
}

}  // namespace

DispatcherStore::DispatcherStore(Database* db) : db_(db) {
  PrepareJobRowStatements(db_);
  PrepareJobBatchStatements(db_);
  db_->Prepare(
      "cluster_attempts",
      absl::StrCat(
          "SELECT ", JobColumns(),
          ", coalesce(l.log_size, 0), coalesce(l.log_complete, false), "
          "coalesce(l.log_error, ''), a.body FROM jobs JOIN LATERAL (SELECT "
          "idx, cluster, body FROM attempts WHERE job_id = jobs.id ORDER BY "
          "idx DESC LIMIT 1) a ON true LEFT JOIN LATERAL (SELECT size AS "
          "log_size, complete AS log_complete, error AS log_error FROM "
          "attempt_logs WHERE job_id = jobs.id AND attempt = a.idx) l ON true "
          "WHERE jobs.state IN (2, 3, 4, 8, 9) AND a.cluster = $1 ORDER BY "
          "jobs.id"));
  // Appends to attempts' kept output: arrays of job, attempt, expected
  // size, offset, data, complete and error ($1..$7), and the bytes kept
  // ($8). An append applies only at the expected size (an existing row:
  // update; none, expected 0: insert); one at the stored size extends the
  // kept bytes, one past it (bytes skipped) replaces them.
  const std::string appends =
      "unnest($1::bigint[], $2::int[], $3::bigint[], $4::bigint[], "
      "$5::bytea[], $6::boolean[], $7::text[]) AS v(job_id, attempt, "
      "expected, off, data, complete, error)";
  db_->Prepare(
      "attempt_logs_update",
      absl::StrCat(
          "UPDATE attempt_logs AS l SET size = v.off + length(v.data), data = "
          "CASE WHEN v.off = l.size THEN substring(l.data || v.data from "
          "greatest(1, length(l.data) + length(v.data) - $8::int + 1)) ELSE "
          "substring(v.data from greatest(1, length(v.data) - $8::int + 1)) "
          "END, complete = v.complete, error = v.error, update_time = now() "
          "FROM ",
          appends,
          " WHERE l.job_id = v.job_id AND l.attempt = v.attempt AND l.size = "
          "v.expected AND NOT l.complete RETURNING l.job_id"));
  db_->Prepare(
      "attempt_logs_insert",
      absl::StrCat(
          "INSERT INTO attempt_logs (job_id, attempt, size, data, complete, "
          "error, update_time) SELECT v.job_id, v.attempt, v.off + "
          "length(v.data), substring(v.data from greatest(1, length(v.data) "
          "- $8::int + 1)), v.complete, v.error, now() FROM ",
          appends,
          " WHERE v.expected = 0 ON CONFLICT (job_id, attempt) DO NOTHING "
          "RETURNING job_id"));
  db_->Prepare("attempts_latest_rows",
               "SELECT DISTINCT ON (job_id) job_id, idx, body FROM attempts "
               "WHERE job_id = ANY($1::bigint[]) ORDER BY job_id, idx DESC");
  db_->Prepare("job_events_recent",
               absl::StrCat("SELECT ", EpochMicros("create_time"),
                            ", body FROM job_events WHERE job_id = $1 ORDER BY "
                            "seq DESC LIMIT 100"));
  db_->Prepare("job_events_newest_first",
               absl::StrCat("SELECT ", EpochMicros("create_time"),
                            ", body FROM job_events WHERE job_id = $1 ORDER BY "
                            "seq DESC"));
}

absl::StatusOr<std::vector<ClusterAttempt>> DispatcherStore::ClusterAttempts(
    const std::string& cluster) {
  std::vector<ClusterAttempt> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& row :
         txn.exec_prepared("cluster_attempts", cluster)) {
      const int n = static_cast<int>(row.size());
      ClusterAttempt a{.job = RowToJob(row),
                       .log_size = row[n - 4].as<int64_t>(),
                       .log_complete = row[n - 3].as<bool>(),
                       .log_error = row[n - 2].as<std::string>()};
      a.attempt.ParseFromString(BytesOf(row[n - 1]));
      out.push_back(std::move(a));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<Job> DispatcherStore::ChangeAttempt(const AttemptChange& c) {
  absl::StatusOr<std::vector<absl::StatusOr<Job>>> out = ChangeAttempts({c});
  if (!out.ok()) return out.status();
  return std::move(out->front());
}

absl::StatusOr<std::vector<absl::StatusOr<Job>>>
DispatcherStore::ChangeAttempts(const std::vector<AttemptChange>& changes,
                                const std::vector<LogAppend>& logs,
                                int64_t log_keep_bytes, int* logs_applied) {
  std::vector<absl::StatusOr<Job>> out;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    // Whatever happens below, the output goes in with the changes.
    const int applied = AppendLogsIn(txn, logs, log_keep_bytes);
    if (logs_applied != nullptr) *logs_applied = applied;
    out.assign(changes.size(), absl::UnknownError("not applied"));
    JobSaves saves;
    // Changes saved by `saves` but not flushed yet: (index in out, job).
    std::vector<std::pair<size_t, int64_t>> unsaved;
    std::vector<int64_t> ids;
    for (const AttemptChange& c : changes) ids.push_back(c.job_id);
    LockedJobs locked(txn, ids);
    auto flush = [&] {
      absl::flat_hash_map<int64_t, Job> saved = saves.Flush(txn);
      for (const auto& [job, row] : saved) locked.Saved(job, row);
      for (const auto& [i, job] : unsaved) out[i] = saved.at(job);
      unsaved.clear();
    };
    // The newest attempt of each job, read once. No attempt row lock is
    // needed: every writer of attempts holds its job's row lock.
    absl::flat_hash_map<int64_t, std::pair<int, trainyard::v1::Attempt>> latest;
    for (const pqxx::row& row :
         txn.exec_prepared("attempts_latest_rows", IdArray(ids))) {
      auto& [idx, attempt] = latest[row[0].as<int64_t>()];
      idx = row[1].as<int>();
      attempt.ParseFromString(BytesOf(row[2]));
    }
    // Jobs whose earlier change in this batch was refused: later ones wait.
    absl::flat_hash_set<int64_t> refused;
    for (size_t i = 0; i < changes.size(); ++i) {
      const AttemptChange& c = changes[i];
      if (refused.contains(c.job_id)) {
        out[i] = absl::AbortedError(absl::StrCat(
            JobName(c.tenant, c.job_id), ": an earlier change was refused"));
        continue;
      }
      absl::Status item = absl::OkStatus();
      // A second change of the same job builds on the first one's saved row.
      if (saves.Has(c.job_id)) flush();
      absl::StatusOr<Job> job = locked.Get(c.tenant, c.job_id);
      if (!job.ok()) {
        item = job.status();
      } else if (c.expected_version != 0 &&
                 job->version() != c.expected_version) {
        item = absl::AbortedError(
            absl::StrCat(job->name(), " changed: version ", job->version(),
                         ", expected ", c.expected_version));
      } else {
        item = domain::CheckTransition(job->state(), c.to);
      }
      auto newest = latest.find(c.job_id);
      if (item.ok() && newest == latest.end()) {
        item = absl::FailedPreconditionError(
            absl::StrCat(job->name(), " has no attempt"));
      }
      if (!item.ok()) {
        out[i] = item;
        refused.insert(c.job_id);
        continue;
      }
      const int idx = newest->second.first;
      trainyard::v1::Attempt& attempt = newest->second.second;
      if (c.start_time.has_value())
        *attempt.mutable_start_time() = ToTimestamp(*c.start_time);
      if (c.end_time.has_value())
        *attempt.mutable_end_time() = ToTimestamp(*c.end_time);
      if (c.failure_class != trainyard::v1::FAILURE_CLASS_UNSPECIFIED)
        attempt.set_failure_class(c.failure_class);
      if (c.exit_code.has_value()) attempt.set_exit_code(*c.exit_code);
      if (c.lost_gpu_seconds > 0)
        attempt.set_lost_gpu_seconds(c.lost_gpu_seconds);
      if (!c.attempt_message.empty()) attempt.set_message(c.attempt_message);
      if (!c.backend_job_id.empty())
        attempt.set_backend_job_id(c.backend_job_id);
      std::optional<int64_t> start, end;
      if (c.start_time.has_value()) start = absl::ToUnixMicros(*c.start_time);
      if (c.end_time.has_value()) end = absl::ToUnixMicros(*c.end_time);
      saves.AddAttempt(c.job_id, idx, attempt, start, end);
      const JobState from = job->state();
      job->set_state(c.to);
      job->set_state_reason(c.reason);
      job->set_state_message(c.message);
      if (c.to == trainyard::v1::JOB_STATE_CANCELLED)
        job->set_cancel_requested(false);
      saves.Add(c.job_id, *job, from);
      unsaved.emplace_back(i, c.job_id);
    }
    flush();
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

// The newest event of the job that `match` accepts, with its time, among the
// rows of `statement` (time, body; newest first); nullopt if none.
absl::StatusOr<std::optional<std::pair<absl::Time, JobEvent>>>
DispatcherStore::NewestEvent(const char* statement, int64_t job_id,
                             absl::FunctionRef<bool(const JobEvent&)> match) {
  std::optional<std::pair<absl::Time, JobEvent>> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.reset();
    for (const pqxx::row& row : txn.exec_prepared(statement, job_id)) {
      JobEvent e;
      if (!e.ParseFromString(BytesOf(row[1]))) continue;
      if (match(e)) {
        out.emplace(TimeOf(row[0]), std::move(e));
        break;
      }
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<int> DispatcherStore::AppendLogs(
    const std::vector<LogAppend>& appends, int64_t keep_bytes) {
  int applied = 0;
  if (appends.empty()) return applied;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    applied = AppendLogsIn(txn, appends, keep_bytes);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return applied;
}

absl::StatusOr<std::optional<absl::Time>> DispatcherStore::StateEnteredAt(
    int64_t job_id, JobState state) {
  TY_ASSIGN_OR_RETURN(
      const auto entered,
      NewestEvent("job_events_recent", job_id, [&](const JobEvent& e) {
        return e.type() == trainyard::v1::JOB_EVENT_TYPE_STATE_CHANGED &&
               e.to_state() == state;
      }));
  if (!entered.has_value()) return std::nullopt;
  return entered->first;
}

absl::StatusOr<std::string> DispatcherStore::CancelRequestMessage(
    int64_t job_id) {
  // Once per cancelled job: all its events, newest first, until the request.
  TY_ASSIGN_OR_RETURN(
      const auto requested,
      NewestEvent("job_events_newest_first", job_id, [](const JobEvent& e) {
        return e.type() == trainyard::v1::JOB_EVENT_TYPE_CANCEL_REQUESTED;
      }));
  if (!requested.has_value()) return std::string();
  return requested->second.message();
}

}  // namespace trainyard::storage::postgres
