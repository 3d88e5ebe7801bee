#include "storage/postgres/job_store.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "services/core/job_state.h"
#include "services/core/names.h"
#include "storage/postgres/errors.h"

namespace trainyard::storage::postgres {
namespace {

using trainyard::v1::Checkpoint;
using trainyard::v1::Job;
using trainyard::v1::JobEvent;
using trainyard::v1::JobState;

// Key of the transaction-scoped advisory lock that orders event sequence
// numbers.
constexpr int64_t kOutboxLockKey = 0x74796f7574626f78;  // "tyoutbox"

google::protobuf::Timestamp ToTimestamp(absl::Time t) {
  return google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
      absl::ToUnixMicros(t));
}

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

std::string LabelsJson(const Job& job) {
  if (job.labels().empty()) return "{}";
  Job only_labels;
  *only_labels.mutable_labels() = job.labels();
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(only_labels, &json);
  // {"labels":{...}} → {...}
  constexpr std::string_view kPrefix = "{\"labels\":";
  return json.substr(kPrefix.size(), json.size() - kPrefix.size() - 1);
}

void ParseLabels(const std::string& json, Job* job) {
  if (json == "{}" || json.empty()) return;
  Job parsed;
  if (google::protobuf::util::JsonStringToMessage(
          absl::StrCat("{\"labels\":", json, "}"), &parsed)
          .ok()) {
    *job->mutable_labels() = parsed.labels();
  }
}

std::string JobName(const std::string& tenant, int64_t id) {
  return absl::StrCat("tenants/", tenant, "/jobs/", id);
}

const std::string& JobColumns() {
  static const auto* columns = new std::string(
      absl::StrCat("id, tenant, queue, project, state, priority, "
                   "client_request_id, job_set, display_name, "
                   "creator, labels::text, spec, state_reason, state_message, "
                   "attempt_count, resume_from, "
                   "cancel_requested, version, ",
                   EpochMicros("create_time"), ", ", EpochMicros("update_time"),
                   ", ", EpochMicros("end_time")));
  return *columns;
}

Job RowToJob(const pqxx::row& row) {
  Job job;
  const int64_t id = row[0].as<int64_t>();
  const std::string tenant = row[1].c_str();
  job.set_name(JobName(tenant, id));
  job.set_tenant(tenant);
  job.set_state(static_cast<JobState>(row[4].as<int>()));
  job.set_priority(row[5].as<int>());
  job.set_client_request_id(row[6].c_str());
  job.set_display_name(row[8].c_str());
  job.set_creator(row[9].c_str());
  ParseLabels(row[10].c_str(), &job);
  job.mutable_spec()->ParseFromString(BytesOf(row[11]));
  job.set_state_reason(row[12].c_str());
  job.set_state_message(row[13].c_str());
  job.set_attempt_count(row[14].as<int>());
  job.set_resume_from(row[15].c_str());
  job.set_cancel_requested(row[16].as<bool>());
  job.set_version(row[17].as<int64_t>());
  *job.mutable_create_time() = ToTimestamp(TimeOf(row[18]));
  *job.mutable_update_time() = ToTimestamp(TimeOf(row[19]));
  if (!row[20].is_null())
    *job.mutable_end_time() = ToTimestamp(TimeOf(row[20]));
  return job;
}

JobEvent MakeEvent(const Job& job, trainyard::v1::JobEventType type,
                   JobState from, JobState to, const std::string& reason,
                   const std::string& message) {
  JobEvent e;
  e.set_type(type);
  e.set_job(job.name());
  e.set_tenant(job.tenant());
  e.set_queue(job.spec().queue());
  e.set_job_set(job.spec().job_set());
  e.set_from_state(from);
  e.set_to_state(to);
  e.set_reason(reason);
  e.set_message(message);
  e.set_attempt(job.attempt_count());
  *e.mutable_time() = ToTimestamp(absl::Now());
  return e;
}

PendingEvent Pending(const Job& job, int64_t id, JobEvent event) {
  return PendingEvent{job.tenant(), id, std::move(event)};
}

absl::StatusOr<Job> LockJob(pqxx::work& txn, const std::string& tenant,
                            int64_t job_id) {
  pqxx::result r = txn.exec_prepared("job_lock", job_id, tenant);
  if (r.empty())
    return absl::NotFoundError(
        absl::StrCat(JobName(tenant, job_id), " not found"));
  return RowToJob(r[0]);
}

// Writes a job's new mutable state, bumping its version.
Job SaveJobState(pqxx::work& txn, int64_t job_id, const Job& job) {
  pqxx::result r = txn.exec_prepared(
      "job_save", job_id, static_cast<int>(job.state()), job.state_reason(),
      job.state_message(), job.attempt_count(), job.resume_from(),
      job.cancel_requested(), core::IsTerminal(job.state()));
  return RowToJob(r[0]);
}

}  // namespace

void AppendEvents(pqxx::work& txn, const std::vector<PendingEvent>& events) {
  if (events.empty()) return;
  ArrayLiteral tenants, job_ids, queues, job_sets, bodies;
  for (const PendingEvent& p : events) {
    tenants.Text(p.tenant);
    job_ids.Int(p.job_id);
    queues.Text(p.event.queue());
    job_sets.Text(p.event.job_set());
    bodies.Bytes(p.event.SerializeAsString());
  }
  txn.exec_prepared("outbox_lock");
  txn.exec_prepared("events_insert", tenants.str(), job_ids.str(), queues.str(),
                    job_sets.str(), bodies.str());
  txn.exec_prepared("events_notify");
}

JobStore::JobStore(Database* db) : db_(db) {
  db_->Prepare("jobs_lock_ordered",
               absl::StrCat("SELECT ", JobColumns(),
                            " FROM jobs WHERE id = ANY($1::bigint[]) ORDER BY "
                            "id FOR UPDATE"));
  db_->Prepare("outbox_lock", absl::StrCat("SELECT pg_advisory_xact_lock(",
                                           kOutboxLockKey, ")"));
  db_->Prepare(
      "events_insert",
      "INSERT INTO job_events (seq, tenant, job_id, queue, job_set, body) "
      "SELECT nextval('job_event_seq'), t.tenant, t.job_id, t.queue, "
      "t.job_set, t.body "
      "FROM (SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], "
      "$4::text[], "
      "$5::bytea[]) WITH ORDINALITY AS u(tenant, job_id, queue, job_set, body, "
      "ord) "
      "ORDER BY ord) t");
  db_->Prepare("events_notify",
               absl::StrCat("SELECT pg_notify('", kEventChannel, "', '')"));
  db_->Prepare(
      "jobs_insert",
      absl::StrCat(
          "INSERT INTO jobs (id, tenant, queue, project, state, priority, "
          "client_request_id, "
          "request_hash, job_set, display_name, creator, labels, spec, "
          "state_reason) "
          "SELECT nextval('job_ids'), t.tenant, t.queue, t.project, 1, "
          "t.priority, t.crid, "
          "t.hash, t.job_set, t.display_name, t.creator, t.labels::jsonb, "
          "t.spec, 'SUBMITTED' "
          "FROM (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], "
          "$4::int[], "
          "$5::text[], $6::text[], $7::text[], $8::text[], $9::text[], "
          "$10::text[], "
          "$11::bytea[]) WITH ORDINALITY AS u(tenant, queue, project, "
          "priority, crid, hash, "
          "job_set, display_name, creator, labels, spec, ord) ORDER BY ord) t "
          "ON CONFLICT (tenant, client_request_id) DO NOTHING RETURNING ",
          JobColumns()));
  db_->Prepare("jobs_by_request",
               absl::StrCat("SELECT ", JobColumns(),
                            ", request_hash FROM jobs WHERE tenant = $1 AND "
                            "client_request_id = ANY($2::text[])"));
  db_->Prepare("job_get",
               absl::StrCat("SELECT ", JobColumns(),
                            " FROM jobs WHERE id = $1 AND tenant = $2"));
  db_->Prepare(
      "job_lock",
      absl::StrCat("SELECT ", JobColumns(),
                   " FROM jobs WHERE id = $1 AND tenant = $2 FOR UPDATE"));
  db_->Prepare(
      "job_save",
      absl::StrCat(
          "UPDATE jobs SET state = $2, state_reason = $3, state_message = $4, "
          "attempt_count = $5, resume_from = $6, cancel_requested = $7, "
          "end_time = CASE WHEN $8::boolean THEN coalesce(end_time, now()) "
          "ELSE NULL END, version = version + 1, update_time = now() "
          "WHERE id = $1 RETURNING ",
          JobColumns()));
  // JobSaves: many jobs' state changes in one statement (the unnest columns
  // are named u_* so that RETURNING's job columns stay unambiguous).
  db_->Prepare(
      "jobs_save_many",
      absl::StrCat(
          "UPDATE jobs SET state = u.u_state, state_reason = u.u_reason, "
          "state_message = u.u_message, attempt_count = u.u_attempts, "
          "resume_from = u.u_resume, cancel_requested = u.u_cancel, "
          "end_time = CASE WHEN u.u_terminal THEN coalesce(jobs.end_time, "
          "now()) ELSE NULL END, version = jobs.version + 1, update_time = "
          "now() FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], "
          "$5::int[], $6::text[], $7::boolean[], $8::boolean[]) AS u(u_id, "
          "u_state, u_reason, u_message, u_attempts, u_resume, u_cancel, "
          "u_terminal) WHERE jobs.id = u.u_id RETURNING ",
          JobColumns()));
  db_->Prepare(
      "attempts_update_many",
      "UPDATE attempts SET body = u.u_body, start_time = CASE WHEN u.u_start "
      "IS NULL THEN attempts.start_time ELSE to_timestamp(u.u_start / 1e6) "
      "END, end_time = CASE WHEN u.u_end IS NULL THEN attempts.end_time ELSE "
      "to_timestamp(u.u_end / 1e6) END FROM unnest($1::bigint[], $2::int[], "
      "$3::bytea[], $4::bigint[], $5::bigint[]) AS u(u_job, u_idx, u_body, "
      "u_start, u_end) WHERE attempts.job_id = u.u_job AND attempts.idx = "
      "u.u_idx");
  db_->Prepare(
      "attempts_get",
      "SELECT job_id, body FROM attempts WHERE job_id = ANY($1::bigint[]) "
      "ORDER BY job_id, idx");
  db_->Prepare(
      "checkpoint_insert",
      absl::StrCat("INSERT INTO checkpoints (job_id, attempt, step, uri, body) "
                   "VALUES ($1, $2, $3, $4, $5) RETURNING id, ",
                   EpochMicros("report_time")));
  db_->Prepare(
      "checkpoint_max_step",
      "SELECT coalesce(max(step), -1) FROM checkpoints WHERE job_id = $1");
  db_->Prepare("checkpoints_list",
               absl::StrCat("SELECT id, body, ", EpochMicros("report_time"),
                            " FROM checkpoints WHERE job_id = $1 AND id < $2 "
                            "ORDER BY id DESC LIMIT $3"));
  db_->Prepare("job_position",
               "SELECT count(*) FILTER (WHERE priority > $3 OR (priority = $3 "
               "AND id < $4)), "
               "count(*) FROM jobs WHERE tenant = $1 AND queue = $2 AND state "
               "IN (1, 10)");
  db_->Prepare(
      "jobs_count_by_state",
      "SELECT state, count(*) FROM jobs WHERE tenant = $1 AND queue = $2 "
      "GROUP BY state ORDER BY state");
  db_->Prepare(
      "jobs_queue_usage",
      "SELECT a.flavor, j.spec FROM jobs j JOIN attempts a ON a.job_id = j.id "
      "AND a.idx = j.attempt_count WHERE j.tenant = $1 AND j.queue = $2 AND "
      "j.state IN (2, 3, 4)");
  db_->Prepare("events_last", "SELECT coalesce(max(seq), 0) FROM job_events");
  // Scheduler.
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
  db_->Prepare("attempts_insert",
               "INSERT INTO attempts (job_id, idx, cluster, flavor, body) "
               "SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], "
               "$4::text[], $5::bytea[])");
  db_->Prepare(
      "explanations_upsert",
      "INSERT INTO pending_explanations (job_id, reason, message, position) "
      "SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], "
      "$4::bigint[]) "
      "ON CONFLICT (job_id) DO UPDATE SET reason = excluded.reason, "
      "message = excluded.message, position = excluded.position, update_time = "
      "now()");
  db_->Prepare(
      "explanations_delete",
      "DELETE FROM pending_explanations WHERE job_id = ANY($1::bigint[])");
  db_->Prepare(
      "cluster_attempts",
      absl::StrCat(
          "SELECT ", JobColumns(),
          ", a.body FROM jobs JOIN LATERAL (SELECT cluster, body FROM attempts "
          "WHERE job_id = jobs.id ORDER BY idx DESC LIMIT 1) a ON true "
          "WHERE jobs.state IN (2, 3, 4, 8, 9) AND a.cluster = $1 ORDER BY "
          "jobs.id"));
  db_->Prepare("attempts_latest_rows",
               "SELECT DISTINCT ON (job_id) job_id, idx, body FROM attempts "
               "WHERE job_id = ANY($1::bigint[]) ORDER BY job_id, idx DESC");
  db_->Prepare("attempt_latest_lock",
               "SELECT idx, body FROM attempts WHERE job_id = $1 ORDER BY idx "
               "DESC LIMIT 1 "
               "FOR UPDATE");
  db_->Prepare(
      "attempt_update",
      absl::StrCat(
          "UPDATE attempts SET body = $3, start_time = CASE WHEN $4::bigint IS "
          "NULL THEN start_time ELSE to_timestamp($4::bigint / 1e6) END, "
          "end_time = CASE WHEN $5::bigint IS NULL THEN end_time ELSE "
          "to_timestamp($5::bigint / 1e6) END WHERE job_id = $1 AND idx = $2"));
  db_->Prepare("job_events_recent",
               absl::StrCat("SELECT ", EpochMicros("create_time"),
                            ", body FROM job_events WHERE job_id = $1 ORDER BY "
                            "seq DESC LIMIT 100"));
  db_->Prepare("explanation_get",
               "SELECT reason, message, position FROM pending_explanations "
               "WHERE job_id = $1");
}

absl::StatusOr<std::vector<SubmitOutcome>> JobStore::SubmitMany(
    const std::vector<NewJob>& jobs, bool atomic) {
  std::vector<SubmitOutcome> outcomes(jobs.size());
  if (jobs.empty()) return outcomes;

  // Resolve duplicates inside the batch: the first occurrence of a key is
  // inserted, the others share its outcome.
  absl::flat_hash_map<std::pair<std::string, std::string>, size_t> first_of;
  std::vector<size_t> unique;  // indexes into jobs
  std::vector<size_t> owner(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto [it, inserted] =
        first_of.try_emplace({jobs[i].tenant, jobs[i].client_request_id}, i);
    owner[i] = it->second;
    if (inserted) unique.push_back(i);
  }

  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    for (auto& o : outcomes) o = SubmitOutcome{};
    ArrayLiteral tenants, queues, projects, priorities, crids, hashes, job_sets,
        names, creators, labels, specs;
    for (size_t i : unique) {
      const NewJob& n = jobs[i];
      tenants.Text(n.tenant);
      queues.Text(n.job.spec().queue());
      projects.Text(n.job.spec().project());
      priorities.Int(n.job.priority());
      crids.Text(n.client_request_id);
      hashes.Text(n.request_hash);
      job_sets.Text(n.job.spec().job_set());
      names.Text(n.job.display_name());
      creators.Text(n.job.creator());
      labels.Text(LabelsJson(n.job));
      specs.Bytes(n.job.spec().SerializeAsString());
    }
    pqxx::result inserted = txn.exec_prepared(
        "jobs_insert", tenants.str(), queues.str(), projects.str(),
        priorities.str(), crids.str(), hashes.str(), job_sets.str(),
        names.str(), creators.str(), labels.str(), specs.str());

    absl::flat_hash_map<std::pair<std::string, std::string>, Job> created;
    std::vector<PendingEvent> events;
    for (const pqxx::row& row : inserted) {
      Job job = RowToJob(row);
      auto key = std::make_pair(job.tenant(), job.client_request_id());
      JobEvent e = MakeEvent(job, trainyard::v1::JOB_EVENT_TYPE_SUBMITTED,
                             trainyard::v1::JOB_STATE_UNSPECIFIED,
                             trainyard::v1::JOB_STATE_QUEUED, "SUBMITTED", "");
      events.push_back(Pending(job, row[0].as<int64_t>(), std::move(e)));
      created.emplace(std::move(key), std::move(job));
    }

    // Keys that were not inserted exist already (committed before, or by a
    // concurrent batch that committed while we waited on the unique index).
    absl::flat_hash_map<std::string, std::vector<std::string>>
        missing_by_tenant;
    for (size_t i : unique) {
      if (!created.contains({jobs[i].tenant, jobs[i].client_request_id})) {
        missing_by_tenant[jobs[i].tenant].push_back(jobs[i].client_request_id);
      }
    }
    absl::flat_hash_map<std::pair<std::string, std::string>,
                        std::pair<Job, std::string>>
        existing;
    for (const auto& [tenant, keys] : missing_by_tenant) {
      ArrayLiteral key_array;
      for (const auto& k : keys) key_array.Text(k);
      pqxx::result r =
          txn.exec_prepared("jobs_by_request", tenant, key_array.str());
      for (const pqxx::row& row : r) {
        Job job = RowToJob(row);
        auto key = std::make_pair(job.tenant(), job.client_request_id());
        existing.emplace(std::move(key),
                         std::make_pair(std::move(job), row[21].c_str()));
      }
    }

    bool any_error = false;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const NewJob& n = jobs[owner[i]];
      auto key = std::make_pair(n.tenant, n.client_request_id);
      SubmitOutcome& out = outcomes[i];
      if (auto it = created.find(key); it != created.end()) {
        out.job = it->second;
        out.deduplicated = owner[i] != i;
      } else if (auto ex = existing.find(key); ex != existing.end()) {
        out.job = ex->second.first;
        out.deduplicated = true;
      } else {
        out.status = absl::InternalError("job neither inserted nor found");
      }
      if (out.status.ok() && out.deduplicated && jobs[i].request_hash != [&] {
            auto ex = existing.find(key);
            return ex != existing.end() ? ex->second.second : n.request_hash;
          }()) {
        out.status = absl::AlreadyExistsError(
            absl::StrCat("client_request_id: \"", n.client_request_id,
                         "\" was already used for ", out.job.name(),
                         " with a different request"));
      }
      if (!out.status.ok()) any_error = true;
    }
    if (atomic && any_error) {
      for (const auto& o : outcomes) {
        if (!o.status.ok()) return o.status;
      }
    }
    AppendEvents(txn, events);
    return absl::OkStatus();
  });
  if (!s.ok()) {
    // An unknown queue or project slipped past the caller's checks (e.g.
    // deleted meanwhile).
    if (s.code() == absl::StatusCode::kFailedPrecondition) {
      std::string c = ViolatedConstraint(s);
      if (c.find("queue") != std::string::npos) {
        return absl::FailedPreconditionError(
            "spec.queue: queue does not exist");
      }
      if (c.find("project") != std::string::npos) {
        return absl::FailedPreconditionError(
            "spec.project: project does not exist");
      }
    }
    return s;
  }
  return outcomes;
}

absl::StatusOr<Job> JobStore::Get(const std::string& tenant, int64_t job_id,
                                  bool with_attempts) {
  std::optional<Job> job;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    job.reset();
    pqxx::result r = txn.exec_prepared("job_get", job_id, tenant);
    if (r.empty()) return absl::OkStatus();
    job = RowToJob(r[0]);
    if (with_attempts) {
      pqxx::result a =
          txn.exec_prepared("attempts_get", absl::StrCat("{", job_id, "}"));
      for (const pqxx::row& row : a)
        job->add_attempts()->ParseFromString(BytesOf(row[1]));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (!job)
    return absl::NotFoundError(
        absl::StrCat(JobName(tenant, job_id), " not found"));
  return *std::move(job);
}

absl::StatusOr<JobPage> JobStore::List(const JobQuery& query) {
  JobPage page;
  if (query.tenants.empty()) return page;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    page = JobPage{};
    DynamicParams params;
    std::vector<std::string> where;
    ArrayLiteral tenants;
    for (const auto& t : query.tenants) tenants.Text(t);
    where.push_back(
        absl::StrCat("tenant = ANY(", params.Add(tenants.str()), "::text[])"));
    if (!query.project.empty()) {
      where.push_back(absl::StrCat("project = ", params.Add(query.project)));
    }
    if (!query.queue.empty())
      where.push_back(absl::StrCat("queue = ", params.Add(query.queue)));
    if (!query.job_set.empty()) {
      where.push_back(absl::StrCat("job_set = ", params.Add(query.job_set)));
    }
    if (!query.states.empty()) {
      ArrayLiteral states;
      for (JobState st : query.states) states.Int(st);
      where.push_back(absl::StrCat("state = ANY(", params.Add(states.str()),
                                   "::smallint[])"));
    }
    if (!query.labels.empty()) {
      Job only;
      for (const auto& [k, v] : query.labels) (*only.mutable_labels())[k] = v;
      where.push_back(
          absl::StrCat("labels @> ", params.Add(LabelsJson(only)), "::jsonb"));
    }
    if (query.before_id > 0) {
      where.push_back(
          absl::StrCat("id < ", params.Add(absl::StrCat(query.before_id))));
    }
    std::string sql = absl::StrCat("SELECT ", JobColumns(), " FROM jobs WHERE ",
                                   absl::StrJoin(where, " AND "),
                                   " ORDER BY id DESC LIMIT ", query.limit + 1);
    pqxx::result r = txn.exec_params(sql, params.Dynamic());
    std::vector<int64_t> ids;
    for (int i = 0; i < static_cast<int>(r.size()) && i < query.limit; ++i) {
      page.jobs.push_back(RowToJob(r[i]));
      ids.push_back(r[i][0].as<int64_t>());
    }
    if (static_cast<int>(r.size()) > query.limit)
      page.next_before_id = ids.back();
    if (query.with_attempts && !ids.empty()) {
      ArrayLiteral id_array;
      absl::flat_hash_map<int64_t, Job*> by_id;
      for (size_t i = 0; i < ids.size(); ++i) {
        id_array.Int(ids[i]);
        by_id[ids[i]] = &page.jobs[i];
      }
      pqxx::result a = txn.exec_prepared("attempts_get", id_array.str());
      for (const pqxx::row& row : a) {
        by_id[row[0].as<int64_t>()]->add_attempts()->ParseFromString(
            BytesOf(row[1]));
      }
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return page;
}

namespace {

// Ends the latest attempt of a job that never reached its backend (cancelled
// or preempted while ADMITTED), so that every attempt row has an end: body
// end_time, failure class and message, and the end_time column.
void CloseUndispatchedAttempt(pqxx::work& txn, int64_t job_id, absl::Time now,
                              trainyard::v1::FailureClass failure,
                              const std::string& message) {
  pqxx::result a = txn.exec_prepared("attempt_latest_lock", job_id);
  if (a.empty()) return;
  const int idx = a[0][0].as<int>();
  trainyard::v1::Attempt attempt;
  attempt.ParseFromString(BytesOf(a[0][1]));
  if (attempt.has_end_time()) return;
  *attempt.mutable_end_time() = ToTimestamp(now);
  attempt.set_failure_class(failure);
  attempt.set_message(message);
  std::optional<int64_t> start;
  txn.exec_prepared("attempt_update", job_id, idx,
                    Bytea(attempt.SerializeAsString()), start,
                    absl::ToUnixMicros(now));
}

}  // namespace

absl::StatusOr<Job> JobStore::Cancel(const std::string& tenant, int64_t job_id,
                                     const std::string& reason,
                                     const std::string& principal) {
  Job out;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    absl::StatusOr<Job> job = LockJob(txn, tenant, job_id);
    if (!job.ok()) return job.status();
    const std::string message =
        reason.empty() ? absl::StrCat("cancelled by ", principal)
                       : absl::StrCat("cancelled by ", principal, ": ", reason);
    switch (core::CancelActionFor(job->state())) {
      case core::CancelAction::kNone:
        out = *job;
        return absl::OkStatus();
      case core::CancelAction::kEndNow: {
        const JobState from = job->state();
        if (from == trainyard::v1::JOB_STATE_ADMITTED) {
          CloseUndispatchedAttempt(txn, job_id, absl::Now(),
                                   trainyard::v1::FAILURE_CLASS_CANCELLED,
                                   "cancelled before dispatch");
        }
        job->set_state(trainyard::v1::JOB_STATE_CANCELLED);
        job->set_state_reason("CANCELLED_BY_USER");
        job->set_state_message(message);
        out = SaveJobState(txn, job_id, *job);
        AppendEvents(
            txn,
            {Pending(
                out, job_id,
                MakeEvent(out, trainyard::v1::JOB_EVENT_TYPE_STATE_CHANGED,
                          from, out.state(), "CANCELLED_BY_USER", message))});
        return absl::OkStatus();
      }
      case core::CancelAction::kRequestStop: {
        if (job->cancel_requested()) {
          out = *job;
          return absl::OkStatus();
        }
        job->set_cancel_requested(true);
        out = SaveJobState(txn, job_id, *job);
        AppendEvents(
            txn,
            {Pending(
                out, job_id,
                MakeEvent(out, trainyard::v1::JOB_EVENT_TYPE_CANCEL_REQUESTED,
                          out.state(), out.state(), "CANCEL_REQUESTED",
                          message))});
        return absl::OkStatus();
      }
    }
    return absl::InternalError("unreachable");
  });
  if (!s.ok()) return s;
  return out;
}

namespace {

// Moves a locked job to `to` with its reason and message, saves it and
// writes its event; returns the saved job.
Job SaveTransition(pqxx::work& txn, int64_t job_id, Job job, JobState to,
                   const std::string& reason, const std::string& message) {
  const JobState from = job.state();
  job.set_state(to);
  job.set_state_reason(reason);
  job.set_state_message(message);
  Job saved = SaveJobState(txn, job_id, job);
  AppendEvents(
      txn,
      {Pending(saved, job_id,
               MakeEvent(saved, trainyard::v1::JOB_EVENT_TYPE_STATE_CHANGED,
                         from, to, reason, message))});
  return saved;
}

}  // namespace

absl::StatusOr<Job> JobStore::SetHold(const std::string& tenant, int64_t job_id,
                                      bool hold, const std::string& reason,
                                      const std::string& principal) {
  const JobState source =
      hold ? trainyard::v1::JOB_STATE_QUEUED : trainyard::v1::JOB_STATE_HELD;
  const JobState target =
      hold ? trainyard::v1::JOB_STATE_HELD : trainyard::v1::JOB_STATE_QUEUED;
  Job out;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    absl::StatusOr<Job> job = LockJob(txn, tenant, job_id);
    if (!job.ok()) return job.status();
    const JobState from = job->state();
    if (from == target) {
      out = *job;
      return absl::OkStatus();
    }
    if (from != source) {
      return absl::FailedPreconditionError(
          absl::StrCat(job->name(), " is ", std::string(core::StateName(from)),
                       hold ? "; only a QUEUED job can be held"
                            : "; only a HELD job can be released"));
    }
    const std::string verb = hold ? "held" : "released";
    const std::string message =
        reason.empty() ? absl::StrCat(verb, " by ", principal)
                       : absl::StrCat(verb, " by ", principal, ": ", reason);
    out = SaveTransition(txn, job_id, *job, target,
                         hold ? "HELD_BY_USER" : "RELEASED_BY_USER", message);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<Job> JobStore::Transition(const std::string& tenant,
                                         int64_t job_id,
                                         int64_t expected_version, JobState to,
                                         const std::string& reason,
                                         const std::string& message) {
  Job out;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    absl::StatusOr<Job> job = LockJob(txn, tenant, job_id);
    if (!job.ok()) return job.status();
    if (expected_version != 0 && job->version() != expected_version) {
      return absl::AbortedError(absl::StrCat(job->name(), " changed: version ",
                                             job->version(), ", expected ",
                                             expected_version));
    }
    if (absl::Status t = core::CheckTransition(job->state(), to); !t.ok())
      return t;
    out = SaveTransition(txn, job_id, *job, to, reason, message);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<Checkpoint> JobStore::ReportCheckpoint(
    const std::string& tenant, int64_t job_id, const Checkpoint& checkpoint) {
  Checkpoint out;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    absl::StatusOr<Job> job = LockJob(txn, tenant, job_id);
    if (!job.ok()) return job.status();
    if (core::IsTerminal(job->state())) {
      return absl::FailedPreconditionError(absl::StrCat(
          job->name(), " is ", std::string(core::StateName(job->state())),
          "; checkpoints can no longer be reported"));
    }
    out = checkpoint;
    out.set_job(job->name());
    if (out.attempt() == 0) out.set_attempt(job->attempt_count());
    if (out.attempt() > job->attempt_count()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint.attempt: job has started ", job->attempt_count(),
          " attempt(s); attempt ", out.attempt(), " does not exist"));
    }
    const int64_t max_step =
        txn.exec_prepared("checkpoint_max_step", job_id)[0][0].as<int64_t>();
    pqxx::result r = txn.exec_prepared("checkpoint_insert", job_id,
                                       out.attempt(), out.step(), out.uri(),
                                       Bytea(out.SerializeAsString()));
    *out.mutable_report_time() = ToTimestamp(TimeOf(r[0][1]));
    if (out.step() >= max_step) job->set_resume_from(out.uri());
    Job saved = SaveJobState(txn, job_id, *job);
    JobEvent e =
        MakeEvent(saved, trainyard::v1::JOB_EVENT_TYPE_CHECKPOINT_REPORTED,
                  saved.state(), saved.state(), "CHECKPOINT_REPORTED",
                  absl::StrCat("step ", out.step(), " at ", out.uri()));
    *e.mutable_checkpoint() = out;
    AppendEvents(txn, {Pending(saved, job_id, std::move(e))});
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<JobStore::CheckpointPage> JobStore::ListCheckpoints(
    const std::string& tenant, int64_t job_id, int64_t before_id, int limit) {
  CheckpointPage page;
  bool found = false;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    page = CheckpointPage{};
    pqxx::result j = txn.exec_prepared("job_get", job_id, tenant);
    found = !j.empty();
    if (!found) return absl::OkStatus();
    pqxx::result r =
        txn.exec_prepared("checkpoints_list", job_id,
                          before_id > 0 ? before_id : INT64_MAX, limit + 1);
    for (int i = 0; i < static_cast<int>(r.size()) && i < limit; ++i) {
      Checkpoint c;
      c.ParseFromString(BytesOf(r[i][1]));
      *c.mutable_report_time() = ToTimestamp(TimeOf(r[i][2]));
      page.checkpoints.push_back(std::move(c));
      if (static_cast<int>(r.size()) > limit)
        page.next_before_id = r[i][0].as<int64_t>();
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (!found)
    return absl::NotFoundError(
        absl::StrCat(JobName(tenant, job_id), " not found"));
  return page;
}

absl::StatusOr<PendingPosition> JobStore::Position(const std::string& tenant,
                                                   int64_t job_id) {
  PendingPosition out;
  bool found = false;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out = PendingPosition{};
    pqxx::result j = txn.exec_prepared("job_get", job_id, tenant);
    found = !j.empty();
    if (!found) return absl::OkStatus();
    Job job = RowToJob(j[0]);
    out.state = job.state();
    pqxx::result r = txn.exec_prepared(
        "job_position", tenant, job.spec().queue(), job.priority(), job_id);
    out.queue_length = r[0][1].as<int64_t>();
    if (core::IsPending(job.state())) out.position = r[0][0].as<int64_t>() + 1;
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (!found)
    return absl::NotFoundError(
        absl::StrCat(JobName(tenant, job_id), " not found"));
  return out;
}

absl::StatusOr<std::vector<std::pair<JobState, int64_t>>>
JobStore::CountByState(const std::string& tenant, const std::string& queue) {
  std::vector<std::pair<JobState, int64_t>> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& row :
         txn.exec_prepared("jobs_count_by_state", tenant, queue)) {
      out.emplace_back(static_cast<JobState>(row[0].as<int>()),
                       row[1].as<int64_t>());
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::map<std::string, JobStore::FlavorHeld>>
JobStore::QueueUsage(const std::string& tenant, const std::string& queue) {
  std::map<std::string, FlavorHeld> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& row :
         txn.exec_prepared("jobs_queue_usage", tenant, queue)) {
      trainyard::v1::JobSpec spec;
      if (!spec.ParseFromString(BytesOf(row[1]))) {
        return absl::DataLossError("unreadable job spec");
      }
      FlavorHeld& held = out[row[0].c_str()];
      const int64_t workers = std::max(spec.workers(), 1);
      held.gpus += workers * spec.resources().gpus();
      held.cpu_millis += workers * spec.resources().cpu_millis();
      held.memory_bytes += workers * spec.resources().memory_bytes();
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<JobEvent>> JobStore::ReadEvents(
    uint64_t after, const EventFilter& filter, int limit) {
  std::vector<JobEvent> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    DynamicParams params;
    std::vector<std::string> where = {
        absl::StrCat("seq > ", params.Add(absl::StrCat(after)), "::bigint")};
    if (!filter.tenants.empty()) {
      ArrayLiteral tenants;
      for (const auto& t : filter.tenants) tenants.Text(t);
      where.push_back(absl::StrCat("tenant = ANY(", params.Add(tenants.str()),
                                   "::text[])"));
    }
    if (filter.job_id != 0) {
      where.push_back(absl::StrCat(
          "job_id = ", params.Add(absl::StrCat(filter.job_id)), "::bigint"));
    }
    if (!filter.queue.empty())
      where.push_back(absl::StrCat("queue = ", params.Add(filter.queue)));
    if (!filter.job_set.empty()) {
      where.push_back(absl::StrCat("job_set = ", params.Add(filter.job_set)));
    }
    pqxx::result r =
        txn.exec_params(absl::StrCat("SELECT seq, body FROM job_events WHERE ",
                                     absl::StrJoin(where, " AND "),
                                     " ORDER BY seq LIMIT ", limit),
                        params.Dynamic());
    for (const pqxx::row& row : r) {
      JobEvent e;
      e.ParseFromString(BytesOf(row[1]));
      e.set_sequence(row[0].as<uint64_t>());
      out.push_back(std::move(e));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<uint64_t> JobStore::LastEventSequence() {
  uint64_t last = 0;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    last = txn.exec_prepared("events_last")[0][0].as<uint64_t>();
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return last;
}

namespace {

std::string IdArray(const std::vector<int64_t>& ids) {
  ArrayLiteral a;
  for (int64_t id : ids) a.Int(id);
  return a.str();
}

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
  LockedJobs(pqxx::work& txn, std::vector<int64_t> ids) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (ids.empty()) return;
    for (const pqxx::row& row :
         txn.exec_prepared("jobs_lock_ordered", IdArray(ids))) {
      rows_.emplace(row[0].as<int64_t>(), RowToJob(row));
    }
  }
  // The locked job, as this transaction last saved it; NotFound as LockJob.
  absl::StatusOr<Job> Get(const std::string& tenant, int64_t job_id) const {
    auto it = rows_.find(job_id);
    if (it == rows_.end() || it->second.tenant() != tenant) {
      return absl::NotFoundError(
          absl::StrCat(JobName(tenant, job_id), " not found"));
    }
    return it->second;
  }
  void Saved(int64_t job_id, const Job& job) { rows_[job_id] = job; }

 private:
  absl::flat_hash_map<int64_t, Job> rows_;
};

// The changes of a batch transaction, written together by Flush(): attempt
// updates in one statement, job state changes in another, then the jobs'
// events appended in the order they were added (what SaveJobState and
// AppendEvents do one job at a time). Each job at most once per Flush().
class JobSaves {
 public:
  bool Has(int64_t job_id) const { return job_ids_.contains(job_id); }
  // Writes attempt (job_id, idx) as `a`; a start or end time given also sets
  // its column.
  void AddAttempt(int64_t job_id, int idx, const trainyard::v1::Attempt& a,
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
  // `job` holds its new state, reason and message; `from` is its old state.
  void Add(int64_t job_id, const Job& job, JobState from) {
    ids_.Int(job_id);
    states_.Int(static_cast<int>(job.state()));
    reasons_.Text(job.state_reason());
    messages_.Text(job.state_message());
    attempt_counts_.Int(job.attempt_count());
    resumes_.Text(job.resume_from());
    cancels_.Bool(job.cancel_requested());
    terminals_.Bool(core::IsTerminal(job.state()));
    changes_.push_back(
        {job_id, from, job.state(), job.state_reason(), job.state_message()});
    job_ids_.insert(job_id);
  }
  // Writes everything added and starts over; returns the saved jobs.
  absl::flat_hash_map<int64_t, Job> Flush(pqxx::work& txn) {
    absl::flat_hash_map<int64_t, Job> saved;
    if (attempt_rows_ > 0) {
      txn.exec_prepared("attempts_update_many", attempt_jobs_.str(),
                        attempt_indexes_.str(), attempt_bodies_.str(),
                        attempt_starts_.str(), attempt_ends_.str());
    }
    if (!changes_.empty()) {
      for (const pqxx::row& row : txn.exec_prepared(
               "jobs_save_many", ids_.str(), states_.str(), reasons_.str(),
               messages_.str(), attempt_counts_.str(), resumes_.str(),
               cancels_.str(), terminals_.str())) {
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
      AppendEvents(txn, events);
    }
    *this = JobSaves();
    return saved;
  }

 private:
  struct Change {
    int64_t job_id;
    JobState from, to;
    std::string reason, message;
  };
  ArrayLiteral ids_, states_, reasons_, messages_, attempt_counts_, resumes_,
      cancels_, terminals_;
  std::vector<Change> changes_;
  absl::flat_hash_set<int64_t> job_ids_;
  ArrayLiteral attempt_jobs_, attempt_indexes_, attempt_bodies_,
      attempt_starts_, attempt_ends_;
  int attempt_rows_ = 0;
};

}  // namespace

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

absl::StatusOr<std::vector<ActiveJob>> JobStore::LoadActiveJobs(
    const std::vector<int64_t>* ids) {
  std::vector<ActiveJob> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out = ReadActiveJobs(txn, ids);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<JobStore::Changes> JobStore::LoadChanges(uint64_t after,
                                                        int limit) {
  Changes out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
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
    // Read after the events: a job that changes in between is read in its
    // newer state now and again at the next call (its event is after
    // last_seq).
    out.active = ReadActiveJobs(txn, &out.ids);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<DecisionOutcome> JobStore::ApplyDecisions(
    const std::vector<PreemptDecision>& preemptions,
    const std::vector<AdmitDecision>& admissions) {
  DecisionOutcome out;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    out = DecisionOutcome{};
    JobSaves saves;
    absl::flat_hash_set<int64_t> not_preempted;
    std::vector<int64_t> ids;
    for (const PreemptDecision& p : preemptions) ids.push_back(p.job_id);
    for (const AdmitDecision& a : admissions) ids.push_back(a.job_id);
    LockedJobs locked(txn, std::move(ids));
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
          !core::CheckTransition(job->state(), to).ok()) {
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
    ArrayLiteral new_job_ids, new_indexes, new_clusters, new_flavors,
        new_bodies;
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
      // Inserted together after the loop (one statement).
      new_job_ids.Int(a.job_id);
      new_indexes.Int(index);
      new_clusters.Text(core::NameId(attempt.cluster()));
      new_flavors.Text(core::NameId(attempt.flavor()));
      new_bodies.Bytes(attempt.SerializeAsString());
      job->set_attempt_count(index);
      job->set_state(trainyard::v1::JOB_STATE_ADMITTED);
      job->set_state_reason("ADMITTED");
      job->set_state_message(a.message);
      saves.Add(a.job_id, *job, trainyard::v1::JOB_STATE_QUEUED);
      out.admitted.push_back(a.job_id);
    }
    if (!out.admitted.empty()) {
      txn.exec_prepared("attempts_insert", new_job_ids.str(), new_indexes.str(),
                        new_clusters.str(), new_flavors.str(),
                        new_bodies.str());
    }
    saves.Flush(txn);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::Status JobStore::WriteExplanations(
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

absl::StatusOr<std::optional<absl::Time>> JobStore::StateEnteredAt(
    int64_t job_id, JobState state) {
  std::optional<absl::Time> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.reset();
    for (const pqxx::row& row :
         txn.exec_prepared("job_events_recent", job_id)) {
      JobEvent e;
      if (!e.ParseFromString(BytesOf(row[1]))) continue;
      if (e.type() == trainyard::v1::JOB_EVENT_TYPE_STATE_CHANGED &&
          e.to_state() == state) {
        out = TimeOf(row[0]);
        break;
      }
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::optional<Explanation>> JobStore::GetExplanation(
    int64_t job_id) {
  std::optional<Explanation> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.reset();
    pqxx::result r = txn.exec_prepared("explanation_get", job_id);
    if (!r.empty()) {
      out = Explanation{.job_id = job_id,
                        .reason = r[0][0].c_str(),
                        .message = r[0][1].c_str(),
                        .position = r[0][2].as<int64_t>()};
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<ClusterAttempt>> JobStore::ClusterAttempts(
    const std::string& cluster) {
  std::vector<ClusterAttempt> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& row :
         txn.exec_prepared("cluster_attempts", cluster)) {
      ClusterAttempt a{.job = RowToJob(row)};
      a.attempt.ParseFromString(BytesOf(row[row.size() - 1]));
      out.push_back(std::move(a));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<Job> JobStore::ChangeAttempt(const AttemptChange& c) {
  absl::StatusOr<std::vector<absl::StatusOr<Job>>> out = ChangeAttempts({c});
  if (!out.ok()) return out.status();
  return std::move(out->front());
}

absl::StatusOr<std::vector<absl::StatusOr<Job>>> JobStore::ChangeAttempts(
    const std::vector<AttemptChange>& changes) {
  std::vector<absl::StatusOr<Job>> out;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
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
        item = core::CheckTransition(job->state(), c.to);
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

}  // namespace trainyard::storage::postgres
