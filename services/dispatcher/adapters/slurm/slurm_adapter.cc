#include "services/dispatcher/adapters/slurm/slurm_adapter.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/dispatcher/adapters/checkpoint_manifest.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher::slurm {

using ::trainyard::domain::AbslView;
using ::trainyard::domain::Cat;
namespace {

// update_time is compared with slurmctld's clock: look back a little.
constexpr absl::Duration kPollSlack = absl::Seconds(2);
// Manifests of ended jobs are still read this long after the end (the final
// checkpoint written in a grace period).
constexpr absl::Duration kCheckpointReadAfterEnd = absl::Minutes(10);
constexpr size_t kMaxCheckpointsPerAttempt = 64;
// A job this adapter submitted that no listing shows after this long is lost.
constexpr absl::Duration kSubmittedButUnlisted = absl::Minutes(2);

absl::Status Prefixed(const absl::Status& s, std::string_view prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), Cat(prefix, ": ", s.message()));
}

bool IsOurs(std::string_view name) { return ParseBackendJobName(name).ok(); }

}  // namespace

absl::StatusOr<std::unique_ptr<SlurmAdapter>> SlurmAdapter::Create(
    SlurmSettings settings) {
  if (absl::Status s = ValidateSlurmSettings(settings); !s.ok()) return s;
  std::string key;
  if (!settings.jwt_key_file.empty()) {
    std::ifstream in(settings.jwt_key_file, std::ios::binary);
    if (!in) {
      return absl::FailedPreconditionError(
          Cat("jwt_key_file: cannot read ", settings.jwt_key_file));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    key = ss.str();
    if (key.size() < 16) {
      return absl::FailedPreconditionError(
          Cat("jwt_key_file: ", settings.jwt_key_file, " holds ", key.size(),
              " bytes; a key of at least 16 (Slurm uses 32) is expected"));
    }
  }
  return std::unique_ptr<SlurmAdapter>(
      new SlurmAdapter(std::move(settings), std::move(key)));
}

SlurmAdapter::SlurmAdapter(SlurmSettings settings, std::string key)
    : settings_(std::move(settings)),
      key_(std::move(key)),
      rest_({.base_url = settings_.rest_url,
             .connect_timeout = settings_.connect_timeout,
             .request_timeout = settings_.request_timeout,
             .ca_file = settings_.ca_file,
             .insecure_skip_verify = settings_.insecure_skip_verify}) {}

SlurmAdapter::~SlurmAdapter() = default;

SlurmAdapter::Counters SlurmAdapter::counters() const {
  absl::MutexLock l(&mu_);
  return counters_;
}

std::string SlurmAdapter::Path(std::string_view rest) const {
  return Cat("/slurm/", settings_.api_version, "/", rest);
}

std::vector<std::pair<std::string, std::string>> SlurmAdapter::Headers() {
  const std::string& user =
      settings_.user.empty() ? settings_.token_user : settings_.user;
  std::string token;
  {
    absl::MutexLock l(&mu_);
    if (!settings_.token.empty()) {
      token = settings_.token;
    } else {
      const absl::Time now = absl::Now();
      if (token_.empty() || now >= token_expiry_) {
        token_ =
            MintJwt(key_, settings_.token_user, now, settings_.token_lifetime);
        token_expiry_ = now + settings_.token_lifetime / 2;
      }
      token = token_;
    }
  }
  return {{"X-SLURM-USER-NAME", user}, {"X-SLURM-USER-TOKEN", token}};
}

absl::StatusOr<std::string> SlurmAdapter::Call(std::string_view method,
                                               std::string_view path,
                                               std::string_view what,
                                               std::string_view body,
                                               bool* sent) {
  absl::StatusOr<HttpResponse> r =
      rest_.Call(method, path, Headers(), body, sent);
  if (!r.ok()) return Prefixed(r.status(), what);
  if (r->status == 304) return std::string();
  if (absl::Status s = ClassifyResponse(r->status, r->body, what); !s.ok()) {
    return s;
  }
  return std::move(r->body);
}

absl::Status SlurmAdapter::Ping() {
  return Call("GET", Path("ping"), "ping").status();
}

absl::Status SlurmAdapter::Poll(bool full) {
  absl::MutexLock poll_lock(&poll_mu_);
  absl::Time since;
  {
    absl::MutexLock l(&mu_);
    if (!primed_) full = true;
    since = last_poll_;
  }
  const absl::Time start = absl::Now();
  const int64_t update_time =
      full ? 0 : std::max<int64_t>(0, absl::ToUnixSeconds(since - kPollSlack));
  absl::StatusOr<HttpResponse> r =
      rest_.Call("GET", Path(Cat("jobs?update_time=", update_time)), Headers());
  if (!r.ok()) return Prefixed(r.status(), "list jobs");
  {
    absl::MutexLock l(&mu_);
    ++counters_.polls;
    if (full) ++counters_.full_polls;
  }
  if (r->status == 304) {
    {
      absl::MutexLock l(&mu_);
      ++counters_.not_modified;
      last_poll_ = start;
    }
    // Jobs unchanged, but running ones may have written checkpoints.
    if (settings_.read_checkpoints) ReadCheckpoints();
    return absl::OkStatus();
  }
  if (absl::Status s = ClassifyResponse(r->status, r->body, "list jobs");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<SlurmJob>> jobs = ParseJobs(r->body);
  if (!jobs.ok()) return jobs.status();
  std::map<std::string, std::vector<SlurmJob>, std::less<>> fresh;
  const std::string& prefix = settings_.job_name_prefix;
  for (SlurmJob& job : *jobs) {
    if (job.name.compare(0, prefix.size(), prefix) != 0) continue;
    job.name.erase(0, prefix.size());
    if (!IsOurs(job.name)) continue;
    fresh[job.name].push_back(std::move(job));
  }
  for (auto& [name, list] : fresh) {
    std::sort(list.begin(), list.end(),
              [](const SlurmJob& a, const SlurmJob& b) {
                return a.job_id < b.job_id;
              });
  }
  {
    absl::MutexLock l(&mu_);
    jobs_ = std::move(fresh);
    for (auto it = submitted_.begin(); it != submitted_.end();) {
      // Listed now; or accepted long ago and still not listed: slurmctld lost
      // it (e.g. it restarted before saving its state), so the attempt is
      // reported missing and the dispatcher launches it again.
      const bool lost = it->second.submit_time.has_value() &&
                        start - *it->second.submit_time > kSubmittedButUnlisted;
      if (jobs_.contains(it->first) || lost) {
        it = submitted_.erase(it);
      } else {
        ++it;
      }
    }
    // Forget bookkeeping of jobs slurmctld no longer knows (purged after
    // MinJobAge), except submissions not listed yet.
    for (auto* set : {&deleted_}) {
      for (auto it = set->begin(); it != set->end();) {
        if (!jobs_.contains(*it) && !submitted_.contains(*it)) {
          it = set->erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto it = stops_.begin(); it != stops_.end();) {
      if (!jobs_.contains(it->first) && !submitted_.contains(it->first)) {
        it = stops_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = checkpoints_.begin(); it != checkpoints_.end();) {
      if (!jobs_.contains(it->first)) {
        it = checkpoints_.erase(it);
      } else {
        ++it;
      }
    }
    if (full) uncertain_.clear();
    primed_ = true;
    last_poll_ = start;
  }
  if (settings_.read_checkpoints) ReadCheckpoints();
  return absl::OkStatus();
}

void SlurmAdapter::ReadCheckpoints() {
  struct Want {
    std::string name;
    std::string dir;
    std::optional<absl::Time> start;
    int32_t attempt = 0;
  };
  std::vector<Want> wants;
  const absl::Time now = absl::Now();
  {
    absl::MutexLock l(&mu_);
    for (const auto& [name, list] : jobs_) {
      if (deleted_.contains(name)) continue;
      const SlurmJob& job = list.front();
      if (!job.start_time.has_value()) continue;  // never ran
      if (IsTerminalSlurmState(job.state) && job.end_time.has_value() &&
          now - *job.end_time > kCheckpointReadAfterEnd) {
        continue;
      }
      std::optional<JobComment> c = ParseComment(job.comment);
      if (!c.has_value() || c->checkpoint_dir.empty()) continue;
      std::optional<std::string> dir = LocalCheckpointDir(c->checkpoint_dir);
      if (!dir.has_value()) continue;
      wants.push_back({name, *dir, job.start_time, c->attempt});
    }
  }
  for (const Want& w : wants) {
    // Written by this attempt (not one before it)?
    std::optional<CheckpointInfo> c = ReadCheckpointManifest(w.dir, w.start);
    if (!c.has_value()) continue;
    absl::MutexLock l(&mu_);
    std::vector<CheckpointInfo>& list = checkpoints_[w.name];
    if (!list.empty() && list.back().step >= c->step) continue;
    list.push_back(*std::move(c));
    if (list.size() > kMaxCheckpointsPerAttempt) list.erase(list.begin());
  }
}

const SlurmJob* SlurmAdapter::FindLocked(std::string_view name) const {
  if (auto it = jobs_.find(name); it != jobs_.end() && !it->second.empty()) {
    return &it->second.front();
  }
  if (auto it = submitted_.find(name); it != submitted_.end()) {
    return &it->second;
  }
  return nullptr;
}

AttemptStatus SlurmAdapter::StatusOfLocked(const SlurmJob& job) const {
  AttemptStatus s = MapJob(job);
  if (auto it = stops_.find(job.name); it != stops_.end()) {
    s.stop_requested = true;
    s.stop_deadline = it->second.deadline;
    if (IsTerminal(s.phase)) {
      const FailureKind kind = it->second.reason == StopReason::kCancel
                                   ? FailureKind::kCancelled
                                   : FailureKind::kPreempted;
      s.message = Cat(
          it->second.reason == StopReason::kCancel ? "cancelled" : "preempted",
          " by Trainyard (Slurm: ", job.state, s.message.empty() ? "" : ", ",
          s.message, ")");
      s.phase = AttemptPhase::kCancelled;
      s.failure = kind;
    }
  }
  if (auto it = checkpoints_.find(job.name); it != checkpoints_.end()) {
    s.checkpoints = it->second;
  }
  return s;
}

absl::Status SlurmAdapter::Cancel(int64_t job_id, std::optional<int> signal,
                                  std::string_view name) {
  const std::string path = signal.has_value()
                               ? Path(Cat("job/", job_id, "?signal=", *signal))
                               : Path(Cat("job/", job_id));
  absl::StatusOr<std::string> r = Call(
      "DELETE", path,
      Cat(signal.has_value() ? "signal " : "cancel ", name, " (", job_id, ")"));
  {
    absl::MutexLock l(&mu_);
    if (signal.has_value()) {
      ++counters_.signals;
    } else {
      ++counters_.cancels;
    }
  }
  return r.status();
}

void SlurmAdapter::ProcessDueStops() {
  std::vector<std::pair<std::string, int64_t>> due;
  const absl::Time now = absl::Now();
  {
    absl::MutexLock l(&mu_);
    for (auto& [name, stop] : stops_) {
      if (stop.killed || stop.deadline > now) continue;
      const SlurmJob* job = FindLocked(name);
      if (job == nullptr || IsTerminalSlurmState(job->state)) {
        stop.killed = true;
        continue;
      }
      due.emplace_back(name, job->job_id);
    }
  }
  for (const auto& [name, id] : due) {
    absl::Status s = Cancel(id, std::nullopt, name);
    if (s.ok() || absl::IsNotFound(s) || absl::IsFailedPrecondition(s)) {
      absl::MutexLock l(&mu_);
      if (auto it = stops_.find(name); it != stops_.end()) {
        it->second.killed = true;
      }
    }
  }
}

absl::StatusOr<AttemptStatus> SlurmAdapter::Launch(
    const LaunchRequest& request) {
  absl::MutexLock launch_lock(&launch_mu_);
  bool refresh = false;
  {
    absl::MutexLock l(&mu_);
    refresh = !primed_ || uncertain_.contains(request.name);
  }
  if (refresh) {
    if (absl::Status s = Poll(/*full=*/true); !s.ok()) return s;
  }
  {
    absl::MutexLock l(&mu_);
    if (const SlurmJob* job = FindLocked(request.name); job != nullptr) {
      return StatusOfLocked(*job);
    }
  }
  if (absl::Status s = ValidateLaunchRequest(request); !s.ok()) return s;
  {
    // Placement on nodes this cluster does not have, or of another flavor.
    absl::MutexLock l(&mu_);
    if (!node_flavor_.empty()) {
      for (size_t i = 0; i < request.worker_nodes.size(); ++i) {
        const std::string field = Cat("worker_nodes[", i, "]");
        auto it = node_flavor_.find(request.worker_nodes[i]);
        if (it == node_flavor_.end()) {
          return domain::AttachErrorInfo(
              absl::FailedPreconditionError(Cat(field, ": unknown node \"",
                                                request.worker_nodes[i], "\"")),
              field, domain::reason::kInvalidValue);
        }
        if (!request.flavor.empty() && !it->second.empty() &&
            it->second != request.flavor) {
          return domain::AttachErrorInfo(
              absl::FailedPreconditionError(
                  Cat(field, ": node \"", it->first, "\" serves flavor \"",
                      it->second, "\", not \"", request.flavor, "\"")),
              field, domain::reason::kInconsistent);
        }
      }
    }
  }
  absl::StatusOr<std::string> body = SubmitBody(request, settings_);
  if (!body.ok()) return body.status();
  bool sent = false;
  absl::StatusOr<std::string> r = Call(
      "POST", Path("job/submit"), Cat("submit ", request.name), *body, &sent);
  {
    absl::MutexLock l(&mu_);
    ++counters_.submits;
  }
  if (!r.ok()) {
    if (sent && (absl::IsUnavailable(r.status()) ||
                 absl::IsDeadlineExceeded(r.status()) ||
                 absl::IsInternal(r.status()) || absl::IsUnknown(r.status()))) {
      // It may exist now: look again (full listing) before a resubmit.
      absl::MutexLock l(&mu_);
      uncertain_.insert(request.name);
    }
    return r.status();
  }
  const nlohmann::json j = nlohmann::json::parse(*r, nullptr, false);
  int64_t job_id = 0;
  if (j.is_object()) {
    auto it = j.find("job_id");
    if (it != j.end() && it->is_number_integer()) job_id = it->get<int64_t>();
  }
  absl::MutexLock l(&mu_);
  if (job_id <= 0) {
    uncertain_.insert(request.name);
    return absl::InternalError(
        Cat("submit ", request.name, ": no job_id in the answer"));
  }
  SlurmJob job;
  job.job_id = job_id;
  job.name = request.name;
  job.state = "PENDING";
  job.submit_time = absl::Now();
  job.comment =
      FormatComment({.tenant = request.tenant,
                     .job_id = request.job_id,
                     .attempt = request.attempt,
                     .checkpoint_dir = request.spec.checkpoint().directory()});
  submitted_[request.name] = job;
  return StatusOfLocked(job);
}

absl::Status SlurmAdapter::Signal(std::string_view name, int signal) {
  if (signal < 1 || signal > 64) {
    return domain::FieldError("signal", domain::reason::kOutOfRange,
                              Cat("expected 1..64, got ", signal));
  }
  if (absl::Status s = Poll(/*full=*/false); !s.ok()) return s;
  int64_t id = 0;
  {
    absl::MutexLock l(&mu_);
    const SlurmJob* job = FindLocked(name);
    if (job == nullptr || deleted_.contains(name)) {
      return absl::NotFoundError(Cat("no Slurm job named ", name));
    }
    if (MapJob(*job).phase != AttemptPhase::kRunning) {
      return absl::FailedPreconditionError(
          Cat(name, " is not running (", job->state, ")"));
    }
    id = job->job_id;
  }
  absl::Status s = Cancel(id, signal, name);
  if (absl::IsNotFound(s)) {
    return absl::FailedPreconditionError(
        Cat(name, " is not running: ", s.message()));
  }
  return s;
}

absl::Status SlurmAdapter::Stop(std::string_view name, absl::Duration grace,
                                StopReason reason) {
  if (grace < absl::ZeroDuration()) {
    return domain::FieldError("grace", domain::reason::kOutOfRange,
                              "must not be negative");
  }
  ProcessDueStops();
  if (absl::Status s = Poll(/*full=*/false); !s.ok()) return s;
  const absl::Time now = absl::Now();
  int64_t id = 0;
  bool signal_now = false;
  bool kill_now = false;
  {
    absl::MutexLock l(&mu_);
    const SlurmJob* job = FindLocked(name);
    if (job == nullptr || deleted_.contains(name)) {
      return absl::NotFoundError(Cat("no Slurm job named ", name));
    }
    const AttemptPhase phase = MapJob(*job).phase;
    auto it = stops_.find(name);
    if (IsTerminal(phase)) {
      if (it != stops_.end() && reason == StopReason::kCancel) {
        it->second.reason = StopReason::kCancel;
      }
      return absl::OkStatus();
    }
    id = job->job_id;
    const absl::Time deadline =
        phase == AttemptPhase::kPending ? now : now + grace;
    if (it == stops_.end()) {
      stops_[std::string(name)] = {.deadline = deadline, .reason = reason};
      signal_now = deadline > now;
      kill_now = !signal_now;
    } else {
      if (reason == StopReason::kCancel) it->second.reason = reason;
      if (deadline < it->second.deadline) it->second.deadline = deadline;
      kill_now = it->second.deadline <= now && !it->second.killed;
    }
  }
  if (signal_now) {
    absl::Status s = Cancel(id, settings_.stop_signal, name);
    if (!s.ok() && !absl::IsNotFound(s) && !absl::IsFailedPrecondition(s)) {
      // Not delivered: forget the request so the next Stop tries again.
      absl::MutexLock l(&mu_);
      stops_.erase(std::string(name));
      return s;
    }
    return absl::OkStatus();
  }
  if (kill_now) {
    absl::Status s = Cancel(id, std::nullopt, name);
    if (!s.ok() && !absl::IsNotFound(s) && !absl::IsFailedPrecondition(s)) {
      return s;  // The next call after the deadline retries.
    }
    absl::MutexLock l(&mu_);
    if (auto it = stops_.find(name); it != stops_.end()) {
      it->second.killed = true;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<AttemptStatus> SlurmAdapter::Status(std::string_view name) {
  ProcessDueStops();
  if (absl::Status s = Poll(/*full=*/false); !s.ok()) return s;
  absl::MutexLock l(&mu_);
  const SlurmJob* job = FindLocked(name);
  if (job == nullptr || deleted_.contains(name)) {
    return absl::NotFoundError(Cat("no Slurm job named ", name));
  }
  return StatusOfLocked(*job);
}

absl::StatusOr<std::vector<AttemptStatus>> SlurmAdapter::List() {
  ProcessDueStops();
  if (absl::Status s = Poll(/*full=*/false); !s.ok()) return s;
  absl::MutexLock l(&mu_);
  std::vector<AttemptStatus> out;
  std::set<std::string_view> seen;
  for (const auto& [name, list] : jobs_) {
    if (list.empty() || deleted_.contains(name)) continue;
    out.push_back(StatusOfLocked(list.front()));
    seen.insert(name);
  }
  for (const auto& [name, job] : submitted_) {
    if (seen.contains(name) || deleted_.contains(name)) continue;
    out.push_back(StatusOfLocked(job));
  }
  std::sort(out.begin(), out.end(),
            [](const AttemptStatus& a, const AttemptStatus& b) {
              return a.name < b.name;
            });
  return out;
}

absl::Status SlurmAdapter::Delete(std::string_view name) {
  absl::MutexLock l(&mu_);
  const SlurmJob* job = FindLocked(name);
  if (job == nullptr) return absl::OkStatus();
  AttemptStatus s = StatusOfLocked(*job);
  if (!IsTerminal(s.phase)) {
    return absl::FailedPreconditionError(
        Cat(name, " has not ended (", job->state, ")"));
  }
  deleted_.insert(std::string(name));
  stops_.erase(std::string(name));
  checkpoints_.erase(std::string(name));
  return absl::OkStatus();
}

absl::StatusOr<LogChunk> SlurmAdapter::ReadLog(std::string_view name,
                                               int64_t offset,
                                               int64_t max_bytes) {
  if (offset < 0) return absl::InvalidArgumentError("offset: negative");
  if (max_bytes <= 0) return absl::InvalidArgumentError("max_bytes: not > 0");
  if (absl::Status s = Poll(/*full=*/false); !s.ok()) return s;
  std::string path;
  bool pending = false;
  {
    absl::MutexLock l(&mu_);
    const SlurmJob* job = FindLocked(name);
    if (job == nullptr || deleted_.contains(name)) {
      return absl::NotFoundError(Cat("no Slurm job named ", name));
    }
    path = job->standard_output;
    pending = StatusOfLocked(*job).phase == AttemptPhase::kPending;
  }
  if (path.empty()) {
    if (pending) return LogChunk{.offset = 0};
    return absl::FailedPreconditionError(
        Cat("Slurm names no output file for ", name));
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT && pending) return LogChunk{.offset = 0};
    return absl::FailedPreconditionError(
        Cat("cannot read the output of ", name, " (", path,
            ") on the dispatcher's host: ", std::strerror(err),
            "; the dispatcher reads Slurm's output files through the "
            "cluster's shared filesystem"));
  }
  LogChunk chunk;
  struct stat st {};
  if (fstat(fd, &st) == 0) chunk.size = st.st_size;
  chunk.offset = std::min(offset, chunk.size);
  const int64_t want = std::min(max_bytes, chunk.size - chunk.offset);
  chunk.data.resize(static_cast<size_t>(want));
  int64_t got = 0;
  while (got < want) {
    const ssize_t n =
        pread(fd, chunk.data.data() + got, static_cast<size_t>(want - got),
              chunk.offset + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += n;
  }
  close(fd);
  chunk.data.resize(static_cast<size_t>(got));
  return chunk;
}

absl::StatusOr<std::vector<NodeInventory>> SlurmAdapter::Inventory() {
  absl::StatusOr<std::string> body = Call("GET", Path("nodes"), "list nodes");
  if (!body.ok()) return body.status();
  absl::StatusOr<std::vector<NodeInventory>> nodes =
      ParseNodes(*body, settings_);
  if (!nodes.ok()) return nodes.status();
  absl::MutexLock l(&mu_);
  node_flavor_.clear();
  for (const NodeInventory& n : *nodes) node_flavor_[n.name] = n.flavor;
  return nodes;
}

absl::StatusOr<std::vector<int64_t>> SlurmAdapter::JobIdsNamed(
    std::string_view name, bool refresh) {
  if (absl::Status s = Poll(refresh); !s.ok()) return s;
  absl::MutexLock l(&mu_);
  std::vector<int64_t> ids;
  if (auto it = jobs_.find(name); it != jobs_.end()) {
    for (const SlurmJob& j : it->second) ids.push_back(j.job_id);
  }
  return ids;
}

}  // namespace trainyard::dispatcher::slurm
