#include "services/dispatcher/dispatcher.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "services/common/logging.h"
#include "services/common/metrics.h"
#include "services/core/job_state.h"
#include "services/core/names.h"
#include "storage/postgres/leader.h"
#include "storage/redis/redis_options.h"
#include "storage/redis/wakeup_subscriber.h"

namespace trainyard::dispatcher {
namespace {

namespace v1 = ::trainyard::v1;
namespace pg = ::trainyard::storage::postgres;
using common::Log;
using common::LogLevel;

int64_t JobIdOf(const v1::Job& job) {
  return std::stoll(std::string(core::NameId(job.name())));
}

absl::Time TimeOf(const google::protobuf::Timestamp& t) {
  return absl::FromUnixMicros(
      google::protobuf::util::TimeUtil::TimestampToMicroseconds(t));
}

// Stable 63-bit key of the cluster's dispatcher lock.
int64_t LockKey(const std::string& cluster) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : absl::StrCat("tydispatch:", cluster)) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h & 0x7fffffffffffffffull);
}

common::Counter& Transitions(const char* to) {
  return common::DefaultMetrics().GetCounter(
      "trainyard_dispatcher_transitions_total",
      "Job transitions made by dispatchers, by target.", {{"to", to}});
}

}  // namespace

Dispatcher::Dispatcher(DispatcherOptions options, Adapter* adapter)
    : options_(std::move(options)), adapter_(adapter) {}

Dispatcher::~Dispatcher() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Dispatcher>> Dispatcher::Create(
    DispatcherOptions options, Adapter* adapter) {
  if (options.cluster.empty())
    return absl::InvalidArgumentError("cluster: required");
  if (adapter == nullptr)
    return absl::InvalidArgumentError("adapter: required");
  std::unique_ptr<Dispatcher> d(new Dispatcher(std::move(options), adapter));
  absl::StatusOr<std::unique_ptr<pg::Database>> db =
      pg::Database::Open({.url = d->options_.postgres_url,
                          .pool_size = std::max(2, d->options_.db_pool_size)});
  if (!db.ok()) return db.status();
  d->db_ = std::move(*db);
  d->jobs_ = std::make_unique<pg::JobStore>(d->db_.get());
  d->objects_ = std::make_unique<pg::ObjectStore>(d->db_.get());
  if (!d->options_.redis_addr.empty()) {
    absl::StatusOr<storage::redis::RedisOptions> redis =
        storage::redis::ParseRedisAddress(d->options_.redis_addr);
    if (!redis.ok()) return redis.status();
    d->redis_ = std::make_unique<storage::redis::RedisClient>(*redis);
  }
  return d;
}

void Dispatcher::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Loop(); });
}

void Dispatcher::Shutdown() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void Dispatcher::Loop() {
  pg::RunAsLeader(
      *db_, LockKey(options_.cluster), options_.standby_poll, stop_, leader_,
      [&](absl::FunctionRef<bool()> alive) { Lead(alive); },
      [&](const absl::Status& s) {
        Log(LogLevel::kWarning, "dispatcher: leader election failed",
            {{"cluster", options_.cluster}, {"error", s}});
      });
}

void Dispatcher::Lead(absl::FunctionRef<bool()> alive) {
  Log(LogLevel::kInfo, "dispatcher: active", {{"cluster", options_.cluster}});
  {
    absl::MutexLock l(&mu_);
    reported_nodes_.clear();
    checkpoint_step_.clear();
  }
  while (!stop_.HasBeenNotified() && alive()) {
    absl::StatusOr<PassReport> r = RunPass();
    if (!r.ok()) {
      Log(LogLevel::kWarning, "dispatcher: pass failed",
          {{"cluster", options_.cluster}, {"error", r.status()}});
    }
    stop_.WaitForNotificationWithTimeout(options_.interval);
  }
  Log(LogLevel::kInfo, "dispatcher: inactive", {{"cluster", options_.cluster}});
}

absl::Status Dispatcher::ReportInventory(PassReport& report) {
  absl::StatusOr<std::vector<NodeInventory>> inventory = adapter_->Inventory();
  if (!inventory.ok()) return inventory.status();
  for (const NodeInventory& n : *inventory) {
    v1::Node node = ToNodeProto(n, options_.cluster);
    std::string body = node.SerializeAsString();
    {
      absl::MutexLock l(&mu_);
      auto it = reported_nodes_.find(n.name);
      if (it != reported_nodes_.end() && it->second == body) continue;
    }
    absl::StatusOr<pg::StoredObject> row = objects_->Upsert(
        pg::NodeKind(), {options_.cluster, n.name},
        {node.pool(), absl::StrCat(static_cast<int>(node.state()))}, body,
        nullptr);
    if (!row.ok()) {
      // Logged once per distinct error (e.g. the cluster is not defined yet),
      // not once per node and pass.
      const std::string error(row.status().message());
      absl::MutexLock l(&mu_);
      if (error != last_inventory_error_) {
        last_inventory_error_ = error;
        Log(LogLevel::kWarning, "dispatcher: nodes not recorded",
            {{"node", node.name()}, {"error", row.status()}});
      }
      continue;
    }
    absl::MutexLock l(&mu_);
    reported_nodes_[n.name] = std::move(body);
    ++report.nodes_reported;
  }
  return absl::OkStatus();
}

absl::StatusOr<PassReport> Dispatcher::RunPass() {
  PassReport report;
  if (absl::Status s = ReportInventory(report); !s.ok()) {
    Log(LogLevel::kWarning, "dispatcher: inventory failed", {{"error", s}});
  }
  absl::StatusOr<std::vector<pg::ClusterAttempt>> attempts =
      jobs_->ClusterAttempts(options_.cluster);
  if (!attempts.ok()) return attempts.status();
  absl::StatusOr<std::vector<AttemptStatus>> backend = adapter_->List();
  if (!backend.ok()) return backend.status();
  std::map<std::string, const AttemptStatus*> by_name;
  for (const AttemptStatus& s : *backend) by_name[s.name] = &s;
  // Nodes still held by attempts being preempted: an admission placed on them
  // (the preemptor) waits until they are free, instead of being refused.
  std::set<std::string> stopping_nodes;
  for (const pg::ClusterAttempt& a : *attempts) {
    if (a.job.state() != v1::JOB_STATE_PREEMPTING) continue;
    for (const v1::WorkerPlacement& p : a.attempt.placements())
      stopping_nodes.insert(p.node());
  }
  for (const pg::ClusterAttempt& a : *attempts) {
    if (a.job.state() == v1::JOB_STATE_ADMITTED) {
      bool wait = false;
      for (const v1::WorkerPlacement& p : a.attempt.placements())
        wait |= stopping_nodes.contains(p.node());
      if (wait) continue;
    }
    auto it = by_name.find(a.attempt.backend_job_name());
    absl::Status s =
        Follow(a, it == by_name.end() ? nullptr : it->second, report);
    if (absl::IsAborted(s)) {
      ++report.conflicts;  // The job changed meanwhile; next pass sees it anew.
    } else if (!s.ok()) {
      Log(LogLevel::kWarning, "dispatcher: attempt not followed",
          {{"job", a.job.name()},
           {"attempt", a.attempt.index()},
           {"error", s}});
    }
  }
  // Ended attempts no job follows any more (a dispatcher died between
  // recording an outcome and telling the backend to forget the attempt).
  std::set<std::string> followed;
  for (const pg::ClusterAttempt& a : *attempts)
    followed.insert(a.attempt.backend_job_name());
  for (const AttemptStatus& s : *backend) {
    if (!IsTerminal(s.phase) || followed.contains(s.name)) continue;
    if (absl::Status d = adapter_->Delete(s.name);
        !d.ok() && !absl::IsNotFound(d)) {
      Log(LogLevel::kWarning, "dispatcher: delete failed",
          {{"attempt", s.name}, {"error", d}});
    }
  }
  // Capacity freed or work requeued: the scheduler need not wait for its
  // timer. (A hint only; it reads the outbox.)
  if (redis_ != nullptr &&
      report.succeeded + report.failed + report.requeued + report.cancelled >
          0) {
    (void)redis_->Notify(storage::redis::kSchedulerWakeupChannel, "dispatcher");
  }
  return report;
}

absl::Status Dispatcher::Launch(const pg::ClusterAttempt& a,
                                PassReport& report) {
  pg::ClusterAttempt current = a;
  if (a.job.state() == v1::JOB_STATE_ADMITTED) {
    absl::StatusOr<v1::Job> claimed = jobs_->ChangeAttempt(
        {.tenant = a.job.tenant(),
         .job_id = JobIdOf(a.job),
         .expected_version = a.job.version(),
         .to = v1::JOB_STATE_DISPATCHING,
         .reason = "DISPATCHING",
         .message = absl::StrCat("submitting ", a.attempt.backend_job_name(),
                                 " to ", options_.cluster)});
    if (!claimed.ok()) return claimed.status();
    current.job = *claimed;
    Transitions("DISPATCHING").Increment();
  }
  LaunchRequest request{.name = a.attempt.backend_job_name(),
                        .job_id = JobIdOf(a.job),
                        .attempt = a.attempt.index(),
                        .tenant = a.job.tenant(),
                        .spec = a.job.spec(),
                        .flavor = std::string(core::NameId(a.attempt.flavor())),
                        .resume_from = a.attempt.resumed_from()};
  for (const v1::WorkerPlacement& p : a.attempt.placements())
    request.worker_nodes.push_back(std::string(core::NameId(p.node())));
  absl::StatusOr<AttemptStatus> launched = adapter_->Launch(request);
  if (!launched.ok()) {
    if (absl::IsUnavailable(launched.status()) ||
        absl::IsDeadlineExceeded(launched.status())) {
      return launched
          .status();  // Stays DISPATCHING; the next pass tries again.
    }
    // Refused for good (bad request) or for now (node full or gone): the job
    // fails, or goes back to its queue for another placement.
    const bool invalid = absl::IsInvalidArgument(launched.status());
    AttemptStatus refused{.name = request.name,
                          .phase = AttemptPhase::kFailed,
                          .failure = FailureKind::kBackendError,
                          .message = std::string(launched.status().message()),
                          .end_time = absl::Now()};
    if (invalid) {
      absl::StatusOr<v1::Job> failed = jobs_->ChangeAttempt(
          {.tenant = a.job.tenant(),
           .job_id = JobIdOf(a.job),
           .expected_version = current.job.version(),
           .to = v1::JOB_STATE_FAILED,
           .reason = "BACKEND_REJECTED",
           .message = refused.message,
           .end_time = refused.end_time,
           .failure_class = v1::FAILURE_CLASS_BACKEND_ERROR,
           .attempt_message = refused.message});
      if (failed.ok()) ++report.failed;
      return failed.status();
    }
    return End(current, refused, report);
  }
  ++report.launched;
  return Follow(current, &*launched, report);
}

absl::Status Dispatcher::RecordCheckpoints(const pg::ClusterAttempt& a,
                                           const AttemptStatus& status,
                                           PassReport& report) {
  if (status.checkpoints.empty()) return absl::OkStatus();
  const int64_t id = JobIdOf(a.job);
  int64_t known = -1;
  {
    absl::MutexLock l(&mu_);
    auto it = checkpoint_step_.find(id);
    if (it != checkpoint_step_.end()) known = it->second;
  }
  if (known < 0) {
    // First sight since this dispatcher became active: what is recorded.
    absl::StatusOr<pg::JobStore::CheckpointPage> page =
        jobs_->ListCheckpoints(a.job.tenant(), id, 0, 1);
    if (!page.ok()) return page.status();
    known = page->checkpoints.empty() ? -1 : page->checkpoints[0].step();
  }
  for (const CheckpointInfo& c : status.checkpoints) {
    if (c.step <= known) continue;
    v1::Checkpoint checkpoint;
    checkpoint.set_attempt(a.attempt.index());
    checkpoint.set_step(c.step);
    checkpoint.set_uri(c.uri);
    *checkpoint.mutable_time() =
        google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
            absl::ToUnixMicros(c.time));
    absl::StatusOr<v1::Checkpoint> saved =
        jobs_->ReportCheckpoint(a.job.tenant(), id, checkpoint);
    if (!saved.ok()) return saved.status();
    known = c.step;
    ++report.checkpoints;
  }
  absl::MutexLock l(&mu_);
  checkpoint_step_[id] = known;
  return absl::OkStatus();
}

absl::Status Dispatcher::Follow(const pg::ClusterAttempt& a,
                                const AttemptStatus* status,
                                PassReport& report) {
  const v1::JobState state = a.job.state();
  const std::string& name = a.attempt.backend_job_name();
  if (state == v1::JOB_STATE_RECOVERING) {
    // A dispatcher died between recording a platform failure (RECOVERING)
    // and putting the job back in line: finish that step.
    const bool cancel = a.job.cancel_requested();
    absl::StatusOr<v1::Job> next = jobs_->ChangeAttempt(
        {.tenant = a.job.tenant(),
         .job_id = JobIdOf(a.job),
         .expected_version = a.job.version(),
         .to = cancel ? v1::JOB_STATE_CANCELLED : v1::JOB_STATE_QUEUED,
         .reason = cancel ? "CANCELLED" : "RECOVERED",
         .message =
             cancel ? absl::StrCat(name, " was stopped")
             : a.job.resume_from().empty()
                 ? std::string("the next attempt starts from the beginning "
                               "(no checkpoint)")
                 : absl::StrCat("the next attempt resumes from ",
                                a.job.resume_from())});
    if (!next.ok()) return next.status();
    if (cancel) {
      ++report.cancelled;
    } else {
      ++report.requeued;
    }
    // Its outcome is recorded: the backend may forget the ended attempt.
    if (status != nullptr && IsTerminal(status->phase)) {
      if (absl::Status d = adapter_->Delete(name);
          !d.ok() && !absl::IsNotFound(d)) {
        Log(LogLevel::kWarning, "dispatcher: delete failed",
            {{"attempt", name}, {"error", d}});
      }
    }
    return absl::OkStatus();
  }
  if (state == v1::JOB_STATE_ADMITTED) return Launch(a, report);
  if (status == nullptr) {
    if (state == v1::JOB_STATE_DISPATCHING) return Launch(a, report);
    // The backend has no such attempt any more: lost.
    AttemptStatus lost{.name = name,
                       .phase = AttemptPhase::kFailed,
                       .failure = state == v1::JOB_STATE_PREEMPTING
                                      ? FailureKind::kPreempted
                                      : FailureKind::kBackendError,
                       .message = "the backend has no record of the attempt",
                       .end_time = absl::Now()};
    return End(a, lost, report);
  }
  if (absl::Status s = RecordCheckpoints(a, *status, report); !s.ok()) return s;
  if (IsTerminal(status->phase)) return End(a, *status, report);
  if (state == v1::JOB_STATE_DISPATCHING &&
      status->phase == AttemptPhase::kRunning) {
    absl::StatusOr<v1::Job> running = jobs_->ChangeAttempt(
        {.tenant = a.job.tenant(),
         .job_id = JobIdOf(a.job),
         .expected_version = a.job.version(),
         .to = v1::JOB_STATE_RUNNING,
         .reason = "STARTED",
         .message = absl::StrCat(name, " started on ", options_.cluster),
         .start_time = status->start_time.value_or(absl::Now()),
         .backend_job_id = status->backend_id});
    if (!running.ok()) return running.status();
    Transitions("RUNNING").Increment();
    ++report.started;
    return absl::OkStatus();
  }
  if (a.job.cancel_requested() && !status->stop_requested) {
    ++report.stops;
    return adapter_->Stop(name, absl::ZeroDuration(), StopReason::kCancel);
  }
  if (state == v1::JOB_STATE_PREEMPTING && !status->stop_requested) {
    absl::Duration grace = options_.default_grace;
    if (a.job.spec().checkpoint().has_grace_period()) {
      grace =
          absl::Seconds(a.job.spec().checkpoint().grace_period().seconds()) +
          absl::Nanoseconds(a.job.spec().checkpoint().grace_period().nanos());
    }
    ++report.stops;
    return adapter_->Stop(name, grace, StopReason::kPreemption);
  }
  return absl::OkStatus();
}

absl::Status Dispatcher::End(const pg::ClusterAttempt& a,
                             const AttemptStatus& status, PassReport& report) {
  const int64_t id = JobIdOf(a.job);
  const std::string& name = a.attempt.backend_job_name();
  const absl::Time end = status.end_time.value_or(absl::Now());
  int64_t version = a.job.version();
  v1::JobState state = a.job.state();
  auto change = [&](v1::JobState to, const std::string& reason,
                    const std::string& message,
                    pg::AttemptChange fields) -> absl::Status {
    fields.tenant = a.job.tenant();
    fields.job_id = id;
    fields.expected_version = version;
    fields.to = to;
    fields.reason = reason;
    fields.message = message;
    absl::StatusOr<v1::Job> job = jobs_->ChangeAttempt(fields);
    if (!job.ok()) return job.status();
    version = job->version();
    state = to;
    Transitions(std::string(core::StateName(to)).c_str()).Increment();
    return absl::OkStatus();
  };
  // An attempt that ends before it was seen running still ran (or not) as the
  // backend says; the state machine wants RUNNING before SUCCEEDED.
  if (state == v1::JOB_STATE_DISPATCHING &&
      status.phase == AttemptPhase::kSucceeded) {
    if (absl::Status s =
            change(v1::JOB_STATE_RUNNING, "STARTED", "started",
                   {.start_time = status.start_time.value_or(end)});
        !s.ok()) {
      return s;
    }
  }

  // Work lost since the last checkpoint (or the start).
  absl::Time since = status.start_time.value_or(
      a.attempt.has_start_time() ? TimeOf(a.attempt.start_time()) : end);
  if (!status.checkpoints.empty())
    since = std::max(since, status.checkpoints.back().time);
  const int64_t gpus = int64_t{a.job.spec().resources().gpus()} *
                       std::max(1, a.job.spec().workers());
  const int64_t lost =
      status.phase == AttemptPhase::kSucceeded
          ? 0
          : gpus * std::max<int64_t>(0, absl::ToInt64Seconds(end - since));
  pg::AttemptChange fields{.end_time = end,
                           .failure_class = ToFailureClass(status.failure),
                           .exit_code = status.exit_code,
                           .lost_gpu_seconds = lost,
                           .attempt_message = status.message,
                           .backend_job_id = status.backend_id};

  absl::Status s;
  if (status.phase == AttemptPhase::kSucceeded) {
    fields.exit_code = 0;
    s = change(v1::JOB_STATE_SUCCEEDED, "SUCCEEDED",
               absl::StrCat(name, " finished successfully"), fields);
    if (s.ok()) ++report.succeeded;
  } else if (status.failure == FailureKind::kCancelled ||
             a.job.cancel_requested()) {
    s = change(v1::JOB_STATE_CANCELLED, "CANCELLED",
               absl::StrCat(name, " was stopped"), fields);
    if (s.ok()) ++report.cancelled;
  } else {
    // Attempts so far that count against the retry limit, this one included.
    absl::StatusOr<v1::Job> full =
        jobs_->Get(a.job.tenant(), id, /*with_attempts=*/true);
    if (!full.ok()) return full.status();
    int32_t counted = CountsAgainstRetryLimit(status.failure) ? 1 : 0;
    for (const v1::Attempt& prior : full->attempts()) {
      if (prior.index() == a.attempt.index()) continue;
      counted += prior.failure_class() == v1::FAILURE_CLASS_USER_ERROR ||
                 prior.failure_class() == v1::FAILURE_CLASS_BACKEND_ERROR;
    }
    const std::string kind(FailureKindName(status.failure));
    const std::string resume =
        full->resume_from().empty()
            ? std::string("from the start (no checkpoint)")
            : absl::StrCat("from ", full->resume_from());
    if (state == v1::JOB_STATE_PREEMPTING) {
      // Preempted by the scheduler: back in line, resuming.
      s = change(v1::JOB_STATE_QUEUED, "PREEMPTED",
                 absl::StrCat(name, " was preempted; the next attempt resumes ",
                              resume),
                 fields);
      if (s.ok()) ++report.requeued;
    } else if (ShouldRetry(status.failure, status.exit_code,
                           a.job.spec().retry(), counted)) {
      if (Retryable(status.failure)) {
        s = change(v1::JOB_STATE_RECOVERING, kind,
                   absl::StrCat(name, ": ", status.message), fields);
        if (s.ok()) {
          s = change(v1::JOB_STATE_QUEUED, "RECOVERED",
                     absl::StrCat("after ", kind, " the next attempt resumes ",
                                  resume),
                     {});
        }
      } else {
        if (state == v1::JOB_STATE_DISPATCHING) {
          s = change(v1::JOB_STATE_RECOVERING, kind, status.message, fields);
          fields = {};
        }
        if (s.ok()) {
          s = change(v1::JOB_STATE_QUEUED, "RETRYING",
                     absl::StrCat(name, " failed (", kind, ": ", status.message,
                                  "); retry ", counted, " resumes ", resume),
                     fields);
        }
      }
      if (s.ok()) ++report.requeued;
    } else {
      s = change(v1::JOB_STATE_FAILED, kind,
                 absl::StrCat(name, ": ", status.message), fields);
      if (s.ok()) ++report.failed;
    }
  }
  if (!s.ok()) return s;
  {
    absl::MutexLock l(&mu_);
    checkpoint_step_.erase(id);
  }
  // Recorded: the backend may forget it.
  if (absl::Status d = adapter_->Delete(name);
      !d.ok() && !absl::IsNotFound(d)) {
    Log(LogLevel::kWarning, "dispatcher: delete failed",
        {{"attempt", name}, {"error", d}});
  }
  return absl::OkStatus();
}

}  // namespace trainyard::dispatcher
