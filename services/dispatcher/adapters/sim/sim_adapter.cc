#include "services/dispatcher/adapters/sim/sim_adapter.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <limits>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "services/dispatcher/adapters/sim/sim_config.h"
#include "services/lib/domain/capacity.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"
#include "services/lib/domain/validation.h"

namespace trainyard::dispatcher::sim {
namespace {

using ::trainyard::domain::AttachErrorInfo;
using ::trainyard::domain::Cat;
using ::trainyard::domain::FieldError;
namespace reason = ::trainyard::domain::reason;
namespace v1 = ::trainyard::v1;

// Reason codes of Launch's FAILED_PRECONDITION errors.
constexpr std::string_view kUnknownNode = "UNKNOWN_NODE";
constexpr std::string_view kNodeDown = "NODE_DOWN";
constexpr std::string_view kNodeUnschedulable = "NODE_UNSCHEDULABLE";
constexpr std::string_view kFlavorMismatch = "FLAVOR_MISMATCH";
constexpr std::string_view kGpuModelMismatch = "GPU_MODEL_MISMATCH";
constexpr std::string_view kInsufficientCapacity = "INSUFFICIENT_CAPACITY";

constexpr std::string_view kCheckpointUriPrefix = "sim://";
constexpr std::string_view kStepMarker = "/step-";

// Random fault times further than this are "never".
constexpr double kMaxFaultHours = 1e6;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// A uniform number in [0, 1): the first output of a std::mt19937_64 seeded
// with (seed, purpose, name, k). Stable across platforms (mt19937_64 is fully
// specified by the standard).
double Uniform(uint64_t seed, std::string_view purpose, std::string_view name,
               uint64_t k) {
  const uint64_t key = SplitMix64(
      seed ^ SplitMix64(Fnv1a64(purpose) ^ SplitMix64(Fnv1a64(name) + k)));
  std::mt19937_64 rng(key);
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// t + an exponential delay with `rate_per_hour`, rounded to whole
// microseconds (what PostgreSQL timestamps hold); InfiniteFuture for rate 0.
absl::Time ExponentialAfter(absl::Time t, double rate_per_hour, double u) {
  if (!(rate_per_hour > 0)) return absl::InfiniteFuture();
  const double hours = -std::log1p(-u) / rate_per_hour;
  if (!(hours < kMaxFaultHours)) return absl::InfiniteFuture();
  return t + absl::Microseconds(std::llround(hours * 3.6e9));
}

absl::Status Precondition(std::string_view field, std::string_view reason_code,
                          std::string_view message) {
  return AttachErrorInfo(
      absl::FailedPreconditionError(Cat(field, ": ", message)), field,
      reason_code);
}

std::string Quoted(std::string_view s) { return Cat("\"", s, "\""); }

std::string Fmt(absl::Duration d) { return absl::FormatDuration(d); }

std::string_view StopReasonName(StopReason reason) {
  return reason == StopReason::kCancel ? "cancel" : "preemption";
}

FailureKind StopFailure(StopReason reason) {
  return reason == StopReason::kCancel ? FailureKind::kCancelled
                                       : FailureKind::kPreempted;
}

// The sim settings of one attempt, parsed from its environment.
struct JobBehaviour {
  absl::Duration duration;
  int exit_code = 0;
  absl::Duration checkpoint_every;  // zero: none
  absl::Duration time_limit;        // zero: none
};

absl::StatusOr<JobBehaviour> ParseBehaviour(const LaunchRequest& request,
                                            absl::Duration default_duration) {
  const std::map<std::string, std::string> env = AttemptEnv(request);
  const auto field = [&](std::string_view key) {
    return request.env.count(std::string(key)) > 0
               ? Cat("env[", Quoted(key), "]")
               : Cat("spec.env[", Quoted(key), "]");
  };
  const auto lookup = [&](std::string_view key) -> const std::string* {
    auto it = env.find(std::string(key));
    return it == env.end() ? nullptr : &it->second;
  };
  JobBehaviour b;
  b.duration = default_duration;
  if (const std::string* v = lookup(kDurationEnv)) {
    absl::Duration d;
    if (!absl::ParseDuration(*v, &d) || d < absl::ZeroDuration() ||
        d > kMaxJobDuration) {
      return FieldError(
          field(kDurationEnv), reason::kInvalidValue,
          Cat("must be a duration from 0 to ", Fmt(kMaxJobDuration),
              " such as \"90s\", got ", Quoted(*v)));
    }
    b.duration = d;
  }
  if (const std::string* v = lookup(kExitCodeEnv)) {
    int code = 0;
    if (!absl::SimpleAtoi(*v, &code) || code < 0 || code > 255) {
      return FieldError(field(kExitCodeEnv), reason::kInvalidValue,
                        Cat("must be an integer 0..255, got ", Quoted(*v)));
    }
    b.exit_code = code;
  }
  if (const std::string* v = lookup(kCheckpointEveryEnv)) {
    absl::Duration d;
    if (!absl::ParseDuration(*v, &d) || d < kMinCheckpointInterval ||
        d == absl::InfiniteDuration()) {
      return FieldError(field(kCheckpointEveryEnv), reason::kInvalidValue,
                        Cat("must be a duration of at least ",
                            Fmt(kMinCheckpointInterval), ", got ", Quoted(*v)));
    }
    b.checkpoint_every = d;
  } else if (request.spec.checkpoint().has_interval()) {
    absl::StatusOr<absl::Duration> d = domain::ToDuration(
        request.spec.checkpoint().interval(), "spec.checkpoint.interval");
    if (!d.ok()) return d.status();
    if (*d > absl::ZeroDuration()) {
      b.checkpoint_every = std::max(*d, kMinCheckpointInterval);
    }
  }
  if (request.spec.has_time_limit()) {
    absl::StatusOr<absl::Duration> d =
        domain::ToDuration(request.spec.time_limit(), "spec.time_limit");
    if (!d.ok()) return d.status();
    if (*d < absl::ZeroDuration()) {
      return FieldError("spec.time_limit", reason::kOutOfRange,
                        "must not be negative");
    }
    b.time_limit = *d;
  }
  return b;
}

}  // namespace

std::string SimCheckpointUri(std::string_view attempt, int64_t step) {
  return Cat(kCheckpointUriPrefix, attempt, kStepMarker, step);
}

std::optional<int64_t> ParseSimCheckpointUri(std::string_view uri) {
  if (uri.substr(0, kCheckpointUriPrefix.size()) != kCheckpointUriPrefix) {
    return std::nullopt;
  }
  const size_t pos = uri.rfind(kStepMarker);
  if (pos == std::string_view::npos || pos < kCheckpointUriPrefix.size()) {
    return std::nullopt;
  }
  const std::string_view digits = uri.substr(pos + kStepMarker.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) {
        return c >= '0' && c <= '9';
      })) {
    return std::nullopt;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(domain::AbslView(digits), &step)) return std::nullopt;
  return step;
}

std::string_view SimEventTypeName(SimEventType type) {
  switch (type) {
    case SimEventType::kLaunched:
      return "LAUNCHED";
    case SimEventType::kStarted:
      return "STARTED";
    case SimEventType::kCheckpoint:
      return "CHECKPOINT";
    case SimEventType::kSucceeded:
      return "SUCCEEDED";
    case SimEventType::kFailed:
      return "FAILED";
    case SimEventType::kCancelled:
      return "CANCELLED";
    case SimEventType::kStopRequested:
      return "STOP_REQUESTED";
    case SimEventType::kSignalled:
      return "SIGNALLED";
    case SimEventType::kNodeFailed:
      return "NODE_FAILED";
    case SimEventType::kNodeReclaimed:
      return "NODE_RECLAIMED";
    case SimEventType::kNodeRecovered:
      return "NODE_RECOVERED";
    case SimEventType::kNodeCordoned:
      return "NODE_CORDONED";
    case SimEventType::kNodeUncordoned:
      return "NODE_UNCORDONED";
  }
  return "UNKNOWN";
}

std::string FormatSimEvent(const SimEvent& event) {
  std::string out = Cat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", event.time, absl::UTCTimeZone()),
      " ", SimEventTypeName(event.type), " ", event.subject);
  if (!event.detail.empty()) out += Cat(" ", event.detail);
  return out;
}

// --- Construction -------------------------------------------------------

absl::StatusOr<std::unique_ptr<SimAdapter>> SimAdapter::Create(
    v1::SimClusterConfig config, const Clock* clock) {
  if (clock == nullptr) {
    return absl::InvalidArgumentError("clock: required");
  }
  if (absl::Status s = ValidateSimConfig(config); !s.ok()) return s;
  return std::unique_ptr<SimAdapter>(new SimAdapter(std::move(config), clock));
}

namespace {
absl::Duration DurationOr(const google::protobuf::Duration& d,
                          absl::Duration fallback) {
  absl::StatusOr<absl::Duration> v = domain::ToDuration(d, "");
  return v.ok() && *v > absl::ZeroDuration() ? *v : fallback;
}
}  // namespace

SimAdapter::SimAdapter(v1::SimClusterConfig config, const Clock* clock)
    : config_(std::move(config)),
      clock_(clock),
      default_duration_(
          DurationOr(config_.default_job_duration(), kDefaultJobDuration)),
      launch_delay_(DurationOr(config_.launch_delay(), absl::ZeroDuration())),
      repair_time_(DurationOr(config_.faults().node_repair_time(),
                              absl::ZeroDuration())),
      crash_rate_(config_.faults().job_crash_rate_per_hour()),
      seed_(config_.faults().seed()) {
  absl::flat_hash_map<std::string, const v1::SimPool*> pools;
  for (const v1::SimPool& pool : config_.pools()) pools[pool.name()] = &pool;

  absl::MutexLock lock(&mu_);
  last_ = clock_->Now();
  for (const ExpandedNode& expanded : ExpandNodes(config_)) {
    const v1::SimNodes& entry = config_.nodes(expanded.entry);
    const v1::SimPool& pool = *pools.at(entry.pool());
    Node n;
    n.name = expanded.name;
    n.pool = pool.name();
    n.flavor = pool.flavor();
    n.flavor_kind = pool.flavor_kind();
    n.gpu_model = entry.capacity().gpu_model();
    n.gpus = entry.capacity().gpus();
    n.cpu_millis = entry.capacity().cpu_millis();
    n.memory_bytes = entry.capacity().memory_bytes();
    n.rack = entry.rack();
    n.block = entry.block();
    n.labels.insert(entry.labels().begin(), entry.labels().end());
    n.failure_rate = config_.faults().node_failure_rate_per_hour();
    if (pool.flavor_kind() == v1::FLAVOR_KIND_SPOT) {
      n.reclaim_rate = pool.reclaim_rate_per_hour() > 0
                           ? pool.reclaim_rate_per_hour()
                           : config_.faults().spot_reclaim_rate_per_hour();
    }
    nodes_.push_back(std::move(n));
  }
  std::sort(nodes_.begin(), nodes_.end(),
            [](const Node& a, const Node& b) { return a.name < b.name; });
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    node_index_[nodes_[i].name] = i;
    DrawNodeFaultsLocked(nodes_[i], last_);
    ScheduleNodeLocked(i);
  }
}

// --- Event processing ---------------------------------------------------

absl::Time SimAdapter::NowLocked() {
  AdvanceLocked(clock_->Now());
  return last_;
}

void SimAdapter::AdvanceLocked(absl::Time now) {
  if (now < last_) now = last_;
  while (!agenda_.empty()) {
    const auto [t, type, id] = *agenda_.begin();
    if (t > now) break;
    agenda_.erase(agenda_.begin());
    // Events are processed at their own instant.
    last_ = std::max(last_, t);
    if (type == 0) {
      Attempt& a = *by_seq_.at(id);
      a.agenda_time.reset();
      ProcessAttemptLocked(a, t);
      ScheduleAttemptLocked(a);
    } else {
      const int index = static_cast<int>(id);
      nodes_[index].agenda_time.reset();
      ProcessNodeLocked(index, t);
      ScheduleNodeLocked(index);
    }
  }
  last_ = now;
}

std::optional<absl::Time> SimAdapter::NextAttemptEvent(const Attempt& a) const {
  const AttemptStatus& s = a.status;
  if (IsTerminal(s.phase)) return std::nullopt;
  if (s.phase == AttemptPhase::kPending) return a.start_at;
  const absl::Time start = *s.start_time;
  const absl::Time end = start + a.remaining;
  absl::Time next = end;
  if (a.checkpoint_every > absl::ZeroDuration() && !s.stop_requested) {
    const absl::Time checkpoint =
        start + a.checkpoint_every * (a.periodic_checkpoints + 1);
    if (checkpoint < end) next = std::min(next, checkpoint);
  }
  if (a.time_limit > absl::ZeroDuration()) {
    next = std::min(next, start + a.time_limit);
  }
  next = std::min(next, a.crash_at);
  if (s.stop_deadline.has_value()) next = std::min(next, *s.stop_deadline);
  return next;
}

absl::Time SimAdapter::NextNodeEvent(const Node& n) const {
  if (n.down == NodeDown::kUp) return std::min(n.next_failure, n.next_reclaim);
  return n.repair_at;
}

void SimAdapter::ScheduleAttemptLocked(Attempt& a) {
  if (a.agenda_time.has_value()) {
    agenda_.erase(AgendaKey{*a.agenda_time, 0, a.seq});
    a.agenda_time.reset();
  }
  std::optional<absl::Time> next = NextAttemptEvent(a);
  if (next.has_value() && *next != absl::InfiniteFuture()) {
    agenda_.insert(AgendaKey{*next, 0, a.seq});
    a.agenda_time = *next;
  }
}

void SimAdapter::ScheduleNodeLocked(int index) {
  Node& n = nodes_[index];
  if (n.agenda_time.has_value()) {
    agenda_.erase(AgendaKey{*n.agenda_time, 1, static_cast<uint64_t>(index)});
    n.agenda_time.reset();
  }
  const absl::Time next = NextNodeEvent(n);
  if (next != absl::InfiniteFuture()) {
    agenda_.insert(AgendaKey{next, 1, static_cast<uint64_t>(index)});
    n.agenda_time = next;
  }
}

void SimAdapter::ProcessAttemptLocked(Attempt& a, absl::Time t) {
  AttemptStatus& s = a.status;
  if (IsTerminal(s.phase)) return;
  if (s.phase == AttemptPhase::kPending) {
    if (a.start_at <= t) {
      s.phase = AttemptPhase::kRunning;
      s.start_time = a.start_at;
      a.crash_at = ExponentialAfter(a.start_at, crash_rate_,
                                    Uniform(seed_, "crash", s.name, 0));
      LogLocked(a.start_at, SimEventType::kStarted, s.name, "");
    }
    return;
  }
  const absl::Time start = *s.start_time;
  const absl::Time end = start + a.remaining;
  if (a.checkpoint_every > absl::ZeroDuration() && !s.stop_requested) {
    const absl::Time checkpoint =
        start + a.checkpoint_every * (a.periodic_checkpoints + 1);
    if (checkpoint < end && checkpoint <= t) {
      ++a.periodic_checkpoints;
      CheckpointLocked(a, checkpoint);
      return;
    }
  }
  if (end <= t) {
    if (a.exit_code == 0) {
      EndAttemptLocked(a, end, AttemptPhase::kSucceeded, FailureKind::kNone, 0,
                       "completed");
    } else {
      EndAttemptLocked(a, end, AttemptPhase::kFailed, FailureKind::kUserError,
                       a.exit_code, Cat("exited with code ", a.exit_code));
    }
    return;
  }
  if (a.time_limit > absl::ZeroDuration() && start + a.time_limit <= t) {
    EndAttemptLocked(a, start + a.time_limit, AttemptPhase::kFailed,
                     FailureKind::kTimeLimit, std::nullopt,
                     Cat("time limit ", Fmt(a.time_limit), " reached"));
    return;
  }
  if (a.crash_at <= t) {
    EndAttemptLocked(
        a, a.crash_at, AttemptPhase::kFailed, FailureKind::kUserError,
        kCrashExitCode,
        Cat("crashed with exit code ", kCrashExitCode, " (random fault)"));
    return;
  }
  if (s.stop_deadline.has_value() && *s.stop_deadline <= t) {
    EndAttemptLocked(a, *s.stop_deadline, AttemptPhase::kCancelled,
                     StopFailure(a.stop_reason), std::nullopt,
                     Cat("stopped (", StopReasonName(a.stop_reason), ")"));
    return;
  }
}

void SimAdapter::ProcessNodeLocked(int index, absl::Time t) {
  Node& n = nodes_[index];
  if (n.down == NodeDown::kUp) {
    if (n.next_failure <= t) {
      DownNodeLocked(index, t, NodeDown::kFailed, /*random=*/true);
    } else if (n.next_reclaim <= t) {
      DownNodeLocked(index, t, NodeDown::kReclaimed, /*random=*/true);
    }
  } else if (n.repair_at <= t) {
    RecoverNodeLocked(index, t);
  }
}

void SimAdapter::CheckpointLocked(Attempt& a, absl::Time t) {
  AttemptStatus& s = a.status;
  if (s.phase != AttemptPhase::kRunning ||
      a.checkpoint_every <= absl::ZeroDuration()) {
    return;
  }
  // Whole seconds of work (t >= start, so truncation is floor).
  const int64_t step =
      a.initial_progress_s + absl::ToInt64Seconds(t - *s.start_time);
  if (!s.checkpoints.empty() && s.checkpoints.back().step == step) return;
  CheckpointInfo info{step, SimCheckpointUri(s.name, step), t};
  LogLocked(t, SimEventType::kCheckpoint, s.name, info.uri);
  s.checkpoints.push_back(std::move(info));
  if (s.checkpoints.size() > kMaxCheckpoints) {
    s.checkpoints.erase(s.checkpoints.begin());
  }
}

void SimAdapter::EndAttemptLocked(Attempt& a, absl::Time t, AttemptPhase phase,
                                  FailureKind failure,
                                  std::optional<int> exit_code,
                                  std::string message) {
  AttemptStatus& s = a.status;
  if (IsTerminal(s.phase)) return;
  s.phase = phase;
  s.failure = failure;
  s.exit_code = exit_code;
  s.message = std::move(message);
  s.end_time = t;
  if (a.holds_resources) {
    for (int index : a.node_indexes) {
      Node& n = nodes_[index];
      n.used_gpus -= a.gpus;
      n.used_cpu_millis -= a.cpu_millis;
      n.used_memory_bytes -= a.memory_bytes;
      n.attempts.erase(a.seq);
    }
    a.holds_resources = false;
  }
  if (a.agenda_time.has_value()) {
    agenda_.erase(AgendaKey{*a.agenda_time, 0, a.seq});
    a.agenda_time.reset();
  }
  SimEventType type = SimEventType::kSucceeded;
  std::string detail;
  if (phase == AttemptPhase::kFailed) {
    type = SimEventType::kFailed;
    detail = Cat(FailureKindName(failure), ": ", s.message);
  } else if (phase == AttemptPhase::kCancelled) {
    type = SimEventType::kCancelled;
    detail = std::string(FailureKindName(failure));
  }
  LogLocked(t, type, s.name, std::move(detail));
}

void SimAdapter::DrawNodeFaultsLocked(Node& n, absl::Time t) {
  n.next_failure = absl::InfiniteFuture();
  n.next_reclaim = absl::InfiniteFuture();
  if (n.failure_rate > 0) {
    n.next_failure =
        ExponentialAfter(t, n.failure_rate,
                         Uniform(seed_, "failure", n.name, n.failure_draws++));
  }
  if (n.reclaim_rate > 0) {
    n.next_reclaim =
        ExponentialAfter(t, n.reclaim_rate,
                         Uniform(seed_, "reclaim", n.name, n.reclaim_draws++));
  }
}

void SimAdapter::DownNodeLocked(int index, absl::Time t, NodeDown why,
                                bool random) {
  Node& n = nodes_[index];
  if (n.down != NodeDown::kUp) return;
  n.down = why;
  n.next_failure = absl::InfiniteFuture();
  n.next_reclaim = absl::InfiniteFuture();
  n.repair_at = random && repair_time_ > absl::ZeroDuration()
                    ? t + repair_time_
                    : absl::InfiniteFuture();
  const bool failed = why == NodeDown::kFailed;
  LogLocked(t,
            failed ? SimEventType::kNodeFailed : SimEventType::kNodeReclaimed,
            n.name, random ? "random" : "command");
  const std::set<uint64_t> victims = n.attempts;
  for (uint64_t seq : victims) {
    EndAttemptLocked(
        *by_seq_.at(seq), t, AttemptPhase::kFailed,
        failed ? FailureKind::kNodeFailure : FailureKind::kSpotReclaim,
        std::nullopt,
        failed ? Cat("node ", n.name, " failed")
               : Cat("spot node ", n.name, " reclaimed"));
  }
  ScheduleNodeLocked(index);
}

void SimAdapter::RecoverNodeLocked(int index, absl::Time t) {
  Node& n = nodes_[index];
  if (n.down == NodeDown::kUp) return;
  n.down = NodeDown::kUp;
  n.repair_at = absl::InfiniteFuture();
  DrawNodeFaultsLocked(n, t);
  LogLocked(t, SimEventType::kNodeRecovered, n.name, "");
  ScheduleNodeLocked(index);
}

void SimAdapter::LogLocked(absl::Time t, SimEventType type, std::string subject,
                           std::string detail) {
  SimEvent& e = events_.emplace_back(
      SimEvent{t, type, std::move(subject), std::move(detail)});
  if (type < SimEventType::kNodeFailed) {
    if (auto it = attempts_.find(e.subject); it != attempts_.end()) {
      Attempt& a = it->second;
      a.output += FormatSimEvent(e);
      a.output += '\n';
      if (a.output.size() > kMaxOutputBytes) {
        const size_t drop = a.output.size() - kMaxOutputBytes;
        a.output.erase(0, drop);
        a.output_start += static_cast<int64_t>(drop);
      }
    }
  }
  while (events_.size() > kMaxEvents) events_.pop_front();
}

absl::StatusOr<int> SimAdapter::FindNodeLocked(std::string_view name) const {
  auto it = node_index_.find(domain::AbslView(name));
  if (it == node_index_.end()) {
    return absl::NotFoundError(Cat("node ", Quoted(name), " not found"));
  }
  return it->second;
}

// --- Adapter ------------------------------------------------------------

absl::StatusOr<AttemptStatus> SimAdapter::Launch(const LaunchRequest& request) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = NowLocked();
  if (auto it = attempts_.find(request.name); it != attempts_.end()) {
    return it->second.status;
  }
  if (absl::Status s = ValidateLaunchRequest(request); !s.ok()) return s;
  absl::StatusOr<JobBehaviour> behaviour =
      ParseBehaviour(request, default_duration_);
  if (!behaviour.ok()) return behaviour.status();

  const v1::Resources& res = request.spec.resources();
  const int64_t gpus = res.gpus();
  const int64_t cpu = res.cpu_millis();
  const int64_t memory = res.memory_bytes();
  std::vector<int> indexes;
  indexes.reserve(request.worker_nodes.size());
  // Demand per node so far, to check several workers on one node.
  absl::flat_hash_map<int, std::array<int64_t, 3>> demand;
  for (size_t i = 0; i < request.worker_nodes.size(); ++i) {
    const std::string& name = request.worker_nodes[i];
    const std::string field = Cat("worker_nodes[", i, "]");
    auto it = node_index_.find(name);
    if (it == node_index_.end()) {
      return Precondition(field, kUnknownNode,
                          Cat("unknown node ", Quoted(name)));
    }
    const Node& n = nodes_[it->second];
    if (n.down != NodeDown::kUp) {
      return Precondition(
          field, kNodeDown,
          Cat("node ", Quoted(name), " is down (",
              n.down == NodeDown::kFailed ? "failed" : "reclaimed", ")"));
    }
    if (n.cordoned) {
      return Precondition(field, kNodeUnschedulable,
                          Cat("node ", Quoted(name), " is not schedulable"));
    }
    if (!request.flavor.empty() && request.flavor != n.flavor) {
      return Precondition(field, kFlavorMismatch,
                          Cat("node ", Quoted(name), " is in pool ",
                              Quoted(n.pool), " of flavor ", Quoted(n.flavor),
                              ", not ", Quoted(request.flavor)));
    }
    if (gpus > 0 && !domain::GpuModelMatches(res.gpu_model(), n.gpu_model)) {
      return Precondition(
          field, kGpuModelMismatch,
          Cat("node ", Quoted(name), " has GPU model ", Quoted(n.gpu_model),
              ", the job asks for ", Quoted(res.gpu_model())));
    }
    std::array<int64_t, 3>& d = demand[it->second];
    const int64_t free_gpus = n.gpus - n.used_gpus - d[0];
    const int64_t free_cpu = n.cpu_millis - n.used_cpu_millis - d[1];
    const int64_t free_memory = n.memory_bytes - n.used_memory_bytes - d[2];
    if (gpus > free_gpus || cpu > free_cpu || memory > free_memory) {
      return Precondition(
          field, kInsufficientCapacity,
          Cat("node ", Quoted(name), " has no room for this worker: it needs ",
              gpus, " GPUs, ", cpu, " CPU millis, ", memory,
              " bytes; free after earlier workers of this attempt: ", free_gpus,
              " GPUs, ", free_cpu, " CPU millis, ", free_memory, " bytes"));
    }
    d[0] += gpus;
    d[1] += cpu;
    d[2] += memory;
    indexes.push_back(it->second);
  }

  const uint64_t seq = next_seq_++;
  Attempt& a = attempts_[request.name];
  a.seq = seq;
  a.status.name = request.name;
  a.status.backend_id = Cat("sim-", seq);
  a.status.phase = AttemptPhase::kPending;
  a.status.submit_time = now;
  a.status.nodes = request.worker_nodes;
  a.env = AttemptEnv(request);
  a.gpus = gpus;
  a.cpu_millis = cpu;
  a.memory_bytes = memory;
  a.node_indexes = std::move(indexes);
  a.start_at = now + launch_delay_;
  if (std::optional<int64_t> step = ParseSimCheckpointUri(request.resume_from);
      step.has_value()) {
    // Progress never exceeds the job's work (which keeps steps in range).
    a.initial_progress_s =
        std::min(*step, absl::ToInt64Seconds(behaviour->duration));
  }
  a.remaining =
      std::max(absl::ZeroDuration(),
               behaviour->duration - absl::Seconds(a.initial_progress_s));
  a.exit_code = behaviour->exit_code;
  a.checkpoint_every = behaviour->checkpoint_every;
  a.time_limit = behaviour->time_limit;
  by_seq_[seq] = &a;
  for (int index : a.node_indexes) {
    Node& n = nodes_[index];
    n.used_gpus += gpus;
    n.used_cpu_millis += cpu;
    n.used_memory_bytes += memory;
    n.attempts.insert(seq);
  }
  a.holds_resources = true;
  LogLocked(now, SimEventType::kLaunched, request.name,
            absl::StrJoin(request.worker_nodes, ","));
  ScheduleAttemptLocked(a);
  AdvanceLocked(now);
  return a.status;
}

absl::StatusOr<SimAdapter::Attempt*> SimAdapter::FindAttemptLocked(
    std::string_view name) {
  auto it = attempts_.find(name);
  if (it == attempts_.end()) {
    return absl::NotFoundError(Cat("attempt ", Quoted(name), " not found"));
  }
  return &it->second;
}

absl::Status SimAdapter::Signal(std::string_view name, int signal) {
  if (signal < 1 || signal > 64) {
    return FieldError("signal", reason::kOutOfRange,
                      Cat("must be between 1 and 64, got ", signal));
  }
  absl::MutexLock lock(&mu_);
  const absl::Time now = NowLocked();
  absl::StatusOr<Attempt*> found = FindAttemptLocked(name);
  if (!found.ok()) return found.status();
  Attempt& a = **found;
  if (a.status.phase != AttemptPhase::kRunning) {
    return absl::FailedPreconditionError(
        Cat("attempt ", Quoted(name), " is not running (",
            AttemptPhaseName(a.status.phase), ")"));
  }
  LogLocked(now, SimEventType::kSignalled, a.status.name, Cat(signal));
  switch (signal) {
    case SIGKILL:
      EndAttemptLocked(a, now, AttemptPhase::kFailed, FailureKind::kUserError,
                       128 + SIGKILL, "killed by signal 9");
      break;
    case SIGTERM:
    case SIGINT:
    case SIGUSR1:
    case SIGUSR2:
      CheckpointLocked(a, now);
      break;
    default:
      break;
  }
  return absl::OkStatus();
}

absl::Status SimAdapter::Stop(std::string_view name, absl::Duration grace,
                              StopReason reason) {
  if (grace < absl::ZeroDuration()) {
    return FieldError("grace", reason::kOutOfRange, "must not be negative");
  }
  absl::MutexLock lock(&mu_);
  const absl::Time now = NowLocked();
  absl::StatusOr<Attempt*> found = FindAttemptLocked(name);
  if (!found.ok()) return found.status();
  Attempt& a = **found;
  AttemptStatus& s = a.status;
  if (IsTerminal(s.phase)) return absl::OkStatus();
  const absl::Time deadline = now + grace;
  if (s.phase == AttemptPhase::kPending) {
    s.stop_requested = true;
    s.stop_deadline = now;
    a.stop_reason = reason;
    LogLocked(now, SimEventType::kStopRequested, s.name,
              Cat("grace=", Fmt(grace), " reason=", StopReasonName(reason)));
    EndAttemptLocked(
        a, now, AttemptPhase::kCancelled, StopFailure(reason), std::nullopt,
        Cat("stopped before it started (", StopReasonName(reason), ")"));
    return absl::OkStatus();
  }
  if (!s.stop_requested) {
    s.stop_requested = true;
    s.stop_deadline = deadline;
    a.stop_reason = reason;
    LogLocked(now, SimEventType::kStopRequested, s.name,
              Cat("grace=", Fmt(grace), " reason=", StopReasonName(reason)));
    // SIGTERM: a checkpointing job saves its progress at once.
    CheckpointLocked(a, now);
  } else {
    s.stop_deadline = std::min(*s.stop_deadline, deadline);
    if (reason == StopReason::kCancel) a.stop_reason = StopReason::kCancel;
    LogLocked(now, SimEventType::kStopRequested, s.name,
              Cat("grace=", Fmt(grace), " reason=", StopReasonName(reason)));
  }
  ScheduleAttemptLocked(a);
  AdvanceLocked(now);
  return absl::OkStatus();
}

absl::StatusOr<AttemptStatus> SimAdapter::Status(std::string_view name) {
  absl::MutexLock lock(&mu_);
  NowLocked();
  absl::StatusOr<Attempt*> found = FindAttemptLocked(name);
  if (!found.ok()) return found.status();
  return (*found)->status;
}

absl::StatusOr<LogChunk> SimAdapter::ReadLog(std::string_view name,
                                             int64_t offset,
                                             int64_t max_bytes) {
  if (offset < 0) return absl::InvalidArgumentError("offset: negative");
  if (max_bytes <= 0) return absl::InvalidArgumentError("max_bytes: not > 0");
  absl::MutexLock lock(&mu_);
  NowLocked();
  absl::StatusOr<Attempt*> found = FindAttemptLocked(name);
  if (!found.ok()) return found.status();
  const Attempt& a = **found;
  LogChunk chunk;
  chunk.size = a.output_start + static_cast<int64_t>(a.output.size());
  chunk.offset = std::min(std::max(offset, a.output_start), chunk.size);
  const auto from = static_cast<size_t>(chunk.offset - a.output_start);
  chunk.data = a.output.substr(
      from, static_cast<size_t>(std::min<int64_t>(
                max_bytes, static_cast<int64_t>(a.output.size() - from))));
  return chunk;
}

absl::StatusOr<std::map<std::string, std::string>> SimAdapter::LaunchEnv(
    std::string_view name) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Attempt*> found = FindAttemptLocked(name);
  if (!found.ok()) return found.status();
  return (*found)->env;
}

absl::StatusOr<std::vector<AttemptStatus>> SimAdapter::List() {
  absl::MutexLock lock(&mu_);
  NowLocked();
  std::vector<AttemptStatus> out;
  out.reserve(attempts_.size());
  for (const auto& [name, a] : attempts_) out.push_back(a.status);
  return out;
}

absl::Status SimAdapter::Delete(std::string_view name) {
  absl::MutexLock lock(&mu_);
  NowLocked();
  auto it = attempts_.find(name);
  if (it == attempts_.end()) return absl::OkStatus();
  if (!IsTerminal(it->second.status.phase)) {
    return absl::FailedPreconditionError(
        Cat("attempt ", Quoted(name), " has not ended (",
            AttemptPhaseName(it->second.status.phase), ")"));
  }
  by_seq_.erase(it->second.seq);
  attempts_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<NodeInventory>> SimAdapter::Inventory() {
  absl::MutexLock lock(&mu_);
  NowLocked();
  std::vector<NodeInventory> out;
  out.reserve(nodes_.size());
  for (const Node& n : nodes_) {
    NodeInventory inv = n;
    inv.failed = n.down != NodeDown::kUp;
    inv.schedulable = !inv.failed && !n.cordoned;
    if (n.down == NodeDown::kFailed) {
      inv.state_message = "failed";
    } else if (n.down == NodeDown::kReclaimed) {
      inv.state_message = "reclaimed";
    } else if (n.cordoned) {
      inv.state_message = "cordoned";
    }
    out.push_back(std::move(inv));
  }
  return out;
}

// --- Simulation controls --------------------------------------------------

std::optional<absl::Time> SimAdapter::NextChange() {
  // Only on the real clock: a virtual clock's times mean nothing to a
  // dispatcher waiting in real time.
  if (clock_ != &RealClock::Get()) return std::nullopt;
  absl::MutexLock lock(&mu_);
  NowLocked();
  if (agenda_.empty()) return std::nullopt;
  return std::get<0>(*agenda_.begin());
}

void SimAdapter::Tick() {
  absl::MutexLock lock(&mu_);
  NowLocked();
}

absl::Status SimAdapter::FailNode(std::string_view node) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = NowLocked();
  absl::StatusOr<int> index = FindNodeLocked(node);
  if (!index.ok()) return index.status();
  DownNodeLocked(*index, now, NodeDown::kFailed, /*random=*/false);
  return absl::OkStatus();
}

absl::Status SimAdapter::ReclaimNode(std::string_view node) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = NowLocked();
  absl::StatusOr<int> index = FindNodeLocked(node);
  if (!index.ok()) return index.status();
  const Node& n = nodes_[*index];
  if (n.flavor_kind != v1::FLAVOR_KIND_SPOT) {
    return absl::FailedPreconditionError(Cat("node ", Quoted(node),
                                             " is in pool ", Quoted(n.pool),
                                             ", which is not a spot pool"));
  }
  DownNodeLocked(*index, now, NodeDown::kReclaimed, /*random=*/false);
  return absl::OkStatus();
}

absl::Status SimAdapter::ReclaimPool(std::string_view pool) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = NowLocked();
  const v1::SimPool* found = nullptr;
  for (const v1::SimPool& p : config_.pools()) {
    if (p.name() == pool) found = &p;
  }
  if (found == nullptr) {
    return absl::NotFoundError(Cat("pool ", Quoted(pool), " not found"));
  }
  if (found->flavor_kind() != v1::FLAVOR_KIND_SPOT) {
    return absl::FailedPreconditionError(
        Cat("pool ", Quoted(pool), " is not a spot pool"));
  }
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    if (nodes_[i].pool == pool) {
      DownNodeLocked(i, now, NodeDown::kReclaimed, /*random=*/false);
    }
  }
  return absl::OkStatus();
}

absl::Status SimAdapter::RecoverNode(std::string_view node) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = NowLocked();
  absl::StatusOr<int> index = FindNodeLocked(node);
  if (!index.ok()) return index.status();
  RecoverNodeLocked(*index, now);
  return absl::OkStatus();
}

absl::Status SimAdapter::SetNodeSchedulable(std::string_view node,
                                            bool schedulable) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = NowLocked();
  absl::StatusOr<int> index = FindNodeLocked(node);
  if (!index.ok()) return index.status();
  Node& n = nodes_[*index];
  if (n.cordoned == !schedulable) return absl::OkStatus();
  n.cordoned = !schedulable;
  LogLocked(
      now,
      schedulable ? SimEventType::kNodeUncordoned : SimEventType::kNodeCordoned,
      n.name, "");
  return absl::OkStatus();
}

absl::Status SimAdapter::CrashJob(std::string_view name, int exit_code) {
  if (exit_code < 1 || exit_code > 255) {
    return FieldError("exit_code", reason::kOutOfRange,
                      Cat("must be between 1 and 255, got ", exit_code));
  }
  absl::MutexLock lock(&mu_);
  const absl::Time now = NowLocked();
  absl::StatusOr<Attempt*> found = FindAttemptLocked(name);
  if (!found.ok()) return found.status();
  Attempt& a = **found;
  if (IsTerminal(a.status.phase)) {
    return absl::FailedPreconditionError(
        Cat("attempt ", Quoted(name), " has ended (",
            AttemptPhaseName(a.status.phase), ")"));
  }
  EndAttemptLocked(a, now, AttemptPhase::kFailed, FailureKind::kUserError,
                   exit_code,
                   Cat("crashed with exit code ", exit_code, " (injected)"));
  return absl::OkStatus();
}

std::vector<SimEvent> SimAdapter::DrainEvents() {
  absl::MutexLock lock(&mu_);
  NowLocked();
  std::vector<SimEvent> out(std::make_move_iterator(events_.begin()),
                            std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

}  // namespace trainyard::dispatcher::sim
