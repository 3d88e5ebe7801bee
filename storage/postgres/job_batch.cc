#include "storage/postgres/job_batch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/lib/domain/job_state.h"

namespace trainyard::storage::postgres {

using trainyard::v1::Job;
using trainyard::v1::JobState;

void PrepareJobBatchStatements(Database* db) {
  db->Prepare("jobs_lock_ordered",
              absl::StrCat("SELECT ", JobColumns(),
                           " FROM jobs WHERE id = ANY($1::bigint[]) ORDER BY "
                           "id FOR UPDATE"));
  // JobSaves: many jobs' state changes in one statement (the unnest columns
  // are named u_* so that RETURNING's job columns stay unambiguous).
  const std::string save_many = absl::StrCat(
      "UPDATE jobs SET state = u.u_state, state_reason = u.u_reason, "
      "state_message = u.u_message, attempt_count = u.u_attempts, "
      "resume_from = u.u_resume, cancel_requested = u.u_cancel, "
      "end_time = CASE WHEN u.u_terminal THEN coalesce(jobs.end_time, "
      "now()) ELSE NULL END, version = jobs.version + 1, update_time = "
      "now() FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], "
      "$5::int[], $6::text[], $7::boolean[], $8::boolean[]) AS u(u_id, "
      "u_state, u_reason, u_message, u_attempts, u_resume, u_cancel, "
      "u_terminal) WHERE jobs.id = u.u_id RETURNING ",
      JobColumns());
  db->Prepare("jobs_save_many", save_many);
  // The same with new attempt rows inserted by the same statement (one round
  // trip fewer for the scheduler's admissions).
  db->Prepare("jobs_save_many_new_attempts",
              absl::StrCat("WITH new_attempts AS (INSERT INTO attempts "
                           "(job_id, idx, cluster, flavor, body, "
                           "estimated_cost_micros) SELECT * "
                           "FROM unnest($9::bigint[], $10::int[], $11::text[], "
                           "$12::text[], $13::bytea[], $14::bigint[])) ",
                           save_many));
  db->Prepare(
      "attempts_update_many",
      "UPDATE attempts SET body = u.u_body, start_time = CASE WHEN u.u_start "
      "IS NULL THEN attempts.start_time ELSE to_timestamp(u.u_start / 1e6) "
      "END, end_time = CASE WHEN u.u_end IS NULL THEN attempts.end_time ELSE "
      "to_timestamp(u.u_end / 1e6) END FROM unnest($1::bigint[], $2::int[], "
      "$3::bytea[], $4::bigint[], $5::bigint[]) AS u(u_job, u_idx, u_body, "
      "u_start, u_end) WHERE attempts.job_id = u.u_job AND attempts.idx = "
      "u.u_idx");
}

LockedJobs::LockedJobs(pqxx::work& txn, std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (ids.empty()) return;
  for (const pqxx::row& row :
       txn.exec_prepared("jobs_lock_ordered", IdArray(ids))) {
    rows_.emplace(row[0].as<int64_t>(), RowToJob(row));
  }
}

absl::StatusOr<Job> LockedJobs::Get(const std::string& tenant,
                                    int64_t job_id) const {
  auto it = rows_.find(job_id);
  if (it == rows_.end() || it->second.tenant() != tenant) {
    return absl::NotFoundError(
        absl::StrCat(JobName(tenant, job_id), " not found"));
  }
  return it->second;
}

void JobSaves::AddAttempt(int64_t job_id, int idx,
                          const trainyard::v1::Attempt& a,
                          std::optional<int64_t> start_micros,
                          std::optional<int64_t> end_micros) {
  attempt_jobs_.Int(job_id);
  attempt_indexes_.Int(idx);
  attempt_bodies_.Bytes(a.SerializeAsString());
  if (start_micros.has_value()) {
    attempt_starts_.Int(*start_micros);
  } else {
    attempt_starts_.Null();
  }
  if (end_micros.has_value()) {
    attempt_ends_.Int(*end_micros);
  } else {
    attempt_ends_.Null();
  }
  ++attempt_rows_;
}

void JobSaves::AddNewAttempt(int64_t job_id, int idx,
                             const std::string& cluster_id,
                             const std::string& flavor_id,
                             const trainyard::v1::Attempt& a,
                             std::optional<int64_t> estimated_cost_micros) {
  new_attempt_jobs_.Int(job_id);
  new_attempt_indexes_.Int(idx);
  new_attempt_clusters_.Text(cluster_id);
  new_attempt_flavors_.Text(flavor_id);
  new_attempt_bodies_.Bytes(a.SerializeAsString());
  if (estimated_cost_micros.has_value()) {
    new_attempt_estimates_.Int(*estimated_cost_micros);
  } else {
    new_attempt_estimates_.Null();
  }
  ++new_attempt_rows_;
}

void JobSaves::Add(int64_t job_id, const Job& job, JobState from) {
  ids_.Int(job_id);
  states_.Int(static_cast<int>(job.state()));
  reasons_.Text(job.state_reason());
  messages_.Text(job.state_message());
  attempt_counts_.Int(job.attempt_count());
  resumes_.Text(job.resume_from());
  cancels_.Bool(job.cancel_requested());
  terminals_.Bool(domain::IsTerminal(job.state()));
  changes_.push_back(
      {job_id, from, job.state(), job.state_reason(), job.state_message()});
  job_ids_.insert(job_id);
}

absl::flat_hash_map<int64_t, Job> JobSaves::Flush(pqxx::work& txn,
                                                  absl::Duration* outbox_wait,
                                                  absl::Duration* events_time) {
  absl::flat_hash_map<int64_t, Job> saved;
  if (attempt_rows_ > 0) {
    txn.exec_prepared("attempts_update_many", attempt_jobs_.str(),
                      attempt_indexes_.str(), attempt_bodies_.str(),
                      attempt_starts_.str(), attempt_ends_.str());
  }
  if (!changes_.empty() || new_attempt_rows_ > 0) {
    pqxx::result rows =
        new_attempt_rows_ > 0
            ? txn.exec_prepared(
                  "jobs_save_many_new_attempts", ids_.str(), states_.str(),
                  reasons_.str(), messages_.str(), attempt_counts_.str(),
                  resumes_.str(), cancels_.str(), terminals_.str(),
                  new_attempt_jobs_.str(), new_attempt_indexes_.str(),
                  new_attempt_clusters_.str(), new_attempt_flavors_.str(),
                  new_attempt_bodies_.str(), new_attempt_estimates_.str())
            : txn.exec_prepared("jobs_save_many", ids_.str(), states_.str(),
                                reasons_.str(), messages_.str(),
                                attempt_counts_.str(), resumes_.str(),
                                cancels_.str(), terminals_.str());
    for (const pqxx::row& row : rows) {
      const int64_t id = row[0].as<int64_t>();
      saved.emplace(id, RowToJob(row));
    }
    std::vector<PendingEvent> events;
    for (const Change& c : changes_) {
      const Job& job = saved.at(c.job_id);
      events.push_back(
          Pending(job, c.job_id,
                  MakeEvent(job, trainyard::v1::JOB_EVENT_TYPE_STATE_CHANGED,
                            c.from, c.to, c.reason, c.message)));
    }
    AppendEvents(txn, events, outbox_wait, events_time);
  }
  *this = JobSaves();
  return saved;
}

}  // namespace trainyard::storage::postgres
