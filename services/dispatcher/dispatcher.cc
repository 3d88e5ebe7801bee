#include "services/dispatcher/dispatcher.h"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "services/lib/domain/job_state.h"
#include "services/lib/domain/names.h"
#include "services/lib/runtime/logging.h"
#include "services/lib/runtime/metrics.h"
#include "services/lib/runtime/proto_bytes.h"
#include "storage/redis/redis_options.h"
#include "storage/redis/wakeup_subscriber.h"

namespace trainyard::dispatcher {
namespace {

namespace v1 = ::trainyard::v1;
namespace pg = ::trainyard::storage::postgres;
using runtime::Log;
using runtime::LogLevel;

int64_t JobIdOf(const v1::Job& job) {
  return std::stoll(std::string(domain::NameId(job.name())));
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

// The claim of an ADMITTED attempt for this dispatcher: the job moves to
// DISPATCHING at the version read (a concurrent change wins).
pg::AttemptChange ClaimForDispatch(const pg::ClusterAttempt& a,
                                   const std::string& cluster) {
  return {.tenant = a.job.tenant(),
          .job_id = JobIdOf(a.job),
          .expected_version = a.job.version(),
          .to = v1::JOB_STATE_DISPATCHING,
          .reason = "DISPATCHING",
          .message = absl::StrCat("submitting ", a.attempt.backend_job_name(),
                                  " to ", cluster)};
}

runtime::Counter& Transitions(const char* to) {
  return runtime::DefaultMetrics().GetCounter(
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
  if (options.log_tail_bytes < 0 || options.log_tail_bytes > (64 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("log_tail_bytes: ", options.log_tail_bytes,
                     " is not in 0..67108864 (64 MiB)"));
  }
  if (options.log_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("log_interval: negative");
  }
  std::unique_ptr<Dispatcher> d(new Dispatcher(std::move(options), adapter));
  absl::StatusOr<std::unique_ptr<pg::Database>> db =
      pg::Database::Open({.url = d->options_.postgres_url,
                          .pool_size = std::max(2, d->options_.db_pool_size),
                          .custom_plans = true});
  if (!db.ok()) return db.status();
  d->db_ = std::move(*db);
  d->jobs_ = std::make_unique<pg::DispatcherStore>(d->db_.get());
  d->api_jobs_ = std::make_unique<pg::JobStore>(d->db_.get());
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
  // The scheduler wakes this dispatcher when it admits or preempts work on
  // the cluster; the interval is the fallback.
  loop_.Start(
      *db_,
      {.name = "dispatcher",
       .became_leader_log = "active",
       .lost_leader_log = "inactive",
       .log_key = "cluster",
       .log_value = options_.cluster,
       .lock_key = LockKey(options_.cluster),
       .standby_poll = options_.standby_poll,
       .redis_addr = options_.redis_addr,
       .wakeup_channels = {storage::redis::DispatcherWakeupChannel(
           options_.cluster)},
       .interval = options_.interval},
      [this] { BecomeActive(); }, [this] { return LeadRound(); });
}

void Dispatcher::Shutdown() { loop_.Stop(); }

void Dispatcher::BecomeActive() {
  failed_passes_ = 0;
  absl::MutexLock l(&mu_);
  reported_nodes_.clear();
  checkpoint_step_.clear();
}

leader::NextRound Dispatcher::LeadRound() {
  // Failed passes (e.g. the backend is unreachable) are retried with
  // exponential backoff: interval × 2^n, at most 30 s (or the interval).
  int& failures = failed_passes_;
  absl::StatusOr<PassReport> r = RunPass();
  if (!r.ok()) {
    if (failures == 0 || failures % 10 == 0) {
      Log(LogLevel::kWarning, "dispatcher: pass failed; retrying with backoff",
          {{"cluster", options_.cluster},
           {"error", r.status()},
           {"failures", failures + 1}});
    }
    ++failures;
  } else if (failures > 0) {
    Log(LogLevel::kInfo, "dispatcher: passes succeed again",
        {{"cluster", options_.cluster}, {"failed_passes", failures}});
    failures = 0;
  }
  absl::Duration wait = options_.interval;
  for (int i = 0; i < std::min(failures, 16); ++i) wait *= 2;
  wait = std::min(wait, std::max(options_.interval, absl::Seconds(30)));
  if (failures == 0) {
    // Follow the backend's own changes as they happen (a sim attempt's end
    // is known in advance): the scheduler learns of the freed capacity at
    // once rather than up to an interval later.
    if (std::optional<absl::Time> next = adapter_->NextChange()) {
      wait =
          std::min(wait, std::max(options_.min_pass_gap,
                                  *next - absl::Now() + absl::Milliseconds(1)));
    }
  }
  // A backing-off dispatcher is not woken early.
  return {.wait = wait, .wakeable = failures == 0};
}

absl::Status Dispatcher::ReportInventory(
    PassReport& report,
    absl::flat_hash_map<std::string, NodeCapacity>& capacity) {
  absl::StatusOr<std::vector<NodeInventory>> inventory = adapter_->Inventory();
  if (!inventory.ok()) return inventory.status();
  // A node reported before that the backend no longer lists (a Kubernetes
  // Node deleted, a spot VM gone) is reported down, so that nothing is placed
  // on it.
  {
    absl::flat_hash_set<std::string> listed;
    for (const NodeInventory& n : *inventory) listed.insert(n.name);
    std::vector<NodeInventory> gone;
    {
      absl::MutexLock l(&mu_);
      for (const auto& [name, last] : reported_nodes_) {
        if (listed.contains(name) || last.failed) continue;
        gone.push_back({.name = name,
                        .pool = last.pool,
                        .schedulable = false,
                        .failed = true,
                        .state_message = "no longer in the cluster"});
      }
    }
    inventory->insert(inventory->end(), gone.begin(), gone.end());
  }
  for (const NodeInventory& n : *inventory) {
    capacity[absl::StrCat("clusters/", options_.cluster, "/nodes/", n.name)] = {
        .gpus = n.gpus,
        .cpu_millis = n.cpu_millis,
        .memory_bytes = n.memory_bytes};
    {
      absl::MutexLock l(&mu_);
      auto it = reported_nodes_.find(n.name);
      if (it != reported_nodes_.end() && SameNodeRecord(it->second, n)) {
        continue;
      }
    }
    v1::Node node = ToNodeProto(n, options_.cluster);
    // Its labels are a map: bytes that are the same for the same node.
    std::string body = runtime::DeterministicBytes(node);
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
    reported_nodes_[n.name] = n;
    ++report.nodes_reported;
  }
  return absl::OkStatus();
}

void Dispatcher::ReportHealth(const absl::Status& backend) {
  const v1::ClusterHealth health =
      backend.ok() ? v1::CLUSTER_HEALTH_HEALTHY : v1::CLUSTER_HEALTH_UNHEALTHY;
  runtime::DefaultMetrics()
      .GetGauge("trainyard_dispatcher_backend_up",
                "1 when the cluster's backend answered the last pass.",
                {{"cluster", options_.cluster}})
      .Set(backend.ok() ? 1 : 0);
  const absl::Time now = absl::Now();
  int previous = 0;
  {
    absl::MutexLock l(&mu_);
    if (reported_health_ == health && now - health_time_ < absl::Seconds(30)) {
      return;
    }
    previous = reported_health_;
    reported_health_ = health;
    health_time_ = now;
  }
  if (previous != health) {
    Log(backend.ok() ? LogLevel::kInfo : LogLevel::kWarning,
        backend.ok() ? "dispatcher: cluster healthy"
                     : "dispatcher: cluster unhealthy",
        {{"cluster", options_.cluster}, {"error", backend}});
  }
  const std::string message(backend.message());
  absl::StatusOr<pg::StoredObject> row = objects_->Update(
      pg::ClusterKind(), {options_.cluster}, 0,
      [&](const pg::StoredObject& current)
          -> absl::StatusOr<pg::ObjectStore::Mutation> {
        v1::Cluster cluster;
        if (!cluster.ParseFromString(current.body)) {
          return absl::InternalError("unreadable cluster record");
        }
        cluster.set_health(health);
        cluster.set_health_message(message);
        *cluster.mutable_heartbeat_time() =
            google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
                absl::ToUnixMicros(now));
        return pg::ObjectStore::Mutation{.body = cluster.SerializeAsString()};
      },
      nullptr);
  if (!row.ok()) {
    Log(LogLevel::kWarning, "dispatcher: cluster health not recorded",
        {{"cluster", options_.cluster}, {"error", row.status()}});
    // Try again on the next pass.
    absl::MutexLock l(&mu_);
    reported_health_ = 0;
  }
}

absl::StatusOr<PassReport> Dispatcher::RunPass() {
  PassReport report;
  absl::flat_hash_map<std::string, NodeCapacity> capacity;
  absl::Status inventory = ReportInventory(report, capacity);
  if (!inventory.ok()) {
    Log(LogLevel::kWarning, "dispatcher: inventory failed",
        {{"error", inventory}});
  }
  absl::StatusOr<std::vector<pg::ClusterAttempt>> attempts =
      jobs_->ClusterAttempts(options_.cluster);
  if (!attempts.ok()) return attempts.status();
  absl::StatusOr<std::vector<AttemptStatus>> backend = adapter_->List();
  // An unreachable backend changes no attempt: the pass stops here and the
  // cluster is reported unhealthy until the backend answers again.
  ReportHealth(backend.ok() ? inventory : backend.status());
  if (!backend.ok()) return backend.status();
  std::map<std::string, const AttemptStatus*> by_name;
  for (const AttemptStatus& s : *backend) by_name[s.name] = &s;
  // What the attempts this cluster runs hold on each node: every attempt
  // past its claim (DISPATCHING, RUNNING, PREEMPTING) until its end is
  // recorded (so the recorded state never holds more than a node has, even
  // for the moment between a backend job's end and its record). An admission
  // starts only when each of its nodes has room for its workers; an admission
  // placed where a preempted attempt still runs (its preemptor) waits until
  // that has ended, while admissions beside it on the same node start at
  // once.
  absl::flat_hash_map<std::string, NodeCapacity> held;
  std::set<std::string> stopping_nodes;
  auto hold = [&](const pg::ClusterAttempt& a) {
    const v1::Resources& r = a.job.spec().resources();
    for (const v1::WorkerPlacement& p : a.attempt.placements()) {
      NodeCapacity& h = held[p.node()];
      h.gpus += r.gpus();
      h.cpu_millis += r.cpu_millis();
      h.memory_bytes += r.memory_bytes();
    }
  };
  for (const pg::ClusterAttempt& a : *attempts) {
    const v1::JobState state = a.job.state();
    if (state != v1::JOB_STATE_DISPATCHING && state != v1::JOB_STATE_RUNNING &&
        state != v1::JOB_STATE_PREEMPTING) {
      continue;
    }
    hold(a);
    if (state == v1::JOB_STATE_PREEMPTING) {
      for (const v1::WorkerPlacement& p : a.attempt.placements())
        stopping_nodes.insert(p.node());
    }
  }
  // Whether an admitted attempt fits beside what its nodes hold. A node the
  // backend did not list (capacity unknown) is free unless an attempt being
  // preempted still runs there.
  auto fits = [&](const pg::ClusterAttempt& a) {
    const v1::Resources& r = a.job.spec().resources();
    absl::flat_hash_map<std::string, int> workers;
    for (const v1::WorkerPlacement& p : a.attempt.placements())
      ++workers[p.node()];
    for (const auto& [node, n] : workers) {
      auto cap = capacity.find(node);
      if (cap == capacity.end()) {
        if (stopping_nodes.contains(node)) return false;
        continue;
      }
      const NodeCapacity& h = held[node];
      if (h.gpus + n * r.gpus() > cap->second.gpus ||
          h.cpu_millis + n * r.cpu_millis() > cap->second.cpu_millis ||
          h.memory_bytes + n * r.memory_bytes() > cap->second.memory_bytes) {
        return false;
      }
    }
    return true;
  };
  // Claim every admitted attempt that may start (ADMITTED -> DISPATCHING)
  // in one transaction before launching any: a crash after the claim leaves
  // DISPATCHING, which the next pass launches idempotently by name.
  std::vector<pg::AttemptChange> claims;
  std::vector<size_t> claimed_index;
  for (size_t i = 0; i < attempts->size(); ++i) {
    const pg::ClusterAttempt& a = (*attempts)[i];
    if (a.job.state() != v1::JOB_STATE_ADMITTED) continue;
    if (!fits(a)) continue;
    hold(a);
    claims.push_back(ClaimForDispatch(a, options_.cluster));
    claimed_index.push_back(i);
  }
  if (!claims.empty()) {
    absl::StatusOr<std::vector<absl::StatusOr<v1::Job>>> claimed =
        jobs_->ChangeAttempts(claims);
    if (!claimed.ok()) return claimed.status();
    for (size_t k = 0; k < claimed_index.size(); ++k) {
      pg::ClusterAttempt& a = (*attempts)[claimed_index[k]];
      if ((*claimed)[k].ok()) {
        a.job = *(*claimed)[k];  // DISPATCHING: Follow launches it.
        Transitions("DISPATCHING").Increment();
      } else {
        ++report.conflicts;  // Changed meanwhile; the next pass sees it anew.
      }
    }
  }
  LaunchAtOnce(*attempts, by_name);
  for (const pg::ClusterAttempt& a : *attempts) {
    // Still ADMITTED: waiting for room on its nodes (its victims still run),
    // or its claim lost a race.
    if (a.job.state() == v1::JOB_STATE_ADMITTED) continue;
    auto it = by_name.find(a.attempt.backend_job_name());
    if (it != by_name.end()) CopyLog(a, *it->second);
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
  // The pass's changes and the output it read, in one transaction.
  if (absl::Status f = Flush(report); !f.ok()) return f;
  // Ended attempts no job follows any more (a dispatcher died between
  // recording an outcome and telling the backend to forget the attempt).
  std::set<std::string> followed;
  for (const pg::ClusterAttempt& a : *attempts)
    followed.insert(a.attempt.backend_job_name());
  absl::erase_if(log_copied_, [&](const auto& entry) {
    return !followed.contains(entry.first);
  });
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

std::map<std::string, std::string> ApiEnv(const DispatcherOptions& options,
                                          const std::string& tenant,
                                          int64_t job_id,
                                          const v1::JobSpec& spec,
                                          absl::Time now) {
  std::map<std::string, std::string> env;
  if (!options.api_advertise_addr.empty())
    env["TRAINYARD_ADDR"] = options.api_advertise_addr;
  if (options.job_tokens != nullptr) {
    absl::Duration valid = options.job_token_ttl;
    if (spec.has_time_limit() && spec.time_limit().seconds() > 0) {
      absl::Duration grace = options.default_grace;
      if (spec.checkpoint().has_grace_period()) {
        grace = absl::Seconds(spec.checkpoint().grace_period().seconds());
      }
      valid = absl::Seconds(spec.time_limit().seconds()) + grace +
              options.job_token_margin;
    }
    env["TRAINYARD_TOKEN"] = options.job_tokens->Mint(
        {.tenant = tenant, .job_id = job_id, .expires = now + valid});
  }
  return env;
}

LaunchRequest Dispatcher::RequestOf(const pg::ClusterAttempt& a) const {
  LaunchRequest request{
      .name = a.attempt.backend_job_name(),
      .job_id = JobIdOf(a.job),
      .attempt = a.attempt.index(),
      .tenant = a.job.tenant(),
      .spec = a.job.spec(),
      .flavor = std::string(domain::NameId(a.attempt.flavor())),
      .resume_from = a.attempt.resumed_from()};
  for (const v1::WorkerPlacement& p : a.attempt.placements())
    request.worker_nodes.push_back(std::string(domain::NameId(p.node())));
  request.env = ApiEnv(options_, a.job.tenant(), JobIdOf(a.job), a.job.spec(),
                       absl::Now());
  return request;
}

void Dispatcher::LaunchAtOnce(
    const std::vector<pg::ClusterAttempt>& attempts,
    const std::map<std::string, const AttemptStatus*>& listed) {
  prelaunched_.clear();
  const int concurrency = adapter_->LaunchConcurrency();
  if (concurrency <= 1) return;
  std::vector<LaunchRequest> requests;
  for (const pg::ClusterAttempt& a : attempts) {
    if (a.job.state() == v1::JOB_STATE_DISPATCHING &&
        !listed.contains(a.attempt.backend_job_name())) {
      requests.push_back(RequestOf(a));
    }
  }
  if (requests.size() < 2) return;
  // Each thread takes the next request; the results are recorded by the
  // pass, in its order, as if launched one by one.
  std::vector<absl::StatusOr<AttemptStatus>> results(
      requests.size(), absl::UnknownError("not launched"));
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  const size_t n = std::min(requests.size(), static_cast<size_t>(concurrency));
  threads.reserve(n);
  for (size_t t = 0; t < n; ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < requests.size(); i = next++) {
        results[i] = adapter_->Launch(requests[i]);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    prelaunched_.emplace(requests[i].name, std::move(results[i]));
  }
}

absl::Status Dispatcher::Launch(const pg::ClusterAttempt& a,
                                PassReport& report) {
  pg::ClusterAttempt current = a;
  if (a.job.state() == v1::JOB_STATE_ADMITTED) {
    absl::StatusOr<v1::Job> claimed =
        jobs_->ChangeAttempt(ClaimForDispatch(a, options_.cluster));
    if (!claimed.ok()) return claimed.status();
    current.job = *claimed;
    Transitions("DISPATCHING").Increment();
  }
  // Launched with the pass's others (LaunchAtOnce), or now: the request
  // (and its job token) is built only for a launch.
  const std::string& name = a.attempt.backend_job_name();
  absl::StatusOr<AttemptStatus> launched = absl::UnknownError("not launched");
  if (auto it = prelaunched_.find(name); it != prelaunched_.end()) {
    launched = std::move(it->second);
    prelaunched_.erase(it);
  } else {
    launched = adapter_->Launch(RequestOf(a));
  }
  if (!launched.ok()) {
    if (absl::IsUnavailable(launched.status()) ||
        absl::IsDeadlineExceeded(launched.status())) {
      return launched
          .status();  // Stays DISPATCHING; the next pass tries again.
    }
    // Refused for good (bad request) or for now (node full or gone): the job
    // fails, or goes back to its queue for another placement.
    const bool invalid = absl::IsInvalidArgument(launched.status());
    AttemptStatus refused{.name = name,
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
  if (options_.fault_kill_after_launches > 0 &&
      ++fault_launches_ == options_.fault_kill_after_launches) {
    // Fault injection (DispatcherOptions): a crash between "the backend
    // accepted the attempt" and "recorded", as kill -9 would leave it.
    Log(LogLevel::kWarning, "dispatcher: fault injection, killing self",
        {{"attempt", name}, {"launches", fault_launches_}});
    raise(SIGKILL);
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
        api_jobs_->ListCheckpoints(a.job.tenant(), id, 0, 1);
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
        api_jobs_->ReportCheckpoint(a.job.tenant(), id, checkpoint);
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
    std::string cancelled;
    if (cancel) {
      absl::StatusOr<std::string> m = CancelledMessage(a);
      if (!m.ok()) return m.status();
      cancelled = *std::move(m);
    }
    deferred_.push_back(
        {.change = {.tenant = a.job.tenant(),
                    .job_id = JobIdOf(a.job),
                    .expected_version = a.job.version(),
                    .to =
                        cancel ? v1::JOB_STATE_CANCELLED : v1::JOB_STATE_QUEUED,
                    .reason = cancel ? "CANCELLED" : "RECOVERED",
                    .message =
                        cancel ? cancelled
                        : a.job.resume_from().empty()
                            ? std::string("the next attempt starts from the "
                                          "beginning (no checkpoint)")
                            : absl::StrCat("the next attempt resumes from ",
                                           a.job.resume_from())},
         .counter = cancel ? &PassReport::cancelled : &PassReport::requeued,
         // Its outcome is recorded: the backend may forget the ended attempt.
         .forget = status != nullptr && IsTerminal(status->phase)
                       ? name
                       : std::string()});
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
    deferred_.push_back(
        {.change = {.tenant = a.job.tenant(),
                    .job_id = JobIdOf(a.job),
                    .expected_version = a.job.version(),
                    .to = v1::JOB_STATE_RUNNING,
                    .reason = "STARTED",
                    .message =
                        absl::StrCat(name, " started on ", options_.cluster),
                    .start_time = status->start_time.value_or(absl::Now()),
                    .backend_job_id = status->backend_id},
         .counter = &PassReport::started});
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
    // The grace period runs from the preemption, not from whenever a
    // dispatcher (a new leader, or one whose backend keeps stop requests in
    // memory, like Slurm's adapter) first asks for the stop.
    absl::StatusOr<std::optional<absl::Time>> preempted =
        jobs_->StateEnteredAt(JobIdOf(a.job), v1::JOB_STATE_PREEMPTING);
    if (preempted.ok() && preempted->has_value()) {
      const absl::Duration elapsed = absl::Now() - **preempted;
      if (elapsed > absl::Seconds(1)) {
        grace = std::max(absl::ZeroDuration(), grace - elapsed);
      }
    }
    ++report.stops;
    return adapter_->Stop(name, grace, StopReason::kPreemption);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Dispatcher::CancelledMessage(
    const pg::ClusterAttempt& a) {
  const std::string stopped =
      absl::StrCat(a.attempt.backend_job_name(), " was stopped");
  if (!a.job.cancel_requested()) return stopped;
  absl::StatusOr<std::string> requested =
      jobs_->CancelRequestMessage(JobIdOf(a.job));
  if (!requested.ok()) return requested.status();
  if (requested->empty()) return stopped;
  return absl::StrCat(*requested, "; ", stopped);
}

void Dispatcher::CopyLog(const pg::ClusterAttempt& a,
                         const AttemptStatus& status) {
  const int64_t keep = options_.log_tail_bytes;
  if (keep <= 0 || a.log_complete) return;
  const bool ended = IsTerminal(status.phase);
  if (!ended && status.phase != AttemptPhase::kRunning) return;
  const std::string& name = a.attempt.backend_job_name();
  // A running attempt's output is read every log_interval from when this
  // dispatcher first saw it (so a short attempt is read once, at its end),
  // and every pass while it is being stopped: what a worker says in its
  // grace period (its last checkpoint) matters most, and a backend may
  // forget a stopped worker's output as soon as it exits (Kubernetes
  // deletes the pod).
  const absl::Time now = absl::Now();
  absl::Time& last = log_copied_.try_emplace(name, now).first->second;
  const bool stopping =
      a.job.state() == v1::JOB_STATE_PREEMPTING || a.job.cancel_requested();
  if (!ended && !stopping && now - last < options_.log_interval) return;
  last = now;
  pg::LogAppend append{.job_id = JobIdOf(a.job),
                       .attempt = a.attempt.index(),
                       .expected_size = a.log_size,
                       .offset = a.log_size};
  absl::StatusOr<LogChunk> chunk = adapter_->ReadLog(name, a.log_size, keep);
  if (chunk.ok() && chunk->size - chunk->offset > keep) {
    // More is new than is kept: read only the newest `keep` bytes.
    chunk = adapter_->ReadLog(name, chunk->size - keep, keep);
  }
  if (chunk.ok()) {
    if (chunk->data.empty() && !ended && a.log_error.empty()) return;
    append.offset = std::max(chunk->offset, a.log_size);
    append.data = std::move(chunk->data);
    append.complete = ended;
  } else if (absl::IsUnavailable(chunk.status()) ||
             absl::IsDeadlineExceeded(chunk.status()) ||
             absl::IsNotFound(chunk.status())) {
    return;  // Tried again next time.
  } else {
    append.error = std::string(chunk.status().message());
    append.complete = ended;
    if (append.error == a.log_error && !ended) return;
  }
  log_appends_.push_back(std::move(append));
}

absl::Status Dispatcher::End(const pg::ClusterAttempt& a,
                             const AttemptStatus& status,
                             PassReport& /*report*/) {
  const int64_t id = JobIdOf(a.job);
  const std::string& name = a.attempt.backend_job_name();
  const absl::Time end = status.end_time.value_or(absl::Now());
  v1::JobState state = a.job.state();
  // The job's changes are committed with the rest of the pass (Flush); the
  // first is guarded by the version this pass read, the later ones follow it
  // in the same transaction.
  const size_t first_change = deferred_.size();
  auto change = [&](v1::JobState to, const std::string& reason,
                    const std::string& message,
                    pg::AttemptChange fields) -> absl::Status {
    fields.tenant = a.job.tenant();
    fields.job_id = id;
    fields.expected_version =
        deferred_.size() == first_change ? a.job.version() : 0;
    fields.to = to;
    fields.reason = reason;
    fields.message = message;
    deferred_.push_back({.change = std::move(fields)});
    state = to;
    return absl::OkStatus();
  };
  int PassReport::*counter = nullptr;
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
  // A preemption Trainyard decided: the attempt keeps why and by whom (the
  // scheduler's message on the job while PREEMPTING: "job 3 (priority 100,
  // queue ...) preempts job 2 ..."), then what the backend said.
  std::string attempt_message = status.message;
  if (a.job.state() == v1::JOB_STATE_PREEMPTING &&
      status.failure == FailureKind::kPreempted &&
      !a.job.state_message().empty()) {
    attempt_message =
        status.message.empty()
            ? a.job.state_message()
            : absl::StrCat(a.job.state_message(), " (", status.message, ")");
  }
  pg::AttemptChange fields{.end_time = end,
                           .failure_class = ToFailureClass(status.failure),
                           .exit_code = status.exit_code,
                           .lost_gpu_seconds = lost,
                           .attempt_message = std::move(attempt_message),
                           .backend_job_id = status.backend_id};

  absl::Status s;
  if (status.phase == AttemptPhase::kSucceeded) {
    fields.exit_code = 0;
    s = change(v1::JOB_STATE_SUCCEEDED, "SUCCEEDED",
               absl::StrCat(name, " finished successfully"), fields);
    counter = &PassReport::succeeded;
  } else if (status.failure == FailureKind::kCancelled ||
             a.job.cancel_requested()) {
    absl::StatusOr<std::string> message = CancelledMessage(a);
    if (!message.ok()) return message.status();
    s = change(v1::JOB_STATE_CANCELLED, "CANCELLED", *message, fields);
    counter = &PassReport::cancelled;
  } else {
    // Attempts so far that count against the retry limit, this one included.
    absl::StatusOr<v1::Job> full =
        api_jobs_->Get(a.job.tenant(), id, /*with_attempts=*/true);
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
      counter = &PassReport::requeued;
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
      counter = &PassReport::requeued;
    } else {
      s = change(v1::JOB_STATE_FAILED, kind,
                 absl::StrCat(name, ": ", status.message), fields);
      counter = &PassReport::failed;
    }
  }
  if (!s.ok()) return s;
  // Once recorded, the backend may forget the attempt.
  Deferred& last = deferred_.back();
  last.counter = counter;
  last.forget = name;
  return absl::OkStatus();
}

absl::Status Dispatcher::Flush(PassReport& report) {
  // The output the pass read goes in first, or with the changes: before the
  // backend may forget an ended attempt. A failed write is read again from
  // the stored size next pass.
  std::vector<pg::LogAppend> logs = std::move(log_appends_);
  log_appends_.clear();
  if (deferred_.empty()) {
    if (logs.empty()) return absl::OkStatus();
    absl::StatusOr<int> applied =
        jobs_->AppendLogs(logs, options_.log_tail_bytes);
    if (!applied.ok()) return applied.status();
    report.logs_copied += *applied;
    return absl::OkStatus();
  }
  std::vector<pg::AttemptChange> changes;
  changes.reserve(deferred_.size());
  for (const Deferred& d : deferred_) changes.push_back(d.change);
  int logs_applied = 0;
  absl::StatusOr<std::vector<absl::StatusOr<v1::Job>>> results =
      jobs_->ChangeAttempts(changes, logs, options_.log_tail_bytes,
                            &logs_applied);
  std::vector<Deferred> batch = std::move(deferred_);
  deferred_.clear();
  // Nothing applied: the next pass sees the same attempts and tries again.
  if (!results.ok()) return results.status();
  report.logs_copied += logs_applied;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Deferred& d = batch[i];
    const absl::StatusOr<v1::Job>& job = (*results)[i];
    if (!job.ok()) {
      if (absl::IsAborted(job.status())) {
        ++report.conflicts;  // Changed meanwhile; the next pass sees it anew.
      } else {
        Log(LogLevel::kWarning, "dispatcher: change not recorded",
            {{"job", absl::StrCat("tenants/", d.change.tenant, "/jobs/",
                                  d.change.job_id)},
             {"to", std::string(domain::StateName(d.change.to))},
             {"error", job.status()}});
      }
      continue;
    }
    Transitions(std::string(domain::StateName(d.change.to)).c_str())
        .Increment();
    if (d.counter != nullptr) ++(report.*d.counter);
    if (d.forget.empty()) continue;
    {
      absl::MutexLock l(&mu_);
      checkpoint_step_.erase(d.change.job_id);
    }
    if (absl::Status del = adapter_->Delete(d.forget);
        !del.ok() && !absl::IsNotFound(del)) {
      Log(LogLevel::kWarning, "dispatcher: delete failed",
          {{"attempt", d.forget}, {"error", del}});
    }
  }
  return absl::OkStatus();
}

}  // namespace trainyard::dispatcher
