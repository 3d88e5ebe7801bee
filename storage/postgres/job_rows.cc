#include "storage/postgres/job_rows.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "services/lib/domain/job_state.h"
#include "services/lib/domain/money.h"

namespace trainyard::storage::postgres {
namespace {

using trainyard::v1::Job;
using trainyard::v1::JobEvent;
using trainyard::v1::JobState;

// Key of the transaction-scoped advisory lock that orders event sequence
// numbers.
constexpr int64_t kOutboxLockKey = 0x74796f7574626f78;  // "tyoutbox"

void ParseLabels(const std::string& json, Job* job) {
  if (json == "{}" || json.empty()) return;
  Job parsed;
  if (google::protobuf::util::JsonStringToMessage(
          absl::StrCat("{\"labels\":", json, "}"), &parsed)
          .ok()) {
    *job->mutable_labels() = parsed.labels();
  }
}

}  // namespace

void PrepareJobRowStatements(Database* db) {
  // The whole append in one statement, one round trip: the outbox lock (a
  // materialized CTE that the insert's join reads, so it is taken before the
  // first nextval), the insert in array order, the notify (sent at commit),
  // and the time the lock was granted (for the callers' timings). Three
  // statements one after the other held the lock across two more round
  // trips, which every other writer of job state waited out.
  db->Prepare(
      "events_append",
      absl::StrCat(
          "WITH outbox AS MATERIALIZED (SELECT pg_advisory_xact_lock(",
          kOutboxLockKey,
          ") AS locked, clock_timestamp() AS at), appended AS (INSERT INTO "
          "job_events (seq, tenant, job_id, queue, job_set, body) SELECT "
          "nextval('job_event_seq'), t.tenant, t.job_id, t.queue, t.job_set, "
          "t.body FROM outbox, (SELECT * FROM unnest($1::text[], "
          "$2::bigint[], $3::text[], $4::text[], $5::bytea[]) WITH ORDINALITY "
          "AS u(tenant, job_id, queue, job_set, body, ord) ORDER BY ord) t "
          "RETURNING 1) SELECT pg_notify('",
          kEventChannel, "', ''), (SELECT ", EpochMicros("at"),
          " FROM outbox)"));
  db->Prepare("attempt_latest_lock",
              "SELECT idx, body FROM attempts WHERE job_id = $1 ORDER BY idx "
              "DESC LIMIT 1 "
              "FOR UPDATE");
  db->Prepare(
      "attempt_update",
      absl::StrCat(
          "UPDATE attempts SET body = $3, start_time = CASE WHEN $4::bigint IS "
          "NULL THEN start_time ELSE to_timestamp($4::bigint / 1e6) END, "
          "end_time = CASE WHEN $5::bigint IS NULL THEN end_time ELSE "
          "to_timestamp($5::bigint / 1e6) END WHERE job_id = $1 AND idx = $2"));
}

void AppendEvents(pqxx::work& txn, const std::vector<PendingEvent>& events,
                  absl::Duration* outbox_wait, absl::Duration* events_time) {
  if (events.empty()) return;
  ArrayLiteral tenants, job_ids, queues, job_sets, bodies;
  for (const PendingEvent& p : events) {
    tenants.Text(p.tenant);
    job_ids.Int(p.job_id);
    queues.Text(p.event.queue());
    job_sets.Text(p.event.job_set());
    bodies.Bytes(p.event.SerializeAsString());
  }
  const absl::Time start = absl::Now();
  pqxx::result r =
      txn.exec_prepared("events_append", tenants.str(), job_ids.str(),
                        queues.str(), job_sets.str(), bodies.str());
  const absl::Time end = absl::Now();
  // The server's clock when the lock was granted (the same host clock in a
  // local deployment; clamped into [start, end] where it is not).
  const absl::Time locked = std::clamp(TimeOf(r[0][1]), start, end);
  if (outbox_wait != nullptr) *outbox_wait = locked - start;
  if (events_time != nullptr) *events_time = end - locked;
}

std::string IdArray(const std::vector<int64_t>& ids) {
  ArrayLiteral a;
  for (int64_t id : ids) a.Int(id);
  return a.str();
}

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

const std::string& JobCostsQuery() {
  static const std::string* const kQuery = new std::string(
      "WITH ids AS (SELECT unnest($1::bigint[]) AS id) SELECT ids.id, "
      "j.tenant, j.queue, j.job_set, j.state, "
      "coalesce(sum(u.cost_micros), 0), "
      "coalesce(sum(u.tenant_cost_micros), 0), coalesce(sum(CASE WHEN "
      "u.lost_work THEN u.cost_micros ELSE 0 END), 0), coalesce(sum(CASE WHEN "
      "u.resource = 0 THEN u.amount * (u.end_ms - u.start_ms) ELSE 0 END), "
      "0)::bigint, coalesce((SELECT bool_and(a.metered_final) FROM attempts a "
      "WHERE a.job_id = ids.id AND a.start_time IS NOT NULL), true), (SELECT "
      "currency FROM accounting_settings WHERE id = 1), (SELECT "
      "e.estimated_cost_micros FROM pending_explanations e WHERE e.job_id = "
      "ids.id), (SELECT a.estimated_cost_micros FROM attempts a WHERE "
      "a.job_id = ids.id ORDER BY a.idx DESC LIMIT 1) FROM ids JOIN jobs j ON "
      "j.id = ids.id LEFT JOIN usage_lines u ON u.job_id = ids.id GROUP BY "
      "ids.id, j.tenant, j.queue, j.job_set, j.state");
  return *kQuery;
}

bool SetJobCost(const pqxx::row& r, trainyard::v1::JobCost* cost) {
  if (r[10].is_null()) return false;  // no accounting currency: no prices yet
  const std::string currency = r[10].as<std::string>();
  const auto state = static_cast<trainyard::v1::JobState>(r[kJobCostState].as<int>());
  auto money = [&](trainyard::v1::Money* m, int64_t micros) {
    m->set_currency_code(currency);
    m->set_micros(micros);
  };
  money(cost->mutable_spent(), r[5].as<int64_t>());
  money(cost->mutable_tenant_cost(), r[6].as<int64_t>());
  money(cost->mutable_lost_work(), r[7].as<int64_t>());
  // GPU-ms → GPU-hours, 9 decimals, half to even.
  const int64_t gpu_ms = r[8].as<int64_t>();
  const int64_t nano_hours =
      domain::MulDivRoundHalfEven(gpu_ms, 1'000'000'000, 3'600'000).value_or(0);
  std::string hours = absl::StrCat(nano_hours / 1'000'000'000);
  if (const int64_t frac = nano_hours % 1'000'000'000; frac != 0) {
    std::string digits = absl::StrFormat("%09d", frac);
    while (!digits.empty() && digits.back() == '0') digits.pop_back();
    absl::StrAppend(&hours, ".", digits);
  }
  cost->set_gpu_hours(hours);
  // Attempts that never started have no usage: nothing to wait for.
  cost->set_final(domain::IsTerminal(state) && r[9].as<bool>());
  // The estimate: while the job waits, the scheduler's estimate on the
  // flavor it would try first; else that of its last attempt.
  std::optional<int64_t> estimate;
  if (state == trainyard::v1::JOB_STATE_QUEUED && !r[11].is_null())
    estimate = r[11].as<int64_t>();
  if (!estimate.has_value() && !r[12].is_null()) estimate = r[12].as<int64_t>();
  if (!estimate.has_value() && !r[11].is_null()) estimate = r[11].as<int64_t>();
  if (estimate.has_value()) money(cost->mutable_estimate(), *estimate);
  return true;
}

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

}  // namespace trainyard::storage::postgres
