#include "storage/postgres/scheduler_store.h"

#include <algorithm>
#include <exception>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "services/lib/domain/job_state.h"
#include "services/lib/domain/names.h"
#include "storage/postgres/job_batch.h"

namespace trainyard::storage::postgres {

using trainyard::v1::Job;
using trainyard::v1::JobState;

SchedulerStore::SchedulerStore(Database* db) : db_(db) {
  PrepareJobRowStatements(db_);
  PrepareJobBatchStatements(db_);
  // Every non-terminal job of one part (id % $1 = $2) with its newest
  // attempt's body (the newest attempt is the one numbered attempt_count:
  // the statement that inserts an attempt sets it).
  db_->Prepare(
      "jobs_active_part",
      absl::StrCat("SELECT ", JobColumns(),
                   ", CASE WHEN attempt_count > 0 THEN (SELECT a.body FROM "
                   "attempts a WHERE a.job_id = jobs.id AND a.idx = "
                   "jobs.attempt_count) END FROM jobs WHERE state NOT IN (5, "
                   "6, 7) AND id % $1::bigint = $2::bigint"));
  // A join that drives primary-key lookups: `id = ANY($1) AND state NOT IN
  // (...)` got a generic plan scanning every active job (all the queued ones)
  // on each cycle.
  db_->Prepare("jobs_active_ids",
               absl::StrCat("SELECT ", JobColumns(),
                            " FROM unnest($1::bigint[]) AS wanted(id) JOIN "
                            "jobs USING (id) WHERE state NOT IN (5, 6, 7)"));
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
      "INSERT INTO pending_explanations (job_id, reason, message, position, "
      "evaluate_time, estimated_cost_micros) "
      "SELECT id, reason, message, position, "
      "coalesce(to_timestamp(evaluated / 1000000.0), now()), estimate "
      "FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], "
      "$5::bigint[], $6::bigint[]) AS u(id, reason, message, position, "
      "evaluated, estimate) "
      "ON CONFLICT (job_id) DO UPDATE SET reason = excluded.reason, "
      "message = excluded.message, position = excluded.position, "
      "evaluate_time = excluded.evaluate_time, estimated_cost_micros = "
      "excluded.estimated_cost_micros, update_time = now()");
  db_->Prepare(
      "explanations_all",
      absl::StrCat("SELECT job_id, reason, message, ",
                   EpochMicros("update_time"), " FROM pending_explanations"));
  db_->Prepare(
      "queue_shares_upsert",
      "INSERT INTO queue_shares (tenant, queue, weighted_share, lent) "
      "SELECT * FROM unnest($1::text[], $2::text[], $3::float8[], "
      "$4::jsonb[]) ON CONFLICT (tenant, queue) DO UPDATE SET "
      "weighted_share = excluded.weighted_share, lent = excluded.lent, "
      "update_time = now()");
  db_->Prepare(
      "explanations_delete",
      "DELETE FROM pending_explanations WHERE job_id = ANY($1::bigint[])");
}

namespace {

// The non-terminal jobs among `ids` with their newest attempt and checkpoint
// time, in the caller's transaction.
std::vector<ActiveJob> ReadActiveJobs(pqxx::transaction_base& txn,
                                      const std::vector<int64_t>& ids) {
  std::vector<ActiveJob> out;
  if (ids.empty()) return out;
  const std::string array = IdArray(ids);
  pqxx::result jobs = txn.exec_prepared("jobs_active_ids", array);
  absl::flat_hash_map<int64_t, size_t> slot;
  out.reserve(jobs.size());
  for (const pqxx::row& row : jobs) {
    slot[row[0].as<int64_t>()] = out.size();
    out.push_back(ActiveJob{.job = RowToJob(row)});
  }
  pqxx::result attempts = txn.exec_prepared("attempts_latest_ids", array);
  for (const pqxx::row& row : attempts) {
    auto it = slot.find(row[0].as<int64_t>());
    if (it == slot.end()) continue;
    trainyard::v1::Attempt a;
    a.ParseFromString(BytesOf(row[1]));
    out[it->second].attempt = std::move(a);
  }
  pqxx::result checkpoints = txn.exec_prepared("checkpoints_latest_ids", array);
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
          out = ReadActiveJobs(txn, *ids);
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return out;
  }
  // All of them, in kLoadParts parts (by id), each read and parsed on a
  // connection and thread of its own, and the checkpoints on another: while
  // PostgreSQL sends one part, another is parsed.
  constexpr int kLoadParts = 4;
  struct Part {
    std::vector<ActiveJob> jobs;
    std::vector<int64_t> ids;
    absl::Status status;
  };
  std::vector<Part> parts(kLoadParts);
  std::vector<std::thread> readers;
  readers.reserve(kLoadParts);
  for (int k = 0; k < kLoadParts; ++k) {
    readers.emplace_back([this, &part = parts[k], k] {
      part.status = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
        const pqxx::result rows = txn.exec_prepared(
            "jobs_active_part", int64_t{kLoadParts}, int64_t{k});
        part.jobs.clear();
        part.jobs.resize(rows.size());
        part.ids.resize(rows.size());
        for (size_t i = 0; i < rows.size(); ++i) {
          part.ids[i] = rows[i][0].as<int64_t>();
          part.jobs[i].job = RowToJob(rows[i]);
          if (const pqxx::field body = rows[i][kJobColumnCount];
              !body.is_null()) {
            part.jobs[i].attempt.emplace().ParseFromString(BytesOf(body));
          }
        }
        return absl::OkStatus();
      });
    });
  }
  absl::flat_hash_map<int64_t, absl::Time> checkpoints;
  const absl::Status checkpoints_read =
      db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
        checkpoints.clear();
        const pqxx::result rows =
            txn.exec_prepared("checkpoints_latest_active");
        checkpoints.reserve(rows.size());
        for (const pqxx::row& row : rows) {
          checkpoints.emplace(row[0].as<int64_t>(), TimeOf(row[1]));
        }
        return absl::OkStatus();
      });
  size_t total = 0;
  for (int k = 0; k < kLoadParts; ++k) {
    readers[k].join();
    total += parts[k].jobs.size();
  }
  for (const Part& part : parts) {
    if (!part.status.ok()) return part.status;
  }
  if (!checkpoints_read.ok()) return checkpoints_read;
  // Checkpoints of jobs that were not active when the jobs were read are
  // left out.
  out.reserve(total);
  for (Part& part : parts) {
    for (size_t i = 0; i < part.jobs.size(); ++i) {
      out.push_back(std::move(part.jobs[i]));
      auto it = checkpoints.find(part.ids[i]);
      if (it != checkpoints.end()) out.back().last_checkpoint = it->second;
    }
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
    out.active = ReadActiveJobs(txn, out.ids);
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
      saves.AddNewAttempt(a.job_id, index,
                          std::string(domain::NameId(attempt.cluster())),
                          std::string(domain::NameId(attempt.flavor())),
                          attempt, a.estimated_cost_micros);
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
      ArrayLiteral ids, reasons, messages, positions, evaluated, estimates;
      for (size_t i = begin; i < std::min(upserts.size(), begin + kChunk);
           ++i) {
        ids.Int(upserts[i].job_id);
        reasons.Text(upserts[i].reason);
        messages.Text(upserts[i].message);
        positions.Int(upserts[i].position);
        if (upserts[i].evaluate_time == absl::InfinitePast()) {
          evaluated.Null();
        } else {
          evaluated.Int(absl::ToUnixMicros(upserts[i].evaluate_time));
        }
        if (upserts[i].estimated_cost_micros.has_value()) {
          estimates.Int(*upserts[i].estimated_cost_micros);
        } else {
          estimates.Null();
        }
      }
      txn.exec_prepared("explanations_upsert", ids.str(), reasons.str(),
                        messages.str(), positions.str(), evaluated.str(),
                        estimates.str());
    }
    return absl::OkStatus();
  });
}

absl::Status SchedulerStore::WriteQueueShares(
    const std::vector<QueueShareRow>& shares) {
  if (shares.empty()) return absl::OkStatus();
  return db_->Transact([&](pqxx::work& txn) -> absl::Status {
    txn.exec0("SET LOCAL synchronous_commit = off");
    ArrayLiteral tenants, queues, values, lent;
    for (const QueueShareRow& row : shares) {
      tenants.Text(row.tenant);
      queues.Text(row.queue);
      values.Text(absl::StrFormat("%.17g", row.weighted_share));
      // [[flavor, resource, amount], ...]; flavor ids need no escaping
      // (domain::IsValidId), but quote them as JSON strings all the same.
      std::vector<std::string> cells;
      for (const QueueLentCell& cell : row.lent) {
        std::string flavor;
        for (char c : cell.flavor) {
          if (c == '"' || c == '\\') flavor.push_back('\\');
          flavor.push_back(c);
        }
        cells.push_back(absl::StrCat("[\"", flavor, "\",", cell.resource, ",",
                                     cell.amount, "]"));
      }
      lent.Text(absl::StrCat("[", absl::StrJoin(cells, ","), "]"));
    }
    txn.exec_prepared("queue_shares_upsert", tenants.str(), queues.str(),
                      values.str(), lent.str());
    return absl::OkStatus();
  });
}

}  // namespace trainyard::storage::postgres
