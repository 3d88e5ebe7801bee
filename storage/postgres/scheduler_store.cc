#include "storage/postgres/scheduler_store.h"

#include <algorithm>
#include <exception>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "services/lib/domain/job_state.h"
#include "services/lib/domain/names.h"
#include "storage/postgres/job_batch.h"

namespace trainyard::storage::postgres {

using trainyard::v1::Job;
using trainyard::v1::JobState;

SchedulerStore::SchedulerStore(Database* db) : db_(db) {
  PrepareJobRowStatements(db_);
  PrepareJobBatchStatements(db_);
  db_->Prepare("jobs_active",
               absl::StrCat("SELECT ", JobColumns(),
                            " FROM jobs WHERE state NOT IN (5, 6, 7)"));
  // A join that drives primary-key lookups: `id = ANY($1) AND state NOT IN
  // (...)` got a generic plan scanning every active job (all the queued ones)
  // on each cycle.
  db_->Prepare("jobs_active_ids",
               absl::StrCat("SELECT ", JobColumns(),
                            " FROM unnest($1::bigint[]) AS wanted(id) JOIN "
                            "jobs USING (id) WHERE state NOT IN (5, 6, 7)"));
  db_->Prepare("attempts_latest_active",
               "SELECT DISTINCT ON (a.job_id) a.job_id, a.body FROM attempts a "
               "JOIN jobs j ON j.id = a.job_id WHERE j.state NOT IN (5, 6, 7) "
               "ORDER BY a.job_id, a.idx DESC");
  db_->Prepare("attempts_latest_ids",
               "SELECT DISTINCT ON (job_id) job_id, body FROM attempts "
               "WHERE job_id = ANY($1::bigint[]) ORDER BY job_id, idx DESC");
  db_->Prepare(
      "checkpoints_latest_active",
      absl::StrCat("SELECT c.job_id, ", EpochMicros("max(c.report_time)"),
                   " FROM checkpoints c JOIN jobs j ON j.id = c.job_id "
                   "WHERE j.state NOT IN (5, 6, 7) GROUP BY c.job_id"));
  db_->Prepare(
      "checkpoints_latest_ids",
      absl::StrCat("SELECT job_id, ", EpochMicros("max(report_time)"),
                   " FROM checkpoints WHERE job_id = ANY($1::bigint[]) "
                   "GROUP BY job_id"));
  db_->Prepare("events_changed",
               "SELECT seq, job_id FROM job_events WHERE seq > $1 ORDER BY seq "
               "LIMIT $2");
  db_->Prepare(
      "explanations_upsert",
      "INSERT INTO pending_explanations (job_id, reason, message, position) "
      "SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], "
      "$4::bigint[]) "
      "ON CONFLICT (job_id) DO UPDATE SET reason = excluded.reason, "
      "message = excluded.message, position = excluded.position, update_time = "
      "now()");
  db_->Prepare(
      "explanations_all",
      absl::StrCat("SELECT job_id, reason, message, ",
                   EpochMicros("update_time"), " FROM pending_explanations"));
  db_->Prepare(
      "explanations_delete",
      "DELETE FROM pending_explanations WHERE job_id = ANY($1::bigint[])");
}

namespace {

// Non-terminal jobs (ids == nullptr: all of them) with their newest attempt
// and checkpoint time, in the caller's transaction.
std::vector<ActiveJob> ReadActiveJobs(pqxx::transaction_base& txn,
                                      const std::vector<int64_t>* ids) {
  std::vector<ActiveJob> out;
  if (ids != nullptr && ids->empty()) return out;
  const std::string array = ids != nullptr ? IdArray(*ids) : std::string();
  pqxx::result jobs = ids != nullptr
                          ? txn.exec_prepared("jobs_active_ids", array)
                          : txn.exec_prepared("jobs_active");
  absl::flat_hash_map<int64_t, size_t> slot;
  out.reserve(jobs.size());
  for (const pqxx::row& row : jobs) {
    slot[row[0].as<int64_t>()] = out.size();
    out.push_back(ActiveJob{.job = RowToJob(row)});
  }
  pqxx::result attempts = ids != nullptr
                              ? txn.exec_prepared("attempts_latest_ids", array)
                              : txn.exec_prepared("attempts_latest_active");
  for (const pqxx::row& row : attempts) {
    auto it = slot.find(row[0].as<int64_t>());
    if (it == slot.end()) continue;
    trainyard::v1::Attempt a;
    a.ParseFromString(BytesOf(row[1]));
    out[it->second].attempt = std::move(a);
  }
  pqxx::result checkpoints =
      ids != nullptr ? txn.exec_prepared("checkpoints_latest_ids", array)
                     : txn.exec_prepared("checkpoints_latest_active");
  for (const pqxx::row& row : checkpoints) {
    auto it = slot.find(row[0].as<int64_t>());
    if (it == slot.end()) continue;
    out[it->second].last_checkpoint = TimeOf(row[1]);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<ActiveJob>> SchedulerStore::LoadActiveJobs(
    const std::vector<int64_t>* ids) {
  std::vector<ActiveJob> out;
  if (ids != nullptr) {
    absl::Status s =
        db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
          out = ReadActiveJobs(txn, ids);
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return out;
  }
  // All of them: the attempts and the checkpoints on connections (and
  // threads) of their own while this one reads and parses the jobs.
  std::vector<std::pair<int64_t, trainyard::v1::Attempt>> attempts;
  std::vector<std::pair<int64_t, absl::Time>> checkpoints;
  absl::Status attempts_read, checkpoints_read;
  std::thread attempts_reader([&] {
    attempts_read = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
      attempts.clear();
      const pqxx::result rows = txn.exec_prepared("attempts_latest_active");
      attempts.resize(rows.size());
      for (size_t i = 0; i < rows.size(); ++i) {
        attempts[i].first = rows[i][0].as<int64_t>();
        attempts[i].second.ParseFromString(BytesOf(rows[i][1]));
      }
      return absl::OkStatus();
    });
  });
  std::thread checkpoints_reader([&] {
    checkpoints_read =
        db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
          checkpoints.clear();
          const pqxx::result rows =
              txn.exec_prepared("checkpoints_latest_active");
          checkpoints.reserve(rows.size());
          for (const pqxx::row& row : rows) {
            checkpoints.emplace_back(row[0].as<int64_t>(), TimeOf(row[1]));
          }
          return absl::OkStatus();
        });
  });
  absl::flat_hash_map<int64_t, size_t> slot;
  absl::Status jobs_read =
      db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
        out.clear();
        slot.clear();
        const pqxx::result rows = txn.exec_prepared("jobs_active");
        out.resize(rows.size());
        // Parsed on two threads, half each (the result is only read).
        const size_t half = rows.size() / 2;
        std::exception_ptr failed;
        std::thread second_half([&] {
          try {
            for (size_t i = half; i < rows.size(); ++i)
              out[i].job = RowToJob(rows[i]);
          } catch (...) {
            failed = std::current_exception();
          }
        });
        try {
          for (size_t i = 0; i < half; ++i) out[i].job = RowToJob(rows[i]);
          slot.reserve(rows.size());
          for (size_t i = 0; i < rows.size(); ++i)
            slot[rows[i][0].as<int64_t>()] = i;
        } catch (...) {
          second_half.join();
          throw;
        }
        second_half.join();
        if (failed) std::rethrow_exception(failed);
        return absl::OkStatus();
      });
  attempts_reader.join();
  checkpoints_reader.join();
  for (const absl::Status& s : {jobs_read, attempts_read, checkpoints_read}) {
    if (!s.ok()) return s;
  }
  // Rows of jobs that were not active when the jobs were read are left out.
  for (auto& [id, attempt] : attempts) {
    auto it = slot.find(id);
    if (it != slot.end()) out[it->second].attempt = std::move(attempt);
  }
  for (const auto& [id, time] : checkpoints) {
    auto it = slot.find(id);
    if (it != slot.end()) out[it->second].last_checkpoint = time;
  }
  return out;
}

absl::StatusOr<std::vector<WrittenExplanation>>
SchedulerStore::LoadExplanations() {
  std::vector<WrittenExplanation> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    const pqxx::result rows = txn.exec_prepared("explanations_all");
    out.clear();
    out.resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      out[i].job_id = rows[i][0].as<int64_t>();
      out[i].reason = rows[i][1].c_str();
      out[i].message = std::string(rows[i][2].c_str(), rows[i][2].size());
      out[i].written = TimeOf(rows[i][3]);
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<SchedulerStore::Changes> SchedulerStore::LoadChanges(
    uint64_t after, int limit) {
  Changes out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    const absl::Time start = absl::Now();
    out = Changes{.last_seq = after};
    absl::flat_hash_set<int64_t> seen;
    int events = 0;
    for (const pqxx::row& row :
         txn.exec_prepared("events_changed", after, limit)) {
      ++events;
      out.last_seq = row[0].as<uint64_t>();
      const int64_t id = row[1].as<int64_t>();
      if (seen.insert(id).second) out.ids.push_back(id);
    }
    out.more = events >= limit;
    out.events = events;
    const absl::Time events_read = absl::Now();
    out.read_events = events_read - start;
    // Read after the events: a job that changes in between is read in its
    // newer state now and again at the next call (its event is after
    // last_seq).
    out.active = ReadActiveJobs(txn, &out.ids);
    out.read_jobs = absl::Now() - events_read;
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<DecisionOutcome> SchedulerStore::ApplyDecisions(
    const std::vector<PreemptDecision>& preemptions,
    const std::vector<AdmitDecision>& admissions) {
  DecisionOutcome out;
  absl::Time body_end;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    const absl::Time start = absl::Now();
    out = DecisionOutcome{};
    JobSaves saves;
    absl::flat_hash_set<int64_t> not_preempted;
    std::vector<int64_t> ids;
    for (const PreemptDecision& p : preemptions) ids.push_back(p.job_id);
    for (const AdmitDecision& a : admissions) ids.push_back(a.job_id);
    LockedJobs locked(txn, std::move(ids));
    const absl::Time jobs_locked = absl::Now();
    out.lock_jobs = jobs_locked - start;
    for (const PreemptDecision& p : preemptions) {
      absl::StatusOr<Job> job = locked.Get(p.tenant, p.job_id);
      JobState to = trainyard::v1::JOB_STATE_UNSPECIFIED;
      if (job.ok() && job->version() == p.expected_version) {
        if (job->state() == trainyard::v1::JOB_STATE_RUNNING) {
          to = trainyard::v1::JOB_STATE_PREEMPTING;
        } else if (job->state() == trainyard::v1::JOB_STATE_ADMITTED) {
          to = trainyard::v1::JOB_STATE_QUEUED;
        }
      }
      if (to == trainyard::v1::JOB_STATE_UNSPECIFIED ||
          !domain::CheckTransition(job->state(), to).ok()) {
        out.dropped.push_back(p.job_id);
        not_preempted.insert(p.job_id);
        continue;
      }
      const JobState from = job->state();
      if (from == trainyard::v1::JOB_STATE_ADMITTED) {
        CloseUndispatchedAttempt(
            txn, p.job_id, absl::Now(), trainyard::v1::FAILURE_CLASS_PREEMPTION,
            absl::StrCat("preempted before dispatch: ", p.message));
      }
      job->set_state(to);
      job->set_state_reason(p.reason);
      job->set_state_message(p.message);
      saves.Add(p.job_id, *job, from);
      out.preempted.push_back(p.job_id);
    }
    const absl::Time now = absl::Now();
    for (const AdmitDecision& a : admissions) {
      bool blocked = false;
      for (int64_t v : a.victims) blocked |= not_preempted.contains(v);
      absl::StatusOr<Job> job = blocked ? absl::AbortedError("victim")
                                        : locked.Get(a.tenant, a.job_id);
      if (!job.ok() || job->version() != a.expected_version ||
          job->state() != trainyard::v1::JOB_STATE_QUEUED ||
          job->cancel_requested()) {
        out.dropped.push_back(a.job_id);
        continue;
      }
      const int32_t index = job->attempt_count() + 1;
      trainyard::v1::Attempt attempt = a.attempt;
      attempt.set_index(index);
      attempt.set_backend_job_name(absl::StrCat("ty-", a.job_id, "-", index));
      attempt.set_resumed_from(job->resume_from());
      *attempt.mutable_admit_time() = ToTimestamp(now);
      // Inserted by the statement that saves the jobs.
      saves.AddNewAttempt(
          a.job_id, index, std::string(domain::NameId(attempt.cluster())),
          std::string(domain::NameId(attempt.flavor())), attempt);
      job->set_attempt_count(index);
      job->set_state(trainyard::v1::JOB_STATE_ADMITTED);
      job->set_state_reason("ADMITTED");
      job->set_state_message(a.message);
      saves.Add(a.job_id, *job, trainyard::v1::JOB_STATE_QUEUED);
      out.admitted.push_back(a.job_id);
    }
    saves.Flush(txn, &out.outbox_wait, &out.events);
    body_end = absl::Now();
    out.writes = body_end - jobs_locked - out.outbox_wait - out.events;
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  out.commit = absl::Now() - body_end;
  return out;
}

absl::Status SchedulerStore::WriteExplanations(
    const std::vector<Explanation>& upserts, const std::vector<int64_t>& done) {
  if (upserts.empty() && done.empty()) return absl::OkStatus();
  return db_->Transact([&](pqxx::work& txn) -> absl::Status {
    // Explanations are advice the scheduler rewrites from its own state: no
    // need to wait for the WAL flush (a database crash may lose the last
    // ones; the scheduler rewrites everything after any failed cycle).
    txn.exec0("SET LOCAL synchronous_commit = off");
    if (!done.empty()) txn.exec_prepared("explanations_delete", IdArray(done));
    // In chunks, so that one statement stays small.
    constexpr size_t kChunk = 2000;
    for (size_t begin = 0; begin < upserts.size(); begin += kChunk) {
      ArrayLiteral ids, reasons, messages, positions;
      for (size_t i = begin; i < std::min(upserts.size(), begin + kChunk);
           ++i) {
        ids.Int(upserts[i].job_id);
        reasons.Text(upserts[i].reason);
        messages.Text(upserts[i].message);
        positions.Int(upserts[i].position);
      }
      txn.exec_prepared("explanations_upsert", ids.str(), reasons.str(),
                        messages.str(), positions.str());
    }
    return absl::OkStatus();
  });
}

}  // namespace trainyard::storage::postgres
